//! The scenario's sections for the seed's other designs (`[payout]`, `[objects]`), read only
//! for the system that uses them; each system checks its own (`systems/payout.rs`,
//! `systems/ten_objects.rs`).

pub use chaos_workloads::designs::objects::ObjectsFence;
use serde::{Deserialize, Serialize};

/// System `payout` (lesson 007): the publishers owed this month, paid one by one to a card
/// processor (a shard's ledger) that cannot keep score.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct PayoutSection {
    pub publishers: u32,
    /// The month being paid, `YYYY-MM`.
    pub month: String,
    /// Payments carry an idempotency key the processor refuses to see twice (lesson 019).
    pub idempotent: bool,
    /// The shard that plays the card processor.
    pub processor: String,
}

impl Default for PayoutSection {
    fn default() -> Self {
        PayoutSection {
            publishers: 40,
            month: "2026-03".into(),
            idempotent: false,
            processor: "shard1".into(),
        }
    }
}

/// System `ten-objects`: a configuration of `count` objects spread over the shards (object
/// `i` on shard `(i - 1) % shards + 1`, the pointer on shard1), and the reference updater's
/// fencing design.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct ObjectsSection {
    pub count: u32,
    pub fence: ObjectsFence,
}

impl Default for ObjectsSection {
    fn default() -> Self {
        ObjectsSection {
            count: 10,
            fence: ObjectsFence::Off,
        }
    }
}
