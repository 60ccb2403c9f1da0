//! A schedule: faults validated against a topology and a scenario window, expanded into paired start/heal operations in time order.

use crate::{Fault, FaultKind, LinkPattern, NemesisError, ScenarioMs, Topology};
use serde::Serialize;

/// One thing the nemesis does at a scenario time.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct NemesisOp {
    pub at_ms: ScenarioMs,
    /// `pause`, `resume`, `stop`, `start`, `latency`, `heal`, ...: its kind's opening verb, or
    /// with `heal` its closing one (`FaultKind::verb`, `heal_verb`).
    pub verb: &'static str,
    /// Index of the fault in the scenario (pairs a heal with its fault).
    pub fault: usize,
    pub heal: bool,
    pub kind: FaultKind,
    /// For link faults: the concrete links the pattern resolved to.
    pub links: Vec<String>,
}

/// Operations sorted by time (stable: a heal scheduled at the same instant
/// as a later fault's start comes first when it was listed first).
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct Schedule {
    pub ops: Vec<NemesisOp>,
    /// Faults that land at a moment of the system (`when`), by their index in the scenario:
    /// validated here, applied by the harness when their trigger fires.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub triggered: Vec<usize>,
}

/// Validate `faults` and expand them into a schedule. The window is the
/// scenario's `[start_ms, end_ms]`; `fmt` prints a scenario time for errors.
pub fn expand(
    faults: &[Fault],
    topology: &Topology,
    start_ms: i64,
    end_ms: i64,
    fmt: fn(i64) -> String,
) -> Result<Schedule, NemesisError> {
    let mut ops = Vec::new();
    let mut triggered = Vec::new();
    for (index, fault) in faults.iter().enumerate() {
        let kind = fault.kind.verb().to_string();
        let links = validate(index, fault, topology)?;
        if let Some(when) = &fault.when {
            validate_trigger(index, fault, when, topology)?;
            // Armed at `at_ms`, which must be in the scenario; where it ends depends on when
            // it fires (a fault still on at the end is healed before the final reads).
            if fault.at_ms < start_ms || fault.at_ms > end_ms {
                return Err(NemesisError::OutsideScenario {
                    index,
                    kind,
                    at: fmt(fault.at_ms),
                    end: fmt(fault.at_ms),
                    scenario_end: fmt(end_ms),
                });
            }
            triggered.push(index);
            continue;
        }
        let end = fault.at_ms + fault.duration_ms.unwrap_or(0);
        if fault.at_ms < start_ms || end > end_ms {
            return Err(NemesisError::OutsideScenario {
                index,
                kind,
                at: fmt(fault.at_ms),
                end: fmt(end),
                scenario_end: fmt(end_ms),
            });
        }
        ops.push(NemesisOp {
            at_ms: fault.at_ms,
            verb: fault.kind.verb(),
            fault: index,
            heal: false,
            kind: fault.kind.clone(),
            links: links.clone(),
        });
        if let Some(d) = fault.duration_ms {
            ops.push(NemesisOp {
                at_ms: fault.at_ms + d,
                verb: fault.kind.heal_verb(),
                fault: index,
                heal: true,
                kind: fault.kind.clone(),
                links,
            });
        }
    }
    ops.sort_by_key(|o| o.at_ms);
    Ok(Schedule { ops, triggered })
}

/// Roles (`holder`, `previous-holder`) are for triggered faults on a box; a named box must
/// exist; link events need a link to watch.
fn validate_trigger(
    index: usize,
    fault: &Fault,
    when: &crate::Trigger,
    topology: &Topology,
) -> Result<(), NemesisError> {
    let invalid = |detail: String| NemesisError::Invalid {
        index,
        kind: fault.kind.verb().to_string(),
        detail,
    };
    if when.nth == 0 {
        return Err(invalid("when.nth counts from 1".into()));
    }
    if !(when.delay_s >= 0.0 && when.delay_s.is_finite()) {
        return Err(invalid(format!(
            "when.delay_s must not be negative (got {})",
            when.delay_s
        )));
    }
    if let crate::Who::Box(b) = &when.by {
        if !topology.boxes.contains(b) {
            return Err(invalid(format!(
                "when.by '{b}' is not a box, holder, previous-holder or any (boxes: {})",
                topology.boxes.join(", ")
            )));
        }
    }
    if when.inside.is_some() && !when.on.on_link() {
        return Err(invalid(format!(
            "when.inside is about a write's transaction: give on = \"write\" (not \"{}\")",
            when.on.name()
        )));
    }
    if let Some(shard) = &when.shard {
        if !when.on.on_link() {
            return Err(invalid(format!(
                "when.shard names the links to watch: give a link event (txn, write, commit), not {}",
                when.on.name()
            )));
        }
        if !topology.nodes.iter().any(|n| n == shard && n != "routing") {
            return Err(invalid(format!("when.shard '{shard}' is not a shard")));
        }
    }
    Ok(())
}

fn validate(index: usize, fault: &Fault, topology: &Topology) -> Result<Vec<String>, NemesisError> {
    let kind = fault.kind.verb().to_string();
    let negative = |field: &'static str, value: i64| NemesisError::Negative {
        index,
        kind: kind.clone(),
        field,
        value,
    };
    if fault.at_ms < 0 {
        return Err(negative("at", fault.at_ms));
    }
    if let Some(d) = fault.duration_ms {
        if d < 0 {
            return Err(negative("duration", d));
        }
    }
    let unknown = |what: &'static str, name: &str, known: &[String]| {
        unknown_target(index, &kind, what, name, known)
    };
    // A role is resolved when the trigger fires (only a triggered fault has a moment).
    let role = fault.kind.role();
    if let (Some(role), None) = (role, &fault.when) {
        return Err(NemesisError::Invalid {
            index,
            kind: kind.clone(),
            detail: format!(
                "target '{}' names a role ({role}), resolved when a trigger fires: give `when`",
                fault.kind.target()
            ),
        });
    }
    match &fault.kind {
        FaultKind::Pause { target, .. } | FaultKind::Kill { target } => {
            // A lock service's member is a process too: it can be paused or killed.
            if role.is_none()
                && !topology.boxes.contains(target)
                && !topology.members.contains(target)
            {
                let known: Vec<String> = topology
                    .boxes
                    .iter()
                    .chain(&topology.members)
                    .cloned()
                    .collect();
                return Err(unknown("box", target, &known));
            }
            Ok(vec![])
        }
        k @ (FaultKind::Clock { .. } | FaultKind::Cpu { .. } | FaultKind::Stall { .. }) => {
            on_box_or_node(index, k, role, topology)?;
            Ok(vec![])
        }
        FaultKind::Stop { target } | FaultKind::Crash { target, .. } => {
            if !topology.nodes.contains(target) && !topology.members.contains(target) {
                let mut known = topology.nodes.clone();
                for m in &topology.members {
                    if !known.contains(m) {
                        known.push(m.clone());
                    }
                }
                return Err(unknown("node", target, &known));
            }
            unsynced(index, &fault.kind, topology)?;
            Ok(vec![])
        }
        k => {
            match k {
                FaultKind::Latency {
                    latency_ms,
                    jitter_ms,
                    ..
                } => {
                    if *latency_ms < 0 {
                        return Err(negative("latency_ms", *latency_ms));
                    }
                    if *jitter_ms < 0 {
                        return Err(negative("jitter_ms", *jitter_ms));
                    }
                    if jitter_ms > latency_ms {
                        return Err(NemesisError::JitterOverLatency {
                            index,
                            latency_ms: *latency_ms,
                            jitter_ms: *jitter_ms,
                        });
                    }
                }
                FaultKind::Bandwidth { rate_kb, .. } if *rate_kb < 0 => {
                    return Err(negative("rate_kb", *rate_kb))
                }
                FaultKind::Timeout { timeout_ms, .. } | FaultKind::ResetPeer { timeout_ms, .. }
                    if *timeout_ms < 0 =>
                {
                    return Err(negative("timeout_ms", *timeout_ms))
                }
                _ => {}
            }
            let pattern = k.target();
            let mut parsed = LinkPattern::parse(pattern).ok_or_else(|| NemesisError::Invalid {
                index,
                kind: kind.clone(),
                detail: format!("link '{pattern}' is not of the form client->node (e.g. box-2->shard1, box-*->routing, holder->routing)"),
            })?;
            if role.is_some() {
                // `holder->shard*`: the node part must name something a box links to.
                parsed.client = "box-*".into();
            }
            let links = parsed.resolve(topology);
            if links.is_empty() {
                return Err(unknown("link", pattern, &topology.links()));
            }
            // A role's links are known when its trigger fires.
            Ok(if role.is_some() { vec![] } else { links })
        }
    }
}

/// What a crash loses is the node's configuration, and the fault says which it expects: a
/// crash that loses acknowledged commits (`lose_unsynced`) names a node that runs asynchronous
/// commit, and a crash of such a node says that it does (it loses them either way).
fn unsynced(index: usize, kind: &FaultKind, topology: &Topology) -> Result<(), NemesisError> {
    let (stop, target, lose) = match kind {
        FaultKind::Crash {
            target,
            lose_unsynced,
        } => (false, target, *lose_unsynced),
        FaultKind::Stop { target } => (true, target, false),
        _ => return Ok(()),
    };
    let asynchronous = topology.asynchronous_commit.contains(target);
    let detail = match (lose, asynchronous) {
        (true, false) => format!(
            "lose_unsynced: {target} acknowledges a commit only once its WAL is written, so a crash loses nothing acknowledged; list it in [cluster] asynchronous_commit to run it with synchronous_commit = off"
        ),
        (false, true) if !stop => format!(
            "{target} runs asynchronous commit ([cluster] asynchronous_commit): a crash drops the commits it acknowledged and had not written; say lose_unsynced = true"
        ),
        _ => return Ok(()),
    };
    Err(NemesisError::Invalid {
        index,
        kind: kind.verb().to_string(),
        detail,
    })
}

/// A clock, cpu or stall fault: on a box or a Postgres node (a stall on a node only), with
/// its own fields' checks.
fn on_box_or_node(
    index: usize,
    fault: &FaultKind,
    role: Option<&str>,
    topology: &Topology,
) -> Result<(), NemesisError> {
    let kind = fault.verb().to_string();
    let unknown = |what: &'static str, name: &str, known: &[String]| {
        unknown_target(index, &kind, what, name, known)
    };
    match fault {
        FaultKind::Clock {
            target,
            offset_ms,
            rate,
            strobe_ms,
            strobe_for_s,
        } => {
            if topology.members.contains(target) {
                return Err(NemesisError::Invalid {
                    index,
                    kind: kind.clone(),
                    detail: format!("{target} is a lock service's member; a clock fault moves a box's or a Postgres node's clock (libfaketime: etcd, in Go, reads the kernel's clock past libc, out of its reach)"),
                });
            }
            box_or_node(target, role, topology).map_err(|k| unknown("box or node", target, &k))?;
            validate_clock(*offset_ms, *rate, *strobe_ms, *strobe_for_s).map_err(|detail| {
                NemesisError::Invalid {
                    index,
                    kind: kind.clone(),
                    detail,
                }
            })?;
            Ok(())
        }
        FaultKind::Cpu { target, share } => {
            // A lock service's member is a process too: it can be starved (not clocked, nor
            // stalled: it is no Postgres).
            if !topology.members.contains(target) {
                box_or_node(target, role, topology).map_err(|mut k| {
                    k.extend(topology.members.iter().cloned());
                    unknown("box, node or lock member", target, &k)
                })?;
            }
            if !(share.is_finite() && *share > 0.0 && *share <= 64.0) {
                return Err(NemesisError::Invalid {
                    index,
                    kind: kind.clone(),
                    detail: format!(
                        "share is a part of one CPU, more than 0 (0.05: five ms in a hundred; got {share})"
                    ),
                });
            }
            Ok(())
        }
        FaultKind::Stall { target } => {
            let nodes = topology.postgres_nodes();
            if !nodes.contains(target) {
                let detail = if topology.members.contains(target) {
                    format!("{target} is a lock service's member; stall holds a Postgres node's commits (nodes: {})", nodes.join(", "))
                } else {
                    return Err(unknown("node", target, &nodes));
                };
                return Err(NemesisError::Invalid {
                    index,
                    kind: kind.clone(),
                    detail,
                });
            }
            Ok(())
        }
        _ => Ok(()),
    }
}

/// A target the topology does not have, with the names it does.
fn unknown_target(
    index: usize,
    kind: &str,
    what: &'static str,
    name: &str,
    known: &[String],
) -> NemesisError {
    NemesisError::UnknownTarget {
        index,
        kind: kind.to_string(),
        what,
        name: name.to_string(),
        known: known.join(", "),
    }
}

/// A box, a Postgres node or a role (not a lock service's member: its server is not ours to
/// clock or starve yet); else the names it could have been.
fn box_or_node(target: &str, role: Option<&str>, topology: &Topology) -> Result<(), Vec<String>> {
    let known = || -> Vec<String> {
        let nodes = topology.postgres_nodes();
        topology.boxes.iter().cloned().chain(nodes).collect()
    };
    match role.is_some() || known().iter().any(|k| k == target) {
        true => Ok(()),
        false => Err(known()),
    }
}

/// A clock fault moves the clock somehow; a rate runs it, a strobe needs an offset to jump by.
fn validate_clock(
    offset_ms: i64,
    rate: Option<f64>,
    strobe_ms: Option<i64>,
    strobe_for_s: Option<f64>,
) -> Result<(), String> {
    if let Some(r) = rate {
        if !(r.is_finite() && r > 0.0 && r <= 100.0) {
            return Err(format!(
                "rate is how fast the clock runs (1.05: 5% fast, 0.95: 5% slow), more than 0 and at most 100 (got {r})"
            ));
        }
    }
    if let Some(p) = strobe_ms {
        if p <= 0 {
            return Err(format!(
                "strobe_ms is how often the clock jumps, more than 0 (got {p})"
            ));
        }
        if offset_ms == 0 {
            return Err("a strobe jumps the clock by offset_ms and back: give offset_ms".into());
        }
    }
    if let Some(f) = strobe_for_s {
        if strobe_ms.is_none() {
            return Err("strobe_for_s is how long a strobe lasts: give strobe_ms".into());
        }
        if !(f.is_finite() && f > 0.0) {
            return Err(format!("strobe_for_s must be more than 0 (got {f})"));
        }
    }
    if offset_ms == 0 && rate.is_none_or(|r| r == 1.0) {
        return Err("a clock fault moves the clock: give offset_ms, rate or strobe_ms".into());
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fmt(ms: i64) -> String {
        format!("{ms}ms")
    }

    fn fault(at_ms: i64, duration_ms: Option<i64>, kind: FaultKind) -> Fault {
        Fault::at(at_ms, duration_ms, kind)
    }

    #[test]
    fn paired_verbs_in_time_order() {
        let t = Topology::new(4, 3);
        let faults = vec![
            fault(
                500,
                Some(100),
                FaultKind::Stop {
                    target: "routing".into(),
                },
            ),
            fault(
                100,
                Some(50),
                FaultKind::Pause {
                    target: "box-2".into(),
                    freezer: false,
                },
            ),
        ];
        let s = expand(&faults, &t, 0, 1000, fmt).unwrap();
        let verbs: Vec<_> = s.ops.iter().map(|o| (o.at_ms, o.verb)).collect();
        assert_eq!(
            verbs,
            vec![
                (100, "pause"),
                (150, "resume"),
                (500, "stop"),
                (600, "start")
            ]
        );
    }

    /// A crash that loses acknowledged commits needs a node running asynchronous commit, and a
    /// crash of such a node says it loses them; a clean stop of it is a stop.
    #[test]
    fn lose_unsynced_needs_a_node_that_runs_asynchronous_commit() {
        let mut t = Topology::new(4, 3);
        let crash = |lose_unsynced| {
            fault(
                0,
                Some(100),
                FaultKind::Crash {
                    target: "routing".into(),
                    lose_unsynced,
                },
            )
        };
        let stop = fault(
            0,
            Some(100),
            FaultKind::Stop {
                target: "routing".into(),
            },
        );
        let err = expand(&[crash(true)], &t, 0, 1000, fmt).unwrap_err();
        assert!(
            err.to_string().contains("[cluster] asynchronous_commit"),
            "{err}"
        );
        assert!(expand(&[crash(false)], &t, 0, 1000, fmt).is_ok());
        t.asynchronous_commit = vec!["routing".into()];
        let err = expand(&[crash(false)], &t, 0, 1000, fmt).unwrap_err();
        assert!(
            err.to_string().contains("say lose_unsynced = true"),
            "{err}"
        );
        let s = expand(&[crash(true)], &t, 0, 1000, fmt).unwrap();
        assert_eq!(s.ops[0].verb, "crash");
        assert!(expand(&[stop], &t, 0, 1000, fmt).is_ok());
    }

    #[test]
    fn bad_input_is_named() {
        let t = Topology::new(4, 3);
        let unknown = expand(
            &[fault(
                0,
                None,
                FaultKind::Stop {
                    target: "shard9".into(),
                },
            )],
            &t,
            0,
            10,
            fmt,
        )
        .unwrap_err();
        assert!(
            unknown.to_string().contains("unknown node 'shard9'"),
            "{unknown}"
        );
        let neg = expand(
            &[fault(
                0,
                Some(-5),
                FaultKind::Pause {
                    target: "box-1".into(),
                    freezer: false,
                },
            )],
            &t,
            0,
            10,
            fmt,
        )
        .unwrap_err();
        assert!(
            neg.to_string().contains("duration must not be negative"),
            "{neg}"
        );
        let jitter = FaultKind::Latency {
            link: "box-1->routing".into(),
            latency_ms: 10,
            jitter_ms: 20,
            stream: Default::default(),
        };
        assert!(matches!(
            expand(&[fault(0, None, jitter)], &t, 0, 10, fmt),
            Err(NemesisError::JitterOverLatency { .. })
        ));
        let late = expand(
            &[fault(
                5,
                Some(10),
                FaultKind::Down {
                    link: "box-1->routing".into(),
                },
            )],
            &t,
            0,
            10,
            fmt,
        )
        .unwrap_err();
        assert!(matches!(late, NemesisError::OutsideScenario { .. }));
        let nolink = expand(
            &[fault(
                0,
                None,
                FaultKind::Down {
                    link: "box-9->routing".into(),
                },
            )],
            &t,
            0,
            10,
            fmt,
        )
        .unwrap_err();
        assert!(nolink.to_string().contains("unknown link"), "{nolink}");
    }

    #[test]
    fn triggered_faults_are_checked_and_left_to_the_harness() {
        let t = Topology::new(4, 3);
        let pause_holder = |when: &str| {
            let mut f = fault(
                0,
                Some(20),
                FaultKind::Pause {
                    target: "holder".into(),
                    freezer: false,
                },
            );
            f.when = serde_json::from_str(when).unwrap();
            f
        };
        let s = expand(
            &[pause_holder(
                r#"{"on":"write","by":"holder","nth":7,"inside":"between"}"#,
            )],
            &t,
            0,
            1000,
            fmt,
        )
        .unwrap();
        assert!(s.ops.is_empty());
        assert_eq!(s.triggered, vec![0]);
        for (when, needle) in [
            (r#"null"#, "names a role (holder)"),
            (r#"{"on":"grant","nth":0}"#, "counts from 1"),
            (r#"{"on":"renew","by":"box-9"}"#, "'box-9' is not a box"),
            (
                r#"{"on":"renew","inside":"between"}"#,
                "give on = \"write\"",
            ),
            (r#"{"on":"write","shard":"routing"}"#, "not a shard"),
            (r#"{"on":"grant","delay_s":-1}"#, "must not be negative"),
        ] {
            let e = expand(&[pause_holder(when)], &t, 0, 1000, fmt).unwrap_err();
            assert!(e.to_string().contains(needle), "{when}: {e}");
        }
    }

    #[test]
    fn a_link_from_a_role_is_resolved_when_it_fires() {
        let t = Topology::new(4, 3);
        let cut = |link: &str, when: &str| {
            let mut f = fault(0, Some(20), FaultKind::Down { link: link.into() });
            f.when = serde_json::from_str(when).unwrap();
            f
        };
        let grant = r#"{"on":"grant","nth":2}"#;
        for link in [
            "holder->routing",
            "previous-holder->shard*",
            "holder -> shard2",
        ] {
            let s = expand(&[cut(link, grant)], &t, 0, 1000, fmt).unwrap();
            assert_eq!((s.ops.len(), &s.triggered[..]), (0, &[0][..]), "{link}");
        }
        for (link, when, needle) in [
            ("holder->routing", "null", "names a role (holder)"),
            ("previous-holder->shard9", grant, "unknown link"),
            ("leader->routing", grant, "unknown link"),
        ] {
            let e = expand(&[cut(link, when)], &t, 0, 1000, fmt).unwrap_err();
            assert!(e.to_string().contains(needle), "{link}: {e}");
        }
        let k = FaultKind::Latency {
            link: "previous-holder->shard*".into(),
            latency_ms: 5,
            jitter_ms: 0,
            stream: crate::Stream::Both,
        };
        assert_eq!(k.role(), Some("previous-holder"));
        assert_eq!(k.for_box("box-3").target(), "box-3->shard*");
        let p = FaultKind::Pause {
            target: "holder".into(),
            freezer: false,
        };
        assert_eq!(
            (p.role(), p.for_box("box-2").target()),
            (Some("holder"), "box-2")
        );
        assert_eq!(
            FaultKind::Down {
                link: "box-1->routing".into()
            }
            .role(),
            None
        );
    }

    #[test]
    fn production_faults_name_what_they_need() {
        let t = Topology::with_lock(4, 3, &["lock".to_string()], &[]);
        let err = |kind: FaultKind| match expand(&[fault(0, Some(5), kind)], &t, 0, 10, fmt) {
            Ok(_) => String::new(),
            Err(e) => e.to_string(),
        };
        let clock = |offset_ms, rate, strobe_ms, strobe_for_s| FaultKind::Clock {
            target: "routing".into(),
            offset_ms,
            rate,
            strobe_ms,
            strobe_for_s,
        };
        // A node's clock runs fast, a box's strobes: both fine.
        assert_eq!(err(clock(0, Some(1.05), None, None)), "");
        assert_eq!(err(clock(2_000, None, Some(500), Some(3.0))), "");
        assert!(err(clock(0, None, None, None)).contains("give offset_ms, rate or strobe_ms"));
        assert!(err(clock(0, Some(0.0), None, None)).contains("rate is how fast"));
        assert!(err(clock(0, None, Some(500), None)).contains("give offset_ms"));
        assert!(err(clock(5, None, None, Some(1.0))).contains("give strobe_ms"));
        let cpu = |target: &str, share| FaultKind::Cpu {
            target: target.into(),
            share,
        };
        assert_eq!(err(cpu("box-2", 0.05)), "");
        assert_eq!(err(cpu("shard1", 0.5)), "");
        assert!(err(cpu("box-2", 0.0)).contains("share is a part of one CPU"));
        // A lock service's member is a process: starved, yes; moved in time, no.
        assert_eq!(err(cpu("lock", 0.1)), "");
        assert!(err(cpu("lock-9", 0.1)).contains("unknown box, node or lock member 'lock-9'"));
        let lock_clock = FaultKind::Clock {
            target: "lock".into(),
            offset_ms: 1_000,
            rate: None,
            strobe_ms: None,
            strobe_for_s: None,
        };
        assert!(err(lock_clock).contains("lock is a lock service's member"));
        let stall = |target: &str| FaultKind::Stall {
            target: target.into(),
        };
        assert_eq!(err(stall("shard2")), "");
        assert!(err(stall("box-1")).contains("unknown node 'box-1'"));
        assert!(err(stall("lock")).contains("is a lock service's member"));
    }
}
