//! The failover system's stored run: what the harness knew before (`FailoverMeta`), what each server held at the end (`FailoverFinal`), and the names its history uses.
//!
//! History conventions of the failover system (`f`, then the `value` fields):
//! - the app (process `app`): `order` invoke `{id, conn}`; ok `{id, conn, node}` (the server
//!   that committed it, as it answered); fail (certainly not committed: no connection, an error
//!   the server answered); info (a timeout, a connection lost mid-statement: may or may not);
//!   `resolve` ok `{conn, node, upstream}` when a connection is (re)opened to where the service
//!   record pointed.
//! - the watcher (process `watcher`, from its stdout; all optional): `check` ok `{node,
//!   latency_ms}` / fail `{node, reason}`; `fence` ok `{node, proxies}`; `drain` ok `{lsn}`;
//!   `promote` invoke/ok/fail `{node}`; `repoint` ok `{proxy, upstream, node}`.
//! - the observer (process `observer`, the harness watching the resources from outside, on
//!   change only): `role` ok `{node, role: "primary"|"standby"|"down"}`; `proxy` ok `{proxy,
//!   link, enabled, upstream, node}` (`node`: the server the upstream names, if any).
//! - the nemesis: as for every system (paired verbs).

use crate::{ScenarioClock, ScenarioMs};
use serde::{Deserialize, Serialize};

/// `run.json`'s `system` for a failover run.
pub const FAILOVER_SYSTEM: &str = "failover";

/// The names of the failover system's nodes, processes, records and operations.
pub mod names {
    pub const PRIMARY: &str = "primary";
    pub const REPLICA: &str = "replica";
    pub const APP: &str = "app";
    pub const WATCHER: &str = "watcher";
    pub const OBSERVER: &str = "observer";
    /// The service record: the proxy whose upstream names the current primary.
    pub const SERVICE: &str = "service";
    pub const ORDER: &str = "order";
    pub const RESOLVE: &str = "resolve";
    pub const CHECK: &str = "check";
    pub const FENCE: &str = "fence";
    pub const DRAIN: &str = "drain";
    pub const PROMOTE: &str = "promote";
    pub const REPOINT: &str = "repoint";
    pub const ROLE: &str = "role";
    pub const PROXY: &str = "proxy";
}

/// What the harness knew about a failover run before it started: enough to judge it with no
/// database. Durations are scenario ms.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct FailoverMeta {
    /// Always `failover` (`FAILOVER_SYSTEM`): how `chaos check` tells the systems apart.
    pub system: String,
    pub scenario: String,
    pub seed: u64,
    pub clock: ScenarioClock,
    /// The watcher's silence constant and check interval, as configured.
    pub silence_ms: ScenarioMs,
    pub check_ms: ScenarioMs,
    /// How often each app connection writes an order.
    pub write_every_ms: ScenarioMs,
    /// `off`, `on` (the reference watcher's switch) or `own` (a team's watcher).
    pub fence: String,
    /// The primary waits for the replica before it acknowledges a commit.
    pub synchronous: bool,
    /// `reference watcher`, or the `--watcher-cmd` that ran.
    pub watcher: String,
    /// Scenario time the run ended, ms.
    pub end_scenario_ms: i64,
    /// False when the run was cut short (the history hit its limit, the harness stopped).
    pub completed: bool,
    #[serde(default)]
    pub incomplete_reason: Option<String>,
    /// The moments the scenario exists to reach (`[expect] reach`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub expect_reach: Vec<crate::Moment>,
}

/// One order row as a server holds it at the end.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct OrderRow {
    /// The client-side id (`o-000017`).
    pub id: String,
    /// The server that committed it (its `cluster_name`, recorded by the column's default).
    pub accepted_by: String,
    /// The writer's `application_name`.
    pub app: String,
    /// `pg_xact_commit_timestamp`, Unix ns (replicated rows keep the primary's).
    pub commit_unix_ns: Option<i64>,
}

/// One server at the end: could it be read, was it a standby, which orders it holds.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ServerOrders {
    pub node: String,
    pub read: bool,
    /// `pg_is_in_recovery()` at the end (None: not read).
    pub in_recovery: Option<bool>,
    pub orders: Vec<OrderRow>,
    #[serde(default)]
    pub error: Option<String>,
}

/// Both servers' orders, read after every fault was healed and before anything else wrote.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct FailoverFinal {
    pub servers: Vec<ServerOrders>,
    pub complete: bool,
    #[serde(default)]
    pub missing: Vec<String>,
}

impl FailoverFinal {
    /// One server's record, if it was listed.
    pub fn server(&self, node: &str) -> Option<&ServerOrders> {
        self.servers.iter().find(|s| s.node == node)
    }
}
