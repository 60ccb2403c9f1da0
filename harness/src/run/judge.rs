//! After a run: its record written (run.json, audit, final state), its figures, and the verdict `chaos check` gives the stored run.

use super::frame::End;
use super::live::{Finals, HISTORY_LIMIT};
use super::options::Timings;
use crate::results::{self, RunDir};
use crate::scenario::Scenario;
use chaos_checkers::Verdict;
use chaos_history::{RunMeta, ScenarioClock};
use chaos_workloads::galewatch::Farm;
use chaos_workloads::ingest::IngestStats;
use serde_json::{json, Value};

/// The run's record: what `chaos check` reads back. A run cut by its time limit, a trigger
/// that never fired or a history over its limit did not complete: what was still under way
/// is unknown, not a finding (a mover still copying has not failed to finish).
pub fn meta(
    scenario: &Scenario,
    farm: &Farm,
    clock: ScenarioClock,
    seeded: Vec<chaos_history::SeededTurbine>,
    end: &End,
    finals: &Finals,
    strict_duplicates: bool,
) -> RunMeta {
    let s = &scenario.file;
    let incomplete_reason = if !finals.unfired.is_empty() {
        Some(finals.unfired.join("; "))
    } else if finals.dropped > 0 {
        Some(format!(
            "the history hit its limit of {HISTORY_LIMIT} events; {} were dropped",
            finals.dropped
        ))
    } else if end.time_limited {
        Some(end.reason.clone())
    } else {
        None
    };
    let system = crate::systems::of(s.system);
    let (payout, objects) = system.meta(scenario);
    RunMeta {
        system: s.system,
        payout,
        objects,
        scenario: s.name.clone(),
        seed: s.seed,
        clock,
        job: s.lease.job.clone(),
        shards: scenario.topology().shards().to_vec(),
        owners: farm.owners(),
        plan: farm.plan(),
        seeded,
        lease_ms: (s.lease.lease_s * 1000.0) as i64,
        copy_ms: (s.lease.copy_s * 1000.0) as i64,
        strict_duplicates,
        mover: system.settings(scenario),
        end_scenario_ms: end.scenario_ms,
        completed: incomplete_reason.is_none(),
        incomplete_reason,
        expect_reach: scenario.expected_moments(),
    }
}

/// Write the run's record, then judge the stored run as `chaos check` would (on a blocking
/// thread: judging a long history is CPU-bound, and a signal must still be seen), then write
/// `figures.json`.
pub async fn judge(
    dir: &RunDir,
    meta: &RunMeta,
    finals: &Finals,
    mut figures: Value,
    quiet: bool,
) -> anyhow::Result<(Verdict, Value)> {
    results::write_json(&dir.file(chaos_history::RUN_META_FILE), meta)?;
    results::write_json(&dir.file(chaos_history::AUDIT_FILE), &finals.audit)?;
    results::write_json(
        &dir.file(chaos_history::FINAL_STATE_FILE),
        &finals.final_state,
    )?;
    figures["wall_clock_drift_ppm"] = json!(meta.clock.wall_drift_ppm());
    let t_check = std::time::Instant::now();
    let verdict = {
        let (path, extra) = (dir.path.clone(), figures.clone());
        tokio::task::spawn_blocking(move || {
            crate::check::check_dir(
                &path,
                &crate::check::CheckOptions {
                    extra: Some(&extra),
                    quiet,
                    strict_duplicates: None,
                },
            )
        })
        .await??
    };
    figures["wall_s"]["check_and_report"] = json!(t_check.elapsed().as_secs_f64());
    Ok((verdict, figures))
}

/// `figures.json`: where the wall time went, how late the faults landed, the ingest's tally,
/// the movers' exits, why the run ended.
pub fn figures(t: &Timings, end: &End, finals: &Finals, lags_us: &[i64], exits: Value) -> Value {
    json!({
        "wall_s": { "cluster": t.cluster_s, "lock_started": t.lock_s, "seed": t.seed_s, "scenario": end.scenario_s, "final_reads": t.final_s },
        "history_events": finals.events,
        "fault_lag_real_us": lag_figures(lags_us),
        "ingest": ingest_tally(&finals.ingest),
        "mover_exits": exits,
        "end_reason": end.reason,
    })
}

fn ingest_tally(stats: &[IngestStats]) -> Value {
    let sum = |f: fn(&IngestStats) -> u64| stats.iter().map(f).sum::<u64>();
    json!({
        "ok": sum(|s| s.ok),
        "fail": sum(|s| s.fail),
        "info": sum(|s| s.info),
        "skipped_ticks": sum(|s| s.skipped_ticks),
    })
}

fn lag_figures(lags: &[i64]) -> Value {
    if lags.is_empty() {
        return json!({ "count": 0 });
    }
    let mut v = lags.to_vec();
    v.sort();
    json!({ "count": v.len(), "median": v[v.len() / 2], "max": v[v.len() - 1], "within_5ms": v.iter().filter(|l| l.abs() <= 5_000).count() })
}
