//! `chaos check DIR`: judge a stored run with no database: stream the history through the checkers, write `verdict.json` and `report.html`, print a summary.

use crate::results;
use chaos_checkers::Verdict;
use chaos_history::{Audit, FinalState, RunMeta, RunRecord, ScenarioClock};
use std::path::Path;

/// Check the run in `dir`; writes verdict.json and report.html there.
pub fn check_dir(
    dir: &Path,
    extra: Option<&serde_json::Value>,
    quiet: bool,
) -> anyhow::Result<Verdict> {
    if !dir.join(chaos_history::RUN_META_FILE).is_file() {
        anyhow::bail!(
            "{}: not a run directory (no {}); runs are under results/<scenario>/",
            dir.display(),
            chaos_history::RUN_META_FILE
        );
    }
    let meta: RunMeta = results::read_json(&dir.join(chaos_history::RUN_META_FILE))?;
    let audit: Option<Audit> = results::read_json(&dir.join(chaos_history::AUDIT_FILE)).ok();
    let final_state: Option<FinalState> =
        results::read_json(&dir.join(chaos_history::FINAL_STATE_FILE)).ok();
    let mut reader = chaos_history::HistoryReader::open(&dir.join(chaos_history::HISTORY_FILE))?;
    let mut history = Vec::new();
    for op in &mut reader {
        history.push(op?);
    }
    let mut meta = meta;
    if reader.torn_tail && meta.completed {
        meta.completed = false;
        meta.incomplete_reason =
            Some("the history's last line is torn: the harness stopped mid-write".into());
    }
    let record = RunRecord {
        meta,
        history,
        audit,
        final_state,
    };
    let verdict = chaos_checkers::check(&record);
    results::write_json(&dir.join("verdict.json"), &verdict)?;
    let stored_extra: serde_json::Value = extra
        .cloned()
        .or_else(|| results::read_json(&dir.join("figures.json")).ok())
        .unwrap_or(serde_json::Value::Null);
    let html = chaos_report::render(&chaos_report::ReportInput {
        meta: &record.meta,
        history: &record.history,
        audit: record.audit.as_ref(),
        verdict: &verdict,
        extra: Some(&stored_extra),
    });
    std::fs::write(dir.join("report.html"), html)
        .map_err(|e| anyhow::anyhow!("cannot write {}: {e}", dir.join("report.html").display()))?;
    if !quiet {
        eprintln!("{}", crate::story::story(&record, &verdict));
        eprintln!("{}", verdict.summary(&record.meta.clock));
        eprintln!("report: {}", dir.join("report.html").display());
    }
    let _ = ScenarioClock::format(0);
    Ok(verdict)
}
