//! The scenario's sections for the seed's other designs (`[payout]`, `[objects]`) and their checks, read only for the system that uses them.

use super::{parse_date, ScenarioError, ScenarioFile, System, Validator};
use chaos_nemesis::Topology;
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

impl Validator {
    /// The seed's other designs: their own sections, checked only for the system that uses them.
    pub(super) fn design(&self, file: &ScenarioFile) -> Result<(), ScenarioError> {
        match file.system {
            System::Payout => {
                let p = &file.payout;
                self.within(
                    "payout.publishers",
                    (1..=10_000).contains(&p.publishers),
                    "1 to 10000",
                    p.publishers,
                )?;
                let month_ok = p.month.len() == 7
                    && p.month.as_bytes()[4] == b'-'
                    && parse_date(&format!("{}-01", p.month)).is_some();
                if !month_ok {
                    return Err(self.field(
                        "payout.month",
                        format!("'{}' is not a month YYYY-MM", p.month),
                    ));
                }
                let topology = Topology::new(file.cluster.boxes, file.cluster.shards);
                if !topology.shards().contains(&p.processor) {
                    return Err(self.field(
                        "payout.processor",
                        format!(
                            "'{}' is not a shard of this cluster (shard1 to shard{})",
                            p.processor, file.cluster.shards
                        ),
                    ));
                }
                Ok(())
            }
            System::TenObjects => self.within(
                "objects.count",
                (1..=100).contains(&file.objects.count),
                "1 to 100",
                file.objects.count,
            ),
            System::Mover | System::Failover => Ok(()),
        }
    }
}
