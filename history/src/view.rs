//! One history line decoded borrowed, for readers that stream a big history: the event's header and the scalar `value` fields the report and the story read; everything else (an ingest batch's turbine list) is skipped unparsed.

use crate::{Op, OpType};
use serde::de::{self, Deserializer, IgnoredAny, MapAccess, SeqAccess, Visitor};
use serde::Deserialize;
use std::borrow::Cow;
use std::fmt;
use std::marker::PhantomData;

/// One history event, borrowed from its line (or from an `Op`).
///
/// A line decodes as an `OpView` exactly when it decodes as an [`Op`]: the
/// same fields are required, with the same types, and `value` may be any JSON.
#[derive(Debug, Clone, PartialEq, Deserialize)]
pub struct OpView<'a> {
    pub index: u64,
    pub time_ns: i64,
    #[serde(rename = "scenario_time")]
    _scenario_time: AnyString,
    #[serde(borrow)]
    pub process: Cow<'a, str>,
    #[serde(rename = "type")]
    pub kind: OpType,
    #[serde(borrow)]
    pub f: Cow<'a, str>,
    #[serde(default, borrow)]
    pub value: ValueFields<'a>,
}

impl<'a> OpView<'a> {
    pub fn new(
        index: u64,
        time_ns: i64,
        process: Cow<'a, str>,
        kind: OpType,
        f: Cow<'a, str>,
        value: ValueFields<'a>,
    ) -> OpView<'a> {
        OpView {
            index,
            time_ns,
            _scenario_time: AnyString,
            process,
            kind,
            f,
            value,
        }
    }

    /// Decode one line of `history.jsonl`.
    pub fn parse(line: &'a str) -> Result<OpView<'a>, serde_json::Error> {
        serde_json::from_str(line)
    }

    /// The view of an event already in memory.
    pub fn of(op: &'a Op) -> OpView<'a> {
        let field = |k: &str| op.value.get(k).map(Scalar::of);
        OpView {
            index: op.index,
            time_ns: op.time_ns,
            _scenario_time: AnyString,
            process: Cow::Borrowed(&op.process),
            kind: op.kind,
            f: Cow::Borrowed(&op.f),
            value: if op.value.is_object() {
                ValueFields {
                    turbine: field("turbine"),
                    shard: field("shard"),
                    from: field("from"),
                    to: field("to"),
                    why: field("why"),
                    reason: field("reason"),
                    token: field("token"),
                    shard_token: field("shard_token"),
                    holder: field("holder"),
                    target: field("target"),
                    error: field("error"),
                    code: field("code"),
                    after_exit: field("after_exit"),
                    when: field("when"),
                    by: field("by"),
                    ts_ms: field("ts_ms"),
                    turbines: field("turbines"),
                    publisher: field("publisher"),
                    repeated_key: field("repeated_key"),
                    object: field("object"),
                    version: field("version"),
                    role: field("role"),
                    leader: field("leader"),
                    members: field("members"),
                }
            } else {
                ValueFields::default()
            },
        }
    }
}

/// The fields of `value` that readers of the whole history look at (see the
/// conventions in `record.rs`); absent when the value has no such key or is
/// not an object.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ValueFields<'a> {
    pub turbine: Option<Scalar<'a>>,
    pub shard: Option<Scalar<'a>>,
    pub from: Option<Scalar<'a>>,
    pub to: Option<Scalar<'a>>,
    pub why: Option<Scalar<'a>>,
    pub reason: Option<Scalar<'a>>,
    pub token: Option<Scalar<'a>>,
    pub shard_token: Option<Scalar<'a>>,
    pub holder: Option<Scalar<'a>>,
    pub target: Option<Scalar<'a>>,
    pub error: Option<Scalar<'a>>,
    /// A mover's exit code and, on the supervisor's restart, the exit it followed.
    pub code: Option<Scalar<'a>>,
    pub after_exit: Option<Scalar<'a>>,
    /// A triggered fault's moment and the box whose event it was.
    pub when: Option<Scalar<'a>>,
    pub by: Option<Scalar<'a>>,
    /// An ingest batch's reading time and turbine list (an array, kept as its JSON text).
    pub ts_ms: Option<Scalar<'a>>,
    pub turbines: Option<Scalar<'a>>,
    /// The designs' work: a payment's publisher and whether the processor refused its
    /// repeated key; an object write's object and version.
    pub publisher: Option<Scalar<'a>>,
    pub repeated_key: Option<Scalar<'a>>,
    pub object: Option<Scalar<'a>>,
    pub version: Option<Scalar<'a>>,
    /// A fault on a role a lock service's member plays (`lock-leader`): the role, the member
    /// that led when it was applied, and the members.
    pub role: Option<Scalar<'a>>,
    pub leader: Option<Scalar<'a>>,
    pub members: Option<Scalar<'a>>,
}

impl<'a> ValueFields<'a> {
    /// The field called `key`, when it is one of those kept.
    pub fn get(&self, key: &str) -> Option<&Scalar<'a>> {
        match key {
            "turbine" => self.turbine.as_ref(),
            "shard" => self.shard.as_ref(),
            "from" => self.from.as_ref(),
            "to" => self.to.as_ref(),
            "why" => self.why.as_ref(),
            "reason" => self.reason.as_ref(),
            "token" => self.token.as_ref(),
            "shard_token" => self.shard_token.as_ref(),
            "holder" => self.holder.as_ref(),
            "target" => self.target.as_ref(),
            "error" => self.error.as_ref(),
            "code" => self.code.as_ref(),
            "after_exit" => self.after_exit.as_ref(),
            "when" => self.when.as_ref(),
            "by" => self.by.as_ref(),
            "ts_ms" => self.ts_ms.as_ref(),
            "turbines" => self.turbines.as_ref(),
            "publisher" => self.publisher.as_ref(),
            "repeated_key" => self.repeated_key.as_ref(),
            "object" => self.object.as_ref(),
            "version" => self.version.as_ref(),
            "role" => self.role.as_ref(),
            "leader" => self.leader.as_ref(),
            "members" => self.members.as_ref(),
            _ => None,
        }
    }

    /// The field as a string, when it is one.
    pub fn str(&self, key: &str) -> Option<&str> {
        self.get(key)?.as_str()
    }

    /// The field as an integer, when it is one.
    pub fn int(&self, key: &str) -> Option<i64> {
        self.get(key)?.as_i64()
    }

    fn slot(&mut self, key: &str) -> Option<&mut Option<Scalar<'a>>> {
        Some(match key {
            "turbine" => &mut self.turbine,
            "shard" => &mut self.shard,
            "from" => &mut self.from,
            "to" => &mut self.to,
            "why" => &mut self.why,
            "reason" => &mut self.reason,
            "token" => &mut self.token,
            "shard_token" => &mut self.shard_token,
            "holder" => &mut self.holder,
            "target" => &mut self.target,
            "error" => &mut self.error,
            "code" => &mut self.code,
            "after_exit" => &mut self.after_exit,
            "when" => &mut self.when,
            "by" => &mut self.by,
            "ts_ms" => &mut self.ts_ms,
            "turbines" => &mut self.turbines,
            "publisher" => &mut self.publisher,
            "repeated_key" => &mut self.repeated_key,
            "object" => &mut self.object,
            "version" => &mut self.version,
            "role" => &mut self.role,
            "leader" => &mut self.leader,
            "members" => &mut self.members,
            _ => return None,
        })
    }
}

/// One JSON value of a kept field. Objects and arrays are kept as their
/// JSON text, so that `Display` prints any value as `serde_json` does.
#[derive(Debug, Clone, PartialEq)]
pub enum Scalar<'a> {
    Str(Cow<'a, str>),
    Int(i64),
    UInt(u64),
    Float(f64),
    Bool(bool),
    Null,
    Json(String),
}

impl<'a> Scalar<'a> {
    fn of(v: &'a serde_json::Value) -> Scalar<'a> {
        use serde_json::Value;
        match v {
            Value::String(s) => Scalar::Str(Cow::Borrowed(s)),
            Value::Number(n) => match (n.as_i64(), n.as_u64(), n.as_f64()) {
                (Some(i), _, _) => Scalar::Int(i),
                (None, Some(u), _) => Scalar::UInt(u),
                (_, _, Some(f)) => Scalar::Float(f),
                _ => Scalar::Json(n.to_string()),
            },
            Value::Bool(b) => Scalar::Bool(*b),
            Value::Null => Scalar::Null,
            other => Scalar::Json(other.to_string()),
        }
    }

    pub fn as_str(&self) -> Option<&str> {
        match self {
            Scalar::Str(s) => Some(s),
            _ => None,
        }
    }

    /// As `serde_json::Value::as_i64`.
    pub fn as_i64(&self) -> Option<i64> {
        match *self {
            Scalar::Int(i) => Some(i),
            Scalar::UInt(u) => i64::try_from(u).ok(),
            _ => None,
        }
    }

    /// A string as itself, anything else as its JSON text (`null`, `8`, `true`).
    pub fn text(&self) -> Cow<'_, str> {
        match self {
            Scalar::Str(s) => Cow::Borrowed(s),
            other => Cow::Owned(other.to_string()),
        }
    }
}

impl fmt::Display for Scalar<'_> {
    /// The value's JSON text, as `serde_json::Value`'s `Display`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Scalar::Str(s) => write!(f, "{}", serde_json::Value::from(s.as_ref())),
            Scalar::Int(i) => write!(f, "{i}"),
            Scalar::UInt(u) => write!(f, "{u}"),
            Scalar::Float(x) => write!(f, "{}", serde_json::Value::from(*x)),
            Scalar::Bool(b) => write!(f, "{b}"),
            Scalar::Null => f.write_str("null"),
            Scalar::Json(text) => f.write_str(text),
        }
    }
}

impl<'de: 'a, 'a> Deserialize<'de> for Scalar<'a> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V<'a>(PhantomData<&'a ()>);
        impl<'de: 'a, 'a> Visitor<'de> for V<'a> {
            type Value = Scalar<'a>;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("any JSON value")
            }
            fn visit_borrowed_str<E>(self, s: &'de str) -> Result<Self::Value, E> {
                Ok(Scalar::Str(Cow::Borrowed(s)))
            }
            fn visit_str<E>(self, s: &str) -> Result<Self::Value, E> {
                Ok(Scalar::Str(Cow::Owned(s.to_string())))
            }
            fn visit_string<E>(self, s: String) -> Result<Self::Value, E> {
                Ok(Scalar::Str(Cow::Owned(s)))
            }
            fn visit_i64<E>(self, i: i64) -> Result<Self::Value, E> {
                Ok(Scalar::Int(i))
            }
            fn visit_u64<E>(self, u: u64) -> Result<Self::Value, E> {
                Ok(match i64::try_from(u) {
                    Ok(i) => Scalar::Int(i),
                    Err(_) => Scalar::UInt(u),
                })
            }
            fn visit_f64<E>(self, x: f64) -> Result<Self::Value, E> {
                Ok(Scalar::Float(x))
            }
            fn visit_bool<E>(self, b: bool) -> Result<Self::Value, E> {
                Ok(Scalar::Bool(b))
            }
            fn visit_unit<E>(self) -> Result<Self::Value, E> {
                Ok(Scalar::Null)
            }
            fn visit_none<E>(self) -> Result<Self::Value, E> {
                Ok(Scalar::Null)
            }
            fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<Self::Value, A::Error> {
                let v = serde_json::Value::deserialize(de::value::MapAccessDeserializer::new(map))?;
                Ok(Scalar::Json(v.to_string()))
            }
            fn visit_seq<A: SeqAccess<'de>>(self, seq: A) -> Result<Self::Value, A::Error> {
                let v = serde_json::Value::deserialize(de::value::SeqAccessDeserializer::new(seq))?;
                Ok(Scalar::Json(v.to_string()))
            }
        }
        d.deserialize_any(V(PhantomData))
    }
}

impl<'de: 'a, 'a> Deserialize<'de> for ValueFields<'a> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V<'a>(PhantomData<&'a ()>);
        impl<'de: 'a, 'a> Visitor<'de> for V<'a> {
            type Value = ValueFields<'a>;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("any JSON value")
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
                let mut out = ValueFields::default();
                while let Some(key) = map.next_key::<Key>()? {
                    match out.slot(&key.0) {
                        // A repeated key: the last one wins, as in `serde_json::Value`.
                        Some(slot) => *slot = Some(map.next_value::<Scalar<'a>>()?),
                        None => {
                            map.next_value::<IgnoredAny>()?;
                        }
                    }
                }
                Ok(out)
            }
            fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Self::Value, A::Error> {
                while seq.next_element::<IgnoredAny>()?.is_some() {}
                Ok(ValueFields::default())
            }
            fn visit_borrowed_str<E>(self, _: &'de str) -> Result<Self::Value, E> {
                Ok(ValueFields::default())
            }
            fn visit_str<E>(self, _: &str) -> Result<Self::Value, E> {
                Ok(ValueFields::default())
            }
            fn visit_i64<E>(self, _: i64) -> Result<Self::Value, E> {
                Ok(ValueFields::default())
            }
            fn visit_u64<E>(self, _: u64) -> Result<Self::Value, E> {
                Ok(ValueFields::default())
            }
            fn visit_f64<E>(self, _: f64) -> Result<Self::Value, E> {
                Ok(ValueFields::default())
            }
            fn visit_bool<E>(self, _: bool) -> Result<Self::Value, E> {
                Ok(ValueFields::default())
            }
            fn visit_unit<E>(self) -> Result<Self::Value, E> {
                Ok(ValueFields::default())
            }
            fn visit_none<E>(self) -> Result<Self::Value, E> {
                Ok(ValueFields::default())
            }
        }
        d.deserialize_any(V(PhantomData))
    }
}

/// A map key, borrowed when it has no escape.
struct Key<'a>(Cow<'a, str>);

impl<'de: 'a, 'a> Deserialize<'de> for Key<'a> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V<'a>(PhantomData<&'a ()>);
        impl<'de: 'a, 'a> Visitor<'de> for V<'a> {
            type Value = Key<'a>;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("a key")
            }
            fn visit_borrowed_str<E>(self, s: &'de str) -> Result<Self::Value, E> {
                Ok(Key(Cow::Borrowed(s)))
            }
            fn visit_str<E>(self, s: &str) -> Result<Self::Value, E> {
                Ok(Key(Cow::Owned(s.to_string())))
            }
        }
        d.deserialize_str(V(PhantomData))
    }
}

/// A field that must be a string (as `Op::scenario_time`), not kept.
#[derive(Debug, Clone, Copy, PartialEq)]
struct AnyString;

impl<'de> Deserialize<'de> for AnyString {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = AnyString;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("a string")
            }
            fn visit_str<E>(self, _: &str) -> Result<Self::Value, E> {
                Ok(AnyString)
            }
        }
        d.deserialize_str(V)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const LINES: &[&str] = &[
        r#"{"index":0,"time_ns":1,"scenario_time":"21:40:00.0","process":"ingest","type":"ok","f":"ingest","value":{"shard":"shard1","ts_ms":5,"turbines":["AP-0001","AP-\u00e9"]}}"#,
        r#"{"index":1,"time_ns":-2,"scenario_time":"21:40:00.0","process":"box-1","type":"fail","f":"copy","value":{"reason":"fenced","token":3,"shard_token":18446744073709551615,"holder":null,"why":{"a":[1,2.5]},"error":1.0}}"#,
        r#"{"index":2,"time_ns":3,"scenario_time":"x","process":"box-\"2\"","type":"info","f":"lost"}"#,
        r#"{"index":3,"time_ns":3,"scenario_time":"x","process":"nemesis","type":"invoke","f":"pause","value":[1,{"target":"x"}],"extra":7}"#,
        r#"{"index":4,"time_ns":3,"scenario_time":"x","process":"nemesis","type":"invoke","f":"pause","value":{"target":"a","target":"b"}}"#,
        r#"{"index":5,"time_ns":4,"scenario_time":"x","process":"harness","type":"ok","f":"restart","value":{"after_exit":1,"target":"box-2","code":null,"when":"the 7th write by holder","by":"box-2"}}"#,
    ];

    #[test]
    fn a_line_reads_as_its_op_reads() {
        for line in LINES {
            let op: Op = serde_json::from_str(line).unwrap();
            let view = OpView::parse(line).unwrap();
            assert_eq!(view, OpView::of(&op), "{line}");
            for key in [
                "code",
                "after_exit",
                "when",
                "by",
                "turbine",
                "shard",
                "from",
                "to",
                "why",
                "reason",
                "token",
                "shard_token",
                "holder",
                "target",
                "error",
                "ts_ms",
                "turbines",
            ] {
                assert_eq!(
                    view.value.get(key).map(|s| s.to_string()),
                    op.value.get(key).map(|v| v.to_string()),
                    "{key} of {line}"
                );
                assert_eq!(
                    view.value.int(key),
                    op.value.get(key).and_then(|v| v.as_i64())
                );
            }
        }
    }

    #[test]
    fn what_op_refuses_the_view_refuses() {
        for line in [
            r#"{"index":0,"time_ns":1,"process":"p","type":"ok","f":"x"}"#,
            r#"{"index":0,"time_ns":1,"scenario_time":5,"process":"p","type":"ok","f":"x"}"#,
            r#"{"index":-1,"time_ns":1,"scenario_time":"","process":"p","type":"ok","f":"x"}"#,
            r#"{"index":0,"time_ns":1,"scenario_time":"","process":"p","type":"maybe","f":"x"}"#,
            r#"[1, 2]"#,
            r#"{"index":0,"time_ns":1,"scenario_time":"","process":"p","type":"ok","f":"x","value":{"a":}}"#,
            r#"{"index":0,"time_ns":1,"scenario_time":"","process":"p","type":"ok","f":"x"} x"#,
        ] {
            assert!(serde_json::from_str::<Op>(line).is_err(), "{line}");
            assert!(OpView::parse(line).is_err(), "{line}");
        }
    }

    #[test]
    fn plain_names_are_borrowed() {
        let view = OpView::parse(LINES[0]).unwrap();
        assert!(matches!(view.process, Cow::Borrowed(_)));
        assert!(matches!(
            view.value.shard,
            Some(Scalar::Str(Cow::Borrowed(_)))
        ));
        assert_eq!(view.value.str("shard"), Some("shard1"));
    }
}
