//! What the designs' programs share: every database connected within a start budget, the start gate, and the lock service as a box plays it (take the claim or win the unique election, renew between units of work, release).
//!
//! The same protocol as the mover's (`routing.sql`'s `claim_acquire`, `claim_renew`,
//! `claim_release` and `job_runs`), played plainly: one renewal attempt per unit of work, no
//! carry-on, no renewal thread. The history lines are the mover's (`acquire`, `renew`, `lost`,
//! `release`), so the story and the checkers read them alike.

use crate::mover::db::{Db, DbError};
use crate::mover::history::History;
use crate::mover::run::wait_at_gate;
use crate::mover::Env;
use chaos_history::verb;
use serde_json::json;
use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use crate::lock_sql::*;

/// What a renewal found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Renewed {
    Yes,
    /// Another box holds the claim (or nobody: it was released).
    Lost,
    /// No answer within the attempt: the holder stops holding (it cannot know).
    Unreachable,
}

/// A box of one of the designs: its environment, its history, its connections.
pub struct Base {
    pub env: Env,
    pub h: History,
    pub routing: Db,
    pub shards: BTreeMap<String, Db>,
    /// The program's name for stderr (`payer`, `updater`).
    pub program: &'static str,
}

impl Base {
    /// Connections made on demand: the routing db's calls time out after a lease, a shard's
    /// after four units of work (at least a second).
    pub fn new(program: &'static str, env: Env) -> Base {
        let lease = Duration::from_millis(env.lease_ms.max(1));
        let shard_timeout = Duration::from_millis((4 * env.copy_ms).max(1000));
        let routing = Db::new(
            "routing",
            &env.routing_display,
            env.routing.clone(),
            &env.box_name,
            lease,
        );
        let shards = env
            .shards
            .iter()
            .map(|u| {
                let db = Db::new(
                    &u.name,
                    &u.display,
                    u.config.clone(),
                    &env.box_name,
                    shard_timeout,
                );
                (u.name.clone(), db)
            })
            .collect();
        Base {
            env,
            h: History,
            routing,
            shards,
            program,
        }
    }

    pub fn log(&self, msg: impl AsRef<str>) {
        eprintln!("{}: {}", self.env.box_name, msg.as_ref());
    }

    /// Connect to every database within `budget`, then wait at the start gate if there is one.
    /// An error is the one line to print before exiting 2.
    pub async fn start(&mut self, budget: Duration) -> Result<(), String> {
        let deadline = Instant::now() + budget;
        let mut dbs: Vec<&mut Db> = vec![&mut self.routing];
        dbs.extend(self.shards.values_mut());
        for db in dbs {
            let mut delay = Duration::from_millis(50);
            while let Err(e) = db.connect().await {
                let left = deadline.saturating_duration_since(Instant::now());
                if left.is_zero() {
                    return Err(format!(
                        "cannot reach {} at {} within {} ms: {e}; start the database or fix the URL",
                        db.name,
                        db.display,
                        budget.as_millis()
                    ));
                }
                tokio::time::sleep(delay.min(left)).await;
                delay = (delay * 2).min(Duration::from_millis(1000));
            }
        }
        if let Some(gate) = self.env.gate.clone() {
            wait_at_gate(&gate).await?;
        }
        Ok(())
    }

    /// The shard called `name` (a name the routing db gave that `CHAOS_SHARD_URLS` lacks is a
    /// bad input).
    pub fn shard(&mut self, name: &str) -> Result<&mut Db, String> {
        self.shards.get_mut(name).ok_or_else(|| {
            format!("the routing db names shard {name}, which CHAOS_SHARD_URLS does not give")
        })
    }

    /// Poll `claim_acquire` every CHAOS_POLL_MS until it hands this box a token.
    pub async fn acquire(&mut self) -> i64 {
        let poll = Duration::from_millis(self.env.poll_ms);
        let lease_ms = self.env.lease_ms as i64;
        let (job, me) = (self.env.job.clone(), self.env.box_name.clone());
        let mut failing = false;
        loop {
            match self
                .routing
                .query(SQL_ACQUIRE, &[&job, &me, &lease_ms])
                .await
            {
                Ok(rows) => {
                    failing = false;
                    if let Some(token) = rows.first().and_then(|r| r.get::<_, Option<i64>>(0)) {
                        self.h.ok(
                            verb::ACQUIRE,
                            json!({ "token": token, "lease_ms": lease_ms }),
                        );
                        self.log(format!("took the claim: token {token}"));
                        return token;
                    }
                }
                Err(e) => {
                    if !failing {
                        self.h.emit(
                            failure_kind(&e),
                            verb::ACQUIRE,
                            json!({ "reason": "unreachable", "error": e.to_string() }),
                        );
                        failing = true;
                    }
                }
            }
            tokio::time::sleep(poll).await;
        }
    }

    /// Lesson 007: one insert keyed on job and date. `Some(0)` when this box won; `None` when
    /// another box (or this box, before a restart) owns today's run: at-most-once.
    pub async fn unique(&mut self) -> Option<i64> {
        let poll = Duration::from_millis(self.env.poll_ms);
        let (job, me) = (self.env.job.clone(), self.env.box_name.clone());
        // Set when an insert of this process may have landed without an answer.
        let mut maybe_inserted = false;
        loop {
            let inserted = self.routing.query(SQL_UNIQUE, &[&job, &me]).await;
            let holder: Result<Option<String>, DbError> = match inserted {
                Ok(rows) if !rows.is_empty() => Ok(None),
                Ok(_) => self
                    .routing
                    .query(SQL_UNIQUE_WHO, &[&job])
                    .await
                    .map(|rows| Some(rows.first().and_then(|r| r.get(0)).unwrap_or_default())),
                Err(e) => {
                    maybe_inserted |= e.maybe_applied();
                    Err(e)
                }
            };
            let holder = match holder {
                Ok(h) => h,
                Err(e) => {
                    self.h.emit(
                        failure_kind(&e),
                        verb::ACQUIRE,
                        json!({ "reason": "unreachable", "error": e.to_string() }),
                    );
                    tokio::time::sleep(poll).await;
                    continue;
                }
            };
            match holder {
                Some(h) if h != me || !maybe_inserted => {
                    self.h.fail(
                        verb::ACQUIRE,
                        json!({ "reason": "taken", "holder": h, "election": "unique" }),
                    );
                    self.log(format!("{h} owns today's run of {job}; exiting"));
                    return None;
                }
                _ => {
                    self.h
                        .ok(verb::ACQUIRE, json!({ "token": 0, "election": "unique" }));
                    self.log("won today's run (unique election): no expiry");
                    return Some(0);
                }
            }
        }
    }

    /// One renewal attempt (a lease long at most). A holder that is not renewed stops holding.
    pub async fn renew(&mut self, token: i64) -> Renewed {
        let lease_ms = self.env.lease_ms as i64;
        let (job, me) = (self.env.job.clone(), self.env.box_name.clone());
        self.h.invoke(verb::RENEW, json!({ "token": token }));
        match self
            .routing
            .query(SQL_RENEW, &[&job, &me, &token, &lease_ms])
            .await
        {
            Ok(rows) if rows.first().and_then(|r| r.get::<_, Option<bool>>(0)) == Some(true) => {
                self.h.ok(verb::RENEW, json!({ "token": token }));
                Renewed::Yes
            }
            Ok(_) => {
                let (holder, holder_token) = match self.routing.query(SQL_WHO, &[&job]).await {
                    Ok(rows) => rows.first().map_or((None, None), |r| {
                        (r.get::<_, Option<String>>(0), r.get::<_, Option<i64>>(1))
                    }),
                    Err(_) => (None, None),
                };
                let v = json!({ "token": token, "holder": holder, "holder_token": holder_token });
                let mut refused = v.clone();
                refused["reason"] = json!("lost");
                self.h.fail(verb::RENEW, refused);
                self.h.info(verb::LOST, v);
                self.log(format!(
                    "renewal of token {token} refused: the claim is no longer mine"
                ));
                Renewed::Lost
            }
            Err(e) => {
                self.h.fail(
                    verb::RENEW,
                    json!({ "token": token, "reason": "unreachable", "maybe_applied": e.maybe_applied(), "error": e.to_string() }),
                );
                self.log(format!(
                    "renewal of token {token} unanswered ({e}): stopping"
                ));
                Renewed::Unreachable
            }
        }
    }

    /// Give the claim back (once: it expires anyway).
    pub async fn release(&mut self, token: i64) {
        let (job, me) = (self.env.job.clone(), self.env.box_name.clone());
        match self.routing.query(SQL_RELEASE, &[&job, &me, &token]).await {
            Ok(rows) if rows.first().and_then(|r| r.get::<_, Option<bool>>(0)) == Some(true) => {
                self.h.ok(verb::RELEASE, json!({ "token": token }));
            }
            Ok(_) => self.h.fail(
                verb::RELEASE,
                json!({ "token": token, "reason": "not the holder" }),
            ),
            Err(e) => self.h.fail(
                verb::RELEASE,
                json!({ "token": token, "reason": "unreachable", "error": e.to_string() }),
            ),
        }
    }
}

/// The history's type for a failure: `info` when the call may have happened.
pub fn failure_kind(e: &DbError) -> &'static str {
    if e.maybe_applied() {
        "info"
    } else {
        "fail"
    }
}

/// Sleep until `start + slot * n`: a unit of work every slot, whatever each one took.
pub async fn pace(start: Instant, slot: Duration, n: u32) {
    tokio::time::sleep_until(tokio::time::Instant::from_std(start + slot * n)).await;
}
