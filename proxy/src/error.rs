//! The concrete error types of this crate's library API.

use std::net::SocketAddr;

/// Errors from running the in-process proxy server.
#[derive(Debug, thiserror::Error)]
pub enum ProxyError {
    #[error("cannot bind API listener on {addr}: {source}")]
    BindApi {
        addr: SocketAddr,
        source: std::io::Error,
    },
    #[error("cannot read local address of API listener: {0}")]
    LocalAddr(std::io::Error),
    #[error("cannot wait for Ctrl-C: {0}")]
    Signal(std::io::Error),
    #[error("benchmark I/O failed: {0}")]
    BenchIo(std::io::Error),
    #[error("benchmark could not configure the proxy: {0}")]
    BenchClient(#[from] ClientError),
    #[error("benchmark histogram error: {0}")]
    Histogram(String),
    #[error("timed out: {0}")]
    Timeout(&'static str),
    #[error("cannot start the proxy's own runtime thread: {0}")]
    Runtime(std::io::Error),
}

/// Errors from [`crate::client::ToxiproxyClient`].
#[derive(Debug, thiserror::Error)]
pub enum ClientError {
    #[error("cannot resolve Toxiproxy API address {addr:?}: {reason}")]
    BadAddress { addr: String, reason: String },
    /// Transport failure, or an error toxiproxy_rust reported as a string.
    #[error("request to Toxiproxy failed: {0}")]
    Transport(String),
    /// The server answered with an error status.
    #[error("Toxiproxy answered {status}: {message}")]
    Api { status: u16, message: String },
    #[error("unexpected response body from Toxiproxy: {0}")]
    BadBody(String),
    /// The read-back after a change shows the change did not take (toxiproxy_rust ignores statuses).
    #[error("change did not take effect: {0}")]
    NotApplied(String),
    /// toxiproxy_rust panics on some failures; the panic is caught on its blocking thread.
    #[error("toxiproxy_rust panicked: {0}")]
    Panicked(String),
    #[error("blocking task failed: {0}")]
    Join(String),
    #[error("invalid argument: {0}")]
    InvalidArgument(String),
}
