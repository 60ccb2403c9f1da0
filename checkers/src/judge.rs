//! Puts the checks together: which can run on what the run left, the anomalies they find, the stats, and the verdict.

use crate::fold::HistoryFold;
use crate::reached::{self, Audited, Found};
use crate::stats::Stats;
use crate::times::format_ms;
use crate::writes::{attribute, TurbineWrites};
use crate::{
    attribution, designs, fencing, forgotten, grants, lease, liveness, objects, payout, rows,
    stall, Anomaly, Verdict,
};
use chaos_history::{Audit, ClaimChange, FinalState, RunMeta, ShardWrite, System, WriteOp};
use std::borrow::Cow;
use std::collections::HashSet;

impl HistoryFold {
    /// Judge the run: the folded history with the audit and the final state
    /// (either may be missing: the verdict is then `unknown` with the reason).
    /// (Here rather than in `fold.rs`: the fold knows nothing of judging.)
    pub fn finish(
        self,
        meta: &RunMeta,
        audit: Option<&Audit>,
        final_state: Option<&FinalState>,
    ) -> Verdict {
        judge(self, meta, audit, final_state)
    }
}

fn judge(
    mut fold: HistoryFold,
    meta: &RunMeta,
    audit: Option<&Audit>,
    final_state: Option<&FinalState>,
) -> Verdict {
    fold.settle_refusals();
    let mut reasons = input_reasons(&fold, meta, audit, final_state);
    let audit = audit.map(dated);
    if let Some(why) = audit.as_ref().and_then(|(_, why)| why.clone()) {
        reasons.push(why);
    }
    let audit = audit.as_ref().map(|(a, _)| a.as_ref());
    // The check's one dispatch on the system: the seed's designs add their own classes to
    // the lock's promise (`designs.rs`), the mover is judged below (a failover run is judged
    // from its own record, `failover.rs`: a `RunMeta` naming it has no classes of its own).
    type Classes<'a> = Box<dyn FnOnce(&mut Stats) -> Vec<Anomaly> + 'a>;
    let design: Option<Classes> = match meta.system {
        System::Mover => None,
        System::Payout => Some(Box::new(|stats| {
            final_state.map_or_else(Vec::new, |f| payout::check(meta, f, stats))
        })),
        System::TenObjects => Some(Box::new(|stats| {
            let writes = audit.map_or(&[][..], |a| a.object_writes.as_slice());
            let config = final_state.and_then(|f| f.config.as_ref());
            let whole = final_state.is_some_and(|f| f.complete);
            objects::check(meta, writes, config, whole, stats)
        })),
        System::Failover => Some(Box::new(|_| Vec::new())),
    };
    if let Some(classes) = design {
        return designs::judge(&fold, meta, audit, reasons, classes);
    }
    let readings_unanswered = fold.settle_in_flight();
    let mut stats = Stats {
        events: fold.events,
        readings_unanswered,
        readings_acknowledged: fold.readings_acknowledged,
        readings_uncertain: fold.readings_uncertain,
        readings_failed: fold.readings_failed,
        refused_writes: fold.refusals.len() as u64,
        turbines_planned: meta.plan.len() as u64,
        ..Stats::default()
    };
    let mut anomalies = Vec::new();
    anomalies.extend(fencing::refused_anomaly(&fold.refusals, meta));

    let turbine_writes = audit.map(TurbineWrites::new);
    let final_complete = final_state.is_some_and(|f| f.complete);
    // Phantom rows are provable only against a complete expectation: every
    // ingest completion said which readings, no line was torn off the end (a
    // batch's invoke may be that line, its rows on the shard), and there is a
    // history at all (nothing observed explains nothing and accuses nothing).
    let expectation_complete = fold.unreadable_ingest == 0 && !fold.torn_tail && fold.events > 0;
    let (notes, refusals) = (
        std::mem::take(&mut fold.notes),
        std::mem::take(&mut fold.refusals),
    );
    let rows = final_state.map(|f| rows::tally_turbines(fold.turbines, fold.groups, meta, f));
    if let Some(r) = &rows {
        reasons.extend(r.reasons.iter().cloned());
        anomalies.extend(r.anomalies(
            meta,
            turbine_writes.as_ref(),
            final_complete,
            expectation_complete,
        ));
        rows_stats(r, &mut stats);
    }

    let live = final_state.map(|f| liveness::check(meta, f, audit));
    if let Some(l) = &live {
        anomalies.extend(l.anomalies(meta));
        stats.turbines_moved = l.moved();
        stats.turbines_not_moved = l.not_moved.iter().map(|n| n.turbine.clone()).collect();
        stats.plan_finished_scenario_ms = l.finished_scenario_ms(meta);
        stats.plan_finished_time = stats.plan_finished_scenario_ms.map(format_ms);
    }

    let mut found = Found::default();
    match audit {
        Some(audit) => {
            let proven_rows = rows.as_ref().filter(|_| final_complete);
            let seen = ((&notes[..], &refusals[..]), &mut found);
            let judged = judge_audit(meta, audit, proven_rows, live.as_ref(), &mut stats, seen);
            anomalies.extend(judged.0);
            reasons.extend(judged.1);
        }
        // No grants to judge by: what the boxes and the faults say alone.
        None => reached::scene(meta, (&notes, &refusals), &Default::default()).find(&mut found),
    }

    reached::settle(
        Verdict::new(anomalies, reasons, stats),
        found.into_list(),
        &meta.expect_reach,
    )
}

/// Why the run cannot be judged in full: what the harness said of it and
/// which inputs are missing or incomplete.
fn input_reasons(
    fold: &HistoryFold,
    meta: &RunMeta,
    audit: Option<&Audit>,
    final_state: Option<&FinalState>,
) -> Vec<String> {
    let mut reasons = Vec::new();
    if !meta.completed {
        let why = meta
            .incomplete_reason
            .as_deref()
            .unwrap_or("the run did not complete");
        reasons.push(format!("history cut short: {why}"));
    }
    reasons.extend(crate::observed::history_reasons(
        fold.events,
        fold.torn_tail,
    ));
    if fold.unreadable_ingest > 0 {
        reasons.push(format!(
            "{} ingest completions do not say which readings ({{shard, ts_ms, turbines}}): the expectation is incomplete",
            fold.unreadable_ingest
        ));
    }
    match audit {
        None => reasons.push("audit missing: fencing and leases cannot be judged".to_string()),
        Some(a) if !a.complete => reasons.push(format!(
            "audit incomplete (could not read: {})",
            a.missing.join(", ")
        )),
        Some(_) => {}
    }
    match final_state {
        None => reasons.push("final state missing: rows and liveness cannot be judged".to_string()),
        Some(f) if !f.complete => reasons.push(format!(
            "final state incomplete (could not read: {})",
            f.missing.join(", ")
        )),
        Some(_) => {}
    }
    reasons
}

/// The audit without the records that carry no commit timestamp (dumped as
/// 0: `track_commit_timestamp` off, or the record truncated), and why the
/// run is then not judged in full. Such a record cannot be ordered against
/// any other (a grant at 1970 would overlap every later one), and neither can
/// the writes made under an undated grant: those carrying its token (or in
/// a transaction that fenced with it), or by its holder without a token.
fn dated(audit: &Audit) -> (Cow<'_, Audit>, Option<String>) {
    let undated: Vec<&ClaimChange> = audit
        .claim_changes
        .iter()
        .filter(|c| c.commit_unix_ns <= 0)
        .collect();
    if undated.is_empty() && audit.shard_writes.iter().all(|w| w.commit_unix_ns > 0) {
        return (Cow::Borrowed(audit), None);
    }
    let tokens: HashSet<i64> = undated
        .iter()
        .map(|c| c.token)
        .filter(|&t| t != 0)
        .collect();
    let holders: HashSet<&str> = undated.iter().filter_map(|c| c.holder.as_deref()).collect();
    let fenced: HashSet<(&str, i64)> = audit
        .shard_writes
        .iter()
        .filter(|w| w.op == WriteOp::Fence && w.token.is_some_and(|t| tokens.contains(&t)))
        .map(|w| (w.shard.as_str(), w.xid))
        .collect();
    let judged = |w: &ShardWrite| {
        w.commit_unix_ns > 0
            && !w.token.is_some_and(|t| tokens.contains(&t))
            && !fenced.contains(&(w.shard.as_str(), w.xid))
            && (w.token.is_some() || !holders.contains(w.app.as_str()))
    };
    let mut kept = audit.clone();
    kept.claim_changes.retain(|c| c.commit_unix_ns > 0);
    kept.shard_writes.retain(judged);
    let left_out = audit.shard_writes.len() - kept.shard_writes.len();
    let why = format!(
        "{} claim changes and {} shard writes in the audit have no commit timestamp; with the writes made under an undated grant, {} claim changes and {left_out} shard writes cannot be ordered and are not judged (is track_commit_timestamp on for every database?)",
        undated.len(),
        audit.shard_writes.iter().filter(|w| w.commit_unix_ns <= 0).count(),
        undated.len(),
    );
    (Cow::Owned(kept), Some(why))
}

/// The rows figures of `Stats`.
fn rows_stats(r: &rows::RowsOutcome, stats: &mut Stats) {
    stats.lost_turbines = r.lost_turbines();
    stats.rows_lost = r.rows_lost();
    stats.duplicated_readings = r.turbines.iter().map(|t| t.tally.duplicated.count).sum();
    stats.duplicate_rows_extra = r
        .turbines
        .iter()
        .map(|t| t.tally.duplicate_rows_extra)
        .sum();
    stats.misplaced_readings = r.turbines.iter().map(|t| t.tally.misplaced.count).sum();
    stats.unexpected_readings = r.turbines.iter().map(|t| t.tally.unexpected.count).sum();
    stats.phantom_readings = stats.unexpected_readings;
    stats.corrupt_rows = r.corrupt.iter().map(|c| c.check.wrong as u64).sum();
    stats.values_checked_rows = r.values_checked;
}

/// Every check that needs the audit: the lock's promise, attribution,
/// fencing, the lease, vacancy and stalls. Returns the anomalies and the
/// reasons (unattributed writes) that make the verdict `unknown`. `rows`
/// only when the final state saw every shard (a loss is provable then).
fn judge_audit(
    meta: &RunMeta,
    audit: &Audit,
    rows: Option<&rows::RowsOutcome>,
    live: Option<&liveness::Liveness>,
    stats: &mut Stats,
    (seen, found): (reached::Seen, &mut Found),
) -> (Vec<Anomaly>, Vec<String>) {
    let clock = &meta.clock;
    let mut anomalies = Vec::new();
    let (mut claims, broken) = forgotten::claims(meta, audit, seen.0);
    claims.seen_late_ns = crate::claims::seen_late_ns(meta);
    let writes = attribute(audit, &claims);
    stats.shard_writes = audit.shard_writes.len() as u64;
    stats.claim_changes = audit.claim_changes.len() as u64;
    stats.unattributed_writes = writes.iter().filter(|a| a.grant.is_none()).count() as u64;
    stats.ungranted_writes = stats.unattributed_writes;
    stats.borrowed_token_writes = writes
        .iter()
        .filter(|a| a.borrowed && matches!(a.write.op, WriteOp::Insert | WriteOp::Delete))
        .count() as u64;
    let promise = grants::lock_promise(meta, &claims, stats);
    reached::promise(promise.as_ref(), found);
    anomalies.extend(promise);
    stats.forgotten_grants = broken.len() as u64;
    let forgot = forgotten::anomaly(&broken, meta);
    reached::promise(forgot.as_ref(), found);
    anomalies.extend(forgot);

    // Writes no grant can be named for: never skipped, the reasons say what to set.
    let unattributed = attribution::unattributed(&writes, &claims, rows);
    let (anomaly, reasons) = attribution::unattributed_anomaly(&unattributed, &claims, meta);
    anomalies.extend(anomaly);
    anomalies.extend(attribution::borrowed_anomaly(&writes, &claims, meta));

    let stale = fencing::stale_writes(&writes, &claims);
    stats.stale_writes_accepted = stale.len() as u64;
    anomalies.extend(fencing::stale_anomaly(&stale, meta));

    // Whether a late delete destroyed data needs a final state that saw every shard.
    let late = lease::late_writes(&writes, &claims, rows);
    stats.writes_after_expiry = late.iter().map(|l| l.writes).sum();
    stats.writes_after_expiry_s = lease::late_seconds_by_box(&late, &claims, meta);
    anomalies.extend(lease::late_anomaly(&late, &claims, meta));

    let overlaps = lease::overlaps(&writes, &claims);
    stats.concurrent_holder_pairs = overlaps.len() as u64;
    stats.concurrent_holders_s = lease::total_overlap_s(&overlaps, meta);
    anomalies.extend(lease::overlap_anomaly(&overlaps, &claims, meta));

    // Vacancy matters only while there is work: until the plan finished,
    // else until the run ended. Without a final state we cannot tell.
    let run_end = clock.unix_ns_at_scenario_ms(meta.end_scenario_ms);
    let until = live.and_then(|l| l.finished_unix_ns).unwrap_or(run_end);
    let windows = claims.vacancies(until);
    let (count, total, min, max) = lease::vacancy_figures(&windows, meta);
    (
        stats.vacancy_windows,
        stats.vacancy_total_s,
        stats.vacancy_min_s,
        stats.vacancy_max_s,
    ) = (count, total, min, max);
    if let (Some(l), Some(&(first, _))) = (live, windows.first()) {
        stats.turbines_moved_before_first_vacancy = Some(l.moved_before(first));
    }
    anomalies.extend(lease::vacancy_anomaly(&windows, meta));

    let stalls = stall::stalls(&writes, &claims, meta);
    stats.stalled_holders = stalls.len() as u64;
    stats.stalled_holder_max_s = stall::longest_s(&stalls, meta);
    anomalies.extend(stall::stall_anomaly(&stalls, &claims, meta));

    let scene = reached::scene(meta, seen, &claims);
    scene.find(found);
    let audited = Audited {
        writes: &writes,
        late: &late,
        overlaps: &overlaps,
        stale: &stale,
        vacancies: &windows,
    };
    audited.find(&scene, found);
    (anomalies, reasons)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{AnomalyClass, Severity, Validity};
    use chaos_history::{Op, OpType, Run, ShardTurbineRuns};

    fn meta() -> RunMeta {
        serde_json::from_value(serde_json::json!({
            "scenario": "t", "seed": 0,
            "clock": {"start_unix_ns": 0, "start_scenario_ms": 0, "real_ns_per_scenario_s": 10_000_000, "scenario_day_unix_ms": 0},
            "job": "move", "shards": ["shard1"], "owners": {"T1": "shard1"}, "plan": [], "seeded": [],
            "lease_ms": 20000, "copy_ms": 1000, "strict_duplicates": false, "mover": {},
            "end_scenario_ms": 10_000, "completed": true, "incomplete_reason": null
        }))
        .expect("a minimal run")
    }

    /// A reading no history line explains is phantom, unless the history's
    /// last line was torn off: it may have been that batch's invoke.
    #[test]
    fn phantom_rows_are_not_proven_past_a_torn_history() {
        let meta = meta();
        let ingest = Op {
            index: 0,
            time_ns: 0,
            scenario_time: String::new(),
            process: "ingest".into(),
            kind: OpType::Ok,
            f: "ingest".into(),
            value: serde_json::json!({"shard": "shard1", "ts_ms": 0, "turbines": ["T1"]}),
        };
        let final_state = FinalState {
            payments: Vec::new(),
            config: None,
            shards: vec![ShardTurbineRuns {
                shard: "shard1".into(),
                turbine: "T1".into(),
                runs: vec![Run {
                    first_ms: 0,
                    last_ms: 2_000,
                    step_ms: 2_000,
                    copies: 1,
                }],
                values: None,
            }],
            complete: true,
            missing: Vec::new(),
        };
        let audit = Audit {
            object_writes: Vec::new(),
            complete: true,
            ..Audit::default()
        };
        for torn in [false, true] {
            let mut fold = HistoryFold::new(&meta);
            fold.observe(&ingest);
            if torn {
                fold.note_torn_tail();
            }
            let v = fold.finish(&meta, Some(&audit), Some(&final_state));
            let phantom = v.anomaly(AnomalyClass::PhantomRows).expect("phantom");
            assert_eq!(phantom.count, 1);
            let (severity, valid) = if torn {
                (Severity::Info, Validity::Unknown)
            } else {
                (Severity::Error, Validity::Invalid)
            };
            assert_eq!((phantom.severity, v.valid), (severity, valid));
        }
    }
}
