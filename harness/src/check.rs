//! `chaos check DIR`: judge a stored run with no database. The history is read once, as it streams, by three consumers: the checkers' fold (the verdict), the report's digest (report.html) and the story; then `verdict.json` and `report.html` are written and the story and the summary printed.
//!
//! Memory stays bounded whatever the history's length (see `stream`). A
//! stored run that is not whole is judged for what it is: a torn last line
//! (the harness stopped mid-write) or a missing `run.json` (the harness was
//! killed) make the verdict `unknown` with the reason; a missing audit or
//! final state is said to be missing. Anything else that is not what the
//! harness writes (a bad line anywhere, a corrupt JSON file) is refused in one
//! line naming the file.

use crate::results::{self, read_optional};
use chaos_checkers::Verdict;
use chaos_history::{Audit, FinalState, RunMeta};
use std::path::Path;

mod cancel;
mod killed;
mod scan;
mod stream;

use cancel::cancelled;
pub use cancel::{cancel, Interrupted};
pub use stream::{FileEvents, Streamed};

fn interrupted() -> anyhow::Result<()> {
    if cancelled() {
        return Err(Interrupted.into());
    }
    Ok(())
}

/// How to judge a stored run.
#[derive(Debug, Clone, Copy, Default)]
pub struct CheckOptions<'a> {
    /// Figures the harness adds to the report (`chaos run` passes its own;
    /// otherwise `figures.json` is shown when the run directory has it).
    pub extra: Option<&'a serde_json::Value>,
    /// Print nothing (no story, no summary).
    pub quiet: bool,
    /// Overrides the run's own `strict_duplicates` when given.
    pub strict_duplicates: Option<bool>,
}

/// Check the run in `dir`; writes verdict.json and report.html there.
pub fn check_dir(dir: &Path, opts: &CheckOptions) -> anyhow::Result<Verdict> {
    refuse_what_is_not_a_run(dir)?;
    if crate::failover::check::is_failover_run(dir) {
        return crate::failover::check::check_dir(dir, opts.quiet);
    }
    let history = dir.join(chaos_history::HISTORY_FILE);
    let meta_path = dir.join(chaos_history::RUN_META_FILE);
    let mut meta: RunMeta = match read_optional(&meta_path)? {
        Some(meta) => meta,
        // A harness killed with SIGKILL leaves its history and no run.json.
        None if history.exists() => killed::meta(dir, &history)?,
        None => anyhow::bail!(
            "{}: not a run directory (no {} and no {}); runs are under results/<scenario>/",
            dir.display(),
            chaos_history::RUN_META_FILE,
            chaos_history::HISTORY_FILE
        ),
    };
    if meta.clock.real_ns_per_scenario_s <= 0 {
        anyhow::bail!(
            "{}: clock.real_ns_per_scenario_s is {}; it must be positive",
            meta_path.display(),
            meta.clock.real_ns_per_scenario_s
        );
    }
    if let Some(strict) = opts.strict_duplicates {
        meta.strict_duplicates = strict;
    }
    let audit: Option<Audit> = read_optional(&dir.join(chaos_history::AUDIT_FILE))?;
    let final_state: Option<FinalState> =
        read_optional(&dir.join(chaos_history::FINAL_STATE_FILE))?;
    interrupted()?;

    let Streamed {
        mut fold,
        digest,
        story,
        torn_tail,
    } = stream::read(&history, &meta)?;
    if torn_tail {
        fold.note_torn_tail();
    }
    let verdict = fold.finish(&meta, audit.as_ref(), final_state.as_ref());
    interrupted()?;
    results::write_json(&dir.join("verdict.json"), &verdict)?;

    let stored_extra: serde_json::Value = match opts.extra {
        Some(extra) => extra.clone(),
        None => read_optional(&dir.join("figures.json"))
            .ok()
            .flatten()
            .unwrap_or(serde_json::Value::Null),
    };
    let events = FileEvents::open(&history)?;
    let html = chaos_report::render(&chaos_report::ReportInput {
        meta: &meta,
        history: &digest,
        events: &events,
        audit: audit.as_ref(),
        verdict: &verdict,
        extra: Some(&stored_extra),
    });
    interrupted()?;
    write_atomically(&dir.join("report.html"), html.as_bytes())?;
    if !opts.quiet {
        eprintln!("{}", story.finish(&meta, &verdict));
        eprintln!("{}", verdict.summary(&meta.clock));
        if let Some(p) = chaos_report::pace(&meta, digest.latency()) {
            eprintln!("chaos: {}", p.line());
        }
        eprintln!("report: {}", dir.join("report.html").display());
    }
    Ok(verdict)
}

/// A path that is not there, not a folder, or a run the harness failed before it had a
/// history: one line saying which, and where the judged runs are.
fn refuse_what_is_not_a_run(dir: &Path) -> anyhow::Result<()> {
    let d = dir.display();
    match std::fs::metadata(dir) {
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => anyhow::bail!(
            "{d}: no such directory; runs are under results/<scenario>/ and results/latest is the newest judged one"
        ),
        Err(e) => anyhow::bail!("{d}: {e}"),
        Ok(m) if !m.is_dir() => anyhow::bail!(
            "{d}: not a directory; give a run's folder, e.g. results/latest"
        ),
        Ok(_) => {}
    }
    let has = |name: &str| dir.join(name).exists();
    if has(chaos_history::RUN_META_FILE) {
        return Ok(());
    }
    if let Ok(why) = std::fs::read_to_string(dir.join(results::NO_VERDICT_FILE)) {
        anyhow::bail!(
            "{d}: this run has no verdict: the harness failed ({}); results/latest is the newest judged run",
            why.trim()
        );
    }
    if !has(chaos_history::HISTORY_FILE) && has("config.json") {
        anyhow::bail!(
            "{d}: this run has no verdict: it stopped before its scenario clock started (no {}); results/latest is the newest judged run",
            chaos_history::HISTORY_FILE
        );
    }
    Ok(())
}

/// Write a file whole or not at all (an interrupted check leaves no half page).
fn write_atomically(path: &Path, bytes: &[u8]) -> anyhow::Result<()> {
    let tmp = path.with_extension("tmp");
    std::fs::write(&tmp, bytes)
        .and_then(|_| std::fs::rename(&tmp, path))
        .map_err(|e| {
            let _ = std::fs::remove_file(&tmp);
            anyhow::anyhow!("cannot write {}: {e}", path.display())
        })
}

#[cfg(test)]
mod tests;
