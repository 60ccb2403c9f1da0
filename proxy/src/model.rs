//! The JSON shapes of the Toxiproxy 2.x API, shared by the server and the client wrapper.

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
