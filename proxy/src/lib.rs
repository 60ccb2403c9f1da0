//! Toxiproxy-compatible fault-injecting TCP proxy, plus the project's one toxiproxy_rust wrapper.

/// Real milliseconds: every time of this crate, a Toxiproxy server's (the same as
/// `chaos_history::RealMs`; the proxy depends on no other crate of the house).
pub type RealMs<T = u64> = T;

pub mod applied;
pub mod bench;
pub mod client;
pub mod error;
pub mod model;
pub mod realtime;
pub mod server;

pub use bench::{bench, BenchOptions, BenchReport};
pub use client::ToxiproxyClient;
pub use error::{ClientError, ProxyError};
pub use model::{ProxyInfo, ProxySpec, Stream, ToxicInfo, ToxicKind, ToxicSpec};
pub use server::{
    serve_forever, start, start_on_own_threads, start_on_threads, ProxyServer, ProxyThread, Tap,
    TapData, TapEvent, TapVerdict, Taps,
};

/// The version `/version` reports, e.g. for `chaos --version` output.
pub fn version() -> &'static str {
    server::VERSION
}
