//! The payout's checks (system `payout`): every publisher owed this month paid exactly once, by the card processor's own ledger. Twice is a double payout; never is a missed one; the summary says which design traded which.

use crate::times::scenario_ms;
use crate::{Anomaly, AnomalyClass, Severity, Stats};
use chaos_history::{FinalState, Payment, RunMeta};
use serde_json::json;
use std::collections::BTreeMap;

/// The double and missed payouts of a run, with the stats they fill. A payment the ledger
/// shows happened; one it does not show is missed only when the ledger was read whole (a
/// final state that could not read everything makes a missed payout information).
pub fn check(meta: &RunMeta, final_state: &FinalState, stats: &mut Stats) -> Vec<Anomaly> {
    let Some(payout) = &meta.payout else {
        return Vec::new();
    };
    let mut paid: BTreeMap<&str, Vec<&Payment>> = payout
        .payees
        .iter()
        .map(|p| (p.publisher.as_str(), Vec::new()))
        .collect();
    let mut unowed: Vec<&Payment> = Vec::new();
    for p in final_state
        .payments
        .iter()
        .filter(|p| p.month == payout.month)
    {
        match paid.get_mut(p.publisher.as_str()) {
            Some(list) => list.push(p),
            None => unowed.push(p),
        }
    }
    for list in paid.values_mut() {
        list.sort_by_key(|p| p.commit_unix_ns);
    }
    stats.payouts_owed = payout.payees.len() as u64;
    stats.payments = final_state.payments.len() as u64;
    let design = Design::of(meta);
    let mut out = Vec::new();
    let twice: Vec<(&str, &Vec<&Payment>)> = paid
        .iter()
        .filter(|(_, l)| l.len() > 1)
        .map(|(k, l)| (*k, l))
        .collect();
    stats.double_payouts = twice.len() as u64 + unowed.len() as u64;
    if !twice.is_empty() || !unowed.is_empty() {
        out.push(double(meta, &payout.month, &twice, &unowed, &design));
    }
    let never: Vec<&str> = paid
        .iter()
        .filter(|(_, l)| l.is_empty())
        .map(|(k, _)| *k)
        .collect();
    stats.missed_payouts = never.len() as u64;
    if !never.is_empty() {
        let made = paid.values().filter(|l| !l.is_empty()).count();
        let whole = final_state.complete;
        out.push(missed(meta, &payout.month, &never, made, &design, whole));
    }
    out
}

/// What the run's switches were, as the summaries name them.
struct Design {
    election: String,
    idempotent: bool,
}

impl Design {
    fn of(meta: &RunMeta) -> Design {
        Design {
            election: meta
                .mover
                .get("election")
                .cloned()
                .unwrap_or_else(|| "unknown".into()),
            idempotent: meta.mover.get("idempotent").is_some_and(|v| v == "true"),
        }
    }
}

fn payment_evidence(meta: &RunMeta, p: &Payment) -> serde_json::Value {
    let at = scenario_ms(&meta.clock, p.commit_unix_ns);
    json!({ "by": p.app, "token": p.token, "amount_cents": p.amount_cents,
            "idempotency_key": p.idempotency_key, "at": crate::times::format_ms(at) })
}

fn double(
    meta: &RunMeta,
    month: &str,
    twice: &[(&str, &Vec<&Payment>)],
    unowed: &[&Payment],
    design: &Design,
) -> Anomaly {
    // The moment a publisher was first overpaid: its second payment's commit.
    let first = twice
        .iter()
        .map(|(_, l)| l[1].commit_unix_ns)
        .chain(unowed.iter().map(|p| p.commit_unix_ns))
        .min()
        .map(|ns| scenario_ms(&meta.clock, ns));
    let why = if design.idempotent {
        "although payments carried idempotency keys".to_string()
    } else {
        format!(
            "the job was retaken ({} election) and the processor, which cannot keep score, took a payment it had already taken: at-least-once without idempotent sends",
            design.election
        )
    };
    let mut summary = format!(
        "{} publisher(s) paid twice or more for {month}, {why}",
        twice.len()
    );
    if !unowed.is_empty() {
        summary.push_str(&format!(
            "; {} payment(s) to publishers nobody owed",
            unowed.len()
        ));
    }
    let evidence = json!({
        "publishers": twice.iter().take(20).map(|(publisher, l)| json!({
            "publisher": publisher,
            "payments": l.iter().map(|p| payment_evidence(meta, p)).collect::<Vec<_>>(),
        })).collect::<Vec<_>>(),
        "unowed": unowed.iter().take(20).map(|p| json!({
            "publisher": p.publisher, "payment": payment_evidence(meta, p)
        })).collect::<Vec<_>>(),
    });
    Anomaly::new(
        AnomalyClass::DoublePayout,
        Severity::Error,
        (twice.len() + unowed.len()) as u64,
        first,
        summary,
        evidence,
    )
}

fn missed(
    meta: &RunMeta,
    month: &str,
    never: &[&str],
    made: usize,
    design: &Design,
    ledger_whole: bool,
) -> Anomaly {
    let owed = never.len() + made;
    let why = if design.election == "unique" {
        format!("the unique election is at-most-once: the winner stopped after {made} payment(s) and its job_runs row keeps every other box out, so nobody finishes the job")
    } else {
        "the job did not finish".to_string()
    };
    // A run stopped before its end may simply not have got there; a ledger not read whole
    // may hold the payment.
    let (read, caveat) = crate::observed::absence_proven(
        ledger_whole,
        " (the final state is incomplete: the processor's ledger may hold these payments)",
    );
    let severity = crate::times::liveness_severity(meta).min(read);
    Anomaly::new(
        AnomalyClass::MissedPayout,
        severity,
        never.len() as u64,
        None,
        format!(
            "{} of {owed} publishers never paid for {month}: {why}{caveat}",
            never.len()
        ),
        json!({ "publishers": never.iter().take(50).collect::<Vec<_>>(), "paid": made }),
    )
}
