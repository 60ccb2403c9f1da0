//! Go's encoding/json rules as Toxiproxy's answers show them: key lookup, decode errors, float32 output.

use serde::{Serialize, Serializer};
use serde_json::{Map, Value};

/// Look a key up the way Go's encoding/json does: exact match first, then case-insensitive.
pub(crate) fn get_field<'a>(obj: &'a Map<String, Value>, name: &str) -> Option<&'a Value> {
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

/// As [`go_kind`], with the number itself, as Go writes it for a non-integer into an int64.
pub(crate) fn go_kind_detail(v: &Value) -> String {
    match v {
        Value::Number(n) => format!("number {n}"),
        other => go_kind(other).to_string(),
    }
}

/// Decode a string field onto `out`; absent or null keeps it.
pub(crate) fn str_field(
    obj: &Map<String, Value>,
    name: &str,
    go_struct: &str,
    out: &mut String,
) -> Result<(), String> {
    match get_field(obj, name) {
        None | Some(Value::Null) => Ok(()),
        Some(Value::String(s)) => {
            *out = s.clone();
            Ok(())
        }
        Some(v) => Err(format!(
            "json: cannot unmarshal {} into Go struct field {go_struct}.{name} of type string",
            go_kind(v)
        )),
    }
}

/// A bool field; absent or null is `None`.
pub(crate) fn bool_field(
    obj: &Map<String, Value>,
    name: &str,
    go_struct: &str,
) -> Result<Option<bool>, String> {
    match get_field(obj, name) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::Bool(b)) => Ok(Some(*b)),
        Some(v) => Err(format!(
            "json: cannot unmarshal {} into Go struct field {go_struct}.{name} of type bool",
            go_kind(v)
        )),
    }
}

/// A toxicity value (a float32); null is `None`.
pub(crate) fn decode_toxicity(v: &Value, go_struct: &str) -> Result<Option<f32>, String> {
    match v {
        Value::Null => Ok(None),
        Value::Number(n) => Ok(n.as_f64().map(|f| f as f32)),
        other => Err(format!(
            "json: cannot unmarshal {} into Go struct field {go_struct}.toxicity of type float32",
            go_kind(other)
        )),
    }
}

/// Go prints float32 1 as `1`, not `1.0`; mirror that so byte-level comparisons match.
pub(crate) struct GoFloat32(pub f32);

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
