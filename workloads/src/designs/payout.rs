//! The payer: lesson 007's monthly payout. The box that wins the election pays every publisher of the month, one payment at a time, to a card processor that cannot keep score.
//!
//! Per publisher, lesson 019's order: skip it if the payer's own record says it was paid;
//! send the payment (a row of the processor's ledger, with an idempotency key when
//! `--idempotent`); record it as paid; renew the lease (lease election). The send is the one
//! step that is not safe twice: a payer that dies between the send and the record leaves a
//! payment the next holder will send again, unless the processor refuses a repeated key.

use super::lock::{failure_kind, pace, Base, Renewed};
use crate::mover::{Election, Env, Exit};
use chaos_history::verb;
use chaos_history::RealMs;
use clap::Parser;
use serde_json::json;
use std::time::{Duration, Instant};

const SQL_PLAN: &str = "select position, publisher, month, amount_cents, processor from payout_plan order by position limit 100000";
const SQL_PAID: &str =
    "select exists (select 1 from payout_progress where publisher = $1 and month = $2)";
const SQL_SEND: &str = "insert into payouts (publisher, month, amount_cents, idempotency_key, token) values ($1, $2, $3, $4, $5) on conflict (idempotency_key) do nothing";
const SQL_RECORD: &str = "insert into payout_progress (publisher, month, paid_by, token) values ($1, $2, $3, $4) on conflict do nothing";

/// The payer's switches: the design under test.
#[derive(Debug, Clone, Parser)]
#[command(name = "payer", version)]
pub struct PayerArgs {
    /// How the job's owner is chosen: a claim with an expiry (retaken when its holder dies) or
    /// lesson 007's unique insert (at-most-once).
    #[arg(long, value_enum, default_value = "unique")]
    pub election: Election,
    /// Send each payment with an idempotency key (`YYYY-MM/publisher`): the processor refuses
    /// a second payment with the same key.
    #[arg(long)]
    pub idempotent: bool,
    /// How long every database may stay unreachable at start before the payer exits 2.
    #[arg(long, default_value_t = 5000)]
    pub start_timeout_ms: RealMs,
}

/// One publisher to pay.
struct Due {
    publisher: String,
    month: String,
    amount_cents: i64,
    processor: String,
}

/// Why a holder stopped holding.
enum Stop {
    Done,
    /// Lost the claim or could not go on: back to polling (lease) or out (unique).
    GiveUp(String),
    Bad(String),
}

/// Run one box of the payout to its end.
pub async fn run(args: PayerArgs, env: Env) -> Exit {
    let mut base = Base::new("payer", env);
    if let Err(msg) = base
        .start(Duration::from_millis(args.start_timeout_ms))
        .await
    {
        eprintln!("payer: {}: {msg}", base.env.box_name);
        return Exit::BadInput;
    }
    base.log(format!(
        "started: job {} lease {} ms poll {} ms, one payment every {} ms, election {:?}, idempotent {}",
        base.env.job, base.env.lease_ms, base.env.poll_ms, base.env.copy_ms, args.election, args.idempotent
    ));
    loop {
        let token = match args.election {
            Election::Lease => base.acquire().await,
            Election::Unique => match base.unique().await {
                Some(t) => t,
                None => return Exit::Done,
            },
        };
        match pay_all(&mut base, &args, token).await {
            Stop::Done => {
                if args.election == Election::Lease {
                    base.release(token).await;
                }
                base.h.ok(verb::DONE, json!({ "token": token }));
                return Exit::Done;
            }
            Stop::Bad(msg) => {
                eprintln!("payer: {}: {msg}", base.env.box_name);
                return Exit::BadInput;
            }
            Stop::GiveUp(why) if args.election == Election::Unique => {
                base.log(format!(
                    "giving up ({why}); the unique election cannot hand the job on"
                ));
                return Exit::Failure;
            }
            Stop::GiveUp(why) => base.log(format!("no longer the holder ({why}); polling again")),
        }
    }
}

/// Hold the job: walk the month's plan, paying whoever is not recorded as paid.
async fn pay_all(base: &mut Base, args: &PayerArgs, token: i64) -> Stop {
    let plan = match base.routing.query(SQL_PLAN, &[]).await {
        Ok(rows) => rows
            .iter()
            .map(|r| Due {
                publisher: r.get(1),
                month: r.get(2),
                amount_cents: r.get(3),
                processor: r.get(4),
            })
            .collect::<Vec<_>>(),
        Err(e) if e.schema() => {
            return Stop::Bad(format!(
                "the routing db lacks payout_plan ({e}): load workloads/sql/routing.sql"
            ))
        }
        Err(e) => return Stop::GiveUp(format!("cannot read the plan: {e}")),
    };
    let slot = Duration::from_millis(base.env.copy_ms);
    let start = Instant::now();
    let mut sent = 0u32;
    for due in &plan {
        match base
            .routing
            .query(SQL_PAID, &[&due.publisher, &due.month])
            .await
        {
            Ok(rows) if rows.first().is_some_and(|r| r.get::<_, bool>(0)) => {
                base.h.ok(verb::SKIP, json!({ "publisher": due.publisher }));
                continue;
            }
            Ok(_) => {}
            Err(e) => return Stop::GiveUp(format!("cannot read the progress: {e}")),
        }
        if let Some(stop) = send(base, args, due, token).await {
            return stop;
        }
        sent += 1;
        pace(start, slot, sent).await;
        let me = base.env.box_name.clone();
        if let Err(e) = base
            .routing
            .execute(SQL_RECORD, &[&due.publisher, &due.month, &me, &token])
            .await
        {
            return Stop::GiveUp(format!("cannot record {} as paid: {e}", due.publisher));
        }
        if args.election == Election::Lease && base.renew(token).await != Renewed::Yes {
            return Stop::GiveUp("the renewal was refused or unanswered".into());
        }
    }
    Stop::Done
}

/// Send one payment to the processor. None when it went through (or the processor already
/// had it by its key).
async fn send(base: &mut Base, args: &PayerArgs, due: &Due, token: i64) -> Option<Stop> {
    let key = args
        .idempotent
        .then(|| format!("{}/{}", due.month, due.publisher));
    base.h.invoke(
        "pay",
        json!({ "publisher": due.publisher, "month": due.month, "amount_cents": due.amount_cents,
                "processor": due.processor, "token": token, "idempotency_key": key }),
    );
    let db = match base.shard(&due.processor) {
        Ok(db) => db,
        Err(msg) => return Some(Stop::Bad(msg)),
    };
    let outcome = db
        .execute(
            SQL_SEND,
            &[&due.publisher, &due.month, &due.amount_cents, &key, &token],
        )
        .await;
    match outcome {
        Ok(rows) => {
            // Zero rows: the processor already had a payment with this key.
            base.h.ok(
                "pay",
                json!({ "publisher": due.publisher, "paid": rows == 1, "repeated_key": rows == 0 }),
            );
            None
        }
        Err(e) if e.schema() => Some(Stop::Bad(format!(
            "{} lacks the payouts ledger ({e}): load workloads/sql/processor.sql",
            due.processor
        ))),
        Err(e) => {
            base.h.emit(
                failure_kind(&e),
                "pay",
                json!({ "publisher": due.publisher, "reason": "unreachable", "error": e.to_string() }),
            );
            Some(Stop::GiveUp(format!("cannot pay {}: {e}", due.publisher)))
        }
    }
}
