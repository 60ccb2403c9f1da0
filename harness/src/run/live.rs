//! A run while it runs: the scenario clock started on ready movers, the nemesis, the triggers and the ingest going, the wait for its end, then every fault healed and everything stopped before the final reads.

use crate::audit;
use crate::backend::{Cluster, MoverSpec};
use crate::faults::Nemesis;
use crate::links::Links;
use crate::lock::{LockServer, Observer};
use crate::movers::{Movers, Supervisor};
use crate::progress::{say, Progress};
use crate::scenario::Scenario;
use crate::testbed::LinkUrls;
use crate::triggers::Watch;
use chaos_history::{Audit, FinalState, HistoryWriter, ScenarioClock};
use chaos_workloads::galewatch::Farm;
use chaos_workloads::ingest::{self, IngestConfig, IngestShard, IngestStats};
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

/// How far ahead the scenario clock is set when the movers are ready: the faults due at the
/// start (their proxy reads done in the meantime) land at it, and the movers go right after.
const START_LEAD: Duration = Duration::from_millis(40);

/// A history larger than this is cut (and the run marked incomplete): a limit on everything.
pub const HISTORY_LIMIT: u64 = 50_000_000;

/// How long the lock observer may take to read the service before the clock starts.
const OBSERVER_READY: Duration = Duration::from_secs(10);

/// Everything a run has going between the clock's start and its end.
pub struct Live {
    pub scenario: Arc<Scenario>,
    pub cluster: Arc<tokio::sync::Mutex<Cluster>>,
    pub links: Arc<Links>,
    pub history: HistoryWriter,
    pub clock: ScenarioClock,
    pub movers: Arc<Movers>,
    pub nemesis: Arc<Nemesis>,
    progress: Arc<Progress>,
    watch: Watch,
    lock: Arc<tokio::sync::Mutex<LockServer>>,
    observer: Observer,
    nemesis_task: tokio::task::JoinHandle<()>,
    stop_ingest: Arc<AtomicBool>,
    ingest: Vec<tokio::task::JoinHandle<IngestStats>>,
    t0: Instant,
    /// Redis with a replica: the harness's sentinel, promoting it on the primary's silence.
    sentinel: Option<super::sentinel::Sentinel>,
}

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

/// Every system's wait for its run's end: `ending` is asked every 10 ms at the scenario's
/// time, `line` (the progress) is printed every 2 s and with the end, which is said and
/// returned.
pub(crate) async fn wait_for_end(
    history: &HistoryWriter,
    t0: Instant,
    quiet: bool,
    mut ending: impl FnMut(i64) -> Option<Ending>,
    line: impl Fn(i64) -> String,
) -> End {
    let mut last_print = Instant::now();
    let end = loop {
        tokio::time::sleep(Duration::from_millis(10)).await;
        let now_ms = history.now_scenario_ms();
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
        scenario_s: t0.elapsed().as_secs_f64(),
    }
}

/// What the run leaves for judging, read once everything is stopped.
pub struct Finals {
    pub audit: Audit,
    pub final_state: FinalState,
    pub ingest: Vec<IngestStats>,
    pub events: u64,
    pub dropped: u64,
    /// Triggers that never fired (and were not optional): the run cannot judge.
    pub unfired: Vec<String>,
}

/// The parts of a testbed a run goes on with.
pub struct Bed {
    pub cluster: Cluster,
    pub links: Arc<Links>,
    pub lock: LockServer,
    pub urls: LinkUrls,
    pub shards: Vec<String>,
}

/// The run's clock, starting a moment from now (so the faults due at the start land at it),
/// and its history: every system's live run begins with them.
pub(crate) fn start_clock(
    scenario: &Scenario,
    history_path: &Path,
    limit: u64,
) -> anyhow::Result<(Instant, ScenarioClock, HistoryWriter)> {
    let t0 = Instant::now() + START_LEAD;
    let start_unix_ns = (SystemTime::now() + START_LEAD)
        .duration_since(UNIX_EPOCH)?
        .as_nanos() as i64;
    let clock = scenario.clock(start_unix_ns);
    let history = HistoryWriter::create(history_path, t0, clock, limit)?;
    Ok((t0, clock, history))
}

impl Live {
    /// The run's clock checked against the wall clock now (`progress::checked_clock`).
    pub fn clock_now(&self, quiet: bool) -> ScenarioClock {
        crate::progress::checked_clock(self.clock, self.t0, quiet)
    }

    /// Arm the triggers, start the movers (held at their gates, connected), start the clock a
    /// moment from now (so the faults due at the start land at it), then let the movers go
    /// and start the nemesis and the ingest.
    pub async fn start(
        scenario: Arc<Scenario>,
        bed: Bed,
        specs: Vec<MoverSpec>,
        farm: &Farm,
        history_path: &Path,
        log_dir: &Path,
    ) -> anyhow::Result<Live> {
        let Bed {
            cluster,
            links,
            lock,
            urls,
            shards,
        } = bed;
        let routing = cluster.admin_url("routing");
        let mut watch = Watch::arm(&scenario, &links, &routing).await?;
        cluster.prepare_movers(&specs).await?;
        links.warm_up().await;
        let launcher = cluster.launcher();
        let cluster = Arc::new(tokio::sync::Mutex::new(cluster));
        // The lock service's own record, from before the first grant (claims: the routing db's
        // audit and NOTIFY, read by the triggers and at the end): read before the clock starts,
        // so a grant at the start is heard as it commits, not when a late first read finds it.
        let service = scenario.file.lock.service;
        let endpoint = lock.endpoints().unwrap_or_else(|| routing.clone());
        let lock_names = crate::lock::Names::default();
        let (observer, feed) = Observer::start(
            service,
            &scenario.file.lease.job,
            &service.key(&scenario.file.lease.job),
            &endpoint,
            lock_names.clone(),
        );
        if !observer.ready(OBSERVER_READY).await {
            anyhow::bail!(
                "the {} lock service did not answer the harness's observer at {endpoint} within {} s",
                service.name(),
                OBSERVER_READY.as_secs()
            );
        }
        let (t0, clock, history) = start_clock(&scenario, history_path, HISTORY_LIMIT)?;
        let progress = Arc::new(Progress::new(farm.plan().len()));
        let movers = movers(
            &scenario, specs, launcher, &history, &progress, log_dir, lock_names,
        );
        if service != crate::lock::LockKind::Claims {
            watch.hear_lock(feed);
        }
        let nemesis = Nemesis::new(
            cluster.clone(),
            links.clone(),
            movers.clone(),
            history.clone(),
            progress.clone(),
            scenario.clone(),
            t0,
        );
        let lock = Arc::new(tokio::sync::Mutex::new(lock));
        let _ = nemesis.lock.set(lock.clone());
        let lock_section = &scenario.file.lock;
        let sentinel = super::sentinel::Sentinel::start(super::sentinel::Watching {
            lock: lock.clone(),
            links: links.clone(),
            history: history.clone(),
            after: Duration::from_millis(scenario.real_ms(lock_section.promote_after_s * 1000.0)),
            after_s: lock_section.promote_after_s,
            boxes: scenario.topology().boxes.clone(),
            key: service.key(&scenario.file.lease.job),
        })
        .await;
        watch.start(nemesis.clone());
        let schedule = scenario.schedule.clone();
        let initial = nemesis.apply_initial(&schedule).await;
        // The movers go at the scenario's start, not before: a fast mover's first writes would
        // otherwise happen before the clock's zero (and be stamped 0). Every gate at once: one
        // after another put the last box milliseconds (scenario seconds) behind the first.
        tokio::time::sleep_until(t0.into()).await;
        let boxes = movers.boxes();
        for r in futures_util::future::join_all(boxes.iter().map(|b| movers.spawn(b))).await {
            r?;
        }
        let nemesis_task = tokio::spawn(nemesis.clone().run(schedule, initial));
        let stop_ingest = Arc::new(AtomicBool::new(false));
        let ingest = start_ingest(&scenario, farm, &urls, &shards, &history, &stop_ingest);
        Ok(Live {
            scenario,
            cluster,
            links,
            history,
            clock,
            movers,
            nemesis,
            progress,
            watch,
            lock,
            observer,
            nemesis_task,
            stop_ingest,
            ingest,
            t0,
            sentinel,
        })
    }

    /// Wait for every mover to exit (a restart owed keeps the run going), the mover to prove
    /// unable to run, or the scenario's time limit; print progress meanwhile.
    pub async fn wait(&self, quiet: bool) -> End {
        let ending = |now_ms: i64| {
            if let Some(failure) = self.movers.setup_failure() {
                return Some(Ending::setup_failure("the mover could not run", failure));
            }
            if self.movers.running() == 0
                && self.movers.pending_restarts.load(Ordering::SeqCst) == 0
            {
                return Some(Ending::because("every mover exited"));
            }
            (now_ms >= self.scenario.end_ms).then(|| Ending {
                time_limited: true,
                ..Ending::because(&format!(
                    "the scenario's time limit {} was reached",
                    ScenarioClock::format(self.scenario.end_ms)
                ))
            })
        };
        wait_for_end(&self.history, self.t0, quiet, ending, |ms| {
            self.progress.line(ms)
        })
        .await
    }

    /// Stop the nemesis and the triggers, the movers and the ingest; heal every fault; read the
    /// audit and the final state; stop the databases and the proxy. With `read` false (the
    /// mover could not run) nothing is read: everything is only stopped.
    pub async fn wind_down(self, read: bool) -> anyhow::Result<Option<Finals>> {
        // No promotion while the faults are healed.
        drop(self.sentinel);
        self.nemesis_task.abort();
        let _ = self.nemesis_task.await;
        let unfired = self.watch.disarm(&self.history).await;
        self.movers.stop_all().await;
        self.stop_ingest.store(true, Ordering::Relaxed);
        let mut ingest = Vec::new();
        for t in self.ingest {
            if let Ok(st) = t.await {
                ingest.push(st);
            }
        }
        self.nemesis.heal_all().await;
        let observed = self.observer.finish().await;
        let finals = if read {
            let (audit, final_state) = {
                let c = self.cluster.lock().await;
                let topology = self.scenario.topology();
                let shards: Vec<(String, String)> = topology
                    .shards()
                    .iter()
                    .map(|n| (n.clone(), c.admin_url(n)))
                    .collect();
                let (mut audit, mut fin) = audit::collect(&c.admin_url("routing"), &shards).await;
                // The routing db's and shards' own stamps, read through their clock faults.
                crate::faults::clock::real_audit(
                    &self.nemesis.clock_log.lock().unwrap(),
                    &mut audit,
                );
                if let Some(changes) = observed {
                    audit.claim_changes = changes;
                }
                crate::systems::of(self.scenario.file.system)
                    .read_back(&self.scenario, &shards, &mut audit, &mut fin)
                    .await;
                (audit, fin)
            };
            let (events, dropped) = self.history.finish()?;
            Some(Finals {
                audit,
                final_state,
                ingest,
                events,
                dropped,
                unfired,
            })
        } else {
            let _ = self.history.finish();
            None
        };
        self.lock.lock().await.stop().await;
        self.cluster.lock().await.stop_all().await;
        self.links.shutdown().await;
        Ok(finals)
    }
}

/// The boxes and their supervisor. A mover that exits non-zero within one lease of its start,
/// printing nothing, did not run: with every box so (or one box 5 times in a row) the run is
/// a setup failure. A box whose mover once ran is never counted again.
fn movers(
    scenario: &Scenario,
    specs: Vec<MoverSpec>,
    launcher: crate::backend::Launcher,
    history: &HistoryWriter,
    progress: &Arc<Progress>,
    log_dir: &Path,
    lock_names: crate::lock::Names,
) -> Arc<Movers> {
    let s = &scenario.file;
    let real = |scenario_s: f64| scenario.real_ms(scenario_s * 1000.0);
    Movers::new(
        specs,
        launcher,
        history.clone(),
        progress.clone(),
        log_dir.to_path_buf(),
        Duration::from_millis(real(s.lease.lease_s).max(1000)),
        Supervisor {
            restart: s.mover.restart,
            delay: Duration::from_millis(real(s.mover.restart_delay_s)),
        },
        lock_names,
    )
}

/// One ingest task per shard, writing every turbine that shard owns every `ingest_every_s`.
fn start_ingest(
    scenario: &Scenario,
    farm: &Farm,
    urls: &LinkUrls,
    shards: &[String],
    history: &HistoryWriter,
    stop: &Arc<AtomicBool>,
) -> Vec<tokio::task::JoinHandle<IngestStats>> {
    let s = &scenario.file;
    if s.data.ingest_every_s <= 0.0 || !crate::systems::of(s.system).moves_turbines() {
        return vec![];
    }
    let config = IngestConfig {
        every: Duration::from_micros((s.data.ingest_every_s * s.time_scale_ms * 1000.0) as u64),
        every_scenario_ms: (s.data.ingest_every_s * 1000.0) as i64,
        timeout: Duration::from_millis(scenario.real_ms(s.lease.lease_s * 1000.0).max(1000)),
    };
    shards
        .iter()
        .map(|n| {
            let shard = IngestShard {
                shard: n.clone(),
                url: urls.harness(&format!("ingest->{n}")),
                turbines: farm.ingested_on(n),
            };
            tokio::spawn(ingest::run_shard(
                shard,
                config.clone(),
                history.clone(),
                stop.clone(),
            ))
        })
        .collect()
}
