//! The rows check: every acknowledged reading exactly once on its owner shard; lost, duplicated and misplaced readings per turbine.

use crate::fold::IngestGroup;
use crate::readings::{tally, Source, TurbineTally};
use crate::times::{format_ms, format_reading, scenario_ms};
use crate::writes::TurbineWrites;
use crate::{Anomaly, AnomalyClass, Severity};
use chaos_history::{FinalState, Run, RunMeta};
use serde_json::json;
use std::collections::HashMap;

/// One turbine judged.
#[derive(Debug, Clone)]
pub struct TurbineRows {
    pub turbine: String,
    pub owner: Option<String>,
    /// Shards holding some of its readings at the end.
    pub shards: Vec<String>,
    pub tally: TurbineTally,
}

#[derive(Debug, Default)]
pub struct RowsOutcome {
    pub turbines: Vec<TurbineRows>,
    /// Why some turbine could not be judged (becomes `unknown`).
    pub reasons: Vec<String>,
}

/// Tally every turbine: seeded and acknowledged readings are expected,
/// uncertain ones allowed, and the final state says what is where.
pub fn tally_turbines(
    mut names: Vec<String>,
    groups: Vec<IngestGroup>,
    meta: &RunMeta,
    final_state: &FinalState,
) -> RowsOutcome {
    let mut index: HashMap<String, usize> = names
        .iter()
        .enumerate()
        .map(|(i, n)| (n.clone(), i))
        .collect();
    let mut shards: Vec<String> = meta.shards.clone();
    let mut per: Vec<Vec<(Run, Source)>> = vec![Vec::new(); names.len()];
    let mut slot =
        |name: &str, names: &mut Vec<String>, per: &mut Vec<Vec<(Run, Source)>>| -> usize {
            if let Some(&i) = index.get(name) {
                return i;
            }
            names.push(name.to_string());
            per.push(Vec::new());
            index.insert(name.to_string(), names.len() - 1);
            names.len() - 1
        };
    for s in &meta.seeded {
        let i = slot(&s.turbine, &mut names, &mut per);
        per[i].push((s.run, Source::Expected));
    }
    for g in groups {
        let acknowledged = g.acknowledged.into_runs();
        let uncertain = g.uncertain.into_runs();
        for &t in &g.turbines {
            let list = &mut per[t as usize];
            list.extend(acknowledged.iter().map(|&r| (r, Source::Expected)));
            list.extend(uncertain.iter().map(|&r| (r, Source::Maybe)));
        }
    }
    let mut held_on: Vec<Vec<String>> = vec![Vec::new(); names.len()];
    for st in &final_state.shards {
        let i = slot(&st.turbine, &mut names, &mut per);
        held_on.resize(names.len(), Vec::new());
        let shard = match shards.iter().position(|s| *s == st.shard) {
            Some(p) => p,
            None => {
                shards.push(st.shard.clone());
                shards.len() - 1
            }
        } as u32;
        let runs: Vec<(Run, Source)> = st
            .runs
            .iter()
            .filter(|r| r.copies > 0)
            .map(|&r| {
                (
                    r,
                    Source::Present {
                        shard,
                        copies: r.copies,
                    },
                )
            })
            .collect();
        if !runs.is_empty() && !held_on[i].contains(&st.shard) {
            held_on[i].push(st.shard.clone());
        }
        per[i].extend(runs);
    }
    held_on.resize(names.len(), Vec::new());
    let mut out = RowsOutcome::default();
    for (i, name) in names.into_iter().enumerate() {
        let owner = meta.owners.get(&name).cloned();
        let owner_index = owner
            .as_ref()
            .and_then(|o| shards.iter().position(|s| s == o))
            .map(|p| p as u32);
        // An owner shard the run never listed holds nothing: everything present is misplaced.
        let owner_index = owner_index.or(owner.as_ref().map(|_| u32::MAX));
        let source = meta
            .plan
            .iter()
            .find(|p| p.turbine == name && Some(&p.to) == owner.as_ref())
            .map(|p| p.from.as_str());
        let source_index = source
            .and_then(|s| shards.iter().position(|x| x == s))
            .map(|p| p as u32);
        match tally(&per[i], owner_index, source_index) {
            Ok(tally) => out.turbines.push(TurbineRows {
                turbine: name,
                owner,
                shards: std::mem::take(&mut held_on[i]),
                tally,
            }),
            Err(e) => out.reasons.push(format!(
                "turbine {name}: its runs are too irregular to check ({} points in one stretch)",
                e.points
            )),
        }
    }
    out
}

impl RowsOutcome {
    pub fn rows_lost(&self) -> u64 {
        self.turbines.iter().map(|t| t.tally.lost.count).sum()
    }

    pub fn lost_turbines(&self) -> Vec<String> {
        self.turbines
            .iter()
            .filter(|t| t.tally.lost.count > 0)
            .map(|t| t.turbine.clone())
            .collect()
    }

    /// The lost range `(first, last)` of a turbine's readings (ts ms), if it lost any.
    pub fn lost_range(&self, turbine: &str) -> Option<(i64, i64)> {
        let t = self
            .turbines
            .iter()
            .find(|t| t.turbine == turbine && t.tally.lost.count > 0)?;
        Some((t.tally.lost.first_ms?, t.tally.lost.last_ms?))
    }

    /// Lost, duplicated and misplaced rows, dated by the audit when there is
    /// one. With a final state that could not read every shard, a reading
    /// missing from it may sit on the unreadable shard: lost and misplaced
    /// rows are then shown as information and the verdict says `unknown`.
    pub fn anomalies(
        &self,
        meta: &RunMeta,
        writes: Option<&TurbineWrites>,
        final_complete: bool,
    ) -> Vec<Anomaly> {
        let clock = &meta.clock;
        let (provable, caveat) = if final_complete {
            (Severity::Error, "")
        } else {
            (
                Severity::Info,
                " (final state incomplete: may be on an unreadable shard)",
            )
        };
        let mut out = Vec::new();
        let reading_ms = |ts: i64| clock.scenario_ms_of_reading(ts);

        // Lost: dated by the delete that took the first lost reading, else by the reading itself.
        let lost: Vec<&TurbineRows> = self
            .turbines
            .iter()
            .filter(|t| t.tally.lost.count > 0)
            .collect();
        if !lost.is_empty() {
            let mut first: Option<i64> = None;
            let mut evidence = Vec::new();
            for t in &lost {
                let first_lost = t.tally.lost.first_ms.unwrap_or_default();
                let deleted = writes.and_then(|w| w.lost_at(&t.turbine, first_lost));
                let at = deleted.map_or(reading_ms(first_lost), |d| {
                    scenario_ms(clock, d.commit_unix_ns)
                });
                first = Some(first.map_or(at, |f| f.min(at)));
                evidence.push(json!({
                    "turbine": t.turbine,
                    "owner": t.owner,
                    "rows_lost": t.tally.lost.count,
                    "rows_expected": t.tally.expected.count,
                    "first_lost_ts_ms": first_lost,
                    "first_lost_time": format_reading(clock, first_lost),
                    "last_lost_ts_ms": t.tally.lost.last_ms,
                    "last_lost_time": t.tally.lost.last_ms.map(|ts| format_reading(clock, ts)),
                    "lost_at_scenario_ms": at,
                    "lost_at_time": format_ms(at),
                    "lost_by": deleted.map(|d| json!({"app": d.app, "shard": d.shard, "rows": d.rows, "token": d.token})),
                    "surviving_from_ts_ms": t.tally.present.first_ms,
                    "surviving_from_time": t.tally.present.first_ms.map(|ts| format_reading(clock, ts)),
                    "shards_holding": t.shards,
                }));
            }
            let rows: u64 = lost.iter().map(|t| t.tally.lost.count).sum();
            let t0 = lost[0];
            let begins = t0
                .tally
                .present
                .first_ms
                .map_or("nowhere".to_string(), |ts| {
                    format!("at {}", format_reading(clock, ts))
                });
            let summary = format!(
                "{rows} acknowledged readings of {} turbine(s) are on no shard; {}: {} lost from {}, its history now begins {begins}{caveat}",
                lost.len(),
                t0.turbine,
                t0.tally.lost.count,
                format_reading(clock, t0.tally.lost.first_ms.unwrap_or_default()),
            );
            out.push(Anomaly::new(
                AnomalyClass::LostRows,
                provable,
                rows,
                first,
                summary,
                json!({ "turbines": evidence }),
            ));
        }

        // Duplicated: dated by the insert that made the first duplicate (the second insert of it).
        let dup: Vec<&TurbineRows> = self
            .turbines
            .iter()
            .filter(|t| t.tally.duplicated.count > 0)
            .collect();
        if !dup.is_empty() {
            let mut first: Option<i64> = None;
            let mut evidence = Vec::new();
            for t in &dup {
                let ts = t.tally.duplicated.first_ms.unwrap_or_default();
                let inserts = writes
                    .map(|w| w.inserts_of(&t.turbine, ts, |_| true))
                    .unwrap_or_default();
                let by = inserts.get(1).or(inserts.first());
                let at = by.map_or(reading_ms(ts), |w| scenario_ms(clock, w.commit_unix_ns));
                first = Some(first.map_or(at, |f| f.min(at)));
                evidence.push(json!({
                    "turbine": t.turbine,
                    "duplicated_readings": t.tally.duplicated.count,
                    "extra_rows": t.tally.duplicate_rows_extra,
                    "first_ts_ms": ts,
                    "first_time": format_reading(clock, ts),
                    "last_ts_ms": t.tally.duplicated.last_ms,
                    "duplicated_at_time": format_ms(at),
                    "duplicated_by": by.map(|w| json!({"app": w.app, "shard": w.shard, "token": w.token})),
                    "shards_holding": t.shards,
                }));
            }
            let readings: u64 = dup.iter().map(|t| t.tally.duplicated.count).sum();
            let extra: u64 = dup.iter().map(|t| t.tally.duplicate_rows_extra).sum();
            let severity = if meta.strict_duplicates {
                Severity::Error
            } else {
                Severity::Cleanup
            };
            let summary = format!(
                "{readings} readings of {} turbine(s) are present more than once ({extra} extra rows){}; first {}",
                dup.len(),
                if meta.strict_duplicates { ", and duplicates are strict" } else { ": cleanup work" },
                dup[0].turbine,
            );
            out.push(Anomaly::new(
                AnomalyClass::DuplicatedRows,
                severity,
                readings,
                first,
                summary,
                json!({ "turbines": evidence }),
            ));
        }

        // Misplaced: dated by the first insert of it on a shard that is not the owner.
        let mis: Vec<&TurbineRows> = self
            .turbines
            .iter()
            .filter(|t| t.tally.misplaced.count > 0)
            .collect();
        if !mis.is_empty() {
            let mut first: Option<i64> = None;
            let mut evidence = Vec::new();
            for t in &mis {
                let ts = t.tally.misplaced.first_ms.unwrap_or_default();
                let owner = t.owner.clone().unwrap_or_default();
                let by = writes.and_then(|w| {
                    w.inserts_of(&t.turbine, ts, |s| s != owner)
                        .first()
                        .copied()
                });
                let at = by.map_or(reading_ms(ts), |w| scenario_ms(clock, w.commit_unix_ns));
                first = Some(first.map_or(at, |f| f.min(at)));
                evidence.push(json!({
                    "turbine": t.turbine,
                    "owner": t.owner,
                    "misplaced_readings": t.tally.misplaced.count,
                    "first_ts_ms": ts,
                    "first_time": format_reading(clock, ts),
                    "shards_holding": t.shards,
                    "placed_by": by.map(|w| json!({"app": w.app, "shard": w.shard, "token": w.token, "time": format_ms(scenario_ms(clock, w.commit_unix_ns))})),
                }));
            }
            let readings: u64 = mis.iter().map(|t| t.tally.misplaced.count).sum();
            let summary = format!(
                "{readings} readings of {} turbine(s) are not on their owner shard; {} belongs on {} but is on {}{caveat}",
                mis.len(),
                mis[0].turbine,
                mis[0].owner.as_deref().unwrap_or("?"),
                mis[0].shards.join(", "),
            );
            out.push(Anomaly::new(
                AnomalyClass::MisplacedRows,
                provable,
                readings,
                first,
                summary,
                json!({ "turbines": evidence }),
            ));
        }
        out
    }
}
