//! History lines on stdout: one JSON object per line, `type`, `f` and `value` only (the harness stamps index, time and process).

use chaos_history::verb;
use serde_json::{json, Value};
use std::io::Write;

/// Render one line (without the newline).
pub fn line(kind: &str, f: &str, value: Value) -> String {
    json!({ "type": kind, "f": f, "value": value }).to_string()
}

/// Writes history lines to stdout, flushed per line so the harness stamps them as they happen.
#[derive(Debug, Default, Clone, Copy)]
pub struct History;

impl History {
    pub fn emit(&self, kind: &str, f: &str, value: Value) {
        let mut text = line(kind, f, value);
        text.push('\n');
        let out = std::io::stdout();
        let mut out = out.lock();
        // A harness that stopped reading is not a reason to stop moving data.
        let _ = out.write_all(text.as_bytes());
        let _ = out.flush();
    }
    pub fn invoke(&self, f: &str, value: Value) {
        self.emit("invoke", f, value)
    }
    pub fn ok(&self, f: &str, value: Value) {
        self.emit("ok", f, value)
    }
    pub fn fail(&self, f: &str, value: Value) {
        self.emit("fail", f, value)
    }
    pub fn info(&self, f: &str, value: Value) {
        self.emit("info", f, value)
    }
}

/// A refused write's value: names both tokens and the shard.
pub fn fenced_value(
    token: i64,
    shard_token: Option<i64>,
    shard: &str,
    turbine: Option<&str>,
) -> Value {
    let mut v = json!({ "reason": verb::FENCED, "token": token, "shard_token": shard_token, "shard": shard });
    if let Some(t) = turbine {
        v["turbine"] = json!(t);
    }
    v
}

/// The human line a refused write prints on stderr.
pub fn fenced_message(box_name: &str, shard: &str, token: i64, shard_token: Option<i64>) -> String {
    match shard_token {
        Some(s) => format!("{box_name}: {shard} refused token {token} (shard has {s}): stopping"),
        None => {
            format!("{box_name}: {shard} refused token {token} (shard has no fence row): stopping")
        }
    }
}
