//! What a person watching a run sees: turbines moved, the current holder, refused writes, printed as a line every few seconds.

use chaos_history::verb;
use chaos_history::{OpType, ScenarioClock};
use std::sync::Mutex;

#[derive(Debug, Default, Clone)]
pub struct ProgressState {
    pub moved: u32,
    pub skipped: u32,
    pub holder: Option<(String, i64)>,
    pub refused: u32,
    pub tidy_ups: u32,
    pub faults: Vec<String>,
    /// Per box, the `why` of its delete in flight (its `ok` does not repeat it).
    pub deleting: std::collections::BTreeMap<String, String>,
}

/// Updated from the movers' history lines and the nemesis.
#[derive(Debug, Default)]
pub struct Progress {
    state: Mutex<ProgressState>,
    pub plan_len: usize,
}

impl Progress {
    pub fn new(plan_len: usize) -> Progress {
        Progress {
            state: Mutex::new(ProgressState::default()),
            plan_len,
        }
    }

    pub fn observe(&self, box_name: &str, kind: OpType, f: &str, value: &serde_json::Value) {
        let mut s = self.state.lock().unwrap();
        match (kind, f) {
            (OpType::Ok, verb::ACQUIRE) => {
                s.holder = Some((
                    box_name.to_string(),
                    value.get("token").and_then(|t| t.as_i64()).unwrap_or(0),
                ))
            }
            (OpType::Invoke, verb::DELETE) => {
                let why = value
                    .get("why")
                    .and_then(|w| w.as_str())
                    .unwrap_or("source")
                    .to_string();
                if why == "tidy-up" {
                    s.tidy_ups += 1;
                }
                s.deleting.insert(box_name.to_string(), why);
            }
            (OpType::Ok, verb::DELETE) => {
                if s.deleting.remove(box_name).as_deref() != Some("tidy-up") {
                    s.moved += 1;
                }
            }
            (OpType::Ok, verb::SKIP) => s.skipped += 1,
            (OpType::Fail, _)
                if value.get("reason").and_then(|r| r.as_str()) == Some(verb::FENCED) =>
            {
                s.refused += 1
            }
            _ => {}
        }
    }

    pub fn fault_started(&self, label: String) {
        self.state.lock().unwrap().faults.push(label);
    }

    pub fn fault_healed(&self, label: &str) {
        let mut s = self.state.lock().unwrap();
        if let Some(i) = s.faults.iter().position(|f| f == label) {
            s.faults.remove(i);
        }
    }

    pub fn snapshot(&self) -> ProgressState {
        self.state.lock().unwrap().clone()
    }

    /// `[22:05:00] moved 61/133 · holder box-2 (token 17) · faults: stop routing`
    pub fn line(&self, scenario_ms: i64) -> String {
        let s = self.snapshot();
        let holder = match &s.holder {
            Some((b, t)) => format!("{b} (token {t})"),
            None => "none yet".into(),
        };
        let mut line = format!(
            "[{}] moved {}/{} · last grant {holder}",
            ScenarioClock::format(scenario_ms),
            s.moved,
            self.plan_len
        );
        if s.refused > 0 {
            line.push_str(&format!(" · refused writes {}", s.refused));
        }
        if s.tidy_ups > 0 {
            line.push_str(&format!(" · tidy-up deletes {}", s.tidy_ups));
        }
        if !s.faults.is_empty() {
            line.push_str(&format!(" · faults: {}", s.faults.join(", ")));
        }
        line
    }
}

/// A progress line on stderr, unless quiet.
pub fn say(quiet: bool, line: &str) {
    if !quiet {
        eprintln!("{line}");
    }
}

/// The run's clock with its wall clock checked against the monotonic one now (database commit
/// times are on the wall clock, the history on the monotonic one); says so, unless quiet, when
/// the machine's wall clock moved during the run.
pub fn checked_clock(clock: ScenarioClock, t0: std::time::Instant, quiet: bool) -> ScenarioClock {
    let clock = clock.checked_now(t0);
    if let Some(line) = clock.wall_drift_warning() {
        say(quiet, &format!("chaos: {line}"));
    }
    clock
}
