//! ZooKeeper's grants as the ensemble shows them: a persistent recursive watch on the lock path (ZooKeeper delivers one client's events in zxid order), each lock node's data and `czxid` read as it is created, the owner the lowest sequence; a grant starts when a node becomes the lowest and ends when it is deleted (its session expired, or its holder released it); a write of the owner node's data is a renewal (the reference mover's; the session's heartbeats are invisible and stock recipes write nothing).

use super::{value_name, wall_ns, Sink};
use chaos_workloads::lock::zk_sequence;
use std::collections::BTreeMap;
use std::time::Duration;
use zookeeper_client as zk;

/// The observer's own session: long, so a paused or restarted member never ends it.
const SESSION: Duration = Duration::from_secs(30);
/// How often the children are read again when no event came (what a reconnection lost).
const RESYNC: Duration = Duration::from_millis(20);
/// For how long after a (re)connection the children are read again every `RESYNC`.
const RESYNC_FOR: Duration = Duration::from_secs(2);

/// A lock node: its name, `czxid` (the grant's token) and the holder its data names.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Node {
    name: String,
    czxid: i64,
    holder: String,
}

/// The lock nodes under the path by sequence, and the grant the observer last recorded.
#[derive(Default)]
pub(super) struct Nodes {
    by_seq: BTreeMap<i64, Node>,
    granted: Option<Node>,
    /// The changes' order: one more per event, in the order the watch delivered them.
    order: i64,
}

impl Nodes {
    /// The changes to record now that the set changed: the old owner's end, the new one's start.
    pub(super) fn settle(&mut self) -> Vec<(Node, bool, i64)> {
        self.order += 1;
        let now = self.by_seq.values().next().cloned();
        if now == self.granted {
            return vec![];
        }
        let mut out = Vec::new();
        if let Some(old) = self.granted.take() {
            out.push((old, false, self.order));
        }
        if let Some(new) = now.clone() {
            out.push((new, true, self.order));
        }
        self.granted = now;
        out
    }

    fn insert(&mut self, name: &str, czxid: i64, data: &[u8]) {
        if let Some(seq) = zk_sequence(name) {
            self.by_seq.insert(
                seq,
                Node {
                    name: name.to_string(),
                    czxid,
                    holder: value_name(data),
                },
            );
        }
    }

    fn remove(&mut self, name: &str) {
        if let Some(seq) = zk_sequence(name) {
            self.by_seq.remove(&seq);
        }
    }
}

/// Record what `settle` says, stamped `at_ns`; a grant no earlier than `not_before` when
/// ZooKeeper gave no time of its own (a deletion, or what a read found).
async fn record_at(sink: &Sink, nodes: &mut Nodes, at_ns: i64, not_before: Option<i64>) {
    for (n, held, order) in nodes.settle() {
        let bound = not_before.filter(|_| held).map(|b| b.min(at_ns));
        sink.change_seen(&n.holder, n.czxid, held, (at_ns, bound), order)
            .await;
    }
}

/// Read the path's children again (at the start and after every reconnection, when events may
/// have been lost: ZOOKEEPER-4698): new nodes read, gone ones dropped.
async fn resync(c: &zk::Client, path: &str, nodes: &mut Nodes) -> Result<(), zk::Error> {
    let children = c.list_children(path).await?;
    let gone: Vec<String> = nodes
        .by_seq
        .values()
        .map(|n| n.name.clone())
        .filter(|n| !children.contains(n))
        .collect();
    for g in gone {
        nodes.remove(&g);
    }
    for child in children {
        if zk_sequence(&child).is_none() || nodes.by_seq.values().any(|n| n.name == child) {
            continue;
        }
        match c.get_data(&format!("{path}/{child}")).await {
            Ok((data, stat)) => nodes.insert(&child, stat.czxid, &data),
            Err(zk::Error::NoNode) => {}
            Err(e) => return Err(e),
        }
    }
    Ok(())
}

/// A fresh session on the ensemble with the lock path made and watched, recursively.
async fn session(endpoints: &str, path: &str) -> Option<(zk::Client, zk::PersistentWatcher)> {
    let connecting = zk::Client::connector()
        .with_session_timeout(SESSION)
        .with_connection_timeout(Duration::from_millis(500))
        .with_server_version(3, 8, 0)
        .with_fail_eagerly()
        .connect(endpoints);
    let client = tokio::time::timeout(Duration::from_secs(2), connecting)
        .await
        .ok()?
        .ok()?;
    let persistent = zk::CreateMode::Persistent.with_acls(zk::Acls::anyone_all());
    match client.mkdir(path, &persistent).await {
        Ok(()) | Err(zk::Error::NodeExists) => {}
        Err(_) => return None,
    }
    let watcher = client
        .watch(path, zk::AddWatchMode::PersistentRecursive)
        .await
        .ok()?;
    Some((client, watcher))
}

/// Watch the lock path on the ensemble (any member; the client moves to another when one goes
/// away), reconnecting when the session ends.
pub(super) async fn zookeeper(sink: Sink, endpoints: String, path: String) {
    let mut nodes = Nodes::default();
    let mut first = true;
    // When the last change was stamped: a stamp never goes back before it.
    let mut last_ns = 0i64;
    let mut arrived;
    // The earliest the event's change can have happened, when ZooKeeper says no time of its own.
    let mut not_before;
    loop {
        let Some((client, mut watcher)) = session(&endpoints, &path).await else {
            tokio::time::sleep(Duration::from_millis(20)).await;
            continue;
        };
        if resync(&client, &path, &mut nodes).await.is_err() {
            continue;
        }
        let since = (last_ns > 0).then_some(last_ns);
        last_ns = wall_ns().max(last_ns);
        record_at(&sink, &mut nodes, last_ns, since).await;
        sink.ready.send_replace(true);
        // The first session has lost nothing; a later one may have.
        let connected = std::time::Instant::now();
        let resyncing = std::mem::replace(&mut first, false).then_some(()).is_none();
        loop {
            // Events lost while the session reconnects are not replayed (ZOOKEEPER-4698), and a
            // read after a reconnection may fail: the children are read again every
            // `RESYNC` for `RESYNC_FOR` after it, so whatever was missed is found within it.
            // Only for a while after a (re)connection: a read in flight delays the next event,
            // and a holder's first write follows its grant by one round trip.
            let wait = match resyncing && connected.elapsed() < RESYNC_FOR {
                true => RESYNC,
                false => Duration::MAX,
            };
            let ev = match tokio::time::timeout(wait, watcher.changed()).await {
                Ok(ev) => {
                    // Stamped as it arrives, before the read it may need: a holder's first
                    // write follows its grant by one round trip, and so would the read.
                    arrived = wall_ns().max(last_ns);
                    not_before = Some(last_ns);
                    ev
                }
                Err(_) => {
                    if resync(&client, &path, &mut nodes).await.is_ok() {
                        let since = last_ns;
                        last_ns = wall_ns().max(last_ns);
                        record_at(&sink, &mut nodes, last_ns, Some(since)).await;
                    }
                    continue;
                }
            };
            match ev.event_type {
                zk::EventType::Session => {
                    // A lost connection is left to a fresh session at once: the client's own
                    // reconnection backs off (100, 200, 400 ms ...), and a member stopped for
                    // a second would leave the observer deaf to grants its movers, whose
                    // sessions are short, already got.
                    if ev.session_state.is_terminated()
                        || ev.session_state == zk::SessionState::Disconnected
                    {
                        break;
                    }
                    if resync(&client, &path, &mut nodes).await.is_err() {
                        continue;
                    }
                }
                zk::EventType::NodeCreated => {
                    let Some(name) = child_of(&path, &ev.path) else {
                        continue;
                    };
                    // A node gone before its read lived less than a round trip: no holder
                    // could have used it.
                    if let Ok((data, stat)) = client.get_data(&ev.path).await {
                        nodes.insert(name, stat.czxid, &data);
                        // The ensemble's own creation time (ms, its clock) when it is earlier:
                        // a node lowest at its creation owns the lock from then. Never before
                        // a change already recorded.
                        arrived = arrived
                            .min(stat.ctime.saturating_mul(1_000_000))
                            .max(last_ns);
                        not_before = None;
                    }
                }
                zk::EventType::NodeDataChanged => {
                    let owner = nodes.granted.clone();
                    if let Some(n) = owner.filter(|n| child_of(&path, &ev.path) == Some(&n.name)) {
                        nodes.order += 1;
                        sink.change(&n.holder, n.czxid, true, wall_ns(), nodes.order)
                            .await;
                    }
                    continue;
                }
                zk::EventType::NodeDeleted => {
                    if let Some(name) = child_of(&path, &ev.path) {
                        nodes.remove(name);
                    }
                }
                _ => continue,
            }
            // A deletion carries no time: the grant it makes to the next node happened after
            // the last change recorded, and a holder's write may precede its arrival here.
            record_at(&sink, &mut nodes, arrived, not_before).await;
            last_ns = arrived;
        }
    }
}

/// `name` when `full` is a direct child of `path`.
fn child_of<'a>(path: &str, full: &'a str) -> Option<&'a str> {
    let rest = full.strip_prefix(path)?.strip_prefix('/')?;
    (!rest.is_empty() && !rest.contains('/')).then_some(rest)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_lowest_sequence_is_the_grant_and_its_deletion_ends_it() {
        let mut n = Nodes::default();
        n.insert("box-2-aa__lock__0000000003", 40, b"box-2");
        let first = n.settle();
        assert_eq!(first.len(), 1);
        assert_eq!(
            (first[0].0.holder.as_str(), first[0].0.czxid, first[0].1),
            ("box-2", 40, true)
        );
        // A waiter queued behind it changes nothing.
        n.insert("box-1-bb__lock__0000000004", 41, b"box-1");
        assert!(n.settle().is_empty());
        // The owner's session expires: its end, then the waiter's grant, in one order.
        n.remove("box-2-aa__lock__0000000003");
        let next = n.settle();
        assert_eq!(next.len(), 2);
        assert_eq!((next[0].0.czxid, next[0].1), (40, false));
        assert_eq!(
            (next[1].0.holder.as_str(), next[1].0.czxid, next[1].1),
            ("box-1", 41, true)
        );
        assert_eq!(next[0].2, next[1].2);
        assert_eq!(
            child_of("/locks/j", "/locks/j/x__lock__0000000001"),
            Some("x__lock__0000000001")
        );
        assert_eq!(child_of("/locks/j", "/locks/j"), None);
        assert_eq!(child_of("/locks/j", "/locks/jj/x"), None);
    }
}
