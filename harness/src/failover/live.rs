//! A failover run while it runs: the watcher started at its gate, the scenario clock, the observer, the nemesis and the app going; the wait until the scenario's end (a failover run always runs to its `end`: the watcher's exit is part of the story, not its end); then every fault healed and everything stopped before the final reads.

use super::finals;
use super::observe::{Observer, Watched};
use super::testbed::FailoverBed;
use crate::backend::MoverSpec;
use crate::links::{proxy_name, Links};
use crate::movers::{Movers, Supervisor};
use crate::progress::Progress;
pub use crate::run::frame::End;
use crate::run::frame::{start_clock, Ending, Frame};
use crate::scenario::Scenario;
use chaos_history::failover_names as names;
use chaos_history::{FailoverFinal, HistoryWriter, ScenarioClock};
use chaos_workloads::failover::api::Api;
use chaos_workloads::failover::app::{self, AppConfig, AppStats};
use std::collections::BTreeMap;
use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

/// A history larger than this is cut (and the run marked incomplete).
pub const HISTORY_LIMIT: u64 = 5_000_000;

/// Everything a failover run has going: the frame every system shares, and its own parts.
pub struct Live {
    pub frame: Frame,
    nemesis_task: tokio::task::JoinHandle<()>,
    observer: Observer,
    stop_app: Arc<AtomicBool>,
    app: Vec<tokio::task::JoinHandle<AppStats>>,
    admin: Vec<(String, String)>,
}

/// What the run leaves for judging.
pub struct Finals {
    pub state: FailoverFinal,
    pub app: AppStats,
    pub events: u64,
    pub dropped: u64,
}

impl Live {
    /// Start the watcher held at its gate, start the clock, the observer, the watcher, the
    /// nemesis and the app.
    pub async fn start(
        scenario: Arc<Scenario>,
        bed: FailoverBed,
        watcher: MoverSpec,
        history_path: &Path,
        log_dir: &Path,
    ) -> anyhow::Result<Live> {
        let FailoverBed {
            cluster,
            links,
            urls,
            upstreams,
            ..
        } = bed;
        let f = scenario.file.failover.clone().unwrap_or_default();
        cluster
            .prepare_movers(std::slice::from_ref(&watcher))
            .await?;
        links.warm_up().await;
        let launcher = cluster.launcher();
        let admin: Vec<(String, String)> = [names::PRIMARY, names::REPLICA]
            .iter()
            .map(|n| (n.to_string(), cluster.admin_url(n)))
            .collect();
        let cluster = Arc::new(tokio::sync::Mutex::new(cluster));
        let started = start_clock(&scenario, history_path, HISTORY_LIMIT)?;
        let progress = Arc::new(Progress::new(0));
        let real = |scenario_s: f64| Duration::from_millis(scenario.real_ms(scenario_s * 1000.0));
        let movers = Movers::new(
            vec![watcher],
            launcher,
            started.history.clone(),
            progress.clone(),
            log_dir.to_path_buf(),
            real(f.silence_s).max(Duration::from_secs(1)),
            Supervisor {
                restart: f.restart,
                delay: real(f.restart_delay_s),
            },
            Default::default(),
        );
        let frame = Frame::new(scenario.clone(), cluster, links, started, progress, movers);
        let (nemesis, history, links) = (&frame.nemesis, &frame.history, &frame.links);
        let schedule = scenario.schedule.clone();
        let initial = nemesis.apply_initial(&schedule).await;
        tokio::time::sleep_until(frame.t0.into()).await;
        let by_upstream: BTreeMap<String, String> = upstreams
            .iter()
            .map(|(n, u)| (u.clone(), n.clone()))
            .collect();
        let observer = Observer::start(
            watched(&admin, links, &by_upstream, f.observe_real_ms),
            history,
        );
        frame.movers.spawn(names::WATCHER).await?;
        let nemesis_task = tokio::spawn(nemesis.clone().run(schedule, initial));
        let routes = by_upstream
            .iter()
            .map(|(u, n)| {
                (
                    u.clone(),
                    (
                        n.clone(),
                        urls.harness(&chaos_nemesis::Link::name(names::APP, n)),
                    ),
                )
            })
            .collect();
        let stop_app = Arc::new(AtomicBool::new(false));
        let app = start_app(&scenario, links, routes, history, &stop_app)?;
        Ok(Live {
            frame,
            nemesis_task,
            observer,
            stop_app,
            app,
            admin,
        })
    }

    /// Wait for the scenario's end (or the watcher proving unable to run); progress meanwhile.
    pub async fn wait(&self, quiet: bool) -> End {
        let ending = |now_ms: i64| {
            (now_ms >= self.frame.scenario.end_ms).then(|| {
                let limit = ScenarioClock::format(self.frame.scenario.end_ms);
                Ending::because(&format!("the scenario's end {limit} was reached"))
            })
        };
        let line = |ms| self.line(ms);
        self.frame.wait(quiet, "the watcher", ending, line).await
    }

    fn line(&self, now_ms: i64) -> String {
        let s = self.frame.progress.snapshot();
        let watcher = if self.frame.movers.is_running(names::WATCHER) {
            "running"
        } else {
            "exited"
        };
        let mut line = format!("[{}] watcher {watcher}", ScenarioClock::format(now_ms));
        if !s.faults.is_empty() {
            line.push_str(&format!(" · faults: {}", s.faults.join(", ")));
        }
        line
    }

    /// Stop the observer, the nemesis, the watcher and the app; heal every fault; read both
    /// servers; stop everything. With `read` false nothing is read.
    pub async fn wind_down(self, read: bool) -> anyhow::Result<Option<Finals>> {
        self.observer.stop().await;
        self.nemesis_task.abort();
        let _ = self.nemesis_task.await;
        self.frame.movers.stop_all().await;
        self.stop_app.store(true, Ordering::Relaxed);
        let mut app = AppStats::default();
        for t in self.app {
            if let Ok(s) = t.await {
                app.ok += s.ok;
                app.fail += s.fail;
                app.info += s.info;
                app.connects += s.connects;
            }
        }
        self.frame.nemesis.heal_all().await;
        let state = match read {
            true => Some(finals::read(&self.admin).await),
            false => None,
        };
        // Closed before the servers stop, stopped whether or not it closes.
        let counted = self.frame.close_history(read);
        self.frame.stop_servers().await;
        Ok(state
            .zip(counted?)
            .map(|(state, (events, dropped))| Finals {
                state,
                app,
                events,
                dropped,
            }))
    }
}

/// What the observer samples: both servers, every proxy of the run, the upstreams' servers.
fn watched(
    admin: &[(String, String)],
    links: &Links,
    by_upstream: &BTreeMap<String, String>,
    every_real_ms: u64,
) -> Watched {
    let mut proxies: BTreeMap<String, String> = super::settings::LINKS
        .iter()
        .map(|l| (proxy_name(l), l.to_string()))
        .collect();
    proxies.insert(names::SERVICE.into(), names::SERVICE.into());
    Watched {
        servers: admin.to_vec(),
        api: links.api.clone(),
        proxies,
        upstreams: by_upstream.clone(),
        every: Duration::from_millis(every_real_ms),
    }
}

/// The app's pool, one task per connection, writing until `stop`.
fn start_app(
    scenario: &Scenario,
    links: &Links,
    routes: BTreeMap<String, (String, String)>,
    history: &HistoryWriter,
    stop: &Arc<AtomicBool>,
) -> anyhow::Result<Vec<tokio::task::JoinHandle<AppStats>>> {
    let f = scenario.file.failover.clone().unwrap_or_default();
    let real = |scenario_s: f64| Duration::from_millis(scenario.real_ms(scenario_s * 1000.0));
    let config = Arc::new(AppConfig {
        connections: f.app_connections,
        every: real(f.write_every_s),
        lifetime: (f.conn_lifetime_s > 0.0).then(|| real(f.conn_lifetime_s)),
        timeout: real(f.write_timeout_s).max(Duration::from_millis(200)),
        api: Api::new(&links.api, Duration::from_secs(5)).map_err(anyhow::Error::msg)?,
        service: names::SERVICE.to_string(),
        routes,
    });
    let ids = Arc::new(AtomicU64::new(1));
    Ok((0..f.app_connections)
        .map(|conn| {
            tokio::spawn(app::run_connection(
                config.clone(),
                conn,
                ids.clone(),
                history.clone(),
                stop.clone(),
            ))
        })
        .collect())
}
