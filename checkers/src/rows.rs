//! The rows check: every acknowledged reading exactly once on its owner shard; lost, duplicated, misplaced, phantom and corrupt readings per turbine.

use crate::fold::IngestGroup;
use crate::readings::{tally, Source, Tally, TurbineTally};
use crate::times::{format_ms, format_reading, scenario_ms};
use crate::writes::TurbineWrites;
use crate::{Anomaly, AnomalyClass, Severity};
use chaos_history::{FinalState, Run, RunMeta, ScenarioClock, ValueCheck};
use serde_json::json;
use std::collections::HashMap;

/// One turbine judged.
#[derive(Debug, Clone)]
pub struct TurbineRows {
    pub turbine: String,
    pub owner: Option<String>,
    /// The plan's source shard for it, when it is to move to its owner.
    pub source: Option<String>,
    /// Shards holding some of its readings at the end.
    pub shards: Vec<String>,
    pub tally: TurbineTally,
    /// Per shard holding phantom readings of it: how many and which range.
    pub phantom_by_shard: Vec<(String, Tally)>,
}

/// A (shard, turbine) whose value check found rows with the wrong value.
#[derive(Debug, Clone)]
pub struct CorruptRows {
    pub shard: String,
    pub turbine: String,
    pub check: ValueCheck,
}

#[derive(Debug, Default)]
pub struct RowsOutcome {
    pub turbines: Vec<TurbineRows>,
    /// Why some turbine could not be judged (becomes `unknown`).
    pub reasons: Vec<String>,
    /// Every (shard, turbine) with wrong values, in the final state's order.
    pub corrupt: Vec<CorruptRows>,
    /// Rows whose value the shards checked (0: a run that did not check values).
    pub values_checked: u64,
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
    let mut out = RowsOutcome::default();
    for st in &final_state.shards {
        if let Some(check) = st.values {
            out.values_checked += check.rows.max(0) as u64;
            if check.wrong > 0 {
                out.corrupt.push(CorruptRows {
                    shard: st.shard.clone(),
                    turbine: st.turbine.clone(),
                    check,
                });
            }
        }
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
            Ok(tally) => {
                let phantom_by_shard = if tally.unexpected.count > 0 {
                    phantom_by_shard(&per[i], &shards, owner_index, source_index)
                } else {
                    Vec::new()
                };
                out.turbines.push(TurbineRows {
                    turbine: name,
                    owner,
                    source: source.map(str::to_string),
                    shards: std::mem::take(&mut held_on[i]),
                    tally,
                    phantom_by_shard,
                })
            }
            Err(e) => out.reasons.push(format!(
                "turbine {name}: its runs are too irregular to check ({} points in one stretch)",
                e.points
            )),
        }
    }
    out
}

/// The phantom readings of one turbine, shard by shard: the expectation
/// against each shard's runs alone (only for turbines that have some).
fn phantom_by_shard(
    runs: &[(Run, Source)],
    shards: &[String],
    owner: Option<u32>,
    source: Option<u32>,
) -> Vec<(String, Tally)> {
    let mut held: Vec<u32> = runs
        .iter()
        .filter_map(|(_, s)| match *s {
            Source::Present { shard, .. } => Some(shard),
            _ => None,
        })
        .collect();
    held.sort_unstable();
    held.dedup();
    held.into_iter()
        .filter_map(|shard| {
            let alone: Vec<(Run, Source)> = runs
                .iter()
                .filter(|(_, s)| match *s {
                    Source::Present { shard: on, .. } => on == shard,
                    _ => true,
                })
                .copied()
                .collect();
            let t = tally(&alone, owner, source).ok()?.unexpected;
            (t.count > 0).then(|| (shards[shard as usize].clone(), t))
        })
        .collect()
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

    /// Lost, duplicated, misplaced, phantom and corrupt rows, dated by the
    /// audit when there is one. With a final state that could not read every
    /// shard, a reading missing from it may sit on the unreadable shard: lost
    /// rows are then shown as information and the verdict says `unknown`
    /// (what a readable shard holds where it should not, misplaced, phantom
    /// or corrupt, is proven whatever the others hold). Phantom rows are
    /// information when the expectation is incomplete (ingest completions
    /// that did not say which readings).
    pub fn anomalies(
        &self,
        meta: &RunMeta,
        writes: Option<&TurbineWrites>,
        final_complete: bool,
        expectation_complete: bool,
    ) -> Vec<Anomaly> {
        let clock = &meta.clock;
        let (provable, caveat) = crate::observed::absence_proven(
            final_complete,
            " (final state incomplete: may be on an unreadable shard)",
        );
        [
            self.lost_anomaly(clock, writes, provable, caveat),
            self.duplicated_anomaly(clock, writes, meta.strict_duplicates),
            self.misplaced_anomaly(clock, writes),
            self.phantom_anomaly(clock, writes, expectation_complete),
            self.corrupt_anomaly(clock, writes),
        ]
        .into_iter()
        .flatten()
        .collect()
    }

    /// Lost: dated by the delete that took the first lost reading, else by the reading itself.
    fn lost_anomaly(
        &self,
        clock: &ScenarioClock,
        writes: Option<&TurbineWrites>,
        provable: Severity,
        caveat: &str,
    ) -> Option<Anomaly> {
        let reading_ms = |ts: i64| clock.scenario_ms_of_reading(ts);
        let lost: Vec<&TurbineRows> = self
            .turbines
            .iter()
            .filter(|t| t.tally.lost.count > 0)
            .collect();
        if lost.is_empty() {
            return None;
        }
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
        Some(Anomaly::new(
            AnomalyClass::LostRows,
            provable,
            rows,
            first,
            summary,
            json!({ "turbines": evidence }),
        ))
    }

    /// Duplicated: dated by the insert that made the first duplicate (the second insert of it).
    fn duplicated_anomaly(
        &self,
        clock: &ScenarioClock,
        writes: Option<&TurbineWrites>,
        strict: bool,
    ) -> Option<Anomaly> {
        let reading_ms = |ts: i64| clock.scenario_ms_of_reading(ts);
        let dup: Vec<&TurbineRows> = self
            .turbines
            .iter()
            .filter(|t| t.tally.duplicated.count > 0)
            .collect();
        if dup.is_empty() {
            return None;
        }
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
        let severity = if strict {
            Severity::Error
        } else {
            Severity::Cleanup
        };
        let summary = format!(
            "{readings} readings of {} turbine(s) are present more than once ({extra} extra rows){}; first {}",
            dup.len(),
            if strict { ", and duplicates are strict" } else { ": cleanup work" },
            dup[0].turbine,
        );
        Some(Anomaly::new(
            AnomalyClass::DuplicatedRows,
            severity,
            readings,
            first,
            summary,
            json!({ "turbines": evidence }),
        ))
    }

    /// Misplaced: dated by the first insert of it on a shard that is
    /// neither the owner nor the plan's source. A stray copy on a shard
    /// that was read is misplaced whatever the unreadable shards hold.
    fn misplaced_anomaly(
        &self,
        clock: &ScenarioClock,
        writes: Option<&TurbineWrites>,
    ) -> Option<Anomaly> {
        let reading_ms = |ts: i64| clock.scenario_ms_of_reading(ts);
        let mis: Vec<&TurbineRows> = self
            .turbines
            .iter()
            .filter(|t| t.tally.misplaced.count > 0)
            .collect();
        if mis.is_empty() {
            return None;
        }
        let mut first: Option<i64> = None;
        let mut evidence = Vec::new();
        for t in &mis {
            let ts = t.tally.misplaced.first_ms.unwrap_or_default();
            let owner = t.owner.clone().unwrap_or_default();
            let source = t.source.clone().unwrap_or_default();
            let stray: Vec<&String> = t
                .shards
                .iter()
                .filter(|s| **s != owner && **s != source)
                .collect();
            let by = writes.and_then(|w| {
                w.inserts_of(&t.turbine, ts, |s| s != owner && s != source)
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
                "last_ts_ms": t.tally.misplaced.last_ms,
                "last_time": t.tally.misplaced.last_ms.map(|ts| format_reading(clock, ts)),
                "stray_shards": stray,
                "owner_holds_some": t.owner.as_ref().is_some_and(|o| t.shards.contains(o)),
                "shards_holding": t.shards,
                "placed_by": by.map(|w| json!({"app": w.app, "shard": w.shard, "token": w.token, "time": format_ms(scenario_ms(clock, w.commit_unix_ns))})),
            }));
        }
        let readings: u64 = mis.iter().map(|t| t.tally.misplaced.count).sum();
        let m0 = mis[0];
        let owner0 = m0.owner.as_deref().unwrap_or("?");
        let stray0: Vec<&str> = m0
            .shards
            .iter()
            .map(String::as_str)
            .filter(|s| Some(*s) != m0.owner.as_deref() && Some(*s) != m0.source.as_deref())
            .collect();
        let summary = format!(
            "{readings} readings of {} turbine(s) are on a shard that is not their owner; {} belongs on {owner0} but is on {}{}",
            mis.len(),
            m0.turbine,
            stray0.join(", "),
            if m0.shards.iter().any(|s| s == owner0) {
                format!(" (as well as on {owner0})")
            } else {
                String::new()
            },
        );
        Some(Anomaly::new(
            AnomalyClass::MisplacedRows,
            Severity::Error,
            readings,
            first,
            summary,
            json!({ "turbines": evidence }),
        ))
    }

    /// Phantom: dated by the first insert on that shard that could have
    /// put the first of them there, else by the reading itself.
    fn phantom_anomaly(
        &self,
        clock: &ScenarioClock,
        writes: Option<&TurbineWrites>,
        expectation_complete: bool,
    ) -> Option<Anomaly> {
        let reading_ms = |ts: i64| clock.scenario_ms_of_reading(ts);
        let phantom: Vec<&TurbineRows> = self
            .turbines
            .iter()
            .filter(|t| t.tally.unexpected.count > 0)
            .collect();
        if phantom.is_empty() {
            return None;
        }
        let mut first: Option<i64> = None;
        let mut evidence = Vec::new();
        for t in &phantom {
            let per_shard: Vec<(String, Tally)> = if t.phantom_by_shard.is_empty() {
                vec![(t.shards.join(", "), t.tally.unexpected)]
            } else {
                t.phantom_by_shard.clone()
            };
            for (shard, tally) in per_shard {
                let ts = tally.first_ms.unwrap_or_default();
                let by = writes.and_then(|w| {
                    w.inserts_of(&t.turbine, ts, |s| s == shard)
                        .first()
                        .copied()
                });
                let at = by.map_or(reading_ms(ts), |w| scenario_ms(clock, w.commit_unix_ns));
                first = Some(first.map_or(at, |f| f.min(at)));
                evidence.push(json!({
                    "turbine": t.turbine,
                    "shard": shard,
                    "owner": t.owner,
                    "known_turbine": t.owner.is_some() || t.tally.expected.count > 0,
                    "readings": tally.count,
                    "first_ts_ms": tally.first_ms,
                    "first_time": tally.first_ms.map(|ts| format_reading(clock, ts)),
                    "last_ts_ms": tally.last_ms,
                    "last_time": tally.last_ms.map(|ts| format_reading(clock, ts)),
                    "inserted_by": by.map(|w| json!({"app": w.app, "shard": w.shard, "token": w.token, "time": format_ms(scenario_ms(clock, w.commit_unix_ns))})),
                }));
            }
        }
        let readings: u64 = phantom.iter().map(|t| t.tally.unexpected.count).sum();
        let p0 = phantom[0];
        let (shard0, tally0) = p0
            .phantom_by_shard
            .first()
            .cloned()
            .unwrap_or_else(|| (p0.shards.join(", "), p0.tally.unexpected));
        let range = match (tally0.first_ms, tally0.last_ms) {
            (Some(a), Some(b)) if a != b => {
                format!(
                    "{} -> {}",
                    format_reading(clock, a),
                    format_reading(clock, b)
                )
            }
            (Some(a), _) => format_reading(clock, a),
            _ => "?".to_string(),
        };
        let (severity, caveat) = crate::observed::absence_proven(
            expectation_complete,
            " (the expectation is incomplete: an ingest completion that did not say which readings, the history's torn last line or an empty history may explain these)",
        );
        let summary = format!(
            "{readings} readings of {} turbine(s) are on a shard though nothing put them there (not seeded, not ingested ok or info, no copy of either); first: {} on {shard0}, {} readings {range}{}{caveat}",
            phantom.len(),
            p0.turbine,
            tally0.count,
            if p0.owner.is_none() && p0.tally.expected.count == 0 {
                " (a turbine nobody planned, seeded or ingested)"
            } else {
                ""
            },
        );
        Some(Anomaly::new(
            AnomalyClass::PhantomRows,
            severity,
            readings,
            first,
            summary,
            json!({ "turbines": evidence }),
        ))
    }

    /// Corrupt: the shard's own value check, dated by the first insert on
    /// that shard of the first wrong reading, else by the reading itself.
    fn corrupt_anomaly(
        &self,
        clock: &ScenarioClock,
        writes: Option<&TurbineWrites>,
    ) -> Option<Anomaly> {
        let reading_ms = |ts: i64| clock.scenario_ms_of_reading(ts);
        if self.corrupt.is_empty() {
            return None;
        }
        let mut first: Option<i64> = None;
        let mut evidence = Vec::new();
        for c in &self.corrupt {
            let ts = c.check.first_wrong_ts_ms;
            let by = writes.and_then(|w| match ts {
                Some(ts) => w
                    .inserts_of(&c.turbine, ts, |s| s == c.shard)
                    .first()
                    .copied(),
                None => w.first_insert_on(&c.turbine, &c.shard),
            });
            let at = by
                .map(|w| scenario_ms(clock, w.commit_unix_ns))
                .or(ts.map(reading_ms));
            if let Some(at) = at {
                first = Some(first.map_or(at, |f| f.min(at)));
            }
            evidence.push(json!({
                "shard": c.shard,
                "turbine": c.turbine,
                "rows": c.check.rows,
                "wrong": c.check.wrong,
                "first_wrong_ts_ms": ts,
                "first_wrong_time": ts.map(|ts| format_reading(clock, ts)),
                "inserted_by": by.map(|w| json!({"app": w.app, "shard": w.shard, "token": w.token, "time": format_ms(scenario_ms(clock, w.commit_unix_ns))})),
            }));
        }
        let wrong: u64 = self.corrupt.iter().map(|c| c.check.wrong as u64).sum();
        let c0 = &self.corrupt[0];
        let summary = format!(
            "{wrong} rows on {} (shard, turbine) hold a value that is not their reading's; first: {} on {}, {} of {} rows wrong{}",
            self.corrupt.len(),
            c0.turbine,
            c0.shard,
            c0.check.wrong,
            c0.check.rows,
            c0.check
                .first_wrong_ts_ms
                .map_or(String::new(), |ts| format!(" from {}", format_reading(clock, ts))),
        );
        Some(Anomaly::new(
            AnomalyClass::CorruptRows,
            Severity::Error,
            wrong,
            first,
            summary,
            json!({ "rows": evidence }),
        ))
    }
}
