//! The scenario's `[cluster]` section: how many shards and boxes, and which Postgres nodes run
//! asynchronous commit.

use super::{ScenarioError, ScenarioFile, Validator};
use chaos_nemesis::Topology;
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
    /// `[cluster] asynchronous_commit` names the scenario's own Postgres nodes, those of a
    /// system that holds a lease (the failover's servers stream to each other and are started
    /// by its own bring-up: not there).
    pub(super) fn asynchronous_commit(
        &self,
        file: &ScenarioFile,
        topology: &Topology,
        holds_lease: bool,
    ) -> Result<(), ScenarioError> {
        let named = &file.cluster.asynchronous_commit;
        if named.is_empty() {
            return Ok(());
        }
        if !holds_lease {
            return Err(self.field(
                "cluster.asynchronous_commit",
                format!("the {}'s servers run synchronous commit; asynchronous commit is for the nodes of a system that holds a lease", file.system.name()),
            ));
        }
        let nodes = topology.postgres_nodes();
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
