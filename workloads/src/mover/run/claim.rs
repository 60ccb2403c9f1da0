//! The lock protocol as a box plays it: poll for the claim (or win the unique election),
//! renew it, release it.

use super::*;

/// The shortest renewal attempt, even when the retry budget is spent (capped by the routing
/// timeout).
const LAST_TRY: Duration = Duration::from_millis(200);

impl Mover {
    /// Poll `claim_acquire` every CHAOS_POLL_MS until it hands this box a token.
    pub(super) async fn poll_acquire(&mut self) -> Grant {
        let poll = Duration::from_millis(self.s.env.poll_ms);
        let lease_ms = self.s.env.lease_ms as i64;
        let mut next = Instant::now();
        let mut failing = false;
        loop {
            tokio::time::sleep_until(tokio::time::Instant::from_std(next)).await;
            next = (next + poll).max(Instant::now());
            let sent = Instant::now();
            match self.lock_acquire().await {
                Ok(got) => {
                    if failing {
                        self.log("the lock service answers again");
                        failing = false;
                    }
                    if let Some((token, lease_id)) = got {
                        self.h.ok(
                            verb::ACQUIRE,
                            json!({ "token": token, "lease_ms": lease_ms }),
                        );
                        self.log(format!(
                            "acquired the claim: token {token}, lease {lease_ms} ms"
                        ));
                        return Grant {
                            token,
                            believed_from: sent,
                            lease: Some(Duration::from_millis(lease_ms as u64)),
                            lease_id,
                        };
                    }
                }
                Err(e) => {
                    if e.schema() {
                        let display = self.lock_display();
                        self.schema_error("routing", &display, &e);
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
                            verb::ACQUIRE,
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
    pub(super) async fn unique_election(&mut self) -> Option<Grant> {
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
                        verb::ACQUIRE,
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
                            verb::ACQUIRE,
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

    pub(super) fn unique_won(&self, sent: Instant) -> Grant {
        self.h
            .ok(verb::ACQUIRE, json!({ "token": 0, "election": "unique" }));
        self.log("won today's run (unique election): token 0, no expiry");
        Grant {
            token: 0,
            believed_from: sent,
            lease: None,
            lease_id: 0,
        }
    }

    /// Renew after a turbine: the policy decides what an unreachable routing db means.
    /// The renewal the work asks for: made now, or with `--renew-on-thread`, what the
    /// renewing task last found (its latest success moves the local belief).
    pub(super) async fn renewal(&mut self, grant: &mut Grant) -> Renewal {
        match &self.renewer {
            Some(r) => {
                let (believed_from, ended) = r.state();
                grant.believed_from = believed_from;
                ended.unwrap_or(Renewal::Renewed)
            }
            None => self.renew(grant).await,
        }
    }

    pub(super) async fn renew(&mut self, grant: &mut Grant) -> Renewal {
        let token = grant.token;
        let lease = grant.lease.unwrap_or_default();
        self.h.invoke(verb::RENEW, json!({ "token": token }));
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
            // No attempt may outlast the budget, but even a spent one gets a real try: its
            // answer ("somebody else holds it") is how a holder whose lease ran out while it
            // was paused learns it lost, and a busy machine answers in tens of ms, not one.
            self.set_lock_timeout(full_timeout.min(backoff.remaining().max(LAST_TRY)));
            let sent = Instant::now();
            let outcome = self.lock_renew(grant).await;
            self.set_lock_timeout(full_timeout);
            match outcome {
                Ok(renewed) => {
                    if renewed {
                        grant.believed_from = sent;
                        self.h.ok(verb::RENEW, json!({ "token": token }));
                        return Renewal::Renewed;
                    }
                    let (holder, holder_token) = self.lock_who().await;
                    self.h.fail(
                        verb::RENEW,
                        json!({ "token": token, "reason": "lost", "holder": holder, "holder_token": holder_token }),
                    );
                    self.h.info(
                        verb::LOST,
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
                        let display = self.lock_display();
                        self.schema_error("routing", &display, &e);
                    }
                    if !backoff.wait().await {
                        break e;
                    }
                }
            }
        };
        let retried_ms = ms(first.elapsed());
        self.h.fail(
            verb::RENEW,
            json!({ "token": token, "reason": "unreachable", "retried_ms": retried_ms,
                    "maybe_applied": last_error.maybe_applied(), "error": last_error.to_string() }),
        );
        match self.s.on_renew_failure {
            OnRenewFailure::CarryOn => {
                self.h.info(
                    verb::RENEW,
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
    pub(super) async fn release(&mut self, grant: &Grant, attempts: u32) {
        // A renewal after the release would extend a claim this box gave up.
        if let Some(r) = self.renewer.take() {
            r.stop().await;
        }
        if grant.lease.is_none() {
            return;
        }
        let token = grant.token;
        let mut last = String::new();
        for attempt in 0..attempts.max(1) {
            if attempt > 0 {
                tokio::time::sleep(Duration::from_millis(self.s.env.poll_ms.min(1000))).await;
            }
            match self.lock_release(grant).await {
                Ok(released) => {
                    if released {
                        self.h.ok(verb::RELEASE, json!({ "token": token }));
                    } else {
                        self.h.fail(
                            verb::RELEASE,
                            json!({ "token": token, "reason": "not the holder" }),
                        );
                    }
                    return;
                }
                Err(e) => last = e.to_string(),
            }
        }
        self.h.fail(
            verb::RELEASE,
            json!({ "token": token, "reason": "unreachable", "error": last }),
        );
    }
}

/// `--renew-on-thread` (`RenewThread`, declared with the mover's other state in `run.rs`).
impl RenewThread {
    pub(super) fn start(s: Settings, grant: Grant) -> RenewThread {
        let state = std::sync::Arc::new(std::sync::Mutex::new((grant.believed_from, None)));
        let shared = state.clone();
        let every = grant.lease.unwrap_or_default() / 3;
        let task = tokio::spawn(async move {
            let mut renewing = Mover::new(s);
            let mut grant = grant;
            loop {
                tokio::time::sleep(every).await;
                let found = renewing.renew(&mut grant).await;
                let mut st = shared.lock().unwrap();
                st.0 = grant.believed_from;
                if matches!(found, Renewal::Lost { .. } | Renewal::Unreachable) {
                    st.1 = Some(found);
                    return;
                }
            }
        });
        RenewThread { task, state }
    }

    /// When the last renewal that answered was sent, and how the task ended, if it has.
    fn state(&self) -> (Instant, Option<Renewal>) {
        *self.state.lock().unwrap()
    }

    /// Stop renewing: no renewal is sent after this returns.
    pub(super) async fn stop(mut self) {
        self.task.abort();
        // Awaited, so an abort that lands mid-query is over before the caller goes on.
        let _ = (&mut self.task).await;
    }
}

impl Drop for RenewThread {
    fn drop(&mut self) {
        self.task.abort();
    }
}
