//! System `payout` (lesson 007): the publishers owed this month, paid one by one by the
//! reference payer to a card processor (a shard's ledger) that cannot keep score. The harness
//! installs the plan and the ledger, and reads the ledger back at the end.

use super::interface::{
    common_settings, failed, Settings, ShardUrl, SystemUnderTest, COMMIT_NS, TIMEOUT,
};
use crate::db;
use crate::scenario::{parse_date, Scenario, ScenarioError, ScenarioFile, Validator};
use chaos_history::{Audit, FinalState, ObjectsMeta, Payee, Payment, PayoutMeta};
use chaos_nemesis::Topology;
use chaos_workloads::mover::switch_name;
use chaos_workloads::schema::PROCESSOR_SQL;
use futures_util::future::BoxFuture;

/// System `payout`.
pub struct Payout;

/// The publishers owed this month: `P-0001`.., each a different amount (cents), so a payment
/// names whom it was for.
pub fn payees(s: &Scenario) -> Vec<Payee> {
    (1..=s.file.payout.publishers as i32)
        .map(|i| Payee {
            position: i,
            publisher: format!("P-{i:04}"),
            amount_cents: 10_000 + 137 * i as i64,
        })
        .collect()
}

/// The processor's ledger: every payment it took.
pub async fn payments(shard: &str, url: &str) -> Result<Vec<Payment>, String> {
    let c = db::connect(url, "harness", TIMEOUT).await?;
    let sql = format!(
        "select publisher, month, amount_cents, app, token, idempotency_key, {COMMIT_NS} from payouts order by id"
    );
    let rows = c
        .query(&sql, &[])
        .await
        .map_err(failed(&format!("{shard}: reading the payouts ledger")))?;
    Ok(rows
        .iter()
        .map(|r| Payment {
            publisher: r.get(0),
            month: r.get(1),
            amount_cents: r.get(2),
            app: r.get(3),
            token: r.get(4),
            idempotency_key: r.get(5),
            commit_unix_ns: r.get(6),
        })
        .collect())
}

/// The payout plan in the routing db, and the processor's ledger on its shard.
async fn install(s: &Scenario, routing_url: &str, shards: &[ShardUrl]) -> Result<(), String> {
    let routing = db::connect(routing_url, "harness", TIMEOUT).await?;
    let processor = &s.file.payout.processor;
    for p in payees(s) {
        routing
            .execute(
                "insert into payout_plan (position, publisher, month, amount_cents, processor) values ($1, $2, $3, $4, $5)",
                &[&p.position, &p.publisher, &s.file.payout.month, &p.amount_cents, processor],
            )
            .await
            .map_err(failed("routing: payout plan"))?;
    }
    let url = &shards
        .iter()
        .find(|(n, _)| n == processor)
        .ok_or_else(|| format!("no shard {processor} for the processor"))?
        .1;
    let c = db::connect(url, "harness", TIMEOUT).await?;
    c.batch_execute(PROCESSOR_SQL)
        .await
        .map_err(failed(&format!("{processor}: the payouts ledger")))
}

impl SystemUnderTest for Payout {
    fn program(&self) -> &'static str {
        "payer"
    }

    /// Its `[payout]`: how many publishers, the month, and a processor among the shards.
    fn check_file(&self, v: &Validator, file: &ScenarioFile) -> Result<(), ScenarioError> {
        v.lease_settings(file)?;
        let p = &file.payout;
        v.within(
            "payout.publishers",
            (1..=10_000).contains(&p.publishers),
            "1 to 10000",
            p.publishers,
        )?;
        let month_ok = p.month.len() == 7
            && p.month.as_bytes()[4] == b'-'
            && parse_date(&format!("{}-01", p.month)).is_some();
        if !month_ok {
            let why = format!("'{}' is not a month YYYY-MM", p.month);
            return Err(v.field("payout.month", why));
        }
        let shards = file.cluster.shards;
        if !Topology::new(file.cluster.boxes, shards)
            .shards()
            .contains(&p.processor)
        {
            let why = format!(
                "'{}' is not a shard of this cluster (shard1 to shard{shards})",
                p.processor
            );
            return Err(v.field("payout.processor", why));
        }
        Ok(())
    }

    fn reference_args(&self, s: &ScenarioFile) -> Vec<String> {
        let mut args = vec!["--election".to_string(), switch_name(s.mover.election)];
        if s.payout.idempotent {
            args.push("--idempotent".into());
        }
        args.extend(s.mover.args.iter().cloned());
        args
    }

    fn settings(&self, s: &Scenario) -> Settings {
        let mut settings = common_settings(s, "payment_s");
        settings.extend([
            ("system".into(), "payout".into()),
            ("election".into(), switch_name(s.file.mover.election)),
            ("idempotent".into(), s.file.payout.idempotent.to_string()),
        ]);
        settings
    }

    fn meta(&self, s: &Scenario) -> (Option<PayoutMeta>, Option<ObjectsMeta>) {
        let meta = PayoutMeta {
            month: s.file.payout.month.clone(),
            payees: payees(s),
            processor: s.file.payout.processor.clone(),
        };
        (Some(meta), None)
    }

    fn install<'a>(
        &'a self,
        s: &'a Scenario,
        routing_url: &'a str,
        shards: &'a [ShardUrl],
    ) -> BoxFuture<'a, Result<(), String>> {
        Box::pin(install(s, routing_url, shards))
    }

    fn read_back<'a>(
        &'a self,
        s: &'a Scenario,
        shards: &'a [ShardUrl],
        _audit: &'a mut Audit,
        fin: &'a mut FinalState,
    ) -> BoxFuture<'a, ()> {
        Box::pin(async move {
            let processor = &s.file.payout.processor;
            if let Some((name, url)) = shards.iter().find(|(n, _)| n == processor) {
                match payments(name, url).await {
                    Ok(p) => fin.payments = p,
                    Err(e) => {
                        fin.complete = false;
                        fin.missing.push(e);
                    }
                }
            }
        })
    }
}
