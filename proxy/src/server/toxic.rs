//! Server-side toxic definitions: typed attributes, Go-compatible JSON decode/encode.

use serde::ser::{SerializeMap, SerializeStruct};
use serde::{Serialize, Serializer};
use serde_json::Value;

/// One toxic type with its attributes, named as Toxiproxy names them (units in comments:
/// the wire names are fixed by Toxiproxy, so they cannot carry the unit suffix).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum ToxicKind {
    /// `latency` ms, `jitter` ms.
    Latency { latency: i64, jitter: i64 },
    /// `rate` KB/s (1 KB = 1000 bytes in Toxiproxy's arithmetic); 0 = unlimited.
    Bandwidth { rate: i64 },
    /// `delay` ms before the close is passed on.
    SlowClose { delay: i64 },
    /// `timeout` ms; 0 = black hole forever.
    Timeout { timeout: i64 },
    /// `timeout` ms after the next data before a TCP RST.
    ResetPeer { timeout: i64 },
    /// `bytes` passed before the connection is closed.
    LimitData { bytes: i64 },
    /// `average_size` bytes, `size_variation` bytes, `delay` microseconds between slices.
    Slicer {
        average_size: i64,
        size_variation: i64,
        delay: i64,
    },
}

impl ToxicKind {
    /// A toxic of the named type with zeroed attributes, as Go's `reflect.New` gives.
    pub(crate) fn from_type(type_name: &str) -> Option<ToxicKind> {
        Some(match type_name {
            "latency" => ToxicKind::Latency {
                latency: 0,
                jitter: 0,
            },
            "bandwidth" => ToxicKind::Bandwidth { rate: 0 },
            "slow_close" => ToxicKind::SlowClose { delay: 0 },
            "timeout" => ToxicKind::Timeout { timeout: 0 },
            "reset_peer" => ToxicKind::ResetPeer { timeout: 0 },
            "limit_data" => ToxicKind::LimitData { bytes: 0 },
            "slicer" => ToxicKind::Slicer {
                average_size: 0,
                size_variation: 0,
                delay: 0,
            },
            _ => return None,
        })
    }

    pub(crate) fn type_name(&self) -> &'static str {
        match self {
            ToxicKind::Latency { .. } => "latency",
            ToxicKind::Bandwidth { .. } => "bandwidth",
            ToxicKind::SlowClose { .. } => "slow_close",
            ToxicKind::Timeout { .. } => "timeout",
            ToxicKind::ResetPeer { .. } => "reset_peer",
            ToxicKind::LimitData { .. } => "limit_data",
            ToxicKind::Slicer { .. } => "slicer",
        }
    }

    /// Go struct name, used in decode error messages like Go's.
    fn go_struct(&self) -> &'static str {
        match self {
            ToxicKind::Latency { .. } => "LatencyToxic",
            ToxicKind::Bandwidth { .. } => "BandwidthToxic",
            ToxicKind::SlowClose { .. } => "SlowCloseToxic",
            ToxicKind::Timeout { .. } => "TimeoutToxic",
            ToxicKind::ResetPeer { .. } => "ResetToxic",
            ToxicKind::LimitData { .. } => "LimitDataToxic",
            ToxicKind::Slicer { .. } => "SlicerToxic",
        }
    }

    /// Attribute fields in Go struct order, as `(json name, value)`.
    fn fields(&self) -> Vec<(&'static str, i64)> {
        match *self {
            ToxicKind::Latency { latency, jitter } => {
                vec![("latency", latency), ("jitter", jitter)]
            }
            ToxicKind::Bandwidth { rate } => vec![("rate", rate)],
            ToxicKind::SlowClose { delay } => vec![("delay", delay)],
            ToxicKind::Timeout { timeout } => vec![("timeout", timeout)],
            ToxicKind::ResetPeer { timeout } => vec![("timeout", timeout)],
            ToxicKind::LimitData { bytes } => vec![("bytes", bytes)],
            ToxicKind::Slicer {
                average_size,
                size_variation,
                delay,
            } => vec![
                ("average_size", average_size),
                ("size_variation", size_variation),
                ("delay", delay),
            ],
        }
    }

    fn set_field(&mut self, name: &str, v: i64) {
        match self {
            ToxicKind::Latency { latency, jitter } => match name {
                "latency" => *latency = v,
                _ => *jitter = v,
            },
            ToxicKind::Bandwidth { rate } => *rate = v,
            ToxicKind::SlowClose { delay } => *delay = v,
            ToxicKind::Timeout { timeout } | ToxicKind::ResetPeer { timeout } => *timeout = v,
            ToxicKind::LimitData { bytes } => *bytes = v,
            ToxicKind::Slicer {
                average_size,
                size_variation,
                delay,
            } => match name {
                "average_size" => *average_size = v,
                "size_variation" => *size_variation = v,
                _ => *delay = v,
            },
        }
    }

    /// Decode `attributes` onto the existing values the way Go's json.Decode does onto a struct:
    /// absent or null keys keep their value, unknown keys are ignored, names match
    /// case-insensitively, and a non-integer is an error.
    pub(crate) fn decode_attributes(&mut self, attrs: &Value) -> Result<(), String> {
        let obj = match attrs {
            Value::Null => return Ok(()),
            Value::Object(o) => o,
            other => {
                return Err(format!(
                    "json: cannot unmarshal {} into Go struct field ToxicWrapper.attributes of type toxics.{}",
                    go_kind(other),
                    self.go_struct()
                ))
            }
        };
        for (field, _) in self.fields() {
            let Some(v) = get_field(obj, field) else {
                continue;
            };
            match v {
                Value::Null => {}
                Value::Number(n) if n.as_i64().is_some() => {
                    self.set_field(field, n.as_i64().unwrap_or_default())
                }
                other => {
                    return Err(format!(
                    "json: cannot unmarshal {} into Go struct field {}.attributes.{} of type int64",
                    go_kind_detail(other),
                    self.go_struct(),
                    field
                ))
                }
            }
        }
        Ok(())
    }
}

/// Serializes attributes as a JSON object in Go field order.
pub(crate) struct AttrsJson<'a>(pub &'a ToxicKind);

impl Serialize for AttrsJson<'_> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let fields = self.0.fields();
        let mut m = s.serialize_map(Some(fields.len()))?;
        for (k, v) in fields {
            m.serialize_entry(k, &v)?;
        }
        m.end()
    }
}

/// One toxic installed on a proxy.
#[derive(Debug, Clone)]
pub(crate) struct Toxic {
    /// Unique for the life of the server; links key their per-connection state on it.
    pub id: u64,
    /// Bumped on every update so links re-roll toxicity and restart timers, as Toxiproxy re-runs the stub.
    pub version: u64,
    pub name: String,
    /// The stream string as the client sent it (Toxiproxy keeps the original case).
    pub stream_raw: String,
    pub toxicity: f32,
    pub kind: ToxicKind,
}

impl Serialize for Toxic {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        // Field order as Go's ToxicWrapper: attributes, name, type, stream, toxicity.
        let mut st = s.serialize_struct("Toxic", 5)?;
        st.serialize_field("attributes", &AttrsJson(&self.kind))?;
        st.serialize_field("name", &self.name)?;
        st.serialize_field("type", self.kind.type_name())?;
        st.serialize_field("stream", &self.stream_raw)?;
        st.serialize_field("toxicity", &GoFloat32(self.toxicity))?;
        st.end()
    }
}

/// Go prints float32 1 as `1`, not `1.0`; mirror that so byte-level comparisons match.
struct GoFloat32(f32);

impl Serialize for GoFloat32 {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let v = self.0;
        if v.is_finite() && v.fract() == 0.0 && v.abs() < 1e15 {
            s.serialize_i64(v as i64)
        } else {
            s.serialize_f32(v)
        }
    }
}

/// Look a key up the way Go's encoding/json does: exact match first, then case-insensitive.
pub(crate) fn get_field<'a>(
    obj: &'a serde_json::Map<String, Value>,
    name: &str,
) -> Option<&'a Value> {
    obj.get(name).or_else(|| {
        obj.iter()
            .find(|(k, _)| k.eq_ignore_ascii_case(name))
            .map(|(_, v)| v)
    })
}

/// Go's name for a JSON value kind in unmarshal errors.
pub(crate) fn go_kind(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "bool",
        Value::Number(_) => "number",
        Value::String(_) => "string",
        Value::Array(_) => "array",
        Value::Object(_) => "object",
    }
}

fn go_kind_detail(v: &Value) -> String {
    match v {
        Value::Number(n) => format!("number {n}"),
        other => go_kind(other).to_string(),
    }
}
