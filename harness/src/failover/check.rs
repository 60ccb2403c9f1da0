//! `chaos check DIR` for a failover run: its record, history and final state read back, judged by `chaos_checkers::failover`, `verdict.json` and `report.html` written, the story and the verdict printed.

use crate::results;
use chaos_checkers::Verdict;
use chaos_history::{FailoverFinal, FailoverMeta, History, FAILOVER_SYSTEM};
use std::path::Path;

/// Whether the run in `dir` is the failover system's: its `run.json` says so, or (a harness
/// stopped before writing it) its `config.json`.
pub fn is_failover_run(dir: &Path) -> bool {
    let read = |name: &str| -> Option<serde_json::Value> {
        serde_json::from_str(&std::fs::read_to_string(dir.join(name)).ok()?).ok()
    };
    if let Some(meta) = read(chaos_history::RUN_META_FILE) {
        return meta["system"] == FAILOVER_SYSTEM;
    }
    read("config.json").is_some_and(|c| c["scenario"]["file"]["system"] == FAILOVER_SYSTEM)
}

/// Judge the failover run in `dir`; writes `verdict.json` and `report.html` there.
pub fn check_dir(dir: &Path, quiet: bool) -> anyhow::Result<Verdict> {
    let meta_path = dir.join(chaos_history::RUN_META_FILE);
    let meta: FailoverMeta = match std::fs::read_to_string(&meta_path) {
        Ok(text) => serde_json::from_str(&text)
            .map_err(|e| anyhow::anyhow!("{}: corrupt: {e}", meta_path.display()))?,
        Err(_) => anyhow::bail!(
            "{}: no {}: the harness stopped before the run ended, and a failover run is judged only once it has",
            dir.display(),
            chaos_history::RUN_META_FILE
        ),
    };
    // Read as the mover's run is: a torn last line is kept as a flag the verdict says,
    // a missing final state is said missing, a corrupt or unreadable one is refused.
    let history = History::read(&dir.join(chaos_history::HISTORY_FILE))
        .map_err(|e| anyhow::anyhow!("{e}"))?;
    let final_state: Option<FailoverFinal> =
        results::read_optional(&dir.join(chaos_history::FINAL_STATE_FILE))?;
    let verdict = chaos_checkers::failover::check(&meta, &history, final_state.as_ref());
    // The page and the story read the events in the order their lines say, as the checker.
    let history: Vec<chaos_history::Op> = chaos_checkers::in_order(&history.ops)
        .into_iter()
        .cloned()
        .collect();
    results::write_json(&dir.join("verdict.json"), &verdict)?;
    let figures: serde_json::Value = std::fs::read_to_string(dir.join("figures.json"))
        .ok()
        .and_then(|t| serde_json::from_str(&t).ok())
        .unwrap_or(serde_json::Value::Null);
    let input = chaos_report::failover::Input {
        meta: &meta,
        history: &history,
        final_state: final_state.as_ref(),
        verdict: &verdict,
        figures: &figures,
    };
    let html = chaos_report::failover::render(&input);
    let report = dir.join("report.html");
    let tmp = report.with_extension("tmp");
    std::fs::write(&tmp, html)
        .and_then(|_| std::fs::rename(&tmp, &report))
        .map_err(|e| anyhow::anyhow!("cannot write {}: {e}", report.display()))?;
    if !quiet {
        eprintln!("{}", chaos_report::failover::story(&input));
        eprintln!("{}", verdict.summary(&meta.clock));
        eprintln!("report: {}", report.display());
    }
    Ok(verdict)
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    /// `chaos check` of every planted failover run (checkers/tests/data) gets its expected
    /// verdict through the one dispatch, and writes its report.
    #[test]
    fn planted_failover_runs_are_judged_through_chaos_check() {
        let data = Path::new(env!("CARGO_MANIFEST_DIR")).join("../checkers/tests/data");
        let mut seen = 0;
        for e in std::fs::read_dir(data).unwrap() {
            let from = e.unwrap().path();
            if !super::is_failover_run(&from) {
                continue;
            }
            let dir = std::env::temp_dir().join(format!(
                "chaos-failover-check-{}-{}",
                std::process::id(),
                from.file_name().unwrap().to_string_lossy()
            ));
            std::fs::create_dir_all(&dir).unwrap();
            for f in std::fs::read_dir(&from).unwrap() {
                let f = f.unwrap();
                std::fs::copy(f.path(), dir.join(f.file_name())).unwrap();
            }
            let opts = crate::check::CheckOptions {
                quiet: true,
                ..Default::default()
            };
            let verdict = crate::check::check_dir(&dir, &opts).unwrap();
            let expect: serde_json::Value =
                serde_json::from_str(&std::fs::read_to_string(dir.join("expect.json")).unwrap())
                    .unwrap();
            assert_eq!(
                serde_json::to_value(verdict.valid).unwrap(),
                expect["valid"],
                "{}",
                from.display()
            );
            assert!(dir.join("report.html").is_file() && dir.join("verdict.json").is_file());
            let _ = std::fs::remove_dir_all(&dir);
            seen += 1;
        }
        assert!(seen >= 6, "only {seen} planted failover runs");
    }
}
