//! The link family: a toxic on a link (latency, bandwidth, timeout, reset_peer) or a cut (down), through the proxy, healed together; scenario durations scaled to real time here.

use super::{Applied, Nemesis, PREPARE};
use crate::links::Links;
use crate::scenario::Scenario;
use chaos_nemesis::{FaultKind, NemesisOp, Stream};
use chaos_proxy::{ToxicKind, ToxiproxyClient};
use serde_json::{json, Value};
use std::time::Duration;

/// A proxy change does its reads first and is held until its instant.
pub(super) fn lead() -> Duration {
    PREPARE
}

/// Every link of the operation changed together through `held` (which lands them at the
/// instant); the heal removes every toxic and opens the links.
pub(super) async fn apply(
    n: &Nemesis,
    op: &NemesisOp,
    held: &ToxiproxyClient,
) -> Result<Applied, String> {
    let each = |r: anyhow::Result<Value>, link: &String| r.map_err(|e| format!("{link}: {e}"));
    let results: Vec<anyhow::Result<Value>> =
        if op.heal {
            futures_util::future::join_all(op.links.iter().map(|link| async move {
                n.links.heal_with(held, link).await.map(|()| Value::Null)
            }))
            .await
        } else {
            futures_util::future::join_all(
                op.links
                    .iter()
                    .map(|link| inject(&n.links, held, link, &op.kind, &n.scenario)),
            )
            .await
        };
    let applied = results
        .into_iter()
        .zip(&op.links)
        .map(|(r, link)| each(r, link))
        .collect::<Result<Vec<_>, _>>()?;
    let extra = if op.heal {
        Value::Null
    } else {
        json!({ "toxics": applied })
    };
    Ok(Applied {
        extra,
        landed: held.landed(),
    })
}

/// Apply a link fault through `c` (a held client lands it at its instant); both streams are
/// changed together. Returns what the history records of it (real-time figures).
pub async fn inject(
    links: &Links,
    c: &ToxiproxyClient,
    link: &str,
    kind: &FaultKind,
    scenario: &Scenario,
) -> anyhow::Result<Value> {
    if let FaultKind::Down { .. } = kind {
        links.down_with(c, link).await?;
        return Ok(json!({ "link": link }));
    }
    let (toxic, stream, out) = toxic(link, kind, scenario)?;
    let streams: Vec<chaos_proxy::Stream> = stream
        .names()
        .iter()
        .map(|n| chaos_proxy::Stream::parse(n).expect("upstream/downstream"))
        .collect();
    links.add_toxic_with(c, link, &streams, toxic).await?;
    Ok(out)
}

/// The proxy's toxic for a fault, the streams it goes on, and its real-time figures.
fn toxic<'k>(
    link: &str,
    kind: &'k FaultKind,
    scenario: &Scenario,
) -> anyhow::Result<(ToxicKind, &'k Stream, Value)> {
    let real = |scenario_ms: i64| scenario.real_ms(scenario_ms as f64).min(u32::MAX as u64) as u32;
    Ok(match kind {
        FaultKind::Latency {
            latency_ms,
            jitter_ms,
            stream,
            ..
        } => (
            ToxicKind::Latency {
                latency_ms: real(*latency_ms),
                jitter_ms: real(*jitter_ms),
            },
            stream,
            json!({ "link": link, "latency_real_ms": real(*latency_ms), "jitter_real_ms": real(*jitter_ms) }),
        ),
        FaultKind::Bandwidth {
            rate_kb, stream, ..
        } => {
            // KB per scenario second becomes KB per real second at the scale.
            let rate = ((*rate_kb as f64) * 1000.0 / scenario.file.time_scale_ms)
                .round()
                .clamp(1.0, u32::MAX as f64) as u32;
            (
                ToxicKind::Bandwidth { rate_kb: rate },
                stream,
                json!({ "link": link, "rate_real_kb": rate }),
            )
        }
        FaultKind::Timeout {
            timeout_ms, stream, ..
        } => (
            ToxicKind::Timeout {
                timeout_ms: real(*timeout_ms),
            },
            stream,
            json!({ "link": link, "timeout_real_ms": real(*timeout_ms) }),
        ),
        FaultKind::ResetPeer {
            timeout_ms, stream, ..
        } => (
            ToxicKind::ResetPeer {
                timeout_ms: real(*timeout_ms),
            },
            stream,
            json!({ "link": link, "timeout_real_ms": real(*timeout_ms) }),
        ),
        other => anyhow::bail!("{} is not a toxic", other.verb()),
    })
}
