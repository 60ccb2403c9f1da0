//! A failover run told and drawn: the story in scenario time (the promotion, the fence, the repoint, the first write on the new primary and the last accepted by the old one) and `report.html` with a lane for each primary.
//!
//! Pure, as the rest of this crate: a function of the stored run. `page.rs` is the page,
//! `lanes.rs` its SVG timeline; `sweep.rs` the silence sweep's table.

mod lanes;
mod page;
pub mod sweep;

pub use page::render;

use chaos_checkers::Verdict;
use chaos_history::failover_names as names;
use chaos_history::{FailoverFinal, FailoverMeta, Op, OpType, ScenarioClock};

/// What one failover report and story are made of. A failover history is small (an order
/// every few hundred scenario ms, the observer on change only), so it comes whole.
#[derive(Clone, Copy)]
pub struct Input<'a> {
    pub meta: &'a FailoverMeta,
    pub history: &'a [Op],
    pub final_state: Option<&'a FailoverFinal>,
    pub verdict: &'a Verdict,
    /// `figures.json` as the harness wrote it (Null when absent).
    pub figures: &'a serde_json::Value,
}

/// One moment of the story.
pub(crate) struct Moment {
    pub ms: i64,
    pub text: String,
}

/// The run told in scenario time, one line per moment that matters.
pub fn story(input: &Input) -> String {
    let m = input.meta;
    let mut out = format!(
        "{}: {}, fence {}, silence {} s, check every {} s, {} replication\n",
        m.scenario,
        m.watcher,
        m.fence,
        m.silence_ms as f64 / 1000.0,
        m.check_ms as f64 / 1000.0,
        if m.synchronous {
            "synchronous"
        } else {
            "asynchronous"
        }
    );
    for moment in moments(input) {
        out.push_str(&format!(
            "  {}  {}\n",
            ScenarioClock::format(moment.ms),
            moment.text
        ));
    }
    out
}

/// Every moment of the story, in time order.
pub(crate) fn moments(input: &Input) -> Vec<Moment> {
    let clock = &input.meta.clock;
    let mut out = Vec::new();
    let mut seen_promotion = false;
    let mut first_failed_check = false;
    let mut service_node: Option<String> = None;
    let mut app_primary_enabled = true;
    for op in input.history {
        let ms = clock.scenario_ms_at_run_ns(op.time_ns);
        let v = &op.value;
        let text = match (op.process.as_str(), op.f.as_str(), op.kind) {
            ("nemesis", verb, OpType::Ok) => Some(format!(
                "nemesis: {verb} {}",
                v["target"].as_str().unwrap_or("")
            )),
            (names::WATCHER, names::CHECK, OpType::Fail) if !first_failed_check => {
                first_failed_check = true;
                Some("watcher: a check of the primary gets no answer (the silence begins)".into())
            }
            (names::WATCHER, "silence", _) => Some(format!(
                "watcher: no answer from the primary for {:.1} s: it fails over",
                v["silent_ms"].as_f64().unwrap_or(0.0)
                    / 1000.0
                    / (clock.real_ns_per_scenario_s as f64 / 1e9)
            )),
            (names::WATCHER, names::FENCE, OpType::Ok) => Some(match v["stage"].as_str() {
                Some("clients") => format!(
                    "watcher: the fence is in place: {} disabled, the old primary takes no write",
                    list(&v["proxies"])
                ),
                _ => format!(
                    "watcher: fences the rest of the old primary: {} disabled",
                    list(&v["proxies"])
                ),
            }),
            (names::WATCHER, names::DRAIN, OpType::Ok) => Some(format!(
                "watcher: the replica has replayed all it received (lsn {})",
                v["lsn"].as_str().unwrap_or("unknown")
            )),
            (names::WATCHER, names::PROMOTE, OpType::Ok) => {
                Some("watcher: pg_promote() on the replica returns".into())
            }
            (names::WATCHER, names::PROMOTE, OpType::Fail) => Some(format!(
                "watcher: the promotion fails: {}",
                v["reason"].as_str().unwrap_or("")
            )),
            (names::WATCHER, names::REPOINT, OpType::Ok) => {
                Some("watcher: repoints the service record to the replica".into())
            }
            (names::WATCHER, "exit", _) => Some(format!("watcher exits (code {})", v["code"])),
            ("harness", "restart", OpType::Ok) => Some(format!(
                "harness: starts {} again",
                v["target"].as_str().unwrap_or("")
            )),
            (names::OBSERVER, names::ROLE, _)
                if v["node"] == names::REPLICA && v["role"] == "primary" && !seen_promotion =>
            {
                seen_promotion = true;
                Some("replica: a primary now (promoted); it no longer follows the old one".into())
            }
            (names::OBSERVER, names::ROLE, _) if v["role"] == "down" => Some(format!(
                "{}: stopped (no answer to the observer)",
                v["node"].as_str().unwrap_or("")
            )),
            (names::OBSERVER, names::PROXY, _) => {
                proxy_moment(v, &mut service_node, &mut app_primary_enabled)
            }
            _ => None,
        };
        if let Some(text) = text {
            out.push(Moment { ms, text });
        }
    }
    out.extend(write_moments(input));
    out.sort_by_key(|m| m.ms);
    out
}

/// A proxy's change as the story tells it (only the ones that matter).
fn proxy_moment(
    v: &serde_json::Value,
    service: &mut Option<String>,
    app_primary: &mut bool,
) -> Option<String> {
    let link = v["link"].as_str().unwrap_or("");
    let enabled = v["enabled"].as_bool().unwrap_or(true);
    if link == names::SERVICE {
        let node = v["node"].as_str().map(str::to_string);
        let first = service.is_none();
        let changed = *service != node;
        *service = node.clone();
        return (changed && !first).then(|| {
            format!(
                "the service record now names {} (the repoint)",
                node.as_deref().unwrap_or("no server")
            )
        });
    }
    if link == chaos_nemesis::Link::name(names::APP, names::PRIMARY) && enabled != *app_primary {
        *app_primary = enabled;
        return Some(if enabled {
            "app->primary enabled again".into()
        } else {
            "app->primary disabled: the old primary can take no more of the app's writes".into()
        });
    }
    None
}

/// The first order the new primary committed and the last the old one did, from the servers.
fn write_moments(input: &Input) -> Vec<Moment> {
    let mut out = Vec::new();
    let Some(f) = input.final_state else {
        return out;
    };
    let clock = &input.meta.clock;
    let own = |node: &str| -> Vec<(i64, String)> {
        f.server(node)
            .map(|s| {
                s.orders
                    .iter()
                    .filter(|o| o.accepted_by == node)
                    .filter_map(|o| {
                        o.commit_unix_ns
                            .map(|ns| (clock.scenario_ms_at_unix_ns(ns), o.id.clone()))
                    })
                    .collect()
            })
            .unwrap_or_default()
    };
    if let Some((ms, id)) = own(names::REPLICA).into_iter().min() {
        out.push(Moment { ms, text: format!("replica: commits its first order of its own ({id}): the first write on the new primary") });
    }
    let promotion = input
        .verdict
        .stats
        .failover
        .as_ref()
        .and_then(|s| s.promotion_scenario_ms);
    if let Some((ms, id)) = own(names::PRIMARY).into_iter().max() {
        let after = match promotion {
            Some(p) if ms >= p => {
                format!(", {:.1} s after the promotion", (ms - p) as f64 / 1000.0)
            }
            _ => String::new(),
        };
        out.push(Moment { ms, text: format!("primary: commits its last order ({id}){after}: the last write the old primary accepted") });
    }
    out
}

fn list(v: &serde_json::Value) -> String {
    v.as_array()
        .map(|a| {
            a.iter()
                .filter_map(|x| x.as_str())
                .collect::<Vec<_>>()
                .join(", ")
        })
        .unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The planted unfenced run of the checkers' tests, told and drawn.
    fn planted() -> (FailoverMeta, Vec<Op>, FailoverFinal) {
        let meta = serde_json::from_str(include_str!(
            "../../../checkers/tests/data/failover-unfenced-lost/run.json"
        ))
        .unwrap();
        let history =
            include_str!("../../../checkers/tests/data/failover-unfenced-lost/history.jsonl")
                .lines()
                .map(|l| serde_json::from_str(l).unwrap())
                .collect();
        let final_state = serde_json::from_str(include_str!(
            "../../../checkers/tests/data/failover-unfenced-lost/final-state.json"
        ))
        .unwrap();
        (meta, history, final_state)
    }

    #[test]
    fn the_story_names_the_promotion_the_repoint_and_both_primaries_writes() {
        let (meta, history, final_state) = planted();
        let read = chaos_history::History {
            ops: history.clone(),
            torn_tail: false,
        };
        let verdict = chaos_checkers::failover::check(&meta, &read, Some(&final_state));
        let input = Input {
            meta: &meta,
            history: &history,
            final_state: Some(&final_state),
            verdict: &verdict,
            figures: &serde_json::Value::Null,
        };
        let text = story(&input);
        for line in [
            "14:00:10.0  nemesis: down watcher->primary",
            "14:00:40.0  replica: a primary now (promoted)",
            "14:00:40.3  the service record now names replica (the repoint)",
            "14:00:45.0  primary: commits its last order (o-000045), 5.0 s after the promotion",
            "14:00:46.0  replica: commits its first order of its own (o-000046)",
        ] {
            assert!(text.contains(line), "no {line:?} in:\n{text}");
        }
        let page = render(&input);
        assert!(page.contains(">primary</text>") && page.contains(">replica</text>"));
        assert!(
            page.contains("rgba(220,30,30,0.15)"),
            "no two-primaries shading"
        );
        assert!(page.contains("(lost)"), "no lost order marked");
    }
}
