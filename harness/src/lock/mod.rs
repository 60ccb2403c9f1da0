//! The lock service as a part of the testbed (DESIGN section 11), in one home: the scenario's `[lock]` section, the server the service needs (`etcd.rs`, `redis.rs`, `zookeeper.rs`; the claim row and advisory locks live in the routing db), the protocol's `CHAOS_LOCK*` variables each box gets, and the observer that reads grants from the service itself (`observe.rs`) into the record the checkers judge.
//!
//! Adding a service (Redis and ZooKeeper were added this way): its `LockKind`
//! (workloads/src/lock.rs, with the calls a mover makes); its server in a file here (`redis.rs`)
//! and, for the docker backend, in `backend/docker/`; its observer in `observe_<service>.rs`;
//! its arms in `LockSection::check`, `box_env`, the `LockServer` matches below and
//! `Observer::start`; the reference mover's client (workloads/src/mover/<service>.rs, its arms in
//! `lock_client.rs` and `run/lock.rs`); a stock-recipe mover in workloads/examples/.

mod etcd;
mod member;
mod observe;
mod peers;
mod redis;
mod zookeeper;

pub use chaos_workloads::lock::LockKind;
pub use etcd::EtcdServer;
pub use observe::{Names, Observer, Seen};
pub use redis::{
    in_sync as redis_in_sync, ping as redis_ping, promote_at as redis_promote_at, RedisServer,
};
pub use zookeeper::{
    srvr_mode as zk_srvr_mode, zoo_cfg_on, ZkServer, JVM_FLAGS as ZK_JVM_FLAGS,
    TICK_MS as ZK_TICK_MS,
};

use chaos_workloads::lock::{advisory_options, LOCK_KEY_VAR, LOCK_URLS_VAR, LOCK_VAR};
use serde::{Deserialize, Serialize};

/// The node name a scenario gives the lock service (the routing db when it holds the lock;
/// the one member of a one-member etcd).
pub const LOCK_NODE: &str = "lock";
/// The role a fault may name a member by: whichever member leads when the fault lands.
pub const LOCK_LEADER: &str = "lock-leader";

/// Whether `node` is a lock service's member (`lock`, `lock-2`) or its role (`lock-leader`).
pub fn is_lock_node(node: &str) -> bool {
    node == LOCK_NODE || node.starts_with("lock-")
}

/// The replica's node name (`[lock] replica = true`): Redis's asynchronous replica of `lock`.
pub const LOCK_REPLICA: &str = "lock-2";

/// `[lock]`: which service holds the lease, how many members it has, and (Redis) whether the
/// primary has an asynchronous replica the harness promotes on the primary's silence.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct LockSection {
    pub service: LockKind,
    pub members: u8,
    /// Redis: a replica `lock-2` (REPLICAOF `lock`, its replication through the link
    /// `lock-2->lock`), promoted by the harness's sentinel.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub replica: bool,
    /// How long (scenario seconds) the primary must fail to answer the sentinel's PING before
    /// the sentinel promotes the replica (Sentinel's `down-after-milliseconds`).
    #[serde(skip_serializing_if = "is_default_promote")]
    pub promote_after_s: f64,
}

/// The sentinel's default silence before a promotion, scenario seconds.
pub const PROMOTE_AFTER_S: f64 = 2.0;

fn is_default_promote(s: &f64) -> bool {
    *s == PROMOTE_AFTER_S
}

impl Eq for LockSection {}

impl Default for LockSection {
    fn default() -> Self {
        LockSection {
            service: LockKind::Claims,
            members: 1,
            replica: false,
            promote_after_s: PROMOTE_AFTER_S,
        }
    }
}

impl LockSection {
    /// Whether the service runs a server of its own (a `lock` node with links from the boxes).
    pub fn has_node(&self) -> bool {
        !self.service.in_routing_db()
    }

    /// The members' node names: `lock` for one, `lock-1` .. `lock-3` for three; none when the
    /// lock lives in the routing db.
    pub fn member_names(&self) -> Vec<String> {
        match (self.has_node(), self.members) {
            (false, _) => vec![],
            (true, 1) => vec![LOCK_NODE.to_string()],
            (true, n) => (1..=n).map(|i| format!("lock-{i}")).collect(),
        }
    }

    /// The replica's node name when the service has one (`lock-2`).
    pub fn replica_name(&self) -> Option<&'static str> {
        (self.replica && self.service == LockKind::Redis).then_some(LOCK_REPLICA)
    }

    /// What a scenario may not ask of this service; `(field, message)`.
    pub fn check(&self, lease_real_ms: u64, election_unique: bool) -> Result<(), (String, String)> {
        let field = |f: &str, m: String| Err((format!("lock.{f}"), m));
        if self.replica && self.service != LockKind::Redis {
            return field(
                "replica",
                format!("true: a replica the harness promotes is built for service = \"redis\" (got {}); etcd and ZooKeeper replicate by consensus: use members = 3 for etcd", self.service.name()),
            );
        }
        if self.replica && self.members != 1 {
            return field(
                "replica",
                "true: Redis runs one primary and one replica (lock, lock-2); drop members"
                    .to_string(),
            );
        }
        if !(self.promote_after_s > 0.0 && self.promote_after_s <= 86_400.0) {
            return field(
                "promote_after_s",
                format!(
                    "must be above 0 and at most 86400 scenario seconds (got {})",
                    self.promote_after_s
                ),
            );
        }
        if self.members != 1 && self.members != 3 {
            return field("members", format!("must be 1 or 3 (got {})", self.members));
        }
        if self.members == 3 && !matches!(self.service, LockKind::Etcd | LockKind::Zookeeper) {
            let why = match self.service {
                LockKind::Redis => "is one server here",
                _ => "has no members of its own (it lives in the routing db)",
            };
            return field(
                "members",
                format!(
                    "3: {} {why}; members = 3 is for service = \"etcd\" or \"zookeeper\"",
                    self.service.name()
                ),
            );
        }
        if self.service == LockKind::Zookeeper && lease_real_ms < 2 * zookeeper::TICK_MS {
            return field(
                "service",
                format!("zookeeper: the lease is {lease_real_ms} real ms and the shortest session ZooKeeper grants here is {} ms (two {} ms ticks); lengthen lease_s or time_scale_ms", 2 * zookeeper::TICK_MS, zookeeper::TICK_MS),
            );
        }
        if election_unique && self.service != LockKind::Claims {
            return field(
                "service",
                format!("{}: the unique election is lesson 007's insert into job_runs in the routing db; use service = \"claims\" with it", self.service.name()),
            );
        }
        if self.service == LockKind::Etcd && lease_real_ms % 1000 != 0 {
            return field(
                "service",
                format!("etcd: its leases are whole seconds and the lease is {lease_real_ms} real ms; choose time_scale_ms so lease_s x time_scale_ms is a multiple of 1000"),
            );
        }
        Ok(())
    }

    /// The time scale (real ms per scenario second) a run on this service needs, from the
    /// scenario's own: etcd's lease TTL is whole seconds, so the scale grows until the lease
    /// is a whole number of real seconds (April's 60 s at 10 ms, 600 ms, becomes 1 s at 16.7 ms).
    pub fn time_scale_ms(&self, scale_ms: f64, lease_s: f64) -> f64 {
        if self.service != LockKind::Etcd || lease_s <= 0.0 {
            return scale_ms;
        }
        let real_ms = (lease_s * scale_ms).round();
        let whole_s = (real_ms / 1000.0).ceil().max(1.0);
        if (real_ms - whole_s * 1000.0).abs() < 0.5 {
            return scale_ms;
        }
        whole_s * 1000.0 / lease_s
    }
}

/// `lock` names the routing db when the lock lives there, so a scenario's fault on `lock` (or
/// on a link to it) lands on whatever holds the lease, whichever the service. With three
/// members a link to `lock` is the box's links to every member (`box-1->lock` is
/// `box-1->lock-*`: the box loses the service, as with one member); a node fault must name a
/// member or the leader, and is refused here with the names to use.
pub fn alias_routing(
    section: &LockSection,
    kind: &mut chaos_nemesis::FaultKind,
) -> Result<(), String> {
    let three = section.has_node() && section.members > 1;
    if section.has_node() && !three {
        return Ok(());
    }
    let name = kind.target_mut();
    let service = if three { "lock-*" } else { "routing" };
    if name == LOCK_NODE {
        if three {
            return Err(format!(
                "target 'lock' is the one-member lock service; with [lock] members = 3 name a member (lock-1, lock-2, lock-3) or the role lock-leader (whichever member leads when the fault lands)"
            ));
        }
        *name = service.into();
    } else if let Some(link) = chaos_nemesis::Link::parse(name) {
        if link.node == LOCK_NODE {
            *name = chaos_nemesis::Link::name(link.client, service);
        }
    }
    Ok(())
}

/// The protocol's lock variables for one box: the service, its endpoints through the box's
/// own links, and the key the harness watches.
pub fn box_env(
    section: &LockSection,
    job: &str,
    lease_real_ms: u64,
    routing_url: &str,
    lock_addrs: &[String],
) -> Vec<(String, String)> {
    let kind = section.service;
    let urls = match kind {
        LockKind::Claims => routing_url.to_string(),
        // The session timeouts that make the lock a lease travel in the URL (libpq's
        // `options`), so a team's own mover gets them without knowing.
        LockKind::Advisory => format!(
            "{routing_url}?options={}",
            encode(&advisory_options(lease_real_ms))
        ),
        LockKind::Etcd => lock_addrs
            .iter()
            .map(|a| format!("http://{a}"))
            .collect::<Vec<_>>()
            .join(","),
        LockKind::Redis => lock_addrs
            .iter()
            .map(|a| format!("redis://{a}"))
            .collect::<Vec<_>>()
            .join(","),
        // ZooKeeper's connect string: host:port, comma-separated, no scheme.
        LockKind::Zookeeper => lock_addrs.join(","),
    };
    vec![
        (LOCK_VAR.to_string(), kind.name().to_string()),
        (LOCK_URLS_VAR.to_string(), urls),
        (LOCK_KEY_VAR.to_string(), kind.key(job)),
    ]
}

/// Percent-encoding for a URL query value (spaces and `=`).
fn encode(text: &str) -> String {
    text.chars()
        .map(|c| match c {
            ' ' => "%20".to_string(),
            '=' => "%3D".to_string(),
            c => c.to_string(),
        })
        .collect()
}

/// Redis on either backend, as the harness's sentinel (`run/sentinel.rs`) watches and
/// promotes it.
pub enum Replicated<'a> {
    Process(&'a mut RedisServer),
    Docker(&'a mut crate::backend::docker::DockerRedis),
}

impl Replicated<'_> {
    /// The primary now and the replica, when there is one.
    pub fn roles(&self) -> (String, Option<String>) {
        match self {
            Replicated::Process(r) => r.roles(),
            Replicated::Docker(r) => r.roles(),
        }
    }

    /// Where the harness reaches the primary now.
    pub fn primary_addr(&self) -> String {
        match self {
            Replicated::Process(r) => r.addr(),
            Replicated::Docker(r) => r.primary_addr(),
        }
    }

    /// Promote the replica: its name, where the harness reaches it, where the proxy does.
    pub async fn promote(&mut self) -> anyhow::Result<(String, String, String)> {
        match self {
            Replicated::Process(r) => r.promote().await,
            Replicated::Docker(r) => r.promote().await,
        }
    }
}

/// A lock service's own server, when it has one.
pub enum LockServer {
    /// The lock lives in the routing db.
    RoutingDb,
    Etcd(EtcdServer),
    /// etcd in a container of the run (the docker backend).
    EtcdDocker(crate::backend::docker::DockerEtcd),
    Redis(RedisServer),
    /// Redis in a container of the run (the docker backend).
    RedisDocker(crate::backend::docker::DockerRedis),
    /// ZooKeeper's JVM as a local process (one member, or an ensemble of three).
    Zk(ZkServer),
    /// ZooKeeper in containers of the run (the docker backend; one member or an ensemble).
    ZkDocker(crate::backend::docker::DockerZk),
}

impl LockServer {
    /// What `section` needs, planned (names, ports, data and logs under the run's
    /// directories) but not started: a cluster's peer links must be up first ([`launch`]).
    pub async fn plan(
        section: &LockSection,
        backend: crate::backend::BackendKind,
        run_id: &str,
        log_dir: &std::path::Path,
    ) -> anyhow::Result<LockServer> {
        use crate::backend::BackendKind;
        Ok(match (section.service, backend) {
            (LockKind::Claims | LockKind::Advisory, _) => LockServer::RoutingDb,
            (LockKind::Etcd, BackendKind::Process) => {
                LockServer::Etcd(EtcdServer::plan(run_id, log_dir, &section.member_names()).await?)
            }
            (LockKind::Etcd, BackendKind::Docker) => LockServer::EtcdDocker(
                crate::backend::docker::DockerEtcd::plan(run_id, log_dir, &section.member_names())
                    .await?,
            ),
            (LockKind::Redis, BackendKind::Process) => {
                LockServer::Redis(RedisServer::plan(run_id, log_dir, section.replica_name()).await?)
            }
            (LockKind::Redis, BackendKind::Docker) => LockServer::RedisDocker(
                crate::backend::docker::DockerRedis::plan(run_id, log_dir, section.replica_name())
                    .await?,
            ),
            (LockKind::Zookeeper, BackendKind::Process) => {
                LockServer::Zk(ZkServer::plan(run_id, log_dir, &section.member_names()).await?)
            }
            (LockKind::Zookeeper, BackendKind::Docker) => LockServer::ZkDocker(
                crate::backend::docker::DockerZk::plan(run_id, log_dir, &section.member_names())
                    .await?,
            ),
        })
    }

    /// Start every member and wait for them (and a leader).
    pub async fn launch(&mut self) -> anyhow::Result<()> {
        match self {
            LockServer::RoutingDb => Ok(()),
            LockServer::RedisDocker(r) => r.launch().await,
            LockServer::ZkDocker(z) => z.launch().await,
            LockServer::Etcd(e) => e.launch().await,
            LockServer::EtcdDocker(e) => e.launch().await,
            LockServer::Redis(r) => r.launch().await,
            LockServer::Zk(z) => z.launch().await,
        }
    }

    /// Where the proxy forwards a box's link to member `node` (its client address).
    pub fn upstream(&self, node: &str) -> Option<String> {
        match self {
            LockServer::RoutingDb => None,
            LockServer::Etcd(e) => e
                .client_addrs()
                .into_iter()
                .find(|(n, _)| n == node)
                .map(|(_, a)| a),
            LockServer::EtcdDocker(e) => e.upstream(node),
            // The floating address: `lock` is whichever member is the primary now.
            LockServer::Redis(r) => (node == LOCK_NODE).then(|| r.addr()),
            LockServer::RedisDocker(r) => (node == LOCK_NODE).then(|| r.upstream()),
            LockServer::ZkDocker(z) => z.upstream(node),
            LockServer::Zk(z) => z
                .client_addrs()
                .into_iter()
                .find(|(n, _)| n == node)
                .map(|(_, a)| a),
        }
    }

    /// Where the harness itself (the observer, on the host) reaches the service, unproxied:
    /// the members' own client addresses, comma-separated.
    pub fn endpoints(&self) -> Option<String> {
        match self {
            LockServer::RoutingDb => None,
            LockServer::Etcd(e) => Some(
                e.client_addrs()
                    .into_iter()
                    .map(|(_, a)| a)
                    .collect::<Vec<_>>()
                    .join(","),
            ),
            LockServer::EtcdDocker(e) => Some(e.observe_addrs()),
            LockServer::Redis(r) => Some(
                r.addrs()
                    .into_iter()
                    .map(|(_, a)| a)
                    .collect::<Vec<_>>()
                    .join(","),
            ),
            LockServer::RedisDocker(r) => Some(r.observe_addrs()),
            LockServer::ZkDocker(z) => Some(z.observe_addrs()),
            LockServer::Zk(z) => Some(
                z.client_addrs()
                    .into_iter()
                    .map(|(_, a)| a)
                    .collect::<Vec<_>>()
                    .join(","),
            ),
        }
    }

    /// The links between members, each `(link, listen, upstream)` (none for one member).
    pub fn peer_links(&self) -> Vec<(String, String, String)> {
        match self {
            LockServer::RoutingDb => vec![],
            LockServer::RedisDocker(r) => r.peer_links(),
            LockServer::ZkDocker(z) => z.peer_links(),
            LockServer::Etcd(e) => e.peer_links(),
            LockServer::EtcdDocker(e) => e.peer_links(),
            LockServer::Zk(z) => z.peer_links(),
            LockServer::Redis(r) => r.peer_links(),
        }
    }

    /// Redis with a replica: the service as the sentinel finds it.
    pub fn replicated(&mut self) -> Option<Replicated<'_>> {
        match self {
            LockServer::Redis(r) => Some(Replicated::Process(r)),
            LockServer::RedisDocker(r) => Some(Replicated::Docker(r)),
            _ => None,
        }
    }

    /// "etcd 3.4.23 (one member)", for the log line.
    pub fn describe(&self) -> Option<String> {
        match self {
            LockServer::RoutingDb => None,
            LockServer::Etcd(e) => Some(e.describe()),
            LockServer::EtcdDocker(e) => Some(e.describe()),
            LockServer::Redis(r) => Some(r.describe()),
            LockServer::RedisDocker(r) => Some(r.describe()),
            LockServer::Zk(z) => Some(z.describe()),
            LockServer::ZkDocker(z) => Some(z.describe()),
        }
    }

    pub async fn stop(&mut self) {
        match self {
            LockServer::RoutingDb => {}
            LockServer::Etcd(e) => e.stop().await,
            LockServer::EtcdDocker(e) => e.stop().await,
            LockServer::Redis(r) => r.stop().await,
            LockServer::RedisDocker(r) => r.stop().await,
            LockServer::Zk(z) => z.stop().await,
            LockServer::ZkDocker(z) => z.stop().await,
        }
    }

    fn etcd(&mut self) -> anyhow::Result<&mut EtcdServer> {
        match self {
            LockServer::RoutingDb => anyhow::bail!("the lock lives in the routing db"),
            LockServer::Etcd(e) => Ok(e),
            LockServer::EtcdDocker(_) | LockServer::RedisDocker(_) | LockServer::Redis(_) => {
                anyhow::bail!("not an etcd member as a local process")
            }
            LockServer::Zk(_) => anyhow::bail!("not an etcd member"),
            LockServer::ZkDocker(_) => anyhow::bail!("not an etcd member"),
        }
    }

    /// Whether `node` is one of its members (`lock`, `lock-2`).
    pub fn has(&self, node: &str) -> bool {
        match self {
            LockServer::RoutingDb => false,
            LockServer::Etcd(e) => e.has(node),
            LockServer::EtcdDocker(e) => e.has(node),
            LockServer::Redis(r) => r.has(node),
            LockServer::RedisDocker(r) => r.has(node),
            LockServer::ZkDocker(z) => z.has(node),
            LockServer::Zk(z) => z.has(node),
        }
    }

    /// What a cpu fault on member `node` lands on: its server's process, or its container.
    pub fn cpu_target(&self, node: &str) -> Option<crate::backend::CpuTarget> {
        match self {
            LockServer::RoutingDb => None,
            LockServer::Etcd(e) => e.cpu_target(node),
            LockServer::EtcdDocker(e) => e.cpu_target(node),
            LockServer::Redis(r) => r.cpu_target(node),
            LockServer::RedisDocker(r) => r.cpu_target(node),
            LockServer::ZkDocker(z) => z.cpu_target(node),
            LockServer::Zk(z) => z.cpu_target(node),
        }
    }

    /// A nemesis stop of member `node` (its own server; the routing db is the cluster's).
    pub async fn stop_member(
        &mut self,
        node: &str,
        mode: crate::pg::StopMode,
    ) -> anyhow::Result<()> {
        if let LockServer::EtcdDocker(e) = self {
            return e.stop_member(node, mode).await;
        }
        if let LockServer::Redis(r) = self {
            return r.stop_member(node, mode).await;
        }
        if let LockServer::RedisDocker(r) = self {
            return r.stop_member(node, mode).await;
        }
        if let LockServer::Zk(z) = self {
            return z.stop_member(node, mode).await;
        }
        if let LockServer::ZkDocker(z) = self {
            return z.stop_member(node, mode).await;
        }
        self.etcd()?.stop_member(node, mode).await
    }

    /// A nemesis start of member `node`; how long until it answered.
    pub async fn start_member(&mut self, node: &str) -> anyhow::Result<std::time::Duration> {
        if let LockServer::EtcdDocker(e) = self {
            return e.start_member(node).await;
        }
        if let LockServer::Redis(r) = self {
            return r.start_member(node).await;
        }
        if let LockServer::RedisDocker(r) = self {
            return r.start_member(node).await;
        }
        if let LockServer::Zk(z) = self {
            return z.start_member(node).await;
        }
        if let LockServer::ZkDocker(z) = self {
            return z.start_member(node).await;
        }
        self.etcd()?.start_member(node).await
    }

    /// A nemesis pause (SIGSTOP) or resume (SIGCONT) of member `node`'s server process (in a
    /// container: the server under the supervisor, or the container frozen when the engine is
    /// not on this host); how it was paused.
    pub async fn pause_member(&mut self, node: &str, pause: bool) -> anyhow::Result<&'static str> {
        match self {
            LockServer::EtcdDocker(e) => return e.pause_member(node, pause).await,
            LockServer::RedisDocker(r) => return r.pause_member(node, pause).await,
            LockServer::ZkDocker(z) => return z.pause_member(node, pause).await,
            LockServer::Redis(r) => r.pause_member(node, pause)?,
            LockServer::Zk(z) => z.pause_member(node, pause)?,
            _ => self.etcd()?.pause_member(node, pause)?,
        }
        Ok("SIGSTOP")
    }

    /// Which member leads now, and every member's etcd id, for the record.
    pub async fn leader(&self) -> (Option<String>, Vec<(String, u64)>) {
        match self {
            LockServer::RoutingDb | LockServer::Redis(_) | LockServer::RedisDocker(_) => {
                (None, vec![])
            }
            LockServer::Etcd(e) => (e.leader().await, e.ids()),
            LockServer::EtcdDocker(e) => (e.leader().await, e.ids()),
            LockServer::Zk(z) => (z.leader().await, vec![]),
            LockServer::ZkDocker(z) => (z.leader().await, vec![]),
        }
    }

    /// What each member says now: (node, the leader it names, its raft term).
    pub async fn views(&self) -> Vec<(String, Option<String>, u64)> {
        match self {
            LockServer::RoutingDb
            | LockServer::Redis(_)
            | LockServer::RedisDocker(_)
            | LockServer::Zk(_)
            | LockServer::ZkDocker(_) => vec![],
            LockServer::Etcd(e) => e.views().await,
            LockServer::EtcdDocker(e) => e.views().await,
        }
    }

    /// How long member `node`'s last start took (the longest of all for any other name).
    pub fn last_start(&self, node: &str) -> std::time::Duration {
        match self {
            LockServer::RoutingDb => std::time::Duration::ZERO,
            LockServer::RedisDocker(r) => r.last_start(node),
            LockServer::ZkDocker(z) => z.last_start(node),
            LockServer::Etcd(e) => e.last_start(node),
            LockServer::EtcdDocker(e) => e.last_start(node),
            LockServer::Redis(r) => r.last_start(node),
            LockServer::Zk(z) => z.last_start(node),
        }
    }

    /// How long bringing the service up took (every member answering with a leader).
    pub fn started_in(&self) -> std::time::Duration {
        match self {
            LockServer::RoutingDb => std::time::Duration::ZERO,
            LockServer::Etcd(e) => e.started_in,
            LockServer::EtcdDocker(e) => e.started_in,
            LockServer::Redis(r) => r.started_in,
            LockServer::RedisDocker(r) => r.started_in,
            LockServer::Zk(z) => z.started_in,
            LockServer::ZkDocker(z) => z.started_in,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn etcd_makes_the_lease_a_whole_number_of_real_seconds() {
        let etcd = LockSection {
            service: LockKind::Etcd,
            members: 1,
            ..Default::default()
        };
        // April: 60 s at 10 ms is 600 real ms: one second needs 16.67 ms per scenario second.
        let s = etcd.time_scale_ms(10.0, 60.0);
        assert!((s * 60.0 - 1000.0).abs() < 1e-6, "{s}");
        // gc-pause: 10 s at 20 ms is 200 ms: one second at 100 ms.
        assert_eq!(etcd.time_scale_ms(20.0, 10.0), 100.0);
        // Already whole: unchanged.
        assert_eq!(etcd.time_scale_ms(100.0, 10.0), 100.0);
        assert!(etcd.check(1000, false).is_ok());
        assert!(etcd.check(600, false).is_err());
        let claims = LockSection::default();
        assert_eq!(claims.time_scale_ms(10.0, 60.0), 10.0);
    }

    #[test]
    fn each_box_gets_the_service_its_endpoints_and_the_key() {
        let advisory = LockSection {
            service: LockKind::Advisory,
            members: 1,
            ..Default::default()
        };
        let env = box_env(
            &advisory,
            "job",
            600,
            "postgres://postgres@127.0.0.1:5/postgres",
            &[],
        );
        assert_eq!(env[0].1, "advisory");
        assert_eq!(
            env[1].1,
            "postgres://postgres@127.0.0.1:5/postgres?options=-c%20idle_session_timeout%3D600%20-c%20idle_in_transaction_session_timeout%3D600"
        );
        assert_eq!(env[2].1, "1032");
        let etcd = LockSection {
            service: LockKind::Etcd,
            members: 1,
            ..Default::default()
        };
        let env = box_env(&etcd, "job", 1000, "", &["127.0.0.1:7".into()]);
        assert_eq!(env[1].1, "http://127.0.0.1:7");
        assert_eq!(env[2].1, "/locks/job");
        let redis = LockSection {
            service: LockKind::Redis,
            members: 1,
            ..Default::default()
        };
        let env = box_env(&redis, "job", 600, "", &["127.0.0.1:7".into()]);
        assert_eq!(env[0].1, "redis");
        assert_eq!(env[1].1, "redis://127.0.0.1:7");
        assert_eq!(env[2].1, "lock:job");
        assert!(redis.check(600, false).is_ok(), "Redis's expiry is in ms");
        assert_eq!(redis.time_scale_ms(20.0, 10.0), 20.0);
        let three = LockSection {
            members: 3,
            ..redis
        };
        assert!(three
            .check(600, false)
            .unwrap_err()
            .1
            .contains("one server"));
        assert!(LockSection::default().check(600, true).is_ok());
        assert!(advisory.check(600, true).is_err());
    }

    #[test]
    fn three_members_are_etcd_s_and_lock_means_every_member_s_link() {
        use chaos_nemesis::FaultKind;
        let three = LockSection {
            service: LockKind::Etcd,
            members: 3,
            ..Default::default()
        };
        assert!(three.check(1000, false).is_ok());
        assert_eq!(three.member_names(), ["lock-1", "lock-2", "lock-3"]);
        let advisory = LockSection {
            service: LockKind::Advisory,
            members: 3,
            ..Default::default()
        };
        assert!(advisory.check(600, false).is_err());
        let two = LockSection {
            service: LockKind::Etcd,
            members: 2,
            ..Default::default()
        };
        assert!(two.check(1000, false).is_err());
        let mut down = FaultKind::Down {
            link: "box-1->lock".into(),
        };
        alias_routing(&three, &mut down).unwrap();
        assert_eq!(down.target(), "box-1->lock-*");
        let mut stop = FaultKind::Stop {
            target: "lock".into(),
        };
        let refused = alias_routing(&three, &mut stop).unwrap_err();
        assert!(
            refused.contains("lock-leader") && refused.contains("lock-2"),
            "{refused}"
        );
        let one = LockSection {
            service: LockKind::Etcd,
            members: 1,
            ..Default::default()
        };
        assert_eq!(one.member_names(), ["lock"]);
        alias_routing(&one, &mut stop).unwrap();
        assert_eq!(stop.target(), "lock");
        assert!(is_lock_node("lock-leader") && is_lock_node("lock") && !is_lock_node("routing"));
    }

    #[test]
    fn zookeeper_gets_a_bare_connect_string_and_refuses_a_lease_shorter_than_two_ticks() {
        let zk = LockSection {
            service: LockKind::Zookeeper,
            members: 1,
            ..Default::default()
        };
        let env = box_env(
            &zk,
            "job",
            200,
            "",
            &["127.0.0.1:7".into(), "127.0.0.1:8".into()],
        );
        assert_eq!(env[0].1, "zookeeper");
        assert_eq!(env[1].1, "127.0.0.1:7,127.0.0.1:8");
        assert_eq!(env[2].1, "/locks/job");
        assert!(zk.check(200, false).is_ok());
        let (field, message) = zk.check(30, false).unwrap_err();
        assert_eq!(field, "lock.service");
        assert!(message.contains("40 ms"), "{message}");
        // No rounding of the scale: ZooKeeper's session timeout is in ms.
        assert_eq!(zk.time_scale_ms(20.0, 10.0), 20.0);
        let three = LockSection {
            service: LockKind::Zookeeper,
            members: 3,
            ..Default::default()
        };
        assert!(three.check(200, false).is_ok());
        assert_eq!(three.member_names(), ["lock-1", "lock-2", "lock-3"]);
    }
}
