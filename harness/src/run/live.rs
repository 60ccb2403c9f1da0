//! A run while it runs: the scenario clock started on ready movers, the nemesis, the triggers and the ingest going, the wait for its end, then every fault healed and everything stopped before the final reads.

use super::frame::{start_clock, End, Ending, Frame};
use crate::audit;
use crate::backend::{Cluster, MoverSpec};
use crate::links::Links;
use crate::lock::{LockServer, Observer};
use crate::movers::{Movers, Supervisor};
use crate::progress::Progress;
use crate::scenario::Scenario;
use crate::testbed::LinkUrls;
use crate::triggers::Watch;
use chaos_history::{Audit, ClaimChange, FinalState, HistoryWriter, ScenarioClock};
use chaos_workloads::galewatch::Farm;
use chaos_workloads::ingest::{self, IngestConfig, IngestShard, IngestStats};
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

/// A history larger than this is cut (and the run marked incomplete): a limit on everything.
pub const HISTORY_LIMIT: u64 = 50_000_000;

/// How long the lock observer may take to read the service before the clock starts.
const OBSERVER_READY: Duration = Duration::from_secs(10);

/// Everything a run has going between the clock's start and its end: the frame every system
/// shares, and the lease systems' own parts.
pub struct Live {
    pub frame: Frame,
    watch: Watch,
    lock: Arc<tokio::sync::Mutex<LockServer>>,
    observer: Observer,
    nemesis_task: tokio::task::JoinHandle<()>,
    stop_ingest: Arc<AtomicBool>,
    ingest: Vec<tokio::task::JoinHandle<IngestStats>>,
    /// Redis with a replica: the harness's sentinel, promoting it on the primary's silence.
    sentinel: Option<super::sentinel::Sentinel>,
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

impl Live {
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
        let started = start_clock(&scenario, history_path, HISTORY_LIMIT)?;
        let progress = Arc::new(Progress::new(farm.plan().len()));
        let movers = movers(
            &scenario,
            specs,
            launcher,
            &started.history,
            &progress,
            log_dir,
            lock_names,
        );
        if service != crate::lock::LockKind::Claims {
            watch.hear_lock(feed);
        }
        let frame = Frame::new(scenario.clone(), cluster, links, started, progress, movers);
        let Frame {
            nemesis,
            history,
            movers,
            links,
            t0,
            ..
        } = &frame;
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
        tokio::time::sleep_until((*t0).into()).await;
        let boxes = movers.boxes();
        for r in futures_util::future::join_all(boxes.iter().map(|b| movers.spawn(b))).await {
            r?;
        }
        let nemesis_task = tokio::spawn(nemesis.clone().run(schedule, initial));
        let stop_ingest = Arc::new(AtomicBool::new(false));
        let ingest = start_ingest(&scenario, farm, &urls, &shards, history, &stop_ingest);
        Ok(Live {
            frame,
            watch,
            lock,
            observer,
            nemesis_task,
            stop_ingest,
            ingest,
            sentinel,
        })
    }

    /// Wait for every mover to exit (a restart owed keeps the run going), the mover to prove
    /// unable to run, or the scenario's time limit; print progress meanwhile.
    pub async fn wait(&self, quiet: bool) -> End {
        let ending = |now_ms: i64| {
            if self.frame.movers.running() == 0
                && self.frame.movers.pending_restarts.load(Ordering::SeqCst) == 0
            {
                return Some(Ending::because("every mover exited"));
            }
            (now_ms >= self.frame.scenario.end_ms).then(|| Ending {
                time_limited: true,
                ..Ending::because(&format!(
                    "the scenario's time limit {} was reached",
                    ScenarioClock::format(self.frame.scenario.end_ms)
                ))
            })
        };
        self.frame
            .wait(quiet, "the mover", ending, |ms| {
                self.frame.progress.line(ms)
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
        let unfired = self.watch.disarm(&self.frame.history).await;
        self.frame.movers.stop_all().await;
        self.stop_ingest.store(true, Ordering::Relaxed);
        let mut ingest = Vec::new();
        for t in self.ingest {
            if let Ok(st) = t.await {
                ingest.push(st);
            }
        }
        self.frame.nemesis.heal_all().await;
        let observed = self.observer.finish().await;
        let read_back = match read {
            true => Some(read_back(&self.frame, observed).await),
            false => None,
        };
        // Closed before the servers stop, stopped whether or not it closes.
        let counted = self.frame.close_history(read);
        self.lock.lock().await.stop().await;
        self.frame.stop_servers().await;
        let finals = read_back
            .zip(counted?)
            .map(|((audit, final_state), (events, dropped))| Finals {
                audit,
                final_state,
                ingest,
                events,
                dropped,
                unfired,
            });
        Ok(finals)
    }
}

/// The audit and the final state, the system's own part included: the routing db's and
/// shards' own stamps read through their clock faults, the lock service's record as the
/// observer heard it.
async fn read_back(frame: &Frame, observed: Option<Vec<ClaimChange>>) -> (Audit, FinalState) {
    let scenario = &frame.scenario;
    let c = frame.cluster.lock().await;
    let shards: Vec<(String, String)> = scenario
        .topology()
        .shards()
        .iter()
        .map(|n| (n.clone(), c.admin_url(n)))
        .collect();
    let (mut audit, mut fin) = audit::collect(&c.admin_url("routing"), &shards).await;
    crate::faults::clock::real_audit(&frame.nemesis.clock_log.lock().unwrap(), &mut audit);
    if let Some(changes) = observed {
        audit.claim_changes = changes;
    }
    crate::systems::of(scenario.file.system)
        .read_back(scenario, &shards, &mut audit, &mut fin)
        .await;
    (audit, fin)
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
