//! The systems a run can test, and what the seed's other designs keep in a stored run: the payout ledger (lesson 007's election) and the ten objects under one lease.
//!
//! The mover's record is the rest of `record.rs`; these types ride beside it with serde
//! defaults, so a stored mover run reads as it always did.

use serde::{Deserialize, Serialize};

/// Which system a scenario runs and judges. Each is a design from the seed with a reference
/// implementation, a protocol a team's own program can follow, and checker classes of its own.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum System {
    /// The Galewatch mover: turbines moved between shards under a lease (the April night).
    #[default]
    Mover,
    /// Lesson 007's payout lock: one box pays every publisher of the month to a ledger that
    /// cannot keep score (the card processor).
    Payout,
    /// Ten objects updated together under one lease (the GC-pause question's follow-up).
    TenObjects,
    /// A primary, a streaming replica and a watcher that promotes on silence (GitHub, 2018).
    Failover,
}

impl System {
    /// The name a scenario file uses (`ten-objects`).
    pub fn name(self) -> &'static str {
        match self {
            System::Mover => "mover",
            System::Payout => "payout",
            System::TenObjects => "ten-objects",
            System::Failover => "failover",
        }
    }
}

/// One publisher owed a payout this month (the routing db's `payout_plan`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Payee {
    pub position: i32,
    pub publisher: String,
    pub amount_cents: i64,
}

/// What a payout run owed, and how the boxes were told to pay it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PayoutMeta {
    /// The month being paid, `YYYY-MM`.
    pub month: String,
    pub payees: Vec<Payee>,
    /// The shard that plays the card processor (the ledger's home).
    pub processor: String,
}

/// How the ten objects were laid out.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ObjectsMeta {
    /// Object ids 1..=count, object `i` on `shards[(i - 1) % shards.len()]`.
    pub count: i32,
    /// The shard holding the pointer object (the compare-and-set in front of the objects).
    pub pointer_shard: String,
}

/// One payment the processor accepted: a row of its ledger, with who sent it and when it
/// committed there.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Payment {
    pub publisher: String,
    pub month: String,
    pub amount_cents: i64,
    /// The sender's `application_name`.
    pub app: String,
    /// The sender's token, when it said one (the processor does not check it).
    #[serde(default)]
    pub token: Option<i64>,
    /// The idempotency key the sender gave (a second payment with the same key is refused).
    #[serde(default)]
    pub idempotency_key: Option<String>,
    /// `pg_xact_commit_timestamp`, Unix ns (0: unknown).
    pub commit_unix_ns: i64,
}

/// One object as a shard holds it at the end: its live version, or a version written beside
/// the live one (the pointer design).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ConfigObject {
    pub object: i32,
    pub shard: String,
    /// The version the object carries (a leader's version is its token; 0 is the initial one).
    pub version: i64,
    /// The highest token the object has obeyed (its fence).
    pub token: i64,
    pub value: String,
    /// Who wrote its value (`application_name`).
    pub app: String,
}

/// The pointer object: which version of the objects is live (the pointer design).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct ConfigPointer {
    pub version: i64,
    pub token: i64,
}

/// The ten objects at the end: the live rows, the pointer and the versions beside them.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ConfigState {
    pub objects: Vec<ConfigObject>,
    #[serde(default)]
    pub pointer: Option<ConfigPointer>,
    /// The rows written beside the live objects for the version the pointer names.
    #[serde(default)]
    pub pointed: Vec<ConfigObject>,
}

impl ConfigState {
    /// The configuration a reader sees: the pointer's version when a pointer was ever flipped,
    /// else the live objects.
    pub fn live(&self) -> &[ConfigObject] {
        match self.pointer {
            Some(p) if p.version > 0 => &self.pointed,
            _ => &self.objects,
        }
    }

    /// True when a reader sees the pointer's version (the pointer design was used).
    pub fn through_pointer(&self) -> bool {
        self.pointer.is_some_and(|p| p.version > 0)
    }
}

/// What a committed write to an object did.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum ObjectWriteKind {
    /// A live object's value changed (a version written in place).
    Content,
    /// Only its token moved (a fence at grant time).
    Fence,
    /// A version written beside the live objects (the pointer design: not yet visible).
    Side,
    /// The pointer flipped to another version: the whole configuration changed at once.
    Pointer,
}

/// One committed write to an object or the pointer, recorded by the shard's own trigger.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ObjectWrite {
    pub shard: String,
    /// The object's id (0 for the pointer).
    pub object: i32,
    pub kind: ObjectWriteKind,
    pub version: i64,
    pub token: i64,
    pub app: String,
    pub xid: i64,
    /// `pg_xact_commit_timestamp`, Unix ns (0: unknown).
    pub commit_unix_ns: i64,
}
