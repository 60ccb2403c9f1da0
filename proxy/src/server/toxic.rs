//! A toxic installed on a proxy (name, stream, toxicity around its type's attributes) and its JSON as Toxiproxy reads and writes it.

use super::gojson::{get_field, go_kind, go_kind_detail, GoFloat32};
use super::toxics::DynToxic;
use serde::ser::{SerializeMap, SerializeStruct};
use serde::{Serialize, Serializer};
use serde_json::Value;
use std::sync::Arc;

/// The toxics of one direction of one proxy, in the order they were added (Toxiproxy's chain
/// order), as the API hands them to open connections.
pub(crate) type Chain = Arc<Vec<ToxicEntry>>;

/// One toxic installed on a proxy (Toxiproxy's `ToxicWrapper`).
#[derive(Debug)]
pub(crate) struct ToxicEntry {
    /// Unique for the life of the server; connections key their state for it on it.
    pub id: u64,
    /// Bumped on every update so connections re-roll toxicity and restart the toxic, as
    /// Toxiproxy re-runs the stub.
    pub version: u64,
    pub name: String,
    /// The stream string as the client sent it (Toxiproxy keeps the original case).
    pub stream_raw: String,
    pub toxicity: f32,
    pub toxic: Box<dyn DynToxic>,
}

impl Clone for ToxicEntry {
    fn clone(&self) -> Self {
        ToxicEntry {
            id: self.id,
            version: self.version,
            name: self.name.clone(),
            stream_raw: self.stream_raw.clone(),
            toxicity: self.toxicity,
            toxic: self.toxic.boxed_clone(),
        }
    }
}

impl Serialize for ToxicEntry {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        // Field order as Go's ToxicWrapper: attributes, name, type, stream, toxicity.
        let mut st = s.serialize_struct("Toxic", 5)?;
        st.serialize_field("attributes", &AttrsJson(&*self.toxic))?;
        st.serialize_field("name", &self.name)?;
        st.serialize_field("type", self.toxic.type_name())?;
        st.serialize_field("stream", &self.stream_raw)?;
        st.serialize_field("toxicity", &GoFloat32(self.toxicity))?;
        st.end()
    }
}

/// Serializes attributes as a JSON object in Go field order.
struct AttrsJson<'a>(&'a dyn DynToxic);

impl Serialize for AttrsJson<'_> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let fields = self.0.attributes();
        let mut m = s.serialize_map(Some(fields.len()))?;
        for (k, v) in fields {
            m.serialize_entry(k, &v)?;
        }
        m.end()
    }
}

/// Decode `attrs` onto the toxic's attributes the way Go's json.Decode does onto a struct:
/// absent or null keys keep their value, unknown keys are ignored, names match
/// case-insensitively, and a non-integer is an error.
pub(crate) fn decode_attributes(toxic: &mut dyn DynToxic, attrs: &Value) -> Result<(), String> {
    let obj = match attrs {
        Value::Null => return Ok(()),
        Value::Object(o) => o,
        other => {
            return Err(format!(
                "json: cannot unmarshal {} into Go struct field ToxicWrapper.attributes of type toxics.{}",
                go_kind(other),
                toxic.go_struct()
            ))
        }
    };
    for (field, _) in toxic.attributes() {
        let Some(v) = get_field(obj, field) else {
            continue;
        };
        match v {
            Value::Null => {}
            Value::Number(n) if n.as_i64().is_some() => {
                toxic.set_attribute(field, n.as_i64().unwrap_or_default())
            }
            other => {
                return Err(format!(
                    "json: cannot unmarshal {} into Go struct field {}.attributes.{} of type int64",
                    go_kind_detail(other),
                    toxic.go_struct(),
                    field
                ))
            }
        }
    }
    Ok(())
}
