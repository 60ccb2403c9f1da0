//! The mover's lease in ZooKeeper, by the lock recipe as Curator and kazoo play it: an ephemeral sequential node `<box>-<id>__lock__<seq>` under the lock path with the box's name as its data, the lowest sequence owns the lock, a waiter watches its predecessor; the session (its timeout is the lease) heartbeats for it, a renewal rewrites the node's data (so the harness sees it), and the owner node's `czxid` is the fencing token.

use super::db::{timed, DbError};
use crate::lock::{zk_sequence, ZK_LOCK_MARK};
use std::time::Duration;
use zookeeper_client as zk;

/// The lock as one box holds it in ZooKeeper.
pub struct ZkLock {
    endpoints: String,
    path: String,
    pub timeout: Duration,
    client: Option<zk::Client>,
    /// This session's node under the lock path (its name) and its `czxid`, once created.
    mine: Option<(String, i64)>,
    /// The name of a create whose answer never came (a timeout): the node may exist, and the
    /// next attempt adopts it rather than queue behind its own orphan (Curator's "protected"
    /// create; an ensemble's follower forwards the create to the leader, and under load the
    /// answer can come after the mover's timeout).
    pending: Option<String>,
}

/// A ZooKeeper error in the routing db's terms. A session the ensemble expired is no outage:
/// the grant is over (the caller reads `Lost` from it).
fn sort(e: zk::Error) -> DbError {
    use zk::Error as E;
    match e {
        E::NoHosts => DbError::Connect(e.to_string()),
        E::ConnectionLoss | E::Timeout | E::ClientClosed => DbError::Closed(e.to_string()),
        E::SessionExpired => DbError::Closed("the session expired".into()),
        other => DbError::Sql(other.to_string()),
    }
}

/// How long a call asked again waits for the client to reconnect between tries.
const RECONNECT_STEP: Duration = Duration::from_millis(5);

/// The connection went, not the session: the client's own errors for a dead or silent
/// connection (its message names which), after which it reconnects by itself.
fn connection_lost(e: &zk::Error) -> bool {
    matches!(e, zk::Error::ConnectionLoss | zk::Error::Custom(_))
}

/// The child that owns the lock: the lowest sequence (kazoo sorts other names last).
pub fn owner(children: &[String]) -> Option<&String> {
    children
        .iter()
        .filter_map(|c| zk_sequence(c).map(|s| (s, c)))
        .min()
        .map(|(_, c)| c)
}

/// The child just before `me` in sequence order: the one a waiter watches.
pub fn predecessor<'a>(children: &'a [String], me: &str) -> Option<&'a String> {
    let mine = zk_sequence(me)?;
    children
        .iter()
        .filter_map(|c| zk_sequence(c).map(|s| (s, c)))
        .filter(|(s, _)| *s < mine)
        .max()
        .map(|(_, c)| c)
}

impl ZkLock {
    /// `endpoints` are the members' `host:port`; `path` the lock path.
    pub fn new(endpoints: Vec<String>, path: String, timeout: Duration) -> ZkLock {
        ZkLock {
            endpoints: endpoints.join(","),
            path,
            timeout,
            client: None,
            mine: None,
            pending: None,
        }
    }

    pub fn display(&self) -> String {
        format!("zookeeper {} path {}", self.endpoints, self.path)
    }

    /// A session, made on demand with the lease as its timeout; forgotten once it expired.
    async fn client(&mut self, lease_ms: u64) -> Result<zk::Client, DbError> {
        if let Some(c) = &self.client {
            if !c.state().is_terminated() {
                return Ok(c.clone());
            }
            // The ensemble ended the session: its node is gone with it.
            self.client = None;
            self.mine = None;
            self.pending = None;
        }
        let connecting = zk::Client::connector()
            .with_session_timeout(Duration::from_millis(lease_ms.max(1)))
            .with_connection_timeout(self.timeout)
            .with_server_version(3, 8, 0)
            .with_fail_eagerly()
            .connect(&self.endpoints);
        match timed(self.timeout, connecting).await {
            None => Err(DbError::Connect(format!(
                "no session within {} ms",
                self.timeout.as_millis()
            ))),
            Some(Err(e)) => Err(DbError::Connect(e.to_string())),
            Some(Ok(c)) => {
                self.client = Some(c.clone());
                Ok(c)
            }
        }
    }

    /// Run one call under the timeout. A timeout leaves the session to its own heartbeat (it
    /// reconnects, or the ensemble expires it); an expired session is forgotten with its node.
    async fn call<T, F>(
        &mut self,
        lease_ms: u64,
        f: impl FnOnce(zk::Client) -> F,
    ) -> Result<T, DbError>
    where
        F: std::future::Future<Output = Result<T, zk::Error>>,
    {
        let client = self.client(lease_ms).await?;
        let answer = timed(self.timeout, f(client)).await;
        self.answered(answer)
    }

    /// A call that changes nothing twice (a read, a renewal's rewrite), asked again while its
    /// one timeout lasts when the answer was only the connection's loss. The client reconnects
    /// by itself, and its next answer says whether the session lives: a holder woken from a
    /// pause longer than its session otherwise reads the dead connection ("no response from
    /// connection") as an outage, where the ensemble would have told it the session expired.
    async fn call_again<T, F>(
        &mut self,
        lease_ms: u64,
        f: impl Fn(zk::Client) -> F,
    ) -> Result<T, DbError>
    where
        F: std::future::Future<Output = Result<T, zk::Error>>,
    {
        let deadline = std::time::Instant::now() + self.timeout;
        // One session throughout: a client the ensemble ended answers `SessionExpired` to the
        // next try, where a new session would answer for a node that is not its own.
        let client = self.client(lease_ms).await?;
        loop {
            let left = deadline.saturating_duration_since(std::time::Instant::now());
            match timed(left, f(client.clone())).await {
                Some(Err(e)) if connection_lost(&e) && left > RECONNECT_STEP => {
                    tokio::time::sleep(RECONNECT_STEP).await;
                }
                answer => return self.answered(answer),
            }
        }
    }

    /// A call's answer (None: none within the timeout) in the routing db's terms; an expired
    /// session is forgotten with its node.
    fn answered<T>(&mut self, answer: Option<Result<T, zk::Error>>) -> Result<T, DbError> {
        match answer {
            None => Err(DbError::Timeout(self.timeout.as_millis())),
            Some(Err(e)) => {
                if e == zk::Error::SessionExpired {
                    self.client = None;
                    self.mine = None;
                    self.pending = None;
                }
                Err(sort(e))
            }
            Some(Ok(v)) => Ok(v),
        }
    }

    /// Connect (the start gate waits for it): a session, and the lock path made if absent.
    pub async fn connect(&mut self, lease_ms: u64) -> Result<(), DbError> {
        let path = self.path.clone();
        self.call(lease_ms, |c| async move {
            let persistent = zk::CreateMode::Persistent.with_acls(zk::Acls::anyone_all());
            match c.mkdir(&path, &persistent).await {
                Err(zk::Error::NodeExists) => Ok(()),
                other => other,
            }
        })
        .await
    }

    /// One attempt at the lock, waiting at most `wait` for the predecessor to go: this session's
    /// node created (once) with `holder` as its data, then the children listed. Its `czxid`
    /// when it is the lowest; None while another node is before it.
    pub async fn acquire(
        &mut self,
        holder: &str,
        lease_ms: u64,
        wait: Duration,
    ) -> Result<Option<i64>, DbError> {
        let dir = self.path.clone();
        if self.mine.is_none() && self.pending.is_some() {
            self.mine = self.adopt(lease_ms).await?;
        }
        if self.mine.is_none() {
            let name = self
                .pending
                .clone()
                .unwrap_or_else(|| format!("{holder}-{:08x}{ZK_LOCK_MARK}", rand_id()));
            self.pending = Some(name.clone());
            let prefix = format!("{dir}/{name}");
            let data = holder.as_bytes().to_vec();
            let (stat, seq) = self
                .call(lease_ms, |c| async move {
                    let ephemeral =
                        zk::CreateMode::EphemeralSequential.with_acls(zk::Acls::anyone_all());
                    c.create(&prefix, &data, &ephemeral).await
                })
                .await?;
            // ZooKeeper appends the sequence as ten digits.
            self.mine = Some((format!("{name}{:010}", seq.into_i64()), stat.czxid));
            self.pending = None;
        }
        let (me, czxid) = self.mine.clone().expect("created above");
        let children = self
            .call(lease_ms, |c| {
                let dir = dir.clone();
                async move { c.list_children(&dir).await }
            })
            .await?;
        if !children.contains(&me) {
            // Deleted under us (the session expired and a new one began): start again.
            self.mine = None;
            return Ok(None);
        }
        let Some(before) = predecessor(&children, &me).cloned() else {
            return Ok(Some(czxid));
        };
        // The recipe's wait: a watch on the node just before this one, not on the whole path.
        let watched = format!("{dir}/{before}");
        let watcher = self
            .call(lease_ms, |c| async move {
                c.check_and_watch_stat(&watched).await
            })
            .await?;
        let (stat, watcher) = watcher;
        if stat.is_some() {
            let _ = tokio::time::timeout(wait, watcher.changed()).await;
        }
        Ok(None)
    }

    /// The node an unanswered create made, if it exists: its name and `czxid`.
    async fn adopt(&mut self, lease_ms: u64) -> Result<Option<(String, i64)>, DbError> {
        let Some(name) = self.pending.clone() else {
            return Ok(None);
        };
        let dir = self.path.clone();
        let found = self
            .call(lease_ms, |c| async move {
                let children = c.list_children(&dir).await?;
                let Some(child) = children.into_iter().find(|c| c.starts_with(&name)) else {
                    return Ok(None);
                };
                let stat = c.check_stat(&format!("{dir}/{child}")).await?;
                Ok(stat.map(|s| (child, s.czxid)))
            })
            .await?;
        if found.is_some() {
            self.pending = None;
        }
        Ok(found)
    }

    /// The session still holds the node: its data written again (`holder`), a call the
    /// ensemble answers, which also refreshes the session as any request does, and which the
    /// harness's watch sees as this grant's renewal (the session's heartbeats are invisible;
    /// etcd's reference mover rewrites its key the same way). False once the node is gone or the
    /// session expired.
    pub async fn renew(
        &mut self,
        holder: &str,
        lease_ms: u64,
        token: i64,
    ) -> Result<bool, DbError> {
        let Some((me, czxid)) = self.mine.clone() else {
            return Ok(false);
        };
        let path = format!("{}/{me}", self.path);
        let data = holder.as_bytes().to_vec();
        match self
            .call_again(lease_ms, |c| {
                let (path, data) = (path.clone(), data.clone());
                async move {
                    match c.set_data(&path, &data, None).await {
                        Ok(stat) => Ok(Some(stat)),
                        Err(zk::Error::NoNode) => Ok(None),
                        Err(e) => Err(e),
                    }
                }
            })
            .await
        {
            // A session made during the call (the old one ended) rewrote a node it does not own.
            Ok(Some(stat)) => Ok(self.mine.is_some() && stat.czxid == czxid && czxid == token),
            Ok(None) => {
                self.mine = None;
                Ok(false)
            }
            Err(_) if self.client.is_none() => Ok(false),
            Err(e) => Err(e),
        }
    }

    /// Who owns the lock (the owner node's data) and its `czxid`.
    pub async fn who(&mut self, lease_ms: u64) -> Result<(Option<String>, Option<i64>), DbError> {
        let path = self.path.clone();
        self.call_again(lease_ms, |c| {
            let dir = path.clone();
            async move {
                let children = c.list_children(&dir).await?;
                let Some(first) = owner(&children) else {
                    return Ok((None, None));
                };
                match c.get_data(&format!("{dir}/{first}")).await {
                    Ok((data, stat)) => Ok((
                        Some(String::from_utf8_lossy(&data).into_owned()),
                        Some(stat.czxid),
                    )),
                    Err(zk::Error::NoNode) => Ok((None, None)),
                    Err(e) => Err(e),
                }
            }
        })
        .await
    }

    /// Delete this session's node if it still is the grant's: true when it was.
    pub async fn release(&mut self, lease_ms: u64, token: i64) -> Result<bool, DbError> {
        let Some((me, czxid)) = self.mine.clone() else {
            return Ok(false);
        };
        let path = format!("{}/{me}", self.path);
        let deleted = self
            .call(lease_ms, |c| async move {
                match c.delete(&path, None).await {
                    Ok(()) => Ok(true),
                    Err(zk::Error::NoNode) => Ok(false),
                    Err(e) => Err(e),
                }
            })
            .await?;
        self.mine = None;
        Ok(deleted && czxid == token)
    }
}

/// A few random bits to tell this session's node from a restarted box's (kazoo uses a uuid).
fn rand_id() -> u32 {
    use std::hash::{BuildHasher, Hasher};
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    h.write_u32(std::process::id());
    h.finish() as u32
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_lowest_sequence_owns_and_a_waiter_watches_the_one_before_it() {
        let children: Vec<String> = [
            "box-2-0a__lock__0000000009",
            "lease_holder",
            "3f2a__lock__0000000004",
            "box-1-77__lock__0000000007",
        ]
        .map(String::from)
        .to_vec();
        assert_eq!(owner(&children).unwrap(), "3f2a__lock__0000000004");
        assert_eq!(
            predecessor(&children, "box-2-0a__lock__0000000009").unwrap(),
            "box-1-77__lock__0000000007"
        );
        assert_eq!(predecessor(&children, "3f2a__lock__0000000004"), None);
        assert_eq!(owner(&["lease_holder".to_string()]), None);
    }
}
