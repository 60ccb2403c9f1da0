//! The mover's state machine: poll for the claim, hold it and walk the plan (April's order), and every way a holder stops holding.

use super::config::{Election, Fencing, OnLost, OnRenewFailure, Settings};
use super::db::{Db, DbError};
use super::history::{fenced_message, fenced_value, History};
use super::pacing::{batch_rows, split_page, Pace, Page};
use super::stalls::Stalls;
use chaos_history::PlanEntry;
use serde_json::json;
use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, Instant, SystemTime};
use tokio_postgres::SimpleQueryMessage;

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

const SQL_ACQUIRE: &str = "select claim_acquire($1, $2, $3)";
const SQL_RENEW: &str = "select claim_renew($1, $2, $3, $4)";
const SQL_RELEASE: &str = "select claim_release($1, $2, $3)";
const SQL_WHO: &str = "select holder, token from claims where job = $1";
const SQL_UNIQUE: &str =
    "insert into job_runs (job, run_on, holder) values ($1, current_date, $2) on conflict do nothing returning holder";
const SQL_UNIQUE_WHO: &str = "select holder from job_runs where job = $1 and run_on = current_date";
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

/// What a renewal found.
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
async fn wait_at_gate(gate: &std::path::Path) -> Result<(), String> {
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
    /// Pacing offsets are measured from here.
    epoch: Instant,
    pace: Pace,
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
            h: History,
            routing,
            shards,
            epoch: Instant::now(),
            pace,
            s,
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
        self.epoch.elapsed()
    }

    async fn sleep_until_offset(&self, at: Duration) {
        tokio::time::sleep_until(tokio::time::Instant::from_std(self.epoch + at)).await;
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
            vec![(&mut self.routing, "CHAOS_ROUTING_URL".to_string())];
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

    /// Poll `claim_acquire` every CHAOS_POLL_MS until it hands this box a token.
    async fn poll_acquire(&mut self) -> Grant {
        let poll = Duration::from_millis(self.s.env.poll_ms);
        let lease_ms = self.s.env.lease_ms as i64;
        let (job, me) = (self.s.env.job.clone(), self.s.env.box_name.clone());
        let mut next = Instant::now();
        let mut failing = false;
        loop {
            tokio::time::sleep_until(tokio::time::Instant::from_std(next)).await;
            next = (next + poll).max(Instant::now());
            let sent = Instant::now();
            match self
                .routing
                .query(SQL_ACQUIRE, &[&job, &me, &lease_ms])
                .await
            {
                Ok(rows) => {
                    if failing {
                        self.log("routing db answers again");
                        failing = false;
                    }
                    let token: Option<i64> = rows.first().and_then(|r| r.get(0));
                    if let Some(token) = token {
                        self.h
                            .ok("acquire", json!({ "token": token, "lease_ms": lease_ms }));
                        self.log(format!(
                            "acquired the claim: token {token}, lease {lease_ms} ms"
                        ));
                        return Grant {
                            token,
                            believed_from: sent,
                            lease: Some(Duration::from_millis(lease_ms as u64)),
                        };
                    }
                }
                Err(e) => {
                    if e.schema() {
                        self.schema_error("routing", &self.routing.display, &e);
                    }
                    // One line per streak of failures keeps the history small through an outage.
                    if !failing {
                        let reason = if e.unreachable() {
                            "unreachable"
                        } else {
                            "error"
                        };
                        self.h.emit(
                            failure_kind(&e),
                            "acquire",
                            json!({ "reason": reason, "error": e.to_string() }),
                        );
                        self.log(format!(
                            "cannot poll the claim: {e}; retrying every {} ms",
                            poll.as_millis()
                        ));
                        failing = true;
                    }
                }
            }
        }
    }

    /// Lesson 007: one insert keyed on job and date. None: another box owns the run.
    async fn unique_election(&mut self) -> Option<Grant> {
        let poll = Duration::from_millis(self.s.env.poll_ms);
        let (job, me) = (self.s.env.job.clone(), self.s.env.box_name.clone());
        let mut failing = false;
        // Set when an insert of this process may have landed without an answer.
        let mut maybe_inserted = false;
        loop {
            let sent = Instant::now();
            let outcome = match self.routing.query(SQL_UNIQUE, &[&job, &me]).await {
                Ok(rows) if !rows.is_empty() => Ok(None),
                Ok(_) => self
                    .routing
                    .query(SQL_UNIQUE_WHO, &[&job])
                    .await
                    .map(|rows| {
                        Some(
                            rows.first()
                                .and_then(|r| r.get::<_, Option<String>>(0))
                                .unwrap_or_default(),
                        )
                    }),
                Err(e) => Err(e),
            };
            match outcome {
                Ok(None) => return Some(self.unique_won(sent)),
                // An earlier insert of this process that timed out landed: the row names us.
                // (A restarted box finds its own name too, and stays out: at-most-once.)
                Ok(Some(holder)) if holder == me && maybe_inserted => {
                    return Some(self.unique_won(sent))
                }
                Ok(Some(holder)) => {
                    self.h.fail(
                        "acquire",
                        json!({ "reason": "taken", "holder": holder, "election": "unique" }),
                    );
                    self.log(format!("{holder} owns today's run of {job}; exiting"));
                    return None;
                }
                Err(e) => {
                    if e.schema() {
                        self.schema_error("routing", &self.routing.display, &e);
                    }
                    maybe_inserted |= e.maybe_applied();
                    if !failing {
                        let reason = if e.unreachable() {
                            "unreachable"
                        } else {
                            "error"
                        };
                        self.h.emit(
                            failure_kind(&e),
                            "acquire",
                            json!({ "reason": reason, "error": e.to_string() }),
                        );
                        self.log(format!(
                            "cannot insert into job_runs: {e}; retrying every {} ms",
                            poll.as_millis()
                        ));
                        failing = true;
                    }
                    tokio::time::sleep(poll).await;
                }
            }
        }
    }

    fn unique_won(&self, sent: Instant) -> Grant {
        self.h
            .ok("acquire", json!({ "token": 0, "election": "unique" }));
        self.log("won today's run (unique election): token 0, no expiry");
        Grant {
            token: 0,
            believed_from: sent,
            lease: None,
        }
    }

    /// Hold the role: read the plan, fence, walk the plan in April's order, release.
    async fn hold(&mut self, mut grant: Grant) -> Stop {
        let token = grant.token;
        let plan = match self.read_plan(&grant).await {
            Ok(p) => p,
            Err(stop) => return stop,
        };
        let mut plan_shards = BTreeSet::new();
        for e in &plan {
            for name in [&e.from, &e.to] {
                if !self.shards.contains_key(name) {
                    let known: Vec<String> = self.shards.keys().cloned().collect();
                    self.release(&grant, 1).await;
                    return Stop::Bad(format!(
                        "move_plan position {} names shard {name:?}, which CHAOS_SHARD_URLS does not have ({known:?}): add it to CHAOS_SHARD_URLS",
                        e.position
                    ));
                }
                plan_shards.insert(name.clone());
            }
        }
        self.log(format!(
            "plan: {} turbines over {:?}",
            plan.len(),
            plan_shards
        ));

        if self.s.fencing == Fencing::On {
            // Before any work: every shard of the plan learns this grant, so an
            // older holder's next write anywhere in the plan is refused. All shards at
            // once: until the last one has it, an older holder can still write there.
            let expiry = self.s.check_expiry_before_write.then_some(&grant);
            for (shard, wrote) in self.fence_all(&plan_shards, expiry, token).await {
                match wrote {
                    Wrote::Rows(_) => self
                        .h
                        .ok("fence", json!({ "shard": shard, "token": token })),
                    Wrote::Fenced { shard_token } => {
                        return self.fenced("fence", &shard, token, shard_token, None)
                    }
                    Wrote::Expired(past) => return self.expired(&grant, "fence", None, past),
                    Wrote::Failed(e) => {
                        self.h.emit(
                            failure_kind(&e),
                            "fence",
                            json!({ "shard": shard, "token": token, "reason": "unreachable", "error": e.to_string() }),
                        );
                        self.release(&grant, 1).await;
                        return Stop::GiveUp(format!("cannot fence {shard}: {e}"));
                    }
                }
            }
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
                if last_renewal.elapsed() > lease / 2 {
                    match self.renew(&mut grant).await {
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
                        "skip",
                        json!({ "turbine": turbine, "reason": "unreachable", "shard": entry.from, "error": e.to_string() }),
                    );
                    self.release(&grant, 1).await;
                    return Stop::GiveUp(format!("cannot read {}: {e}", entry.from));
                }
            };
            if !exists {
                self.h.ok("skip", json!({ "turbine": turbine }));
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
                let renewal = self.renew(&mut grant).await;
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
            .ok("done", json!({ "moved": moved, "skipped": skipped }));
        self.log(format!("done: moved {moved}, skipped {skipped}"));
        Stop::Done
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

    /// One turbine's copy: count, then keyset pages from the source, each batch its own transaction on the destination.
    async fn copy(
        &mut self,
        entry: &PlanEntry,
        grant: &Grant,
        cursor: &mut Option<Duration>,
    ) -> Result<(u64, u64), Stop> {
        let (turbine, from, to, token) = (
            entry.turbine.as_str(),
            entry.from.as_str(),
            entry.to.as_str(),
            grant.token,
        );
        self.h.invoke(
            "copy",
            json!({ "turbine": turbine, "from": from, "to": to, "token": token }),
        );
        let (mut read, mut written) = (0u64, 0u64);
        macro_rules! give_up {
            ($e:expr) => {{
                let e: DbError = $e;
                self.h.emit(
                    failure_kind(&e),
                    "copy",
                    json!({ "turbine": turbine, "reason": "unreachable", "error": e.to_string(),
                            "rows_read": read, "rows_written": written }),
                );
                self.release(grant, 1).await;
                return Err(Stop::GiveUp(format!("{turbine}: {e}")));
            }};
        }
        let pace = self.pace;
        // The count belongs to the first batch: a slow link slows it too.
        let start = pace.turbine_start(*cursor, self.now_offset());
        let count: i64 = match self.read(from, Read::Count(turbine)).await {
            Ok(rows) => rows.first().map(|r| r.get(0)).unwrap_or(0),
            Err(e) => give_up!(e),
        };
        let n = batch_rows(count.max(0) as u64, self.pace.batches) as i64;
        let mut last_ts: Option<SystemTime> = None;
        let mut exhausted = count == 0;
        let mut i: u32 = 0;
        // Every page moves the keyset on, so more than count + batches pages cannot happen; the cap guards the guard.
        let max_pages = count.max(0) as u64 + pace.batches as u64 + 1;
        while !exhausted {
            if i as u64 >= max_pages {
                self.h.fail("copy", json!({ "turbine": turbine, "reason": "too many pages", "rows_read": read, "rows_written": written }));
                return Err(Stop::GiveUp(format!(
                    "{turbine}: more than {max_pages} pages"
                )));
            }
            let page = match last_ts {
                None => self.read(from, Read::PageFirst(turbine, n + 1)).await,
                Some(t) => self.read(from, Read::PageAfter(turbine, t, n + 1)).await,
            };
            let rows = match page {
                Ok(rows) => rows,
                Err(e) => give_up!(e),
            };
            let mut ts: Vec<SystemTime> = rows.iter().map(|r| r.get(0)).collect();
            let mut values: Vec<f64> = rows.iter().map(|r| r.get(1)).collect();
            match split_page(&ts, n as usize) {
                Page::Take {
                    keep,
                    exhausted: done,
                } => {
                    ts.truncate(keep);
                    values.truncate(keep);
                    exhausted = done;
                }
                Page::AllOneTs => {
                    let at = ts[0];
                    match self.read(from, Read::AtTs(turbine, at)).await {
                        Ok(rows) => {
                            ts = rows.iter().map(|r| r.get(0)).collect();
                            values = rows.iter().map(|r| r.get(1)).collect();
                        }
                        Err(e) => give_up!(e),
                    }
                }
            }
            if let Some(t) = ts.last() {
                last_ts = Some(*t);
                match self
                    .write(
                        to,
                        grant,
                        Write::Insert {
                            turbine,
                            ts: &ts,
                            values: &values,
                        },
                    )
                    .await
                {
                    Wrote::Rows(k) => {
                        read += ts.len() as u64;
                        written += k;
                    }
                    Wrote::Fenced { shard_token } => {
                        return Err(self.fenced_with(
                            "copy",
                            to,
                            token,
                            shard_token,
                            turbine,
                            read,
                            written,
                        ))
                    }
                    Wrote::Expired(past) => {
                        self.h.fail(
                            "copy",
                            json!({ "turbine": turbine, "reason": "expired", "rows_read": read, "rows_written": written }),
                        );
                        return Err(self.expired(grant, "copy", Some(turbine), past));
                    }
                    Wrote::Failed(e) => give_up!(e),
                }
            } else {
                exhausted = true;
            }
            let deadline = pace.batch_deadline(start, i);
            if self.now_offset() < deadline {
                self.sleep_until_offset(deadline).await;
            }
            i += 1;
        }
        // A short turbine still takes its copy time, so the schedule holds.
        self.sleep_until_offset(pace.cursor_after(start)).await;
        *cursor = Some(pace.cursor_after(start));
        self.h.ok(
            "copy",
            json!({ "turbine": turbine, "rows_read": read, "rows_written": written }),
        );
        Ok((read, written))
    }

    /// Delete a turbine from a shard (`why`: source or tidy-up). None when it went through.
    async fn delete(
        &mut self,
        entry: &PlanEntry,
        shard: &str,
        why: &str,
        grant: &Grant,
    ) -> Option<Stop> {
        let (turbine, token) = (entry.turbine.as_str(), grant.token);
        self.h.invoke(
            "delete",
            json!({ "turbine": turbine, "shard": shard, "token": token, "why": why }),
        );
        match self.write(shard, grant, Write::Delete { turbine }).await {
            Wrote::Rows(rows) => {
                self.h.ok(
                    "delete",
                    json!({ "turbine": turbine, "shard": shard, "rows": rows }),
                );
                self.log(format!(
                    "{turbine}: deleted {rows} rows from {shard} ({why}, token {token})"
                ));
                None
            }
            Wrote::Fenced { shard_token } => {
                let mut v = fenced_value(token, shard_token, shard, Some(turbine));
                v["why"] = json!(why);
                self.h.fail("delete", v);
                eprintln!(
                    "{}",
                    fenced_message(&self.s.env.box_name, shard, token, shard_token)
                );
                Some(Stop::Fenced)
            }
            Wrote::Expired(past) => {
                self.h.fail(
                    "delete",
                    json!({ "turbine": turbine, "shard": shard, "reason": "expired" }),
                );
                Some(self.expired(grant, "delete", Some(turbine), past))
            }
            Wrote::Failed(e) => {
                self.h.emit(
                    failure_kind(&e),
                    "delete",
                    json!({ "turbine": turbine, "shard": shard, "reason": "unreachable", "error": e.to_string() }),
                );
                if why == "source" {
                    self.release(grant, 1).await;
                }
                Some(Stop::GiveUp(format!(
                    "cannot delete {turbine} from {shard}: {e}"
                )))
            }
        }
    }

    fn fenced(
        &self,
        f: &str,
        shard: &str,
        token: i64,
        shard_token: Option<i64>,
        turbine: Option<&str>,
    ) -> Stop {
        self.h
            .fail(f, fenced_value(token, shard_token, shard, turbine));
        eprintln!(
            "{}",
            fenced_message(&self.s.env.box_name, shard, token, shard_token)
        );
        Stop::Fenced
    }

    #[allow(clippy::too_many_arguments)]
    fn fenced_with(
        &self,
        f: &str,
        shard: &str,
        token: i64,
        shard_token: Option<i64>,
        turbine: &str,
        read: u64,
        written: u64,
    ) -> Stop {
        let mut v = fenced_value(token, shard_token, shard, Some(turbine));
        v["rows_read"] = json!(read);
        v["rows_written"] = json!(written);
        self.h.fail(f, v);
        eprintln!(
            "{}",
            fenced_message(&self.s.env.box_name, shard, token, shard_token)
        );
        Stop::Fenced
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

    /// Renew after a turbine: the policy decides what an unreachable routing db means.
    async fn renew(&mut self, grant: &mut Grant) -> Renewal {
        let token = grant.token;
        let lease = grant.lease.unwrap_or_default();
        let (job, me) = (self.s.env.job.clone(), self.s.env.box_name.clone());
        let lease_ms = self.s.env.lease_ms as i64;
        self.h.invoke("renew", json!({ "token": token }));
        let budget = match self.s.on_renew_failure {
            OnRenewFailure::CarryOn => self.s.renew_retry,
            // A well-behaved holder keeps trying only while it still believes it holds the claim.
            OnRenewFailure::Stop => {
                (grant.believed_from + lease).saturating_duration_since(Instant::now())
            }
        };
        let first = Instant::now();
        let mut backoff = self.backoff(budget);
        let full_timeout = self.s.routing_timeout;
        let last_error = loop {
            // No attempt may outlast the budget (at least a short try even when it is spent).
            self.routing.timeout =
                full_timeout.min(backoff.remaining().max(Duration::from_millis(20)));
            let sent = Instant::now();
            let outcome = self
                .routing
                .query(SQL_RENEW, &[&job, &me, &token, &lease_ms])
                .await;
            self.routing.timeout = full_timeout;
            match outcome {
                Ok(rows) => {
                    let renewed: bool = rows
                        .first()
                        .and_then(|r| r.get::<_, Option<bool>>(0))
                        .unwrap_or(false);
                    if renewed {
                        grant.believed_from = sent;
                        self.h.ok("renew", json!({ "token": token }));
                        return Renewal::Renewed;
                    }
                    let (holder, holder_token) = match self.routing.query(SQL_WHO, &[&job]).await {
                        Ok(rows) => match rows.first() {
                            Some(r) => (r.get::<_, Option<String>>(0), r.get::<_, Option<i64>>(1)),
                            None => (None, None),
                        },
                        Err(_) => (None, None),
                    };
                    self.h.fail(
                        "renew",
                        json!({ "token": token, "reason": "lost", "holder": holder, "holder_token": holder_token }),
                    );
                    self.h.info(
                        "lost",
                        json!({ "token": token, "holder": holder, "holder_token": holder_token }),
                    );
                    self.log(format!(
                        "renewal of token {token} refused: the claim is {} (token {})",
                        holder.as_deref().unwrap_or("nobody's"),
                        holder_token
                            .map(|t| t.to_string())
                            .unwrap_or_else(|| "?".into())
                    ));
                    return Renewal::Lost { holder_token };
                }
                Err(e) => {
                    if e.schema() {
                        self.schema_error("routing", &self.routing.display, &e);
                    }
                    if !backoff.wait().await {
                        break e;
                    }
                }
            }
        };
        let retried_ms = ms(first.elapsed());
        self.h.fail(
            "renew",
            json!({ "token": token, "reason": "unreachable", "retried_ms": retried_ms,
                    "maybe_applied": last_error.maybe_applied(), "error": last_error.to_string() }),
        );
        match self.s.on_renew_failure {
            OnRenewFailure::CarryOn => {
                self.h.info(
                    "renew",
                    json!({ "token": token, "reason": "carry-on", "retried_ms": retried_ms }),
                );
                self.log(format!("renewal of token {token} unreachable for {retried_ms} ms ({last_error}): carrying on"));
                Renewal::CarriedOn
            }
            OnRenewFailure::Stop => {
                self.log(format!("renewal of token {token} unreachable for {retried_ms} ms ({last_error}): stopping"));
                Renewal::Unreachable
            }
        }
    }

    /// Give the claim back; `attempts` bounds the effort (it expires anyway).
    async fn release(&mut self, grant: &Grant, attempts: u32) {
        if grant.lease.is_none() {
            return;
        }
        let (job, me, token) = (
            self.s.env.job.clone(),
            self.s.env.box_name.clone(),
            grant.token,
        );
        let mut last = String::new();
        for attempt in 0..attempts.max(1) {
            if attempt > 0 {
                tokio::time::sleep(Duration::from_millis(self.s.env.poll_ms.min(1000))).await;
            }
            match self.routing.query(SQL_RELEASE, &[&job, &me, &token]).await {
                Ok(rows) => {
                    let released: bool = rows
                        .first()
                        .and_then(|r| r.get::<_, Option<bool>>(0))
                        .unwrap_or(false);
                    if released {
                        self.h.ok("release", json!({ "token": token }));
                    } else {
                        self.h.fail(
                            "release",
                            json!({ "token": token, "reason": "not the holder" }),
                        );
                    }
                    return;
                }
                Err(e) => last = e.to_string(),
            }
        }
        self.h.fail(
            "release",
            json!({ "token": token, "reason": "unreachable", "error": last }),
        );
    }

    /// A read on a shard, reconnecting and retrying within the shard retry budget.
    async fn read(
        &mut self,
        shard: &str,
        q: Read<'_>,
    ) -> Result<Vec<tokio_postgres::Row>, DbError> {
        let mut backoff = self.backoff(self.s.shard_retry);
        let db = self
            .shards
            .get_mut(shard)
            .expect("plan shards are checked against CHAOS_SHARD_URLS");
        loop {
            let outcome = match &q {
                Read::Exists(t) => db.query(SQL_EXISTS, &[t]).await,
                Read::Count(t) => db.query(SQL_COUNT, &[t]).await,
                Read::PageFirst(t, n) => db.query(SQL_PAGE_FIRST, &[t, n]).await,
                Read::PageAfter(t, after, n) => db.query(SQL_PAGE_AFTER, &[t, after, n]).await,
                Read::AtTs(t, at) => db.query(SQL_AT_TS, &[t, at]).await,
            };
            match outcome {
                Ok(rows) => return Ok(rows),
                Err(e) => {
                    if e.schema() {
                        let display = db.display.clone();
                        self.schema_error(shard, &display, &e);
                    }
                    eprintln!("{}: read on {shard} failed: {e}", self.s.env.box_name);
                    if !backoff.wait().await {
                        return Err(e);
                    }
                }
            }
        }
    }

    /// A write transaction on a shard: the token for the audit, the fence when on, the write, commit.
    /// Retried (reconnecting) within the shard retry budget; the expiry check runs before every attempt.
    async fn write(&mut self, shard: &str, grant: &Grant, w: Write<'_>) -> Wrote {
        let backoff = self.backoff(self.s.shard_retry);
        let (fencing, check) = (
            self.s.fencing == Fencing::On,
            self.s.check_expiry_before_write,
        );
        let box_name = self.s.env.box_name.clone();
        let db = self
            .shards
            .get_mut(shard)
            .expect("plan shards are checked against CHAOS_SHARD_URLS");
        let expiry = check.then_some(grant);
        let wrote = write_retrying(db, &box_name, grant.token, fencing, expiry, backoff, &w).await;
        self.exit_on_schema_error(shard, &wrote);
        wrote
    }

    /// A schema error cannot be retried away: exit 2 naming the shard.
    fn exit_on_schema_error(&self, shard: &str, wrote: &Wrote) {
        if let Wrote::Failed(e) = wrote {
            if e.schema() {
                let display = self
                    .shards
                    .get(shard)
                    .map(|d| d.display.clone())
                    .unwrap_or_default();
                self.schema_error(shard, &display, e);
            }
        }
    }

    /// The guarded fence statement alone with `token` on every shard in `shards`, all at
    /// once. `expiry`: the grant whose lease is checked first (`--check-expiry-before-write`).
    async fn fence_all(
        &mut self,
        shards: &BTreeSet<String>,
        expiry: Option<&Grant>,
        token: i64,
    ) -> Vec<(String, Wrote)> {
        let backoffs: Vec<Backoff> = shards
            .iter()
            .map(|_| self.backoff(self.s.shard_retry))
            .collect();
        let box_name = self.s.env.box_name.clone();
        let fences = self
            .shards
            .iter_mut()
            .filter(|(name, _)| shards.contains(*name))
            .zip(backoffs)
            .map(|((name, db), backoff)| {
                let box_name = box_name.clone();
                async move {
                    let wrote =
                        write_retrying(db, &box_name, token, true, expiry, backoff, &Write::Fence)
                            .await;
                    (name.clone(), wrote)
                }
            });
        let results = futures_util::future::join_all(fences).await;
        for (shard, wrote) in &results {
            self.exit_on_schema_error(shard, wrote);
        }
        results
    }

    /// After losing the claim to `newer`: advance every plan shard's fence to it (a fence
    /// only goes up, and `newer` was granted), recorded as `fence` with `for_token`.
    async fn fence_for_successor(&mut self, shards: &BTreeSet<String>, newer: i64) {
        // No lease of ours is checked: this write is on behalf of the newer holder.
        for (shard, wrote) in self.fence_all(shards, None, newer).await {
            let v = json!({ "shard": shard, "token": newer, "why": "successor" });
            match wrote {
                Wrote::Rows(_) | Wrote::Fenced { .. } => self.h.ok("fence", v),
                Wrote::Expired(_) => {}
                Wrote::Failed(e) => {
                    let mut v = v;
                    v["error"] = json!(e.to_string());
                    self.h.emit(failure_kind(&e), "fence", v);
                }
            }
        }
    }
}

/// One write with retries inside `backoff`. `expiry`: check that grant's lease before each
/// attempt (`--check-expiry-before-write`). A schema error is returned at once.
async fn write_retrying(
    db: &mut Db,
    box_name: &str,
    token: i64,
    fencing: bool,
    expiry: Option<&Grant>,
    mut backoff: Backoff,
    w: &Write<'_>,
) -> Wrote {
    loop {
        if let Some(past) = expiry.and_then(|g| g.expired_for(Instant::now())) {
            return Wrote::Expired(past);
        }
        match write_once(db, token, fencing, w).await {
            Ok(outcome) => return outcome,
            Err(e) => {
                if e.schema() {
                    return Wrote::Failed(e);
                }
                eprintln!("{box_name}: write on {} failed: {e}", db.name);
                if !backoff.wait().await {
                    return Wrote::Failed(e);
                }
            }
        }
    }
}

/// One attempt at a write transaction. Any error drops the connection, which rolls back whatever was open.
async fn write_once(
    db: &mut Db,
    token: i64,
    fencing: bool,
    w: &Write<'_>,
) -> Result<Wrote, DbError> {
    let outcome = write_steps(db, token, fencing, w).await;
    if outcome.is_err() {
        db.reset();
    }
    outcome
}

async fn write_steps(
    db: &mut Db,
    token: i64,
    fencing: bool,
    w: &Write<'_>,
) -> Result<Wrote, DbError> {
    // One round trip opens the transaction, names the token for the audit and
    // (fencing on) runs the guarded statement and reads the shard's token.
    let script = if fencing {
        format!(
            "begin; select set_config('chaos.token', '{token}', true); \
             update mover_fence set token = {token} where token <= {token}; \
             select max(token) from mover_fence"
        )
    } else {
        format!("begin; select set_config('chaos.token', '{token}', true)")
    };
    let messages = db.simple(&script).await?;
    if fencing {
        let counts: Vec<u64> = messages
            .iter()
            .filter_map(|m| match m {
                SimpleQueryMessage::CommandComplete(n) => Some(*n),
                _ => None,
            })
            .collect();
        // begin, set_config, update, select.
        let fenced_rows = counts
            .get(2)
            .copied()
            .ok_or_else(|| DbError::Sql(format!("fence script answered {counts:?}")))?;
        if fenced_rows == 0 {
            let shard_token = messages.iter().rev().find_map(|m| match m {
                SimpleQueryMessage::Row(r) => r.get(0).and_then(|t| t.parse::<i64>().ok()),
                _ => None,
            });
            // Roll back on the same connection; if even that fails, dropping it rolls back.
            if db.simple("rollback").await.is_err() {
                db.reset();
            }
            return Ok(Wrote::Fenced { shard_token });
        }
    }
    let rows = match w {
        Write::Insert {
            turbine,
            ts,
            values,
        } => db.copy_readings(turbine, ts, values).await?,
        Write::Delete { turbine } => db.execute(SQL_DELETE, &[turbine]).await?,
        Write::Fence => 1,
    };
    db.simple("commit").await?;
    Ok(Wrote::Rows(rows))
}
