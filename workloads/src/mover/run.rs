//! The mover's state machine: poll for the claim, hold it and walk the plan (April's order), and every way a holder stops holding. The lock protocol is in `claim`, the shard writes in `shards`.

use super::config::{Election, Fencing, OnLost, OnRenewFailure, Settings, Timer};
use super::db::{Db, DbError};
use super::env;
use super::history::{fenced_message, fenced_value, History};
use super::pacing::{batch_rows, split_page, Pace, Page};
use super::stalls::Stalls;
use chaos_history::verb;
use chaos_history::PlanEntry;
use serde_json::json;
use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, Instant, SystemTime};
use tokio_postgres::SimpleQueryMessage;

mod claim;
mod lock;
mod shards;

use super::lock_client::LockClient;

/// How the process ends.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Exit {
    /// The plan is done, by this box or another (or this box lost a unique election).
    Done = 0,
    /// Anything else that went wrong.
    Failure = 1,
    /// A missing or malformed input, or a database unreachable at start.
    BadInput = 2,
    /// A shard refused this box's token: it stopped on purpose.
    Fenced = 3,
}

/// Most plan rows read; a plan larger than this is a harness mistake, not a job.
const MAX_PLAN_ROWS: i64 = 1_000_000;

use crate::lock_sql::*;
const SQL_PLAN: &str =
    "select position, turbine_id, from_shard, to_shard from move_plan order by position limit $1";
const SQL_EXISTS: &str = "select exists (select 1 from readings where turbine_id = $1)";
const SQL_COUNT: &str = "select count(*) from readings where turbine_id = $1";
const SQL_PAGE_FIRST: &str =
    "select ts, value from readings where turbine_id = $1 order by ts limit $2";
const SQL_PAGE_AFTER: &str =
    "select ts, value from readings where turbine_id = $1 and ts > $2 order by ts limit $3";
const SQL_AT_TS: &str = "select ts, value from readings where turbine_id = $1 and ts = $2";
const SQL_DELETE: &str = "delete from readings where turbine_id = $1";

/// The role as this box holds it.
#[derive(Debug, Clone, Copy)]
struct Grant {
    token: i64,
    /// When the last successful acquire or renewal was SENT: the local belief starts there.
    believed_from: Instant,
    /// None: the unique election has no expiry.
    lease: Option<Duration>,
    /// etcd: the lease the key lives on (0 for the other services).
    lease_id: i64,
}

impl Grant {
    /// How long ago the local belief ran out, if it has.
    fn expired_for(&self, now: Instant) -> Option<Duration> {
        let lease = self.lease?;
        let end = self.believed_from + lease;
        (now >= end).then(|| now - end)
    }
}

/// Why a holder stopped holding.
enum Stop {
    Done,
    /// Back to polling (lease) or out (unique).
    GiveUp(String),
    Fenced,
    Bad(String),
}

/// `--renew-on-thread`: the claim renewed every third of a lease by a task of its own, on a
/// routing connection of its own, whatever the work is doing; it ends at the first renewal
/// that finds the claim lost (or unreachable, under `--on-renew-failure stop`). Its work is in
/// `claim.rs`.
struct RenewThread {
    task: tokio::task::JoinHandle<()>,
    state: std::sync::Arc<std::sync::Mutex<(Instant, Option<Renewal>)>>,
}

/// What a renewal found.
#[derive(Debug, Clone, Copy)]
enum Renewal {
    Renewed,
    /// Unreachable, and carry-on chose to go on as if renewed.
    CarriedOn,
    /// Unreachable, and the policy says stop.
    Unreachable,
    /// Refused: another box holds the claim, with this token when the routing db said.
    Lost {
        holder_token: Option<i64>,
    },
}

/// A read on a shard.
enum Read<'a> {
    Exists(&'a str),
    Count(&'a str),
    PageFirst(&'a str, i64),
    PageAfter(&'a str, SystemTime, i64),
    AtTs(&'a str, SystemTime),
}

/// A write transaction on a shard.
enum Write<'a> {
    Insert {
        turbine: &'a str,
        ts: &'a [SystemTime],
        values: &'a [f64],
    },
    Delete {
        turbine: &'a str,
    },
    /// The guarded fence statement alone (grant-time fencing).
    Fence,
}

/// How a write transaction ended.
enum Wrote {
    Rows(u64),
    Fenced { shard_token: Option<i64> },
    Expired(Duration),
    Failed(DbError),
}

/// Block until the harness writes a line into the gate fifo (or closes it).
pub(crate) async fn wait_at_gate(gate: &std::path::Path) -> Result<(), String> {
    let path = gate.to_path_buf();
    tokio::task::spawn_blocking(move || {
        use std::io::Read;
        let mut f = std::fs::File::open(&path)
            .map_err(|e| format!("CHAOS_GATE {}: {e}", path.display()))?;
        let mut byte = [0u8; 1];
        loop {
            match f.read(&mut byte) {
                Ok(0) => return Ok(()),
                Ok(_) if byte[0] == b'\n' => return Ok(()),
                Ok(_) => {}
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                Err(e) => return Err(format!("CHAOS_GATE {}: {e}", path.display())),
            }
        }
    })
    .await
    .map_err(|e| format!("CHAOS_GATE: {e}"))?
}

/// Exponential back-off inside a deadline.
struct Backoff {
    delay: Duration,
    cap: Duration,
    deadline: Instant,
}

impl Backoff {
    fn new(initial: Duration, cap: Duration, budget: Duration) -> Backoff {
        Backoff {
            delay: initial,
            cap: cap.max(initial),
            deadline: Instant::now() + budget,
        }
    }

    fn remaining(&self) -> Duration {
        self.deadline.saturating_duration_since(Instant::now())
    }

    /// Sleep before the next attempt; false when the budget is spent.
    async fn wait(&mut self) -> bool {
        let left = self.remaining();
        if left.is_zero() {
            return false;
        }
        tokio::time::sleep(self.delay.min(left)).await;
        self.delay = (self.delay * 2).min(self.cap);
        true
    }
}

/// The mover.
pub struct Mover {
    s: Settings,
    h: History,
    routing: Db,
    shards: BTreeMap<String, Db>,
    /// Pacing offsets are measured from here, by `--timer`'s clock.
    epoch: Instant,
    wall_epoch: SystemTime,
    pace: Pace,
    /// `--renew-on-thread`: the task renewing the claim while this box holds it.
    renewer: Option<RenewThread>,
    /// The lock service's client (`CHAOS_LOCK`).
    lock: LockClient,
}

fn ms(d: Duration) -> u64 {
    d.as_millis() as u64
}

/// The history's type for a failure: `info` when the call may have happened.
fn failure_kind(e: &DbError) -> &'static str {
    if e.maybe_applied() {
        "info"
    } else {
        "fail"
    }
}

impl Mover {
    pub fn new(s: Settings) -> Mover {
        let env = &s.env;
        let routing = Db::new(
            "routing",
            &env.routing_display,
            env.routing.clone(),
            &env.box_name,
            s.routing_timeout,
        );
        let shards = env
            .shards
            .iter()
            .map(|u| {
                (
                    u.name.clone(),
                    Db::new(
                        &u.name,
                        &u.display,
                        u.config.clone(),
                        &env.box_name,
                        s.shard_timeout,
                    ),
                )
            })
            .collect();
        let pace = Pace {
            copy: Duration::from_millis(env.copy_ms),
            batches: env.batches,
        };
        Mover {
            lock: LockClient::new(&s),
            h: History,
            routing,
            shards,
            epoch: Instant::now(),
            wall_epoch: SystemTime::now(),
            pace,
            s,
            renewer: None,
        }
    }

    /// A schema error cannot be retried away: say which database lacks what, and exit 2.
    fn schema_error(&self, db: &str, display: &str, e: &DbError) -> ! {
        let file = if db == "routing" {
            "workloads/sql/routing.sql"
        } else {
            "workloads/sql/shard.sql"
        };
        eprintln!(
            "mover: {}: {db} ({display}) lacks the mover schema: {e}; load {file}",
            self.s.env.box_name
        );
        std::process::exit(Exit::BadInput as i32)
    }

    fn log(&self, msg: impl AsRef<str>) {
        eprintln!("{}: {}", self.s.env.box_name, msg.as_ref());
    }

    fn backoff(&self, budget: Duration) -> Backoff {
        let initial = Duration::from_millis((self.s.env.poll_ms / 2).clamp(5, 500));
        let cap = Duration::from_millis((self.s.env.lease_ms / 6).clamp(5, 10_000));
        Backoff::new(initial, cap, budget)
    }

    fn now_offset(&self) -> Duration {
        match self.s.timer {
            Timer::Monotonic => self.epoch.elapsed(),
            // A clock set back before the start reads as the start.
            Timer::Wall => SystemTime::now()
                .duration_since(self.wall_epoch)
                .unwrap_or_default(),
        }
    }

    /// Until `at` by `--timer`'s clock: on the wall clock, slept in steps and read again, so a
    /// clock running slow (or set back) keeps the mover waiting, as it would a mover that
    /// sleeps until `time.time()` says so.
    async fn sleep_until_offset(&self, at: Duration) {
        match self.s.timer {
            Timer::Monotonic => {
                tokio::time::sleep_until(tokio::time::Instant::from_std(self.epoch + at)).await
            }
            Timer::Wall => loop {
                let now = self.now_offset();
                if now >= at {
                    return;
                }
                tokio::time::sleep((at - now).min(Duration::from_millis(20))).await;
            },
        }
    }

    /// Run to the end; the exit code says how it ended. The stall probe runs
    /// alongside for the whole life of the process (one line per lease, one at exit).
    pub async fn run(self) -> Exit {
        let period = Duration::from_millis(self.s.env.lease_ms.clamp(100, 5_000));
        let stalls = Stalls::start(self.h, period);
        let exit = self.run_to_end().await;
        stalls.finish();
        exit
    }

    async fn run_to_end(mut self) -> Exit {
        if self.s.renew_on_thread && self.s.env.lock == crate::lock::LockKind::Advisory {
            eprintln!(
                "mover: {}: --renew-on-thread cannot hold an advisory lock (the session that renews must be the one that holds it): drop it or use another CHAOS_LOCK",
                self.s.env.box_name
            );
            return Exit::BadInput;
        }
        if let Err(msg) = self.connect_all().await {
            eprintln!("mover: {}: {msg}", self.s.env.box_name);
            return Exit::BadInput;
        }
        if let Some(gate) = self.s.env.gate.clone() {
            if let Err(msg) = wait_at_gate(&gate).await {
                eprintln!("mover: {}: {msg}", self.s.env.box_name);
                return Exit::BadInput;
            }
        }
        self.log(format!(
            "started: job {} lease {} ms poll {} ms copy {} ms batches {}, {:?}",
            self.s.env.job,
            self.s.env.lease_ms,
            self.s.env.poll_ms,
            self.s.env.copy_ms,
            self.s.env.batches,
            self.s.describe_switches()
        ));
        loop {
            let grant = match self.s.election {
                Election::Lease => self.poll_acquire().await,
                Election::Unique => match self.unique_election().await {
                    Some(g) => g,
                    None => return Exit::Done,
                },
            };
            match self.hold(grant).await {
                Stop::Done => return Exit::Done,
                Stop::Fenced => return Exit::Fenced,
                Stop::Bad(msg) => {
                    eprintln!("mover: {}: {msg}", self.s.env.box_name);
                    return Exit::BadInput;
                }
                Stop::GiveUp(why) => {
                    if self.s.election == Election::Unique {
                        // At-most-once: nobody can take the job over, this box included.
                        self.log(format!(
                            "giving up the job ({why}); the unique election cannot hand it on"
                        ));
                        return Exit::Failure;
                    }
                    self.log(format!("no longer the holder ({why}); polling again"));
                }
            }
        }
    }

    /// Every database must answer within the start budget, or the input is bad.
    async fn connect_all(&mut self) -> Result<(), String> {
        let budget_ms = self.s.start_timeout.as_millis();
        let deadline = Instant::now() + self.s.start_timeout;
        let mut dbs: Vec<(&mut Db, String)> =
            vec![(&mut self.routing, env::ROUTING_URL.to_string())];
        for db in self.shards.values_mut() {
            let var = format!("CHAOS_SHARD_URLS ({})", db.name);
            dbs.push((db, var));
        }
        let attempts = dbs.into_iter().map(|(db, var)| async move {
            let mut delay = Duration::from_millis(50);
            loop {
                match db.connect().await {
                    Ok(()) => return Ok(()),
                    Err(e) => {
                        let left = deadline.saturating_duration_since(Instant::now());
                        if left.is_zero() {
                            return Err(format!(
                                "cannot reach {} at {} ({var}) within {budget_ms} ms: {e}; start the database or fix the URL",
                                db.name, db.display
                            ));
                        }
                        tokio::time::sleep(delay.min(left)).await;
                        delay = (delay * 2).min(Duration::from_millis(1000));
                    }
                }
            }
        });
        let results = futures_util::future::join_all(attempts).await;
        if let Some(msg) = results.into_iter().find_map(Result::err) {
            return Err(msg);
        }
        let mut delay = Duration::from_millis(50);
        while let Err(e) = self.connect_lock().await {
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return Err(format!(
                    "cannot reach the lock service ({} at {}) within {budget_ms} ms: {e}; start it or fix CHAOS_LOCK_URLS",
                    self.s.env.lock.name(),
                    self.lock_display()
                ));
            }
            tokio::time::sleep(delay.min(left)).await;
            delay = (delay * 2).min(Duration::from_millis(1000));
        }
        // Warm up: parse the hot statements now. A failure here (an old schema) is left
        // for the real call to report in its own words.
        let _ = self
            .routing
            .prepare_all(&[SQL_ACQUIRE, SQL_RENEW, SQL_WHO, SQL_PLAN])
            .await;
        let warm = self.shards.values_mut().map(|db| {
            db.prepare_all(&[
                SQL_EXISTS,
                SQL_COUNT,
                SQL_PAGE_FIRST,
                SQL_PAGE_AFTER,
                SQL_DELETE,
            ])
        });
        futures_util::future::join_all(warm).await;
        Ok(())
    }

    /// Hold the role: read the plan, fence, walk the plan in April's order, release.
    async fn hold(&mut self, mut grant: Grant) -> Stop {
        let plan = match self.read_plan(&grant).await {
            Ok(p) => p,
            Err(stop) => return stop,
        };
        let plan_shards = match self.plan_shards(&grant, &plan).await {
            Ok(shards) => shards,
            Err(stop) => return stop,
        };
        if let Some(stop) = self.fence_plan(&grant, &plan_shards).await {
            return stop;
        }

        if self.s.renew_on_thread && grant.lease.is_some() {
            self.renewer = Some(RenewThread::start(self.s.clone(), grant));
        }
        // The job's copy clock starts when the work does (after the plan read and fencing).
        let mut cursor = Some(self.now_offset());
        let (mut moved, mut skipped) = (0u64, 0u64);
        let mut last_renewal = Instant::now();
        for entry in &plan {
            let turbine = entry.turbine.as_str();
            // A long walk of skips (or a slow grant-time fencing) must not outlive the
            // lease unnoticed. Measured from the last renewal attempt, not the belief,
            // so a carry-on is not followed by a second minute of retries at once.
            if let Some(lease) = grant.lease {
                if last_renewal.elapsed() > lease / 2 || self.renewer.is_some() {
                    match self.renewal(&mut grant).await {
                        Renewal::Renewed | Renewal::CarriedOn => last_renewal = Instant::now(),
                        Renewal::Unreachable => return Stop::GiveUp("renewal unreachable".into()),
                        Renewal::Lost { .. } => return Stop::GiveUp("claim lost".into()),
                    }
                }
            }
            // (1) Already moved: the source has none of it.
            let exists = match self.read(&entry.from, Read::Exists(turbine)).await {
                Ok(rows) => rows.first().map(|r| r.get::<_, bool>(0)).unwrap_or(false),
                Err(e) => {
                    self.h.fail(
                        verb::SKIP,
                        json!({ "turbine": turbine, "reason": "unreachable", "shard": entry.from, "error": e.to_string() }),
                    );
                    self.release(&grant, 1).await;
                    return Stop::GiveUp(format!("cannot read {}: {e}", entry.from));
                }
            };
            if !exists {
                self.h.ok(verb::SKIP, json!({ "turbine": turbine }));
                skipped += 1;
                // A copy after a skip walk starts when the walk ends and takes its full time.
                cursor = None;
                continue;
            }

            // (2) Copy, paced.
            let (read, written) = match self.copy(entry, &grant, &mut cursor).await {
                Ok(counts) => counts,
                Err(stop) => return stop,
            };

            // (3) Renew.
            if grant.lease.is_some() {
                let renewal = self.renewal(&mut grant).await;
                last_renewal = Instant::now();
                match renewal {
                    Renewal::Renewed | Renewal::CarriedOn => {}
                    Renewal::Unreachable => return Stop::GiveUp("renewal unreachable".into()),
                    Renewal::Lost { holder_token } => {
                        // Fencing on: the shards learn the newer token from this box too, so
                        // nothing this box does with its old token can land in the moment
                        // between the new holder's grant and its own grant-time fencing.
                        if let (Fencing::On, Some(newer)) = (self.s.fencing, holder_token) {
                            self.fence_for_successor(&plan_shards, newer).await;
                        }
                        if self.s.on_lost == OnLost::TidyUp {
                            // April: the half-finished turbine has no right to be on the destination.
                            if let Some(stop) =
                                self.delete(entry, &entry.to, "tidy-up", &grant).await
                            {
                                return stop;
                            }
                        }
                        return Stop::GiveUp("claim lost".into());
                    }
                }
            }

            // (4) Delete from the source when its own counters agree.
            if read == written {
                if let Some(stop) = self.delete(entry, &entry.from, "source", &grant).await {
                    return stop;
                }
                moved += 1;
            } else {
                self.log(format!(
                    "{turbine}: read {read} rows but wrote {written}: leaving the source alone"
                ));
            }
        }

        if grant.lease.is_some() {
            self.release(&grant, 3).await;
        }
        self.h
            .ok(verb::DONE, json!({ "moved": moved, "skipped": skipped }));
        self.log(format!("done: moved {moved}, skipped {skipped}"));
        Stop::Done
    }

    /// The shards the plan names, each checked against CHAOS_SHARD_URLS (the grant released
    /// if one is missing), and the plan's line in the log.
    async fn plan_shards(
        &mut self,
        grant: &Grant,
        plan: &[PlanEntry],
    ) -> Result<BTreeSet<String>, Stop> {
        let mut plan_shards = BTreeSet::new();
        for e in plan {
            for name in [&e.from, &e.to] {
                if !self.shards.contains_key(name) {
                    let known: Vec<String> = self.shards.keys().cloned().collect();
                    self.release(grant, 1).await;
                    return Err(Stop::Bad(format!(
                        "move_plan position {} names shard {name:?}, which CHAOS_SHARD_URLS does not have ({known:?}): add it to CHAOS_SHARD_URLS",
                        e.position
                    )));
                }
                plan_shards.insert(name.clone());
            }
        }
        self.log(format!(
            "plan: {} turbines over {:?}",
            plan.len(),
            plan_shards
        ));
        Ok(plan_shards)
    }

    /// With fencing on, before any work: every shard of the plan learns this grant, so an
    /// older holder's next write anywhere in the plan is refused. All shards at once: until
    /// the last one has it, an older holder can still write there. None when every shard has
    /// it (or fencing is off).
    async fn fence_plan(&mut self, grant: &Grant, plan_shards: &BTreeSet<String>) -> Option<Stop> {
        if self.s.fencing != Fencing::On {
            return None;
        }
        let token = grant.token;
        let expiry = self.s.check_expiry_before_write.then_some(grant);
        for (shard, wrote) in self.fence_all(plan_shards, expiry, token).await {
            match wrote {
                Wrote::Rows(_) => self
                    .h
                    .ok(verb::FENCE, json!({ "shard": shard, "token": token })),
                Wrote::Fenced { shard_token } => {
                    return Some(self.fenced(verb::FENCE, &shard, token, shard_token, None))
                }
                Wrote::Expired(past) => return Some(self.expired(grant, verb::FENCE, None, past)),
                Wrote::Failed(e) => {
                    self.h.emit(
                        failure_kind(&e),
                        verb::FENCE,
                        json!({ "shard": shard, "token": token, "reason": "unreachable", "error": e.to_string() }),
                    );
                    self.release(grant, 1).await;
                    return Some(Stop::GiveUp(format!("cannot fence {shard}: {e}")));
                }
            }
        }
        None
    }

    /// Read the move plan, retrying while the grant is young.
    async fn read_plan(&mut self, grant: &Grant) -> Result<Vec<PlanEntry>, Stop> {
        let mut backoff = self.backoff(Duration::from_millis(self.s.env.lease_ms));
        loop {
            match self.routing.query(SQL_PLAN, &[&MAX_PLAN_ROWS]).await {
                Ok(rows) => {
                    if rows.len() as i64 >= MAX_PLAN_ROWS {
                        return Err(Stop::Bad(format!(
                            "move_plan has {MAX_PLAN_ROWS} rows or more: that is not a plan"
                        )));
                    }
                    return Ok(rows
                        .iter()
                        .map(|r| PlanEntry {
                            position: r.get(0),
                            turbine: r.get(1),
                            from: r.get(2),
                            to: r.get(3),
                        })
                        .collect());
                }
                Err(e) => {
                    if let DbError::Sql(text) = &e {
                        return Err(Stop::Bad(format!(
                            "cannot read move_plan on the routing db ({}): {text}; load workloads/sql/routing.sql",
                            self.routing.display
                        )));
                    }
                    if !backoff.wait().await {
                        self.h.fail("plan", json!({ "token": grant.token, "reason": "unreachable", "error": e.to_string() }));
                        return Err(Stop::GiveUp(format!("cannot read the plan: {e}")));
                    }
                }
            }
        }
    }

    /// The local belief ran out before a write: stop holding (the variant that narrows the window).
    fn expired(&self, grant: &Grant, op: &str, turbine: Option<&str>, past: Duration) -> Stop {
        let mut v = json!({ "token": grant.token, "op": op, "expired_ms_ago": ms(past),
                            "belief_age_ms": ms(grant.believed_from.elapsed()) });
        if let Some(t) = turbine {
            v["turbine"] = json!(t);
        }
        self.h.info("expired", v);
        self.log(format!(
            "lease believed expired {} ms ago before a {op} write: stopping",
            ms(past)
        ));
        Stop::GiveUp("lease expired (local check)".into())
    }
}
