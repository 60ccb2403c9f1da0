//! The failover system's settings: the scenario's `[failover]` section (serde defaults), its checks, the command-line overrides that apply to it, and the topology its faults name.

use crate::program::{program_defaults, program_section, Ready};
use chaos_history::failover_names as names;
use chaos_nemesis::Topology;
pub use chaos_workloads::failover::Fence;
use serde::{Deserialize, Serialize};

program_section! {
    /// `[failover]`: the watcher's constants, the app's pace, the replication mode, then the
    /// program and its supervision. Times are scenario seconds unless a name says real.
    #[derive(Debug, Clone, Serialize, Deserialize)]
    #[serde(deny_unknown_fields, default)]
    pub struct FailoverSection {
        /// A silence this long makes the watcher promote (30 s in the shop's fifty lines).
        pub silence_s: f64,
        /// How often the watcher checks the primary.
        pub check_s: f64,
        /// A check that takes longer has failed.
        pub check_timeout_s: f64,
        /// The reference watcher's fence: off (promote and repoint) or on (fence the old
        /// primary first).
        pub fence: Fence,
        /// The primary waits for the replica before acknowledging a commit
        /// (`synchronous_standby_names`).
        pub synchronous: bool,
        /// The app's pool: connections, each writing one order every `write_every_s`.
        pub app_connections: u32,
        pub write_every_s: f64,
        /// An open connection is closed and opened again (the service record resolved anew)
        /// after this long (the pool's first connections after (k+1)/n of it, so they do not
        /// all recycle at once); 0: only when it breaks.
        pub conn_lifetime_s: f64,
        /// A write (or a connect) that takes longer is abandoned: the order is `info`.
        pub write_timeout_s: f64,
        /// How often the harness samples both servers' roles and the proxies, REAL ms.
        pub observe_real_ms: u64,
    }
}

impl Default for FailoverSection {
    fn default() -> Self {
        program_defaults!(FailoverSection {
            silence_s: 30.0,
            check_s: 1.0,
            check_timeout_s: 1.0,
            fence: Fence::Off,
            synchronous: false,
            app_connections: 2,
            write_every_s: 0.5,
            conn_lifetime_s: 20.0,
            write_timeout_s: 5.0,
            observe_real_ms: 10,
        })
    }
}

/// The links of the failover system: the app's to each server (it dials the one the service
/// record names), the watcher's to each, and replication (the replica's to the primary).
pub const LINKS: [&str; 5] = [
    "app->primary",
    "app->replica",
    "watcher->primary",
    "watcher->replica",
    "replica->primary",
];

/// What its faults can name: the watcher (a box: pause, kill), the two servers, the links.
pub fn topology() -> Topology {
    Topology::with_links(
        vec![names::WATCHER.to_string()],
        vec![names::PRIMARY.to_string(), names::REPLICA.to_string()],
        LINKS.iter().map(|l| l.to_string()).collect(),
    )
}

/// The command-line overrides of the failover system, as `chaos run` parsed them.
#[derive(Debug, Clone, Default)]
pub struct Overrides {
    pub fence: Option<Fence>,
    pub watcher_cmd: Option<String>,
    pub watcher_ready: Option<Ready>,
    pub silence_s: Option<f64>,
}

impl Overrides {
    /// Whether any was given.
    pub fn any(&self) -> bool {
        self.fence.is_some()
            || self.watcher_cmd.is_some()
            || self.watcher_ready.is_some()
            || self.silence_s.is_some()
    }
}

/// A refusal: the field and what to give instead.
type Refusal = (String, String);

fn field(name: &str, message: String) -> Refusal {
    (name.to_string(), message)
}

/// The checks of a failover scenario's settings, each refusal naming the field: its section
/// (defaults when absent), the first fault with a trigger, whether it asks for a generator.
pub fn validate(
    section: Option<&FailoverSection>,
    trigger: Option<usize>,
    random: bool,
) -> Result<(), Refusal> {
    let f = section.cloned().unwrap_or_default();
    let positive = [
        ("failover.silence_s", f.silence_s),
        ("failover.check_s", f.check_s),
        ("failover.check_timeout_s", f.check_timeout_s),
        ("failover.write_every_s", f.write_every_s),
        ("failover.write_timeout_s", f.write_timeout_s),
        ("failover.ready_timeout_real_s", f.ready_timeout_real_s),
    ];
    for (name, v) in positive {
        if !(v > 0.0 && v <= 86_400.0) {
            return Err(field(
                name,
                format!("must be above 0 and at most 86400 (got {v})"),
            ));
        }
    }
    for (name, v) in [
        ("failover.conn_lifetime_s", f.conn_lifetime_s),
        ("failover.restart_delay_s", f.restart_delay_s),
    ] {
        if !(0.0..=86_400.0).contains(&v) {
            return Err(field(name, format!("must be 0 to 86400 (got {v})")));
        }
    }
    if !(1..=16).contains(&f.app_connections) {
        return Err(field(
            "failover.app_connections",
            format!("must be 1 to 16 (got {})", f.app_connections),
        ));
    }
    if !(1..=1000).contains(&f.observe_real_ms) {
        return Err(field(
            "failover.observe_real_ms",
            format!("must be 1 to 1000 real ms (got {})", f.observe_real_ms),
        ));
    }
    if let Some(i) = trigger {
        return Err(field(
            &format!("fault[{i}].when"),
            "triggers watch the mover's claim and shard links; give a failover fault an `at`"
                .into(),
        ));
    }
    if random {
        return Err(field(
            "nemesis.random",
            "the generator draws the mover's faults; list a failover scenario's faults as [[fault]]".into(),
        ));
    }
    Ok(())
}

/// The settings as the run's record and the story show them.
pub fn describe(f: &FailoverSection) -> String {
    let watcher = f
        .command
        .clone()
        .unwrap_or_else(|| "reference watcher".into());
    let fence = if f.command.is_some() {
        "own"
    } else if f.fence == Fence::On {
        "on"
    } else {
        "off"
    };
    format!(
        "{watcher}, fence {fence}, silence {} s, check every {} s, {} replication",
        f.silence_s,
        f.check_s,
        if f.synchronous {
            "synchronous"
        } else {
            "asynchronous"
        }
    )
}
