//! The Toxiproxy 2.x API's values in the library API: streams, proxies and toxics to create, and what the API reports.

use crate::RealMs;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::fmt;

/// Which half of a proxied connection a toxic acts on.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Stream {
    /// Client -> server bytes.
    Upstream,
    /// Server -> client bytes (Toxiproxy's default).
    Downstream,
}

impl Stream {
    /// The lowercase name Toxiproxy uses on the wire.
    pub fn as_str(self) -> &'static str {
        match self {
            Stream::Upstream => "upstream",
            Stream::Downstream => "downstream",
        }
    }

    /// Case-insensitive parse, as Toxiproxy's `stream.ParseDirection`.
    pub fn parse(value: &str) -> Option<Stream> {
        match value.to_ascii_lowercase().as_str() {
            "upstream" => Some(Stream::Upstream),
            "downstream" => Some(Stream::Downstream),
            _ => None,
        }
    }
}

impl fmt::Display for Stream {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A proxy to create (the body of `POST /proxies` or one element of `POST /populate`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ProxySpec {
    pub name: String,
    /// Address to listen on; "127.0.0.1:0" picks a free port.
    pub listen: String,
    pub upstream: String,
    pub enabled: bool,
}

impl ProxySpec {
    /// An enabled proxy spec.
    pub fn new(
        name: impl Into<String>,
        listen: impl Into<String>,
        upstream: impl Into<String>,
    ) -> Self {
        ProxySpec {
            name: name.into(),
            listen: listen.into(),
            upstream: upstream.into(),
            enabled: true,
        }
    }
}

/// A proxy as the API reports it: `{"name","listen","upstream","enabled","toxics"}`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ProxyInfo {
    pub name: String,
    /// The address actually bound (a concrete port even if ":0" was asked for).
    pub listen: String,
    pub upstream: String,
    pub enabled: bool,
    #[serde(default)]
    pub toxics: Vec<ToxicInfo>,
}

/// A toxic as the API reports it. Attributes stay untyped JSON so a real Toxiproxy with
/// toxics this crate does not know still parses.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ToxicInfo {
    pub attributes: BTreeMap<String, serde_json::Value>,
    pub name: String,
    #[serde(rename = "type")]
    pub kind: String,
    pub stream: String,
    pub toxicity: f32,
}

impl ToxicInfo {
    /// An integer attribute, if present and integral.
    pub fn attr_i64(&self, key: &str) -> Option<i64> {
        self.attributes.get(key).and_then(|v| v.as_i64())
    }
}

/// A toxic to add (see [`crate::ToxiproxyClient::add_toxic`]): its type with its attributes,
/// the stream it acts on, and its toxicity.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct ToxicSpec {
    pub kind: ToxicKind,
    pub stream: Stream,
    /// Chance in [0, 1] that a connection gets the toxic (a noop otherwise), rolled per
    /// connection as Toxiproxy does.
    pub toxicity: f32,
}

impl ToxicSpec {
    /// `kind` on `stream`, on every connection (toxicity 1).
    pub fn new(stream: Stream, kind: ToxicKind) -> Self {
        ToxicSpec {
            kind,
            stream,
            toxicity: 1.0,
        }
    }

    /// The same toxic on a share of the connections only.
    pub fn with_toxicity(self, toxicity: f32) -> Self {
        ToxicSpec { toxicity, ..self }
    }

    /// The name the toxic gets: `<type>_<stream>`, as toxiproxy_rust and Toxiproxy name it.
    pub fn name(&self) -> String {
        format!("{}_{}", self.kind.type_name(), self.stream)
    }
}

/// A toxic type with its attributes, one variant per type Toxiproxy registers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ToxicKind {
    /// Data passes unchanged.
    Noop,
    /// Every chunk delayed `latency_ms` ± `jitter_ms`.
    Latency {
        latency_ms: RealMs<u32>,
        jitter_ms: RealMs<u32>,
    },
    /// Data let through at `rate_kb` KB/s.
    Bandwidth { rate_kb: u32 },
    /// A close passed on after `delay_ms`.
    SlowClose { delay_ms: RealMs<u32> },
    /// Data dropped; the connection closed after `timeout_ms` (0 = never).
    Timeout { timeout_ms: RealMs<u32> },
    /// TCP RST `timeout_ms` after the next data.
    ResetPeer { timeout_ms: RealMs<u32> },
    /// The connection closed once `bytes` have passed.
    LimitData { bytes: u32 },
    /// Data cut into slices of about `average_size_bytes`, `delay_us` apart.
    Slicer {
        average_size_bytes: u32,
        size_variation_bytes: u32,
        delay_us: u32,
    },
}

impl ToxicKind {
    /// The `type` on the wire.
    pub fn type_name(&self) -> &'static str {
        match self {
            ToxicKind::Noop => "noop",
            ToxicKind::Latency { .. } => "latency",
            ToxicKind::Bandwidth { .. } => "bandwidth",
            ToxicKind::SlowClose { .. } => "slow_close",
            ToxicKind::Timeout { .. } => "timeout",
            ToxicKind::ResetPeer { .. } => "reset_peer",
            ToxicKind::LimitData { .. } => "limit_data",
            ToxicKind::Slicer { .. } => "slicer",
        }
    }

    /// The attributes as `(wire name, value)`.
    pub fn attributes(&self) -> Vec<(&'static str, u32)> {
        match *self {
            ToxicKind::Noop => Vec::new(),
            ToxicKind::Latency {
                latency_ms,
                jitter_ms,
            } => vec![("latency", latency_ms), ("jitter", jitter_ms)],
            ToxicKind::Bandwidth { rate_kb } => vec![("rate", rate_kb)],
            ToxicKind::SlowClose { delay_ms } => vec![("delay", delay_ms)],
            ToxicKind::Timeout { timeout_ms } | ToxicKind::ResetPeer { timeout_ms } => {
                vec![("timeout", timeout_ms)]
            }
            ToxicKind::LimitData { bytes } => vec![("bytes", bytes)],
            ToxicKind::Slicer {
                average_size_bytes,
                size_variation_bytes,
                delay_us,
            } => vec![
                ("average_size", average_size_bytes),
                ("size_variation", size_variation_bytes),
                ("delay", delay_us),
            ],
        }
    }
}
