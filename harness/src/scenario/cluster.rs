//! The scenario's `[cluster]` section: how many shards and boxes, and which Postgres nodes run
//! asynchronous commit.

use super::{topology_of, ScenarioError, ScenarioFile, System, Validator};
use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct ClusterSection {
    pub shards: usize,
    pub boxes: usize,
    /// Postgres nodes run with `synchronous_commit = off`, as many run a lock store: a commit
    /// is acknowledged before its WAL is written, and a crash (`lose_unsynced`) loses it.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub asynchronous_commit: Vec<String>,
}

impl Default for ClusterSection {
    fn default() -> Self {
        ClusterSection {
            shards: 3,
            boxes: 4,
            asynchronous_commit: vec![],
        }
    }
}

impl Validator {
    /// `[cluster] asynchronous_commit` names the scenario's own Postgres nodes (the failover's
    /// servers stream to each other and are started by its own bring-up: not there).
    pub(super) fn asynchronous_commit(&self, file: &ScenarioFile) -> Result<(), ScenarioError> {
        let named = &file.cluster.asynchronous_commit;
        if named.is_empty() {
            return Ok(());
        }
        if file.system == System::Failover {
            return Err(self.field(
                "cluster.asynchronous_commit",
                "the failover's servers run synchronous commit; asynchronous commit is for the mover's and the seed designs' nodes".into(),
            ));
        }
        let nodes = topology_of(file).postgres_nodes();
        match named.iter().find(|n| !nodes.contains(n)) {
            Some(n) => Err(self.field(
                "cluster.asynchronous_commit",
                format!(
                    "'{n}' is not a Postgres node of this scenario (its nodes: {})",
                    nodes.join(", ")
                ),
            )),
            None => Ok(()),
        }
    }
}
