//! The scenario's `[expect]` section: the verdict it is expected to show and the dangerous
//! moments it exists to reach (a valid run that reached none of them is `unknown`).

use super::{Scenario, ScenarioError, ScenarioFile, Validator};
use chaos_history::Moment;
use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ExpectSection {
    /// What the scenario is expected to show, for documentation and tests.
    #[serde(default)]
    pub verdict: Option<String>,
    /// The dangerous moments the scenario exists to reach (`stale-write`, ...): a valid run
    /// that reached none of them is `unknown` (`chaos_history::Moment`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub reach: Vec<String>,
}

impl Validator {
    /// The verdict is one of three; the moments are the ones its system can reach (a lease's,
    /// or the failover's when its boxes hold none).
    pub(super) fn expect(
        &self,
        file: &ScenarioFile,
        holds_lease: bool,
    ) -> Result<(), ScenarioError> {
        if let Some(v) = &file.expect.verdict {
            if !["valid", "invalid", "unknown"].contains(&v.as_str()) {
                return Err(self.field(
                    "expect.verdict",
                    format!("'{v}' is not one of valid, invalid, unknown"),
                ));
            }
        }
        let failover = !holds_lease;
        for name in &file.expect.reach {
            let m = Moment::parse(name).map_err(|e| self.field("expect.reach", e))?;
            if m.failover() != failover {
                let why = match failover {
                    true => "a failover run reaches only promotion-while-writable".to_string(),
                    false => format!(
                        "'{m}' is the failover's; a {} run holds a lease",
                        file.system.name()
                    ),
                };
                return Err(self.field("expect.reach", why));
            }
        }
        Ok(())
    }
}

impl Scenario {
    /// The moments the scenario exists to reach (`[expect] reach`, checked when loaded).
    pub fn expected_moments(&self) -> Vec<Moment> {
        self.file
            .expect
            .reach
            .iter()
            .filter_map(|n| Moment::parse(n).ok())
            .collect()
    }
}
