//! A schedule: faults validated against a topology and a scenario window, expanded into paired start/heal operations in time order.

use crate::{Fault, FaultKind, LinkPattern, NemesisError, Topology};
use serde::{Deserialize, Serialize};

/// One thing the nemesis does at a scenario time.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct NemesisOp {
    pub at_ms: i64,
    /// `pause`, `resume`, `stop`, `start`, `latency`, `heal`, ...
    pub verb: String,
    /// Index of the fault in the scenario (pairs a heal with its fault).
    pub fault: usize,
    pub heal: bool,
    pub kind: FaultKind,
    /// For link faults: the concrete links the pattern resolved to.
    pub links: Vec<String>,
}

/// Operations sorted by time (stable: a heal scheduled at the same instant
/// as a later fault's start comes first when it was listed first).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Schedule {
    pub ops: Vec<NemesisOp>,
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
    for (index, fault) in faults.iter().enumerate() {
        let kind = fault.kind.verb().to_string();
        let links = validate(index, fault, topology)?;
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
            verb: fault.kind.verb().into(),
            fault: index,
            heal: false,
            kind: fault.kind.clone(),
            links: links.clone(),
        });
        if let Some(d) = fault.duration_ms {
            ops.push(NemesisOp {
                at_ms: fault.at_ms + d,
                verb: fault.kind.heal_verb().into(),
                fault: index,
                heal: true,
                kind: fault.kind.clone(),
                links,
            });
        }
    }
    ops.sort_by_key(|o| o.at_ms);
    Ok(Schedule { ops })
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
    let unknown = |what: &'static str, name: &str, known: &[String]| NemesisError::UnknownTarget {
        index,
        kind: kind.clone(),
        what,
        name: name.to_string(),
        known: known.join(", "),
    };
    match &fault.kind {
        FaultKind::Pause { target, .. }
        | FaultKind::Kill { target }
        | FaultKind::Clock { target, .. } => {
            if !topology.boxes.contains(target) {
                return Err(unknown("box", target, &topology.boxes));
            }
            Ok(vec![])
        }
        FaultKind::Stop { target } | FaultKind::Crash { target } => {
            if !topology.nodes.contains(target) {
                return Err(unknown("node", target, &topology.nodes));
            }
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
            let parsed = LinkPattern::parse(pattern).ok_or_else(|| NemesisError::Invalid {
                index,
                kind: kind.clone(),
                detail: format!("link '{pattern}' is not of the form client->node (e.g. box-2->shard1, box-*->routing)"),
            })?;
            let links = parsed.resolve(topology);
            if links.is_empty() {
                return Err(unknown("link", pattern, &topology.links()));
            }
            Ok(links)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fmt(ms: i64) -> String {
        format!("{ms}ms")
    }

    fn fault(at_ms: i64, duration_ms: Option<i64>, kind: FaultKind) -> Fault {
        Fault {
            at_ms,
            duration_ms,
            kind,
            note: None,
        }
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
        let verbs: Vec<_> = s.ops.iter().map(|o| (o.at_ms, o.verb.as_str())).collect();
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
}
