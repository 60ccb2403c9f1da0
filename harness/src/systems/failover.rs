//! System `failover` (GitHub, October 2018): a watcher that promotes a replica when the
//! primary falls silent. Its run has its own frame and testbed (`failover/`: a primary, a
//! replica, a service, one watcher); here are its reference program and argv, its checks of a
//! scenario file and what its faults can name.

use super::interface::SystemUnderTest;
use crate::failover::settings::{FailoverSection, Fence};
use crate::scenario::{ScenarioError, ScenarioFile, Validator};
use chaos_nemesis::Topology;

/// System `failover`.
pub struct Failover;

/// The watcher's fencing as its `--fence` and the record say it: `own` for a team's watcher.
pub fn fence_word(f: &FailoverSection) -> &'static str {
    match (&f.command, f.fence) {
        (Some(_), _) => "own",
        (None, Fence::On) => "on",
        (None, Fence::Off) => "off",
    }
}

impl SystemUnderTest for Failover {
    fn program(&self) -> &'static str {
        "watcher"
    }

    fn own_program_flag(&self) -> &'static str {
        "--watcher-cmd"
    }

    /// Its `[failover]` section, and no trigger or generator it cannot honour.
    fn check_file(&self, v: &Validator, file: &ScenarioFile) -> Result<(), ScenarioError> {
        let trigger = file.faults.iter().position(|x| x.when.is_some());
        let random = file.nemesis.random.is_some();
        crate::failover::settings::validate(file.failover.as_ref(), trigger, random)
            .map_err(|(f, m)| v.field(&f, m))
    }

    /// The watcher (a box), the two servers and the links between them and the app.
    fn topology(&self, _file: &ScenarioFile) -> Topology {
        crate::failover::settings::topology()
    }

    fn holds_lease(&self) -> bool {
        false
    }

    fn reference_args(&self, s: &ScenarioFile) -> Vec<String> {
        let f = s.failover.clone().unwrap_or_default();
        let mut args = vec!["--fence".to_string(), fence_word(&f).to_string()];
        args.extend(f.args.iter().cloned());
        args
    }
}
