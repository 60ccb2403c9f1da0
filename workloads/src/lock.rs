//! The lock services a mover may hold its lease in (DESIGN section 11): their names, the protocol variables that point a mover at one, and the calls each is made with, one text for the harness and the reference programs alike.

use clap::ValueEnum;

/// `CHAOS_LOCK`: which lock service holds the lease (`claims` when unset).
pub const LOCK_VAR: &str = "CHAOS_LOCK";
/// `CHAOS_LOCK_URLS`: the service's endpoints, comma-separated, each through its proxy.
pub const LOCK_URLS_VAR: &str = "CHAOS_LOCK_URLS";
/// `CHAOS_LOCK_KEY`: the key (etcd, Redis), the lock path (ZooKeeper), or the advisory lock's
/// number, the harness watches.
pub const LOCK_KEY_VAR: &str = "CHAOS_LOCK_KEY";

/// A lock service.
#[derive(
    Debug,
    Clone,
    Copy,
    PartialEq,
    Eq,
    Hash,
    Default,
    ValueEnum,
    serde::Serialize,
    serde::Deserialize,
)]
#[serde(rename_all = "kebab-case")]
pub enum LockKind {
    /// The claim row in the routing db (DESIGN section 4): token from a sequence, expiry by
    /// the routing db's clock.
    #[default]
    Claims,
    /// A Postgres advisory lock held by a session of the routing db; the session's end (its
    /// `idle_session_timeout`) is the lease. No token of its own.
    Advisory,
    /// etcd 3.4: a key created if absent under a lease; its revision is the token.
    Etcd,
    /// Redis 7.0: `SET key holder NX PX lease`; the server's expiry is the lease. No token of
    /// its own (an `INCR` in the same script gives one).
    Redis,
    /// ZooKeeper 3.8: the lowest ephemeral sequential node under the lock path owns it; the
    /// session's timeout is the lease; the owner node's `czxid` is the token.
    Zookeeper,
}

impl LockKind {
    pub fn name(self) -> &'static str {
        match self {
            LockKind::Claims => "claims",
            LockKind::Advisory => "advisory",
            LockKind::Etcd => "etcd",
            LockKind::Redis => "redis",
            LockKind::Zookeeper => "zookeeper",
        }
    }

    /// Whether the service is the routing db itself (no server of its own).
    pub fn in_routing_db(self) -> bool {
        matches!(self, LockKind::Claims | LockKind::Advisory)
    }

    /// Whether the service mints a fencing token of its own.
    pub fn mints_tokens(self) -> bool {
        matches!(
            self,
            LockKind::Claims | LockKind::Etcd | LockKind::Zookeeper
        )
    }

    /// The key a run's job is locked under, as `CHAOS_LOCK_KEY` gives it.
    pub fn key(self, job: &str) -> String {
        match self {
            LockKind::Claims => job.to_string(),
            LockKind::Advisory => ADVISORY_KEY.to_string(),
            // python3-etcd3's `Lock(name)` keeps its key at `/locks/<name>`.
            LockKind::Etcd => format!("/locks/{job}"),
            // redis-py's `Lock(name)` keeps its key at `name` itself.
            LockKind::Redis => format!("lock:{job}"),
            // kazoo's and Curator's `Lock(client, path)` create their nodes under `path`.
            LockKind::Zookeeper => format!("/locks/{job}"),
        }
    }

    /// Read `CHAOS_LOCK` (unset or empty: `claims`).
    pub fn from_var(value: Option<&str>) -> Result<LockKind, String> {
        match value.map(str::trim).filter(|v| !v.is_empty()) {
            None => Ok(LockKind::Claims),
            Some(v) => LockKind::from_str(v, true).map_err(|_| {
                format!("{LOCK_VAR} is {v:?}: use claims, advisory, etcd, redis or zookeeper")
            }),
        }
    }
}

/// Redis: where the fenced design's counter lives beside the lock key (`lock:job:token`).
pub fn redis_token_key(key: &str) -> String {
    format!("{key}:token")
}

/// Redis: take the lock if nobody holds it (`SET NX PX`, redis-py's `Lock.acquire`) and, in the
/// same script, draw the grant's token from the counter beside it (Redisson's fenced lock).
/// KEYS: lock, counter; ARGV: holder, lease ms. The token, or nil: somebody else holds it.
pub const REDIS_ACQUIRE: &str = "if redis.call('set', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2]) then \
     return redis.call('incr', KEYS[2]) end return false";
/// Redis: extend the lock only while it is still this holder's (redis-py's `extend` with
/// `replace_ttl`). KEYS: lock; ARGV: holder, lease ms. 1 while held, 0 otherwise.
pub const REDIS_RENEW: &str = "if redis.call('get', KEYS[1]) == ARGV[1] then \
     return redis.call('pexpire', KEYS[1], ARGV[2]) end return 0";
/// Redis: delete the lock only while it is still this holder's (redis-py's `release`).
/// KEYS: lock; ARGV: holder. 1 when deleted.
pub const REDIS_RELEASE: &str = "if redis.call('get', KEYS[1]) == ARGV[1] then \
     return redis.call('del', KEYS[1]) end return 0";
/// Redis's keyspace notifications the observer needs: `K` keyspace channels, `g` generic
/// (`del`, `expire`), `$` strings (`set`, `incrby`), `x` expired.
pub const REDIS_NOTIFY: &str = "Kg$x";

/// The advisory lock's number (lesson 032): `pg_try_advisory_lock(1032)`.
pub const ADVISORY_KEY: i64 = 1032;

/// Take the advisory lock on this session and, when it is taken, draw a token from the claim
/// sequence under it and record it beside the session (`lock_tokens`): the fenced design's
/// token, since an advisory lock mints none. No row: somebody else's session holds it.
pub const SQL_ADVISORY_ACQUIRE: &str = "with got as (select pg_try_advisory_lock($1) as ok) \
     insert into lock_tokens (pid, backend_start, holder, token) \
     select pg_backend_pid(), a.backend_start, $2, nextval('claim_tokens') \
     from got, pg_stat_activity a where got.ok and a.pid = pg_backend_pid() \
     returning token";
/// Whether this session still holds the advisory lock (the renewal: it also keeps the
/// session from going idle past its timeout).
pub const SQL_ADVISORY_HELD: &str = "select exists (select 1 from pg_locks \
     where locktype = 'advisory' and granted and pid = pg_backend_pid() \
     and classid = ($1::bigint >> 32)::int::oid and objid = ($1::bigint & 4294967295)::oid and objsubid = 1)";
/// Who holds the advisory lock, and the token its session drew.
pub const SQL_ADVISORY_WHO: &str = "select a.application_name, t.token from pg_locks l \
     join pg_stat_activity a on a.pid = l.pid \
     left join lock_tokens t on t.pid = l.pid and t.backend_start = a.backend_start \
     where l.locktype = 'advisory' and l.granted \
     and l.classid = ($1::bigint >> 32)::int::oid and l.objid = ($1::bigint & 4294967295)::oid and l.objsubid = 1";
pub const SQL_ADVISORY_RELEASE: &str = "select pg_advisory_unlock($1)";
/// Every session holding the advisory lock, as the harness's observer polls it: pid, session
/// start (Unix µs), application_name, the token its session drew (if any), and when its
/// state last changed, Unix µs, whether a statement is running on it now, and when the token's
/// row committed (the grant by the routing db's own clock), Unix ns.
pub const SQL_ADVISORY_OBSERVE: &str = "select l.pid, \
     (extract(epoch from a.backend_start) * 1000000)::bigint, a.application_name, t.token, \
     coalesce((extract(epoch from a.state_change) * 1000000)::bigint, 0), \
     coalesce(a.state, '') = 'active', \
     (extract(epoch from pg_xact_commit_timestamp(t.xmin)) * 1000000)::bigint * 1000 \
     from pg_locks l join pg_stat_activity a on a.pid = l.pid \
     left join lock_tokens t on t.pid = l.pid and t.backend_start = a.backend_start \
     where l.locktype = 'advisory' and l.granted \
     and l.classid = ($1::bigint >> 32)::int::oid and l.objid = ($1::bigint & 4294967295)::oid and l.objsubid = 1";

/// The session settings that make an advisory lock a lease: the server ends a session idle
/// (or idle in a transaction) for `lease_ms` and frees its locks. Given to a mover inside its
/// lock URL (libpq's `options`), so a team's own mover gets the same lease unchanged.
pub fn advisory_options(lease_ms: u64) -> String {
    format!("-c idle_session_timeout={lease_ms} -c idle_in_transaction_session_timeout={lease_ms}")
}

/// The name part every lock recipe's node carries before its sequence (kazoo's and Curator's
/// `<uuid>__lock__0000000007`): the owner is the node whose sequence is lowest.
pub const ZK_LOCK_MARK: &str = "__lock__";

/// A lock node's sequence (the 10 digits ZooKeeper appends after `__lock__`); None for a node
/// that is no lock recipe's (kazoo sorts those last).
pub fn zk_sequence(node: &str) -> Option<i64> {
    let at = node.rfind(ZK_LOCK_MARK)?;
    node[at + ZK_LOCK_MARK.len()..].parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_lock_node_s_sequence_follows_its_mark() {
        assert_eq!(zk_sequence("3f2a__lock__0000000007"), Some(7));
        assert_eq!(zk_sequence("box-1-ab__lock__0000000012"), Some(12));
        assert_eq!(zk_sequence("lease_holder"), None);
        assert_eq!(
            LockKind::from_var(Some("zookeeper")),
            Ok(LockKind::Zookeeper)
        );
        assert_eq!(LockKind::Zookeeper.key("job"), "/locks/job");
        assert!(LockKind::Zookeeper.mints_tokens() && !LockKind::Zookeeper.in_routing_db());
    }
}
