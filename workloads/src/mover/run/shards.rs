//! The shard side: copy a turbine in paced batches, delete it from its source, the fence
//! that opens every write transaction (and the grant-time fence on every shard), and the
//! retries of one write.

use super::*;

/// One batch of a copy: its destination, its turbine and its rows.
struct Batch<'a> {
    to: &'a str,
    turbine: &'a str,
    ts: &'a [SystemTime],
    values: &'a [f64],
}

impl Mover {
    /// One turbine's copy: count, then keyset pages from the source, each batch its own transaction on the destination.
    pub(super) async fn copy(
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
            verb::COPY,
            json!({ "turbine": turbine, "from": from, "to": to, "token": token }),
        );
        let (mut read, mut written) = (0u64, 0u64);
        let pace = self.pace;
        // The count belongs to the first batch: a slow link slows it too.
        let start = pace.turbine_start(*cursor, self.now_offset());
        let count: i64 = match self.read(from, Read::Count(turbine)).await {
            Ok(rows) => rows.first().map(|r| r.get(0)).unwrap_or(0),
            Err(e) => return Err(self.copy_gave_up(grant, turbine, e, read, written).await),
        };
        let n = batch_rows(count.max(0) as u64, self.pace.batches) as i64;
        let mut last_ts: Option<SystemTime> = None;
        let mut exhausted = count == 0;
        let mut i: u32 = 0;
        // Every page moves the keyset on, so more than count + batches pages cannot happen; the cap guards the guard.
        let max_pages = count.max(0) as u64 + pace.batches as u64 + 1;
        while !exhausted {
            if i as u64 >= max_pages {
                self.h.fail(verb::COPY, json!({ "turbine": turbine, "reason": "too many pages", "rows_read": read, "rows_written": written }));
                return Err(Stop::GiveUp(format!(
                    "{turbine}: more than {max_pages} pages"
                )));
            }
            let (ts, values, done) = match self.read_page(from, turbine, last_ts, n).await {
                Ok(page) => page,
                Err(e) => return Err(self.copy_gave_up(grant, turbine, e, read, written).await),
            };
            exhausted = done;
            if let Some(t) = ts.last() {
                last_ts = Some(*t);
                let batch = Batch {
                    to,
                    turbine,
                    ts: &ts,
                    values: &values,
                };
                written += self.write_batch(grant, batch, read, written).await?;
                read += ts.len() as u64;
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
            verb::COPY,
            json!({ "turbine": turbine, "rows_read": read, "rows_written": written }),
        );
        Ok((read, written))
    }

    /// The next page of a turbine's copy (after `last_ts`, or its first): its rows, cut to
    /// `n` at a timestamp boundary (or every row of its one timestamp), and whether it was
    /// the last.
    async fn read_page(
        &mut self,
        from: &str,
        turbine: &str,
        last_ts: Option<SystemTime>,
        n: i64,
    ) -> Result<(Vec<SystemTime>, Vec<f64>, bool), DbError> {
        let rows = match last_ts {
            None => self.read(from, Read::PageFirst(turbine, n + 1)).await,
            Some(t) => self.read(from, Read::PageAfter(turbine, t, n + 1)).await,
        }?;
        let mut ts: Vec<SystemTime> = rows.iter().map(|r| r.get(0)).collect();
        let mut values: Vec<f64> = rows.iter().map(|r| r.get(1)).collect();
        let mut exhausted = false;
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
                let rows = self.read(from, Read::AtTs(turbine, at)).await?;
                ts = rows.iter().map(|r| r.get(0)).collect();
                values = rows.iter().map(|r| r.get(1)).collect();
            }
        }
        Ok((ts, values, exhausted))
    }

    /// Write one batch of a copy to its destination: the rows it wrote, or why the copy
    /// stops (`read` and `written` so far go into its history).
    async fn write_batch(
        &mut self,
        grant: &Grant,
        batch: Batch<'_>,
        read: u64,
        written: u64,
    ) -> Result<u64, Stop> {
        let Batch {
            to,
            turbine,
            ts,
            values,
        } = batch;
        let insert = Write::Insert {
            turbine,
            ts,
            values,
        };
        match self.write(to, grant, insert).await {
            Wrote::Rows(k) => Ok(k),
            Wrote::Fenced { shard_token } => Err(self.fenced_with(
                verb::COPY,
                to,
                grant.token,
                shard_token,
                turbine,
                read,
                written,
            )),
            Wrote::Expired(past) => {
                self.h.fail(
                    verb::COPY,
                    json!({ "turbine": turbine, "reason": "expired", "rows_read": read, "rows_written": written }),
                );
                Err(self.expired(grant, verb::COPY, Some(turbine), past))
            }
            Wrote::Failed(e) => Err(self.copy_gave_up(grant, turbine, e, read, written).await),
        }
    }

    /// A copy that cannot reach a database: its failure in the history, the grant released.
    async fn copy_gave_up(
        &mut self,
        grant: &Grant,
        turbine: &str,
        e: DbError,
        read: u64,
        written: u64,
    ) -> Stop {
        self.h.emit(
            failure_kind(&e),
            verb::COPY,
            json!({ "turbine": turbine, "reason": "unreachable", "error": e.to_string(),
                    "rows_read": read, "rows_written": written }),
        );
        self.release(grant, 1).await;
        Stop::GiveUp(format!("{turbine}: {e}"))
    }

    /// Delete a turbine from a shard (`why`: source or tidy-up). None when it went through.
    pub(super) async fn delete(
        &mut self,
        entry: &PlanEntry,
        shard: &str,
        why: &str,
        grant: &Grant,
    ) -> Option<Stop> {
        let (turbine, token) = (entry.turbine.as_str(), grant.token);
        self.h.invoke(
            verb::DELETE,
            json!({ "turbine": turbine, "shard": shard, "token": token, "why": why }),
        );
        match self.write(shard, grant, Write::Delete { turbine }).await {
            Wrote::Rows(rows) => {
                self.h.ok(
                    verb::DELETE,
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
                self.h.fail(verb::DELETE, v);
                eprintln!(
                    "{}",
                    fenced_message(&self.s.env.box_name, shard, token, shard_token)
                );
                Some(Stop::Fenced)
            }
            Wrote::Expired(past) => {
                self.h.fail(
                    verb::DELETE,
                    json!({ "turbine": turbine, "shard": shard, "reason": "expired" }),
                );
                Some(self.expired(grant, verb::DELETE, Some(turbine), past))
            }
            Wrote::Failed(e) => {
                self.h.emit(
                    failure_kind(&e),
                    verb::DELETE,
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

    pub(super) fn fenced(
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
    pub(super) fn fenced_with(
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

    /// A read on a shard, reconnecting and retrying within the shard retry budget.
    pub(super) async fn read(
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
    pub(super) async fn write(&mut self, shard: &str, grant: &Grant, w: Write<'_>) -> Wrote {
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
    pub(super) fn exit_on_schema_error(&self, shard: &str, wrote: &Wrote) {
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
    pub(super) async fn fence_all(
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
    pub(super) async fn fence_for_successor(&mut self, shards: &BTreeSet<String>, newer: i64) {
        // No lease of ours is checked: this write is on behalf of the newer holder.
        for (shard, wrote) in self.fence_all(shards, None, newer).await {
            let v = json!({ "shard": shard, "token": newer, "why": "successor" });
            match wrote {
                Wrote::Rows(_) | Wrote::Fenced { .. } => self.h.ok(verb::FENCE, v),
                Wrote::Expired(_) => {}
                Wrote::Failed(e) => {
                    let mut v = v;
                    v["error"] = json!(e.to_string());
                    self.h.emit(failure_kind(&e), verb::FENCE, v);
                }
            }
        }
    }
}

/// One write with retries inside `backoff`. `expiry`: check that grant's lease before each
/// attempt (`--check-expiry-before-write`). A schema error is returned at once.
pub(super) async fn write_retrying(
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
pub(super) async fn write_once(
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

pub(super) async fn write_steps(
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
