//! The history's operations, typed: an event's `f` with the `value` fields its readers use, one variant per operation (the conventions in `record.rs`). The JSONL stays as it is; this is how it is read.

use crate::view::{OpView, ValueFields};
use crate::{OpType, ReadingMs};

/// The `f` of every operation the harness, the ingest and the movers write (a nemesis fault's
/// verbs are `chaos_nemesis::VERB_PAIRS`).
pub mod verb {
    pub const INGEST: &str = "ingest";
    pub const ACQUIRE: &str = "acquire";
    pub const RENEW: &str = "renew";
    pub const RELEASE: &str = "release";
    pub const COPY: &str = "copy";
    pub const DELETE: &str = "delete";
    pub const FENCE: &str = "fence";
    pub const SKIP: &str = "skip";
    pub const LOST: &str = "lost";
    pub const DONE: &str = "done";
    pub const STALLS: &str = "stalls";
    /// The harness: a box's process ended (`code`), and the supervisor started it again.
    pub const EXIT: &str = "exit";
    pub const RESTART: &str = "restart";
    /// The harness: a triggered fault fired, or never did.
    pub const TRIGGER: &str = "trigger";
    pub const TRIGGER_UNFIRED: &str = "trigger-unfired";
    /// Why a write failed when a shard's fence refused it (any `f`).
    pub const FENCED: &str = "fenced";
}

/// One operation, with its fields. Fields a writer left out are `None`: a team's mover
/// prints what it likes (docs/mover-protocol.md), so nothing here is required.
#[derive(Debug, Clone, PartialEq)]
pub enum Operation<'v> {
    /// An ingest batch: readings at `ts_ms` for the listed turbines (kept as JSON text).
    Ingest {
        shard: Option<&'v str>,
        ts_ms: Option<ReadingMs>,
        turbines: Option<String>,
    },
    Acquire {
        token: Option<i64>,
    },
    /// `reason` on a failed renewal: `lost` or `unreachable`.
    Renew {
        token: Option<i64>,
        reason: Option<&'v str>,
    },
    Release {
        token: Option<i64>,
    },
    Copy {
        turbine: Option<&'v str>,
        from: Option<&'v str>,
        to: Option<&'v str>,
        token: Option<i64>,
    },
    /// `why`: `source` (the move's own delete) or `tidy-up` (a lost holder's cleanup).
    Delete {
        turbine: Option<&'v str>,
        shard: Option<&'v str>,
        token: Option<i64>,
        why: Option<&'v str>,
    },
    Fence {
        shard: Option<&'v str>,
        token: Option<i64>,
    },
    Skip {
        turbine: Option<&'v str>,
    },
    /// The box learned that `holder` holds the claim now.
    Lost {
        token: Option<i64>,
        holder: Option<&'v str>,
    },
    Done,
    Stalls,
    Exit {
        code: Option<i64>,
    },
    Restart {
        after_exit: Option<i64>,
    },
    Trigger {
        when: Option<&'v str>,
        by: Option<&'v str>,
        target: Option<&'v str>,
    },
    TriggerUnfired {
        when: Option<&'v str>,
    },
    /// Anything else: a nemesis fault's verb (`pause`, `heal`, ...) with its target, or an
    /// operation of a team's own.
    Other {
        f: &'v str,
        target: Option<&'v str>,
    },
}

/// A write a shard's fence refused: the writer's token and the higher one the shard had served.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Refusal<'v> {
    pub token: Option<i64>,
    pub shard_token: Option<i64>,
    pub shard: Option<&'v str>,
}

impl<'a> OpView<'a> {
    /// The event's operation, typed by its `f`.
    pub fn operation(&self) -> Operation<'_> {
        Operation::of(&self.f, &self.value)
    }

    /// When this is a completion that a shard's fence refused (`fail` with reason `fenced`).
    pub fn refusal(&self) -> Option<Refusal<'_>> {
        let v = &self.value;
        (self.kind == OpType::Fail && v.str("reason") == Some(verb::FENCED)).then(|| Refusal {
            token: v.int("token"),
            shard_token: v.int("shard_token"),
            shard: v.str("shard"),
        })
    }
}

impl<'v> Operation<'v> {
    /// The operation `f` names, with the fields of `value` it has.
    pub fn of(f: &'v str, v: &'v ValueFields<'_>) -> Operation<'v> {
        let s = |k: &str| v.str(k);
        let i = |k: &str| v.int(k);
        match f {
            verb::INGEST => Operation::Ingest {
                shard: s("shard"),
                ts_ms: i("ts_ms"),
                turbines: v.get("turbines").map(|t| t.to_string()),
            },
            verb::ACQUIRE => Operation::Acquire { token: i("token") },
            verb::RENEW => Operation::Renew {
                token: i("token"),
                reason: s("reason"),
            },
            verb::RELEASE => Operation::Release { token: i("token") },
            verb::COPY => Operation::Copy {
                turbine: s("turbine"),
                from: s("from"),
                to: s("to"),
                token: i("token"),
            },
            verb::DELETE => Operation::Delete {
                turbine: s("turbine"),
                shard: s("shard"),
                token: i("token"),
                why: s("why"),
            },
            verb::FENCE => Operation::Fence {
                shard: s("shard"),
                token: i("token"),
            },
            verb::SKIP => Operation::Skip {
                turbine: s("turbine"),
            },
            verb::LOST => Operation::Lost {
                token: i("token"),
                holder: s("holder"),
            },
            verb::DONE => Operation::Done,
            verb::STALLS => Operation::Stalls,
            verb::EXIT => Operation::Exit { code: i("code") },
            verb::RESTART => Operation::Restart {
                after_exit: i("after_exit"),
            },
            verb::TRIGGER => Operation::Trigger {
                when: s("when"),
                by: s("by"),
                target: s("target"),
            },
            verb::TRIGGER_UNFIRED => Operation::TriggerUnfired { when: s("when") },
            other => Operation::Other {
                f: other,
                target: s("target"),
            },
        }
    }

    /// The token the operation carries, if any.
    pub fn token(&self) -> Option<i64> {
        match self {
            Operation::Acquire { token }
            | Operation::Renew { token, .. }
            | Operation::Release { token }
            | Operation::Copy { token, .. }
            | Operation::Delete { token, .. }
            | Operation::Fence { token, .. }
            | Operation::Lost { token, .. } => *token,
            _ => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Op;

    fn op(kind: &str, f: &str, value: &str) -> Op {
        serde_json::from_str(&format!(
            r#"{{"index":0,"time_ns":0,"scenario_time":"21:40:00.0","process":"box-2","type":"{kind}","f":"{f}","value":{value}}}"#
        ))
        .unwrap()
    }

    #[test]
    fn each_operation_reads_its_fields_from_a_line_and_from_memory() {
        let cases = [
            (
                op("ok", "acquire", r#"{"token":17}"#),
                Operation::Acquire { token: Some(17) },
            ),
            (
                op("fail", "renew", r#"{"token":17,"reason":"lost"}"#),
                Operation::Renew {
                    token: Some(17),
                    reason: Some("lost"),
                },
            ),
            (
                op(
                    "invoke",
                    "delete",
                    r#"{"turbine":"AP-0161","shard":"shard3","token":17,"why":"tidy-up"}"#,
                ),
                Operation::Delete {
                    turbine: Some("AP-0161"),
                    shard: Some("shard3"),
                    token: Some(17),
                    why: Some("tidy-up"),
                },
            ),
            (op("ok", "done", "null"), Operation::Done),
            (
                op("ok", "pause", r#"{"target":"box-2"}"#),
                Operation::Other {
                    f: "pause",
                    target: Some("box-2"),
                },
            ),
        ];
        for (o, want) in cases {
            assert_eq!(OpView::of(&o).operation(), want);
            let line = serde_json::to_string(&o).unwrap();
            assert_eq!(OpView::parse(&line).unwrap().operation(), want, "{line}");
        }
    }

    #[test]
    fn a_fenced_failure_is_a_refusal_whatever_its_f() {
        let o = op(
            "fail",
            "copy",
            r#"{"reason":"fenced","token":7,"shard_token":8,"shard":"shard2"}"#,
        );
        let view = OpView::of(&o);
        let r = view.refusal().unwrap();
        assert_eq!(
            (r.token, r.shard_token, r.shard),
            (Some(7), Some(8), Some("shard2"))
        );
        let unreachable = op("fail", "renew", r#"{"reason":"unreachable"}"#);
        assert_eq!(OpView::of(&unreachable).refusal(), None);
    }
}
