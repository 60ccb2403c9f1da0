//! Redis's grants as the server shows them: keyspace notifications on the lock key and its `:token` counter on a subscription of their own, each followed by a read of the key, its deadline and the counter on a second connection; a `set` naming a new holder is a grant, an `expire` by the same holder a renewal, `expired` its end at the key's own deadline by the server's clock, `del` its end on arrival.

use super::{value_name, wall_ns, Sink};
use std::time::{Duration, Instant};

/// How long a Redis grant whose token was not drawn in the same script (redis-py's `Lock`,
/// then an `INCR` of the mover's own) may wait for that `INCR` before it is recorded with the
/// observer's own count.
const REDIS_TOKEN_WAIT: Duration = Duration::from_millis(50);

/// The Redis lock as the observer follows it.
#[derive(Default)]
struct RedisState {
    /// The current grant: holder, token, and the key's deadline (Unix ns, the server's clock).
    held: Option<(String, i64, Option<i64>)>,
    /// A grant seen whose token is not drawn yet: holder, when its `set` arrived, its deadline,
    /// and when the wait for its token began.
    pending: Option<(String, i64, Option<i64>, Instant)>,
    /// The counter's value as last read (None: absent, as after a restart without persistence).
    counter: Option<i64>,
    /// The highest token recorded: a grant with no `INCR` of its own is named by the next.
    count: i64,
    /// Orders the changes (Redis has no revision to give).
    xid: i64,
}

impl RedisState {
    /// Record the pending grant with `token` (the counter's value, when it moved for this grant,
    /// even where it went back, as a restart without persistence makes it; the observer's own
    /// count otherwise).
    async fn settle(&mut self, sink: &Sink, token: Option<i64>) {
        let Some((holder, at, deadline, _)) = self.pending.take() else {
            return;
        };
        let token = token.unwrap_or(self.count + 1);
        self.count = self.count.max(token);
        self.xid += 1;
        sink.change(&holder, token, true, at, self.xid).await;
        self.held = Some((holder, token, deadline));
    }

    /// End the current grant at `at_ns` (or, `expired`, at its deadline when that is earlier).
    async fn end(&mut self, sink: &Sink, at_ns: i64, at_deadline: bool) {
        self.settle(sink, None).await;
        if let Some((holder, token, deadline)) = self.held.take() {
            let at = match (at_deadline, deadline) {
                (true, Some(d)) => d.min(at_ns),
                _ => at_ns,
            };
            self.xid += 1;
            sink.change(&holder, token, false, at, self.xid).await;
        }
    }

    /// What the server says now (`GET key`, `PEXPIRETIME key`, `GET counter`) after an event on
    /// the lock key arrived at `at`.
    async fn on_key(&mut self, sink: &Sink, event: &str, at: i64, now: Option<RedisNow>) {
        match event {
            "set" => {
                let Some(now) = now else { return };
                let Some(holder) = now.holder else {
                    // Gone already (expired or deleted before the read): its own event follows.
                    return;
                };
                let same = self.held.as_ref().map(|h| h.0 == holder);
                let pending_same = self.pending.as_ref().map(|p| p.0 == holder);
                if same == Some(true) || pending_same == Some(true) {
                    // The holder set its own key again: a renewal.
                    self.renew(sink, at, now.deadline_ns).await;
                    return;
                }
                self.end(sink, at, false).await;
                self.pending = Some((holder, at, now.deadline_ns, Instant::now()));
                if now.token.is_some() && now.token != self.counter {
                    // Drawn in the same script (or already after it): this grant's.
                    self.counter = now.token;
                    self.settle(sink, now.token).await;
                }
            }
            "expire" | "pexpire" => {
                if let Some(now) = now {
                    if now.holder.is_some()
                        && now.holder.as_deref() == self.held.as_ref().map(|h| h.0.as_str())
                    {
                        self.renew(sink, at, now.deadline_ns).await;
                    } else if let Some(p) = &mut self.pending {
                        p.2 = now.deadline_ns;
                    }
                }
            }
            "expired" => self.end(sink, at, true).await,
            "del" => self.end(sink, at, false).await,
            _ => {}
        }
    }

    /// The counter moved (`incr`): its value names the grant still waiting for one.
    async fn on_counter(&mut self, sink: &Sink, token: Option<i64>) {
        self.counter = token;
        if self.pending.is_some() && token.is_some() {
            self.settle(sink, token).await;
        }
    }

    /// Whether the grant recorded (or waiting for its token) is `holder`'s.
    fn holds(&self, holder: Option<&str>) -> bool {
        let mine = self.held.as_ref().map(|h| h.0.as_str());
        let waiting = self.pending.as_ref().map(|p| p.0.as_str());
        holder.is_some() && (holder == mine || holder == waiting)
    }

    /// The primary now does not hold the recorded grant (the old one went away, or a replica
    /// that never received it was promoted): the service forgot it, and it ends at the
    /// deadline it was promised (now when none was read).
    async fn forget(&mut self, sink: &Sink, now_ns: i64) {
        self.settle(sink, None).await;
        if let Some((holder, token, deadline)) = self.held.take() {
            self.xid += 1;
            sink.change(&holder, token, false, deadline.unwrap_or(now_ns), self.xid)
                .await;
        }
    }

    async fn renew(&mut self, sink: &Sink, at: i64, deadline: Option<i64>) {
        if let Some(p) = &mut self.pending {
            p.2 = deadline;
            return;
        }
        if let Some((holder, token, d)) = &mut self.held {
            *d = deadline;
            let (holder, token) = (holder.clone(), *token);
            self.xid += 1;
            sink.change(&holder, token, true, at, self.xid).await;
        }
    }
}

/// The lock key's state as one read finds it.
struct RedisNow {
    holder: Option<String>,
    deadline_ns: Option<i64>,
    token: Option<i64>,
}

/// `GET key`, `PEXPIRETIME key`, `GET counter` in one round trip.
async fn redis_read(
    conn: &mut redis::aio::MultiplexedConnection,
    key: &str,
    counter: &str,
) -> Option<RedisNow> {
    let mut pipe = redis::pipe();
    pipe.get(key).cmd("PEXPIRETIME").arg(key).get(counter);
    let ask = pipe.query_async::<(Option<Vec<u8>>, i64, Option<i64>)>(conn);
    let (value, deadline_ms, token) = tokio::time::timeout(Duration::from_secs(1), ask)
        .await
        .ok()?
        .ok()?;
    Some(RedisNow {
        holder: value.map(|v| value_name(&v)),
        deadline_ns: (deadline_ms > 0).then(|| deadline_ms.saturating_mul(1_000_000)),
        token,
    })
}

/// How often each server is asked its role (Redis with a replica).
const ROLE_EVERY: Duration = Duration::from_millis(10);

/// Each server's role as last asked: `Some(true)` primary, `Some(false)` replica, None no answer.
type Roles = tokio::sync::watch::Receiver<Vec<Option<bool>>>;

/// Ask every server its `ROLE` every 10 ms, each on a connection of its own kept open, each in
/// a task of its own (a paused server delays nobody else's answer).
fn ask_roles(addrs: &[String], tasks: &mut tokio::task::JoinSet<()>) -> Roles {
    let (tx, rx) = tokio::sync::watch::channel(vec![None; addrs.len()]);
    let tx = std::sync::Arc::new(tx);
    for (i, addr) in addrs.iter().enumerate() {
        let (tx, addr) = (tx.clone(), addr.clone());
        tasks.spawn(async move {
            let mut conn: Option<redis::aio::MultiplexedConnection> = None;
            loop {
                let ask = async {
                    if conn.is_none() {
                        let client = redis::Client::open(format!("redis://{addr}")).ok()?;
                        conn = Some(client.get_multiplexed_async_connection().await.ok()?);
                    }
                    let c = conn.as_mut()?;
                    let role = redis::cmd("ROLE")
                        .query_async::<Vec<redis::Value>>(c)
                        .await
                        .ok()?;
                    Some(match role.first() {
                        Some(redis::Value::BulkString(b)) => b.as_slice() == b"master",
                        Some(redis::Value::SimpleString(s)) => s == "master",
                        _ => false,
                    })
                };
                let role = tokio::time::timeout(Duration::from_millis(100), ask)
                    .await
                    .ok()
                    .flatten();
                if role.is_none() {
                    conn = None;
                }
                tx.send_if_modified(|r| std::mem::replace(&mut r[i], role) != role);
                tokio::time::sleep(ROLE_EVERY).await;
            }
        });
    }
    rx
}

/// A primary other than `follow` (a promotion), else `follow` while it is the primary.
fn primary_of(roles: &[Option<bool>], follow: usize) -> Option<usize> {
    let masters: Vec<usize> = (0..roles.len())
        .filter(|&i| roles[i] == Some(true))
        .collect();
    masters
        .iter()
        .copied()
        .find(|&i| i != follow)
        .or_else(|| masters.contains(&follow).then_some(follow))
}

/// Follow the Redis lock key by its keyspace notifications, on a subscription of its own and
/// a second connection that reads the key after each event (a notification names the event,
/// not the value). A lost connection ends the grant at the loss: a server without persistence
/// that went away forgot the key.
///
/// With a replica (`addrs` the primary's and the replica's): the service is whichever server
/// says it is the primary (`ROLE`, asked of each every 10 ms), and the observer follows it,
/// moving to another server the moment that one says primary (a promotion). A grant is not
/// ended when the primary goes away: the server found primary next is read, and a grant it
/// does not hold is one the service forgot, ended at the deadline it was promised (the key's
/// `PEXPIRETIME` as last read): a second grant before then overlaps it, by the service's own
/// record.
pub(super) async fn redis_watch(sink: Sink, addrs: Vec<String>, key: String) {
    use futures_util::StreamExt;
    let counter = chaos_workloads::lock::redis_token_key(&key);
    let on_key = format!("__keyspace@0__:{key}");
    let on_counter = format!("__keyspace@0__:{counter}");
    let mut state = RedisState::default();
    let replicated = addrs.len() > 1;
    let mut tasks = tokio::task::JoinSet::new();
    // One server: no roles to ask (the receiver of a sender dropped at once, never read).
    let mut roles = if replicated {
        ask_roles(&addrs, &mut tasks)
    } else {
        tokio::sync::watch::channel(Vec::new()).1
    };
    let mut follow = 0;
    loop {
        if replicated {
            let found = roles.wait_for(|r| primary_of(r, follow).is_some()).await;
            let Ok(r) = found else { return };
            follow = primary_of(&r, follow).unwrap_or(follow);
        }
        let addr = &addrs[follow];
        let Ok(client) = redis::Client::open(format!("redis://{addr}")) else {
            eprintln!("chaos: the Redis observer cannot use the address {addr:?}");
            return;
        };
        let connect = async {
            let mut ps = client.get_async_pubsub().await?;
            ps.subscribe(&on_key).await?;
            ps.subscribe(&on_counter).await?;
            let conn = client.get_multiplexed_async_connection().await?;
            Ok::<_, redis::RedisError>((ps, conn))
        };
        let Ok(Ok((ps, mut conn))) =
            tokio::time::timeout(Duration::from_millis(500), connect).await
        else {
            tokio::time::sleep(Duration::from_millis(20)).await;
            continue;
        };
        // Subscribed first, then read: whoever holds the key now is a grant from here.
        let Some(now) = redis_read(&mut conn, &key, &counter).await else {
            continue;
        };
        // The counter as this server has it now (a restarted one may have forgotten it).
        let counter_now = now.token;
        if replicated {
            if !state.holds(now.holder.as_deref()) {
                state.forget(&sink, wall_ns()).await;
            }
            // This server's counter is its own (a promoted replica's may be behind the old
            // primary's): a value read now is the grant's, not one seen before.
            state.counter = None;
        }
        if now.holder.is_some() {
            state.on_key(&sink, "set", wall_ns(), Some(now)).await;
        }
        state.counter = counter_now;
        sink.ready.send_replace(true);
        let (_sink_half, mut stream) = ps.split();
        loop {
            if replicated && primary_of(&roles.borrow(), follow) != Some(follow) {
                // Another server is the primary now: follow it.
                break;
            }
            let pending = state
                .pending
                .as_ref()
                .map(|p| REDIS_TOKEN_WAIT.saturating_sub(p.3.elapsed()));
            let wait = match (pending, replicated) {
                (Some(w), true) => Some(w.min(ROLE_EVERY)),
                (Some(w), false) => Some(w),
                (None, true) => Some(ROLE_EVERY),
                (None, false) => None,
            };
            let next = match wait {
                Some(w) => match tokio::time::timeout(w, stream.next()).await {
                    Ok(m) => m,
                    Err(_) => {
                        if state
                            .pending
                            .as_ref()
                            .is_some_and(|p| p.3.elapsed() >= REDIS_TOKEN_WAIT)
                        {
                            state.settle(&sink, None).await;
                        }
                        continue;
                    }
                },
                None => stream.next().await,
            };
            let Some(msg) = next else { break };
            let at = wall_ns();
            let event: String = msg.get_payload().unwrap_or_default();
            if msg.get_channel_name() == on_counter {
                if event.starts_with("incr") {
                    let token = redis_read(&mut conn, &key, &counter)
                        .await
                        .and_then(|n| n.token);
                    state.on_counter(&sink, token).await;
                }
                continue;
            }
            let now = match event.as_str() {
                "set" | "expire" | "pexpire" => redis_read(&mut conn, &key, &counter).await,
                _ => None,
            };
            state.on_key(&sink, &event, at, now).await;
        }
        if !replicated {
            state.end(&sink, wall_ns(), false).await;
        } else if roles.borrow().get(follow) == Some(&None) {
            // Gone: wait for the sentinel's promotion, or for it to answer again.
            let _ = roles.changed().await;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use chaos_history::ClaimChange;
    use std::sync::{Arc, Mutex};

    fn sink() -> (Sink, Arc<Mutex<Vec<ClaimChange>>>) {
        let changes: Arc<Mutex<Vec<ClaimChange>>> = Default::default();
        let (feed, _rx) = tokio::sync::mpsc::unbounded_channel();
        let (ready, _) = tokio::sync::watch::channel(false);
        let sink = Sink {
            job: "job".into(),
            changes: changes.clone(),
            names: Default::default(),
            feed,
            ready: Arc::new(ready),
        };
        (sink, changes)
    }

    fn now(holder: Option<&str>, deadline_ns: i64, token: Option<i64>) -> Option<RedisNow> {
        Some(RedisNow {
            holder: holder.map(str::to_string),
            deadline_ns: Some(deadline_ns),
            token,
        })
    }

    /// (holder, token, held, at) of each change.
    fn seen(changes: &Arc<Mutex<Vec<ClaimChange>>>) -> Vec<(String, i64, bool, i64)> {
        let c = changes.lock().unwrap();
        c.iter()
            .map(|c| {
                let holder = c.holder.clone().unwrap_or_default();
                (
                    holder,
                    c.token,
                    c.expires_unix_ns == i64::MAX,
                    c.commit_unix_ns,
                )
            })
            .collect()
    }

    #[tokio::test]
    async fn a_redis_grant_renews_expires_at_its_deadline_and_takes_its_incr() {
        let (sink, changes) = sink();
        let mut s = RedisState::default();
        // The reference mover's script: the counter moved with the set.
        s.on_key(&sink, "set", 100, now(Some("box-1"), 1_000, Some(1)))
            .await;
        s.on_key(&sink, "expire", 200, now(Some("box-1"), 1_100, Some(1)))
            .await;
        // The server expires it at its deadline, heard later.
        s.on_key(&sink, "expired", 5_000, None).await;
        // redis-py's Lock: the set first, the INCR after it.
        s.on_key(&sink, "set", 6_000, now(Some("box-2"), 7_000, Some(1)))
            .await;
        assert!(s.pending.is_some(), "waits for the box's INCR");
        s.on_counter(&sink, Some(2)).await;
        // Deleted by its holder; a set by a mover that draws no token is named by the count.
        s.on_key(&sink, "del", 6_500, None).await;
        s.on_key(&sink, "set", 6_600, now(Some("box-3"), 7_600, Some(2)))
            .await;
        s.on_key(&sink, "del", 6_700, None).await;
        // A server restarted without persistence forgot the counter: the next INCR gives 1
        // again, and the record says so (the token went back).
        s.on_key(&sink, "del", 7_000, None).await;
        s.counter = None;
        s.on_key(&sink, "set", 8_000, now(Some("box-4"), 9_000, Some(1)))
            .await;
        assert_eq!(
            seen(&changes),
            [
                ("box-1".into(), 1, true, 100),
                ("box-1".into(), 1, true, 200),
                ("box-1".into(), 1, false, 1_100),
                ("box-2".into(), 2, true, 6_000),
                ("box-2".into(), 2, false, 6_500),
                ("box-3".into(), 3, true, 6_600),
                ("box-3".into(), 3, false, 6_700),
                ("box-4".into(), 1, true, 8_000),
            ]
        );
    }
}
