//! The failover system (GitHub, 21 October 2018; the shop's fifty lines): a primary and a streaming replica, the app that writes orders to "the primary" (`app.rs`), the reference watcher that promotes on silence (`watcher.rs`, run by `bin/watcher.rs`), and the one small Toxiproxy API client both use (`api.rs`).
//!
//! The watcher protocol (docs/watcher-protocol.md) is the environment in `env` and the
//! schema in `ORDERS_SQL`; the watcher knows nothing else about the harness.

pub mod api;
pub mod app;
pub mod watcher;

use clap::ValueEnum;

/// The reference watcher's fence: `off` promotes on silence and repoints (the shop's fifty
/// lines); `on` first takes the old primary's ability to accept a write away, through the
/// proxy (the power switch).
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, Default, ValueEnum, serde::Serialize, serde::Deserialize,
)]
#[serde(rename_all = "kebab-case")]
pub enum Fence {
    #[default]
    Off,
    On,
}

/// The orders table every server holds: one row per order, with the client's id, the server
/// that committed it (its `cluster_name`, which the harness sets to the node's name) and the
/// writer (`application_name`). Commit times come from `pg_xact_commit_timestamp`.
pub const ORDERS_SQL: &str = "create table if not exists orders (
    id text primary key,
    accepted_by text not null default current_setting('cluster_name'),
    app text not null default current_setting('application_name'),
    amount_cents bigint not null
)";

/// The app's write: one order, answering which server committed it.
pub const INSERT_ORDER_SQL: &str =
    "insert into orders (id, amount_cents) values ($1, $2) returning accepted_by";

/// The watcher protocol's environment variables (durations in real ms, already scaled).
pub mod env {
    /// `watcher`: set as `application_name` on every connection.
    pub use crate::mover::env::BOX;
    /// The primary and the replica, each through the watcher's own link (a proxy).
    pub const PRIMARY_URL: &str = "CHAOS_PRIMARY_URL";
    pub const REPLICA_URL: &str = "CHAOS_REPLICA_URL";
    /// How often to check the primary, how long a check may take, how long a silence may
    /// last before the watcher promotes.
    pub const CHECK_MS: &str = "CHAOS_CHECK_MS";
    pub const CHECK_TIMEOUT_MS: &str = "CHAOS_CHECK_TIMEOUT_MS";
    pub const SILENCE_MS: &str = "CHAOS_SILENCE_MS";
    /// The Toxiproxy API, `http://host:port`.
    pub const PROXY_API: &str = "CHAOS_PROXY_API";
    /// The proxy that is the service address's record; a repoint sets its `upstream`.
    pub const SERVICE_PROXY: &str = "CHAOS_SERVICE_PROXY";
    /// The replica's address as the proxy reaches it: the repoint's new `upstream`.
    pub const REPLICA_UPSTREAM: &str = "CHAOS_REPLICA_UPSTREAM";
    /// The proxies through which clients reach the primary (a fence cuts these first) and
    /// every proxy that reaches it (the fence in full), comma-separated.
    pub const PRIMARY_CLIENT_PROXIES: &str = "CHAOS_PRIMARY_CLIENT_PROXIES";
    pub const PRIMARY_PROXIES: &str = "CHAOS_PRIMARY_PROXIES";
    /// With `--watcher-ready gate` (and always for the reference watcher): a fifo to read
    /// one line from once connected.
    pub use crate::mover::env::GATE;
}

/// How the reference watcher exits.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
pub enum Exit {
    /// It promoted the replica and repointed the service (its one job).
    Done = 0,
    Failure = 1,
    BadInput = 2,
}
