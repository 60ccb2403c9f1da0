//! The lock service as a part of the testbed (DESIGN section 11), in one home: the scenario's `[lock]` section, the server the service needs (`etcd.rs`; the claim row and advisory locks live in the routing db), the protocol's `CHAOS_LOCK*` variables each box gets, and the observer that reads grants from the service itself (`observe.rs`) into the record the checkers judge.
//!
//! Adding a service: its `LockKind` (workloads/src/lock.rs, with the calls a mover makes),
//! its arm in `LockSection::check`, `box_env`, `LockServer::start` and `Observer::start`,
//! and the reference mover's client (workloads/src/mover/run/lock.rs).

mod etcd;
mod observe;

pub use chaos_workloads::lock::LockKind;
pub use etcd::EtcdServer;
pub use observe::{Names, Observer, Seen};

use chaos_workloads::lock::{advisory_options, LOCK_KEY_VAR, LOCK_URLS_VAR, LOCK_VAR};
use serde::{Deserialize, Serialize};

/// The node name a scenario gives the lock service (the routing db when it holds the lock).
pub const LOCK_NODE: &str = "lock";

/// `[lock]`: which service holds the lease, and how many members it has.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields, default)]
pub struct LockSection {
    pub service: LockKind,
    pub members: u8,
}

impl Default for LockSection {
    fn default() -> Self {
        LockSection {
            service: LockKind::Claims,
            members: 1,
        }
    }
}

impl LockSection {
    /// Whether the service runs a server of its own (a `lock` node with links from the boxes).
    pub fn has_node(&self) -> bool {
        !self.service.in_routing_db()
    }

    /// What a scenario may not ask of this service; `(field, message)`.
    pub fn check(&self, lease_real_ms: u64, election_unique: bool) -> Result<(), (String, String)> {
        let field = |f: &str, m: String| Err((format!("lock.{f}"), m));
        if self.members != 1 && self.members != 3 {
            return field("members", format!("must be 1 or 3 (got {})", self.members));
        }
        if self.members == 3 {
            return field(
                "members",
                format!(
                    "3: a three-member {} is not built yet; use members = 1",
                    self.service.name()
                ),
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
/// on a link to it) lands on whatever holds the lease, whichever the service.
pub fn alias_routing(section: &LockSection, kind: &mut chaos_nemesis::FaultKind) {
    use chaos_nemesis::FaultKind as K;
    if section.has_node() {
        return;
    }
    let name = match kind {
        K::Pause { target, .. }
        | K::Kill { target }
        | K::Stop { target }
        | K::Crash { target }
        | K::Clock { target, .. } => target,
        K::Latency { link, .. }
        | K::Bandwidth { link, .. }
        | K::Down { link }
        | K::Timeout { link, .. }
        | K::ResetPeer { link, .. } => link,
    };
    if name == LOCK_NODE {
        *name = "routing".into();
    } else if let Some((client, node)) = name.split_once("->") {
        if node.trim() == LOCK_NODE {
            *name = format!("{}->routing", client.trim());
        }
    }
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

/// A lock service's own server, when it has one.
pub enum LockServer {
    /// The lock lives in the routing db.
    RoutingDb,
    Etcd(EtcdServer),
    /// etcd in a container of the run (the docker backend).
    EtcdDocker(crate::backend::docker::DockerEtcd),
}

impl LockServer {
    /// Start what `section` needs, its data and log under the run's directories.
    pub async fn start(
        section: &LockSection,
        backend: crate::backend::BackendKind,
        run_id: &str,
        log_dir: &std::path::Path,
    ) -> anyhow::Result<LockServer> {
        use crate::backend::BackendKind;
        Ok(match (section.service, backend) {
            (LockKind::Claims | LockKind::Advisory, _) => LockServer::RoutingDb,
            (LockKind::Etcd, BackendKind::Process) => {
                LockServer::Etcd(EtcdServer::start(run_id, log_dir).await?)
            }
            (LockKind::Etcd, BackendKind::Docker) => LockServer::EtcdDocker(
                crate::backend::docker::DockerEtcd::start(run_id, log_dir).await?,
            ),
        })
    }

    /// Where the proxy forwards a box's link to the lock (its client address).
    pub fn upstream(&self) -> Option<String> {
        match self {
            LockServer::RoutingDb => None,
            LockServer::Etcd(e) => Some(e.client_addr()),
            LockServer::EtcdDocker(e) => Some(e.upstream()),
        }
    }

    /// Where the harness itself (the observer, on the host) reaches the service, unproxied.
    pub fn endpoint(&self) -> Option<String> {
        match self {
            LockServer::EtcdDocker(e) => Some(e.observe_addr()),
            other => other.upstream(),
        }
    }

    /// "etcd 3.4.23 (one member)", for the log line.
    pub fn describe(&self) -> Option<String> {
        match self {
            LockServer::RoutingDb => None,
            LockServer::Etcd(e) => Some(e.describe()),
            LockServer::EtcdDocker(e) => Some(e.describe()),
        }
    }

    pub async fn stop(&mut self) {
        match self {
            LockServer::RoutingDb => {}
            LockServer::Etcd(e) => e.stop().await,
            LockServer::EtcdDocker(e) => e.stop().await,
        }
    }

    /// A nemesis stop of the `lock` node (its own server; the routing db is the cluster's).
    pub async fn stop_member(&mut self, mode: crate::pg::StopMode) -> anyhow::Result<()> {
        match self {
            LockServer::RoutingDb => anyhow::bail!("the lock lives in the routing db"),
            LockServer::Etcd(e) => e.stop_member(mode).await,
            LockServer::EtcdDocker(e) => e.stop_member(mode).await,
        }
    }

    /// A nemesis start of the `lock` node; how long until it answered.
    pub async fn start_member(&mut self) -> anyhow::Result<std::time::Duration> {
        match self {
            LockServer::RoutingDb => anyhow::bail!("the lock lives in the routing db"),
            LockServer::Etcd(e) => e.start_member().await,
            LockServer::EtcdDocker(e) => e.start_member().await,
        }
    }

    /// How long its last start took.
    pub fn last_start(&self) -> std::time::Duration {
        match self {
            LockServer::RoutingDb => std::time::Duration::ZERO,
            LockServer::Etcd(e) => e.started_in,
            LockServer::EtcdDocker(e) => e.started_in,
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
        };
        let env = box_env(&etcd, "job", 1000, "", &["127.0.0.1:7".into()]);
        assert_eq!(env[1].1, "http://127.0.0.1:7");
        assert_eq!(env[2].1, "/locks/job");
        assert!(LockSection::default().check(600, true).is_ok());
        assert!(advisory.check(600, true).is_err());
    }
}
