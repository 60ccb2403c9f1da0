//! Grants read from the lock service itself, never from a mover: etcd's watch on the lock key (a grant is the key that owns the lock, by lowest create revision; its end is the DELETE the leader issues at the lease's expiry, or the unlock), ZooKeeper's persistent watch on the lock path (`observe_zk.rs`: the lowest sequence owns it; its node's deletion ends it), a Postgres advisory lock's `pg_locks` polled on the routing db (a grant is a session holding it; a statement on that session renews it; its end is the session's), and Redis's keyspace notifications on the lock key (a grant is a `set` that names a new holder; `expire` by the same holder renews it; its end is `expired`, stamped at the key's own deadline by the server's clock, or `del`). Each change is stamped with the harness's wall clock as it arrives (Redis's expiry: the server's), recorded as the claim changes the checkers judge, and fed to the triggers.

use chaos_history::ClaimChange;
use chaos_workloads::lock::LockKind;
use chaos_workloads::lock::SQL_ADVISORY_OBSERVE;
use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

#[path = "observe_redis.rs"]
mod redis;
#[path = "observe_zk.rs"]
mod zk;

/// How long the advisory lock's observer waits between two reads of its holders (a grant is
/// seen within this and a read's round trip). Slept on a blocking thread: tokio's timer has
/// 1 ms ticks, so its 1 ms sleep lasted 1 to 2 ms and a grant was seen 3.5 ms late at p99.
const ADVISORY_POLL: Duration = Duration::from_micros(400);
/// How long a new advisory holder's token may take to appear (its statement still running).
const TOKEN_WAIT_NS: i64 = 20_000_000;
/// How long a holder named by an opaque value (python3-etcd3's uuid) may wait for the history
/// line that ties it to its box before the triggers hear it under the raw value.
const NAME_WAIT: Duration = Duration::from_millis(200);

/// A change as the triggers hear it: when it arrived, who holds the lock now (None: nobody),
/// and the grant's token.
#[derive(Debug, Clone)]
pub struct Seen {
    pub at: Instant,
    pub holder: Option<String>,
    pub token: i64,
}

/// Opaque lock values a mover tied to its box with a history line (`lock_value`).
pub type Names = Arc<Mutex<HashMap<String, String>>>;

/// The observer at work.
pub struct Observer {
    kind: LockKind,
    job: String,
    /// The service's own address (the routing db's URL for an advisory lock).
    endpoint: String,
    changes: Arc<Mutex<Vec<ClaimChange>>>,
    names: Names,
    task: Option<tokio::task::JoinHandle<()>>,
    /// True once the task reads the service (etcd: its watch is up; advisory: a first poll).
    ready: tokio::sync::watch::Receiver<bool>,
}

fn wall_ns() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as i64)
}

/// What the observer shares with its task.
#[derive(Clone)]
struct Sink {
    job: String,
    changes: Arc<Mutex<Vec<ClaimChange>>>,
    names: Names,
    feed: tokio::sync::mpsc::UnboundedSender<Seen>,
    ready: Arc<tokio::sync::watch::Sender<bool>>,
}

impl Sink {
    /// Record one change: `held` false ends the grant at `at_ns`. `xid` orders changes
    /// committed in the same instant (etcd's revision; the observer's count otherwise).
    async fn change(&self, holder: &str, token: i64, held: bool, at_ns: i64, xid: i64) {
        self.change_seen(holder, token, held, (at_ns, None), xid)
            .await
    }

    /// `change`, stamped `at_ns` when it was seen and, when the service gave no time of its
    /// own, no earlier than `not_before` (the checker judges a token used in between as issued).
    async fn change_seen(
        &self,
        holder: &str,
        token: i64,
        held: bool,
        (at_ns, not_before): (i64, Option<i64>),
        xid: i64,
    ) {
        let at = Instant::now();
        self.changes.lock().unwrap().push(ClaimChange {
            job: self.job.clone(),
            holder: Some(holder.to_string()),
            token,
            expires_unix_ns: if held { i64::MAX } else { i64::MIN + 1 },
            commit_unix_ns: at_ns,
            app: holder.to_string(),
            xid,
            not_before_unix_ns: not_before,
        });
        let name = if held {
            Some(self.name_of(holder).await)
        } else {
            None
        };
        let _ = self.feed.send(Seen {
            at,
            holder: name,
            token,
        });
    }

    /// The box a lock value names: itself, or the box whose history line tied it.
    async fn name_of(&self, value: &str) -> String {
        let waited = Instant::now();
        loop {
            if value.starts_with("box-") {
                return value.to_string();
            }
            if let Some(b) = self.names.lock().unwrap().get(value) {
                return b.clone();
            }
            if waited.elapsed() > NAME_WAIT {
                return value.to_string();
            }
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
    }
}

impl Observer {
    /// Start observing the service (claims: nothing to do here, the routing db's own audit
    /// and NOTIFY are the record). `endpoint` is the service's own, unproxied address: the
    /// routing db's admin URL, or every etcd or ZooKeeper member's `host:port`, comma-separated.
    pub fn start(
        kind: LockKind,
        job: &str,
        key: &str,
        endpoint: &str,
        names: Names,
    ) -> (Observer, tokio::sync::mpsc::UnboundedReceiver<Seen>) {
        let (feed, rx) = tokio::sync::mpsc::unbounded_channel();
        let changes: Arc<Mutex<Vec<ClaimChange>>> = Default::default();
        let (ready_tx, ready) = tokio::sync::watch::channel(kind == LockKind::Claims);
        let sink = Sink {
            job: job.to_string(),
            changes: changes.clone(),
            names: names.clone(),
            feed,
            ready: Arc::new(ready_tx),
        };
        let task = match kind {
            LockKind::Claims => None,
            LockKind::Advisory => Some(tokio::spawn(advisory(
                sink,
                endpoint.to_string(),
                key.parse().unwrap_or(chaos_workloads::lock::ADVISORY_KEY),
            ))),
            LockKind::Etcd => Some(tokio::spawn(etcd(
                sink,
                endpoint.split(',').map(|e| format!("http://{e}")).collect(),
                key.to_string(),
            ))),
            LockKind::Redis => Some(tokio::spawn(redis::redis_watch(
                sink,
                endpoint.split(',').map(str::to_string).collect(),
                key.to_string(),
            ))),
            LockKind::Zookeeper => Some(tokio::spawn(zk::zookeeper(
                sink,
                endpoint.to_string(),
                key.to_string(),
            ))),
        };
        (
            Observer {
                kind,
                job: job.to_string(),
                endpoint: endpoint.to_string(),
                changes,
                names,
                task,
                ready,
            },
            rx,
        )
    }

    /// Wait until the observer reads the service (a grant before then would be stamped when
    /// its first read found it, late), at most `limit`; whether it does.
    pub async fn ready(&self, limit: Duration) -> bool {
        let mut ready = self.ready.clone();
        let wait = async move { ready.wait_for(|r| *r).await.is_ok() };
        tokio::time::timeout(limit, wait).await.unwrap_or(false)
    }

    pub fn kind(&self) -> LockKind {
        self.kind
    }

    /// Stop observing; the changes seen, each holder named by its box where a history line
    /// tied an opaque value to one. None for `claims` (its record is the routing db's audit).
    pub async fn finish(mut self) -> Option<Vec<ClaimChange>> {
        if let Some(t) = self.task.take() {
            t.abort();
            let _ = t.await;
        }
        if self.kind == LockKind::Claims {
            return None;
        }
        let names = self.names.lock().unwrap().clone();
        let mut changes = std::mem::take(&mut *self.changes.lock().unwrap());
        if self.kind == LockKind::Advisory {
            let drawn = drawn_tokens(&self.endpoint).await;
            changes.extend(missed_grants(&self.job, &changes, &drawn, wall_ns()));
            one_holder_at_a_time(&mut changes);
        }
        for c in &mut changes {
            if let Some(b) = c.holder.as_ref().and_then(|h| names.get(h)) {
                c.holder = Some(b.clone());
            }
        }
        Some(changes)
    }
}

/// Every token drawn under the advisory lock: holder, token, and its commit (Unix ns), in
/// token order; empty when the routing db cannot be read.
async fn drawn_tokens(url: &str) -> Vec<(String, i64, i64)> {
    let Ok(c) = crate::db::connect(url, "harness-lock", Duration::from_secs(5)).await else {
        return vec![];
    };
    let sql = "select holder, token, \
        (extract(epoch from pg_xact_commit_timestamp(xmin)) * 1000000)::bigint * 1000 \
        from lock_tokens order by token";
    match c.query(sql, &[]).await {
        Ok(rows) => rows
            .iter()
            .filter_map(|r| Some((r.get(0), r.get(1), r.get::<_, Option<i64>>(2)?)))
            .collect(),
        Err(_) => vec![],
    }
}

/// Grants a poll of `pg_locks` missed (a holder that took the lock and let it go between two
/// polls) whose token the routing db recorded: each from its token's commit to the next
/// token's commit (an advisory lock has one holder at a time), the last to `end_ns`.
fn missed_grants(
    job: &str,
    seen: &[ClaimChange],
    drawn: &[(String, i64, i64)],
    end_ns: i64,
) -> Vec<ClaimChange> {
    let mut out = Vec::new();
    for (i, (holder, token, at)) in drawn.iter().enumerate() {
        if seen.iter().any(|c| c.token == *token) {
            continue;
        }
        let until = drawn.get(i + 1).map_or(end_ns, |next| next.2).max(*at);
        for (held, t, xid) in [(true, *at, 2 * token + 1), (false, until, 2 * token + 2)] {
            out.push(ClaimChange {
                job: job.to_string(),
                holder: Some(holder.clone()),
                token: *token,
                expires_unix_ns: if held { i64::MAX } else { i64::MIN + 1 },
                commit_unix_ns: t,
                app: holder.clone(),
                xid,
                not_before_unix_ns: None,
            });
        }
    }
    out
}

/// An advisory lock has one holder at a time: each grant's end, as a poll placed it, is moved
/// back to the next grant's start where the poll saw the end late, and a renewal a poll placed
/// at or after the next grant's start (it renews nothing: an advisory grant never expires) is
/// dropped.
fn one_holder_at_a_time(changes: &mut Vec<ClaimChange>) {
    // Each grant's start: the earliest change of its token that holds.
    let mut first: HashMap<i64, i64> = HashMap::new();
    for c in changes.iter().filter(|c| c.expires_unix_ns == i64::MAX) {
        let e = first.entry(c.token).or_insert(c.commit_unix_ns);
        *e = (*e).min(c.commit_unix_ns);
    }
    let mut starts: Vec<i64> = first.values().copied().collect();
    starts.sort_unstable();
    let next_start = |token: i64| {
        let start = *first.get(&token)?;
        starts.iter().copied().find(|&s| s > start)
    };
    changes.retain(|c| {
        let renewal =
            c.expires_unix_ns == i64::MAX && first.get(&c.token) != Some(&c.commit_unix_ns);
        !renewal || next_start(c.token).is_none_or(|next| c.commit_unix_ns < next)
    });
    for c in changes.iter_mut().filter(|c| c.expires_unix_ns != i64::MAX) {
        if let Some(next) = next_start(c.token) {
            c.commit_unix_ns = c.commit_unix_ns.min(next);
        }
    }
}

impl Drop for Observer {
    fn drop(&mut self) {
        if let Some(t) = self.task.take() {
            t.abort();
        }
    }
}

/// The advisory lock's holder as one poll sees it.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Session {
    pid: i32,
    started_us: i64,
    app: String,
    /// When the session's state last changed, Unix µs.
    changed_us: i64,
    /// Whether a statement was running when it was read.
    active: bool,
}

impl Session {
    /// Whether `now` shows a statement begun since `self` was read: a new statement running,
    /// or a newer idle state where the last read saw it idle (the statement ran between two
    /// reads). An idle state right after an active one is that statement ending.
    fn renewed_by(&self, now: &Session) -> bool {
        now.changed_us > self.changed_us && (now.active || !self.active)
    }
}

/// The pause between two reads of `pg_locks`: [`ADVISORY_POLL`], finer than tokio's timer.
async fn poll_pause() {
    let _ = tokio::task::spawn_blocking(|| std::thread::sleep(ADVISORY_POLL)).await;
}

/// Poll `pg_locks` on the routing db. A new session holding the lock is a grant (its token
/// the one it drew under the lock, `lock_tokens`, else the observer's count from 1); a statement
/// begun on it a renewal (it keeps the session from its idle timeout); the session gone (or the server) its end. A lost connection ends
/// the grant at the moment of the loss: the server that ended it ended every session.
async fn advisory(sink: Sink, url: String, key: i64) {
    let mut current: Option<(Session, i64, i64)> = None;
    let mut grants = 0i64;
    let mut count = 0i64;
    // A holder seen before its token: (pid, when first seen).
    let mut first_seen: Option<(i32, i64)> = None;
    loop {
        let client = match crate::db::connect(&url, "harness-lock", Duration::from_secs(2)).await {
            Ok(c) => c,
            Err(_) => {
                tokio::time::sleep(Duration::from_millis(20)).await;
                continue;
            }
        };
        let stmt = match client.prepare(SQL_ADVISORY_OBSERVE).await {
            Ok(s) => s,
            Err(e) => {
                eprintln!("chaos: the advisory lock's observer cannot read pg_locks: {e}");
                tokio::time::sleep(Duration::from_millis(200)).await;
                continue;
            }
        };
        loop {
            let rows = match client.query(&stmt, &[&key]).await {
                Ok(r) => r,
                Err(_) => break,
            };
            sink.ready.send_replace(true);
            let now = wall_ns();
            // Two orders a poll: an end before the grant that follows it in the same instant.
            count += 2;
            let seen = rows.first().map(|r| {
                (
                    Session {
                        pid: r.get(0),
                        started_us: r.get(1),
                        app: r.get::<_, Option<String>>(2).unwrap_or_default(),
                        changed_us: r.get(4),
                        active: r.get(5),
                    },
                    r.get::<_, Option<i64>>(3),
                    r.get::<_, Option<i64>>(6),
                )
            });
            match (&mut current, seen) {
                (Some((held, token, since)), Some((s, _, _)))
                    if held.pid == s.pid && held.started_us == s.started_us =>
                {
                    let renewed = held.renewed_by(&s);
                    *held = s;
                    if renewed {
                        // The statement's own moment (the server's clock is this host's), not
                        // the poll's return: by then the holder may have let go and the next
                        // one committed its token, which would stamp this renewal after it.
                        let at = (held.changed_us * 1000).min(now).max(*since);
                        let (app, t) = (held.app.clone(), *token);
                        sink.change(&app, t, true, at, count + 1).await;
                    }
                }
                (cur, seen) => {
                    if let Some((old, token, _)) = cur.take() {
                        // An advisory lock has one holder at a time: the old session let go
                        // no later than the new one's token committed, whenever a poll saw it.
                        let new_at = seen.as_ref().and_then(|x| x.2).unwrap_or(now);
                        sink.change(&old.app, token, false, now.min(new_at), count)
                            .await;
                        first_seen = None;
                    }
                    if let Some((s, drawn, drawn_ns)) = seen {
                        // The statement that took the lock draws its token in the same breath,
                        // and a poll's snapshot may predate its commit: wait a few polls for it
                        // to name the grant by it (a holder that draws none waits this long).
                        let at = match first_seen {
                            Some((pid, t)) if pid == s.pid => t,
                            _ => {
                                first_seen = Some((s.pid, now));
                                now
                            }
                        };
                        if drawn.is_none() && now - at < TOKEN_WAIT_NS {
                            poll_pause().await;
                            continue;
                        }
                        first_seen = None;
                        grants += 1;
                        let token = drawn.unwrap_or(grants);
                        // The token's commit is the grant by the routing db's own clock: a
                        // poll sees it up to a poll late, and the holder may write by then.
                        let at = drawn_ns.map_or(at, |c| c.min(at));
                        sink.change(&s.app, token, true, at, count + 1).await;
                        *cur = Some((s, token, at));
                    }
                }
            }
            poll_pause().await;
        }
        if let Some((old, token, _)) = current.take() {
            sink.change(&old.app, token, false, wall_ns(), count).await;
        }
    }
}

/// A key under the lock prefix: its create revision and the value it names the holder by.
type Keys = BTreeMap<Vec<u8>, (i64, String)>;

/// The key that owns the lock: the lowest create revision.
fn owner(keys: &Keys) -> Option<(i64, String)> {
    keys.values().min_by_key(|(rev, _)| *rev).cloned()
}

/// A value as the record names its holder: text, or hex for bytes (python3-etcd3's uuid).
fn value_name(v: &[u8]) -> String {
    if !v.is_empty() && v.iter().all(|b| b.is_ascii_graphic()) {
        return String::from_utf8_lossy(v).into_owned();
    }
    v.iter().map(|b| format!("{b:02x}")).collect()
}

/// What the watches of every member share: the keys under the prefix, and the revision the
/// next event must reach to be news.
#[derive(Default)]
struct Watched {
    keys: Keys,
    from_revision: i64,
}

/// Watch the lock key (as a prefix) on every member at once, from the revision of a first
/// read, each reconnecting when its member goes away: a paused or cut-off member's watch
/// stalls, the others' go on, and each revision is recorded once, when it first arrives.
async fn etcd(sink: Sink, endpoints: Vec<String>, key: String) {
    let shared = Arc::new(tokio::sync::Mutex::new(Watched::default()));
    let watches = endpoints
        .into_iter()
        .map(|e| etcd_member(sink.clone(), e, key.clone(), shared.clone()));
    futures_util::future::join_all(watches).await;
}

/// One member's watch. Every PUT or DELETE that changes the owner, and every PUT to the owner's
/// key (a holder that proclaims its renewal), is recorded at its arrival.
async fn etcd_member(
    sink: Sink,
    endpoint: String,
    key: String,
    shared: Arc<tokio::sync::Mutex<Watched>>,
) {
    use etcd_client::{EventType, GetOptions, WatchOptions};
    loop {
        let options = etcd_client::ConnectOptions::new()
            .with_connect_timeout(Duration::from_millis(500))
            .with_timeout(Duration::from_secs(2));
        let Ok(mut client) = etcd_client::Client::connect([&endpoint], Some(options)).await else {
            tokio::time::sleep(Duration::from_millis(20)).await;
            continue;
        };
        let start = {
            let mut w = shared.lock().await;
            if w.from_revision == 0 {
                let Ok(got) = client
                    .get(key.clone(), Some(GetOptions::new().with_prefix()))
                    .await
                else {
                    continue;
                };
                for kv in got.kvs() {
                    w.keys.insert(
                        kv.key().to_vec(),
                        (kv.create_revision(), value_name(kv.value())),
                    );
                }
                if let Some((rev, holder)) = owner(&w.keys) {
                    sink.change(&holder, rev, true, wall_ns(), rev).await;
                }
                w.from_revision = got.header().map_or(0, |h| h.revision()) + 1;
            }
            w.from_revision
        };
        let watch = WatchOptions::new()
            .with_prefix()
            .with_prev_key()
            .with_start_revision(start);
        let Ok(mut stream) = client.watch(key.clone(), Some(watch)).await else {
            continue;
        };
        sink.ready.send_replace(true);
        while let Ok(Some(msg)) = stream.message().await {
            let now = wall_ns();
            let mut w = shared.lock().await;
            // Another member's watch already told these (one revision's events come together).
            let floor = w.from_revision;
            for ev in msg.events() {
                let Some(kv) = ev.kv() else { continue };
                let rev = kv.mod_revision();
                if rev < floor {
                    continue;
                }
                let before = owner(&w.keys);
                w.from_revision = w.from_revision.max(rev + 1);
                match ev.event_type() {
                    EventType::Put => {
                        w.keys.insert(
                            kv.key().to_vec(),
                            (kv.create_revision(), value_name(kv.value())),
                        );
                    }
                    EventType::Delete => {
                        w.keys.remove(kv.key());
                    }
                }
                let after = owner(&w.keys);
                if before != after {
                    if let Some((token, holder)) = &before {
                        sink.change(holder, *token, false, now, rev).await;
                    }
                    if let Some((token, holder)) = &after {
                        sink.change(holder, *token, true, now, rev).await;
                    }
                } else if let (Some((token, holder)), EventType::Put) = (&after, ev.event_type()) {
                    if kv.create_revision() == *token {
                        sink.change(holder, *token, true, now, rev).await;
                    }
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn change(holder: &str, token: i64, held: bool, at: i64, xid: i64) -> ClaimChange {
        ClaimChange {
            job: "j".into(),
            holder: Some(holder.into()),
            token,
            expires_unix_ns: if held { i64::MAX } else { i64::MIN + 1 },
            commit_unix_ns: at,
            app: holder.into(),
            xid,
            not_before_unix_ns: None,
        }
    }

    /// A poll that saw the old holder's last statement returned after the next holder's token
    /// committed (CI: box-3's token 8 "renewed" 3.4 s into box-2's grant): the late renewal
    /// goes, the late end moves back, and renewals before the next grant stay.
    #[test]
    fn a_renewal_seen_after_the_next_grant_began_is_dropped_and_ends_move_back() {
        let mut changes = vec![
            change("box-3", 8, true, 100, 1),
            change("box-3", 8, true, 150, 3),
            change("box-3", 8, true, 205, 5),
            change("box-2", 9, true, 200, 7),
            change("box-3", 8, false, 210, 6),
            change("box-2", 9, true, 250, 9),
        ];
        one_holder_at_a_time(&mut changes);
        let left: Vec<(i64, bool, i64)> = changes
            .iter()
            .map(|c| (c.token, c.expires_unix_ns == i64::MAX, c.commit_unix_ns))
            .collect();
        assert_eq!(
            left,
            [
                (8, true, 100),
                (8, true, 150),
                (9, true, 200),
                (8, false, 200),
                (9, true, 250)
            ]
        );
    }
}
