//! The ten objects' checks (system `ten-objects`): the configuration a reader sees at the end is one leader's complete version (else a torn update), and no older leader's write landed after a newer leader's (else the update interleaved).

use crate::times::{format_ms, scenario_ms};
use crate::{Anomaly, AnomalyClass, Severity, Stats};
use chaos_history::{ConfigObject, ConfigState, ObjectWrite, ObjectWriteKind, RunMeta};
use serde_json::json;
use std::collections::BTreeMap;

/// The value every writer gives object `object` of version `version` (the updater's
/// `object_value`): anything else was not written by a leader's version.
fn value_of(version: i64, object: i32) -> String {
    format!("v{version}-o{object}")
}

/// Torn, unfinished and interleaved updates, with the stats they fill. `read_whole`: the
/// final state read every shard; else an object not seen may be on an unread one (not torn),
/// and a version not seen published may have been (not unfinished).
pub fn check(
    meta: &RunMeta,
    writes: &[ObjectWrite],
    config: Option<&ConfigState>,
    read_whole: bool,
    stats: &mut Stats,
) -> Vec<Anomaly> {
    let mut out = Vec::new();
    if let Some(config) = config {
        out.extend(torn(meta, writes, config, read_whole, stats));
    }
    out.extend(interleaved(meta, writes, stats));
    out
}

/// The live configuration: one complete version written by a leader, or not.
fn torn(
    meta: &RunMeta,
    writes: &[ObjectWrite],
    config: &ConfigState,
    read_whole: bool,
    stats: &mut Stats,
) -> Option<Anomaly> {
    let count = meta.objects.as_ref().map_or(10, |o| o.count);
    let live = config.live();
    let by_object: BTreeMap<i32, &ConfigObject> = live.iter().map(|o| (o.object, o)).collect();
    let mut versions: BTreeMap<i64, u64> = BTreeMap::new();
    for o in by_object.values() {
        *versions.entry(o.version).or_default() += 1;
    }
    // The version most objects carry (the newest among equals) is what the update meant.
    let main = versions
        .iter()
        .max_by_key(|(v, n)| (**n, **v))
        .map(|(v, _)| *v);
    // An object not seen is missing only when every shard was read.
    let missing: Vec<i32> = (1..=count)
        .filter(|i| read_whole && !by_object.contains_key(i))
        .collect();
    let odd: Vec<&ConfigObject> = by_object
        .values()
        .filter(|o| Some(o.version) != main || o.value != value_of(o.version, o.object))
        .copied()
        .collect();
    if missing.is_empty() && odd.is_empty() {
        stats.live_version = main;
        if main == Some(0) {
            return Some(unfinished(meta, read_whole));
        }
        return None;
    }
    stats.torn_objects = (missing.len() + odd.len()) as u64;
    // When it tore: the last write to a live object that is not of the main version.
    let tore = odd
        .iter()
        .filter_map(|o| {
            writes
                .iter()
                .filter(|w| {
                    w.object == o.object
                        && w.version == o.version
                        && w.kind == ObjectWriteKind::Content
                })
                .map(|w| w.commit_unix_ns)
                .max()
        })
        .max()
        .map(|ns| scenario_ms(&meta.clock, ns));
    let through = if config.through_pointer() {
        "the version the pointer names"
    } else {
        "the live objects"
    };
    let mut summary = format!(
        "{} of {count} objects a reader sees are not version {}: {through} mix {} versions",
        stats.torn_objects,
        main.unwrap_or(0),
        versions.len()
    );
    if !missing.is_empty() {
        summary.push_str(&format!("; objects {missing:?} are missing"));
    }
    let evidence = json!({
        "main_version": main,
        "objects": by_object.values().map(|o| json!({
            "object": o.object, "shard": o.shard, "version": o.version, "token": o.token,
            "value": o.value, "written_by": o.app,
        })).collect::<Vec<_>>(),
        "missing": missing,
        "through_pointer": config.through_pointer(),
    });
    Some(Anomaly::new(
        AnomalyClass::TornUpdate,
        Severity::Error,
        stats.torn_objects,
        tore,
        summary,
        evidence,
    ))
}

/// Every object still holds the initial version: no leader published one.
fn unfinished(meta: &RunMeta, read_whole: bool) -> Anomaly {
    let (read, caveat) = crate::observed::absence_proven(
        read_whole,
        " (the final state is incomplete: an unread shard may hold a published version)",
    );
    let severity = crate::times::liveness_severity(meta).min(read);
    Anomaly::new(
        AnomalyClass::JobNotFinished,
        severity,
        1,
        None,
        format!("no leader's version was published: every object still holds the initial version{caveat}"),
        json!({}),
    )
}

/// Live writes (object contents in place, or pointer flips) in commit order: one carrying an
/// older token than a live write already committed is a stale leader admitted after a newer
/// one began.
fn interleaved(meta: &RunMeta, writes: &[ObjectWrite], stats: &mut Stats) -> Option<Anomaly> {
    let mut live: Vec<&ObjectWrite> = writes
        .iter()
        .filter(|w| matches!(w.kind, ObjectWriteKind::Content | ObjectWriteKind::Pointer))
        .collect();
    live.sort_by_key(|w| (w.commit_unix_ns, w.xid));
    let mut newest: Option<&ObjectWrite> = None;
    let mut stale: Vec<(&ObjectWrite, &ObjectWrite)> = Vec::new();
    for w in live {
        match newest {
            Some(n) if w.token < n.token => stale.push((w, n)),
            Some(n) if w.token <= n.token => {}
            _ => newest = Some(w),
        }
    }
    stats.interleaved_writes = stale.len() as u64;
    let (first, after) = *stale.first()?;
    let at = |ns| format_ms(scenario_ms(&meta.clock, ns));
    let summary = format!(
        "{} object write(s) of an older leader accepted after a newer leader had written: first {} (token {}) object {} on {} at {}, after {} (token {}) wrote at {}",
        stale.len(),
        first.app,
        first.token,
        first.object,
        first.shard,
        at(first.commit_unix_ns),
        after.app,
        after.token,
        at(after.commit_unix_ns)
    );
    let evidence = json!({
        "writes": stale.iter().take(20).map(|(w, n)| json!({
            "by": w.app, "token": w.token, "object": w.object, "shard": w.shard,
            "kind": w.kind, "at": at(w.commit_unix_ns),
            "after": { "by": n.app, "token": n.token, "object": n.object, "at": at(n.commit_unix_ns) },
        })).collect::<Vec<_>>(),
    });
    Some(Anomaly::new(
        AnomalyClass::InterleavedUpdate,
        Severity::Error,
        stale.len() as u64,
        Some(scenario_ms(&meta.clock, first.commit_unix_ns)),
        summary,
        evidence,
    ))
}
