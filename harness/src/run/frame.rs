//! The run frame every system's live run shares: the scenario clock started a moment from now
//! with its history, the programs under test under their supervisor, the nemesis over the
//! servers and proxies, the wait for the run's end and the end said; and, at the end, the
//! servers and proxies stopped. A system's live run (`run/live.rs`, `failover/live.rs`) adds its
//! own parts around it (the triggers, the lock, the ingest; the observer and the app).

use crate::backend::Cluster;
use crate::faults::Nemesis;
use crate::links::Links;
use crate::movers::Movers;
use crate::progress::{say, Progress};
use crate::scenario::Scenario;
use chaos_history::{HistoryWriter, ScenarioClock};
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

/// What every system's run has going between the clock's start and its end.
pub struct Frame {
    pub scenario: Arc<Scenario>,
    pub cluster: Arc<tokio::sync::Mutex<Cluster>>,
    pub links: Arc<Links>,
    pub history: HistoryWriter,
    pub clock: ScenarioClock,
    pub movers: Arc<Movers>,
    pub nemesis: Arc<Nemesis>,
    pub progress: Arc<Progress>,
    pub t0: Instant,
}

/// The run's clock and history, started (`start_clock`).
pub(crate) struct Started {
    pub t0: Instant,
    pub clock: ScenarioClock,
    pub history: HistoryWriter,
}

impl Frame {
    /// The frame of a run whose clock has started and whose programs are made: the nemesis
    /// over its servers, proxies and programs.
    pub(crate) fn new(
        scenario: Arc<Scenario>,
        cluster: Arc<tokio::sync::Mutex<Cluster>>,
        links: Arc<Links>,
        started: Started,
        progress: Arc<Progress>,
        movers: Arc<Movers>,
    ) -> Frame {
        let Started { t0, clock, history } = started;
        let nemesis = Nemesis::new(
            cluster.clone(),
            links.clone(),
            movers.clone(),
            history.clone(),
            progress.clone(),
            scenario.clone(),
            t0,
        );
        Frame {
            scenario,
            cluster,
            links,
            history,
            clock,
            movers,
            nemesis,
            progress,
            t0,
        }
    }

    /// The run's clock checked against the wall clock now (`progress::checked_clock`).
    pub fn clock_now(&self, quiet: bool) -> ScenarioClock {
        crate::progress::checked_clock(self.clock, self.t0, quiet)
    }

    /// Wait for the run's end: the program under test (`program`: "the mover") proving
    /// unable to run, or what `ending` says, asked every 10 ms at the scenario's time; `line`
    /// (the progress) is printed every 2 s and with the end, which is said and returned.
    pub(crate) async fn wait(
        &self,
        quiet: bool,
        program: &str,
        mut ending: impl FnMut(i64) -> Option<Ending>,
        line: impl Fn(i64) -> String,
    ) -> End {
        let history = &self.history;
        let mut last_print = Instant::now();
        let end = loop {
            tokio::time::sleep(Duration::from_millis(10)).await;
            let now_ms = history.now_scenario_ms();
            if let Some(failure) = self.movers.setup_failure() {
                let reason = format!("{program} could not run");
                break Ending::setup_failure(&reason, failure);
            }
            if let Some(end) = ending(now_ms) {
                break end;
            }
            if last_print.elapsed() >= Duration::from_secs(2) {
                say(quiet, &line(now_ms));
                last_print = Instant::now();
            }
        };
        let scenario_ms = history.now_scenario_ms();
        say(
            quiet,
            &format!(
                "{}\nchaos: the run ends at {}: {}",
                line(scenario_ms),
                ScenarioClock::format(scenario_ms),
                end.reason
            ),
        );
        End {
            reason: end.reason,
            time_limited: end.time_limited,
            setup_failure: end.setup_failure,
            scenario_ms,
            scenario_s: self.t0.elapsed().as_secs_f64(),
        }
    }

    /// The history closed, its events and the lines it dropped counted when the run is read
    /// (`read`), else only closed.
    pub(crate) fn close_history(&self, read: bool) -> anyhow::Result<Option<(u64, u64)>> {
        if read {
            return Ok(Some(self.history.finish()?));
        }
        let _ = self.history.finish();
        Ok(None)
    }

    /// Every server and proxy of the run stopped.
    pub(crate) async fn stop_servers(&self) {
        self.cluster.lock().await.stop_all().await;
        self.links.shutdown().await;
    }
}

/// How far ahead the scenario clock is set when the movers are ready: the faults due at the
/// start (their proxy reads done in the meantime) land at it, and the movers go right after.
const START_LEAD: Duration = Duration::from_millis(40);

/// How the run ended.
pub struct End {
    pub reason: String,
    pub time_limited: bool,
    /// The mover (the watcher) could not run at all: nothing is judged.
    pub setup_failure: Option<String>,
    pub scenario_ms: i64,
    /// Real seconds from the clock's start to the end.
    pub scenario_s: f64,
}

/// Why a run ends, as its wait sees it: the reason, whether the time limit ended it, and what
/// kept its program from running.
pub(crate) struct Ending {
    pub reason: String,
    pub time_limited: bool,
    pub setup_failure: Option<String>,
}

impl Ending {
    pub fn because(reason: &str) -> Ending {
        Ending {
            reason: reason.to_string(),
            time_limited: false,
            setup_failure: None,
        }
    }

    pub fn setup_failure(reason: &str, failure: String) -> Ending {
        Ending {
            setup_failure: Some(failure),
            ..Ending::because(reason)
        }
    }
}

/// The run's clock, starting a moment from now (so the faults due at the start land at it),
/// and its history: every system's live run begins with them.
pub(crate) fn start_clock(
    scenario: &Scenario,
    history_path: &Path,
    limit: u64,
) -> anyhow::Result<Started> {
    let t0 = Instant::now() + START_LEAD;
    let start_unix_ns = (SystemTime::now() + START_LEAD)
        .duration_since(UNIX_EPOCH)?
        .as_nanos() as i64;
    let clock = scenario.clock(start_unix_ns);
    let history = HistoryWriter::create(history_path, t0, clock, limit)?;
    Ok(Started { t0, clock, history })
}
