//! Backends: where the databases, the proxy and the movers run. `process` (local binaries, the default) and `docker` (containers on a private network); both do everything, behind the `Cluster`, `Launcher` and `Mover` enums.

pub mod docker;
pub mod gate;
pub mod process;
pub mod standby;

use std::path::PathBuf;
use std::time::Duration;
use tokio::io::AsyncRead;

pub use crate::pg::StopMode;

/// Which backend a run uses.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum, serde::Serialize, serde::Deserialize,
)]
#[serde(rename_all = "lowercase")]
pub enum BackendKind {
    /// Local Postgres binaries and child processes (default).
    Process,
    /// Containers through testcontainers on a private network.
    Docker,
}

/// What a cpu fault lands on (`faults/cpu.rs`).
pub enum CpuTarget {
    /// A mover's process group on this host.
    Group(i32),
    /// A server and its children on this host (a postmaster and its backends).
    Tree(i32),
    /// A container.
    Container {
        docker: testcontainers::bollard::Docker,
        id: String,
    },
}

/// What a cluster is asked to be.
#[derive(Debug, Clone)]
pub struct ClusterSpec {
    /// Database nodes: `routing`, `shard1` ...
    pub nodes: Vec<String>,
    /// Every link `client->node` the proxy will carry (the docker backend publishes ports for them).
    pub links: Vec<String>,
    /// Where node logs go (the run directory's `logs/`).
    pub log_dir: PathBuf,
    /// A run id unique on this machine, for data directories and labels.
    pub run_id: String,
    /// Nodes that run asynchronous commit (`[cluster] asynchronous_commit`).
    pub asynchronous_commit: Vec<String>,
}

impl ClusterSpec {
    /// Nodes alone: no links, every commit flushed (the benches' clusters).
    pub fn nodes_only(nodes: Vec<String>, log_dir: PathBuf, run_id: String) -> ClusterSpec {
        ClusterSpec {
            nodes,
            links: vec![],
            log_dir,
            run_id,
            asynchronous_commit: vec![],
        }
    }
}

/// How to start one mover.
#[derive(Debug, Clone)]
pub struct MoverSpec {
    pub box_name: String,
    /// The program and its arguments (reference mover), or a shell command line.
    pub program: MoverProgram,
    pub env: Vec<(String, String)>,
    pub log_path: PathBuf,
    /// A shell command that reads `CHAOS_GATE` itself once connected (`[mover] ready =
    /// "gate"`), instead of being held by the shell before it starts.
    pub reads_gate: bool,
    /// How long the mover may take to wait at its gate (connected) before the run is refused.
    pub ready_timeout: Duration,
}

#[derive(Debug, Clone)]
pub enum MoverProgram {
    Exec { program: PathBuf, args: Vec<String> },
    Shell(String),
}

/// Timeouts that bound every backend action.
pub const START_TIMEOUT: Duration = Duration::from_secs(60);
pub const STOP_TIMEOUT: Duration = Duration::from_secs(20);

/// A mover's output stream (its history lines).
pub type MoverStdout = Box<dyn AsyncRead + Send + Unpin>;

/// A database's stop as kill(2)s from this host, sent at its instant from a thread woken then:
/// the supervisor's own signal first (our image's, which then keeps the container up), then
/// the postmaster's (SIGINT fast: new connections refused and sessions ended at once;
/// SIGQUIT immediate: a crash). The stop lands with the postmaster's signal.
pub struct StopSignal {
    pub(crate) supervisor: Option<(i32, i32)>,
    pub(crate) postmaster: (i32, i32),
}

impl StopSignal {
    pub fn send(&self) -> Result<(), String> {
        for (pid, sig) in self.supervisor.iter().chain([&self.postmaster]) {
            // SAFETY: kill(2) on a postmaster this harness started, or on the supervisor of its
            // container, both checked when this was made.
            if unsafe { libc::kill(*pid, *sig) } != 0 {
                return Err(format!(
                    "signal {sig} to pid {pid}: {}",
                    std::io::Error::last_os_error()
                ));
            }
        }
        Ok(())
    }
}

/// A running cluster of databases (and, for docker, the proxy container).
pub enum Cluster {
    Process(process::ProcessCluster),
    Docker(docker::DockerCluster),
}

impl Cluster {
    pub async fn start(kind: BackendKind, spec: &ClusterSpec) -> anyhow::Result<Cluster> {
        Ok(match kind {
            BackendKind::Process => Cluster::Process(process::ProcessCluster::start(spec).await?),
            BackendKind::Docker => Cluster::Docker(docker::DockerCluster::start(spec).await?),
        })
    }

    pub fn kind(&self) -> BackendKind {
        match self {
            Cluster::Process(_) => BackendKind::Process,
            Cluster::Docker(_) => BackendKind::Docker,
        }
    }

    /// "Postgres 15" or the image names, for the log line.
    pub fn describe(&self) -> String {
        match self {
            Cluster::Process(c) => format!(
                "Postgres {} as local processes, data in {}",
                c.install.version,
                c.data_root.parent().unwrap_or(&c.data_root).display()
            ),
            Cluster::Docker(c) => c.describe(),
        }
    }

    /// The harness's own (unproxied) URL of a node.
    pub fn admin_url(&self, node: &str) -> String {
        match self {
            Cluster::Process(c) => c.admin_url(node),
            Cluster::Docker(c) => c.admin_url(node),
        }
    }

    /// Where the proxy forwards a link to `node` (as the proxy sees it).
    pub fn upstream(&self, node: &str) -> String {
        match self {
            Cluster::Process(c) => c.upstream(node),
            Cluster::Docker(c) => c.upstream(node),
        }
    }

    /// Where the backend's own proxy tells what its links' servers say (docker: the proxy
    /// container's `--events` port on the host), if it does.
    pub fn link_events(&self) -> Option<String> {
        match self {
            Cluster::Process(_) => None,
            Cluster::Docker(c) => c.link_events(),
        }
    }

    /// The Toxiproxy API the backend itself runs (docker: the proxy container), if any.
    pub fn proxy_api(&self) -> Option<String> {
        match self {
            Cluster::Process(_) => None,
            Cluster::Docker(c) => Some(c.proxy_api()),
        }
    }

    /// The Toxiproxy API as a mover (or a watcher) reaches it, when the backend runs the proxy
    /// itself where the harness's own address would not do (docker: the proxy container).
    pub fn proxy_api_for_movers(&self) -> Option<String> {
        match self {
            Cluster::Process(_) => None,
            Cluster::Docker(c) => Some(c.proxy_api_in_network()),
        }
    }

    /// The `listen` to ask of the proxy for link number `index`.
    pub fn link_listen(&self, link: &str, index: usize) -> String {
        match self {
            Cluster::Process(_) => {
                let _ = (link, index);
                "127.0.0.1:0".into()
            }
            Cluster::Docker(c) => c.link_listen(link, index),
        }
    }

    /// host:port a client of `link` connects to, given the listen address the
    /// proxy reported; `for_harness` is the ingest (on the host), else a mover.
    pub fn client_addr(&self, link: &str, reported_listen: &str, for_harness: bool) -> String {
        match self {
            Cluster::Process(_) => reported_listen.to_string(),
            Cluster::Docker(c) => c.client_addr(link, reported_listen, for_harness),
        }
    }

    pub async fn stop_node(&mut self, node: &str, mode: StopMode) -> anyhow::Result<()> {
        match self {
            Cluster::Process(c) => c.stop_node(node, mode).await,
            Cluster::Docker(c) => c.stop_node(node, mode).await,
        }
    }

    /// `node`'s postmaster, when it is a process of this host (the process backend's, or in
    /// a container of our image on this host's engine).
    pub fn server_pid(&self, node: &str) -> Option<i32> {
        match self {
            Cluster::Process(c) => Some(c.nodes.get(node)?.pid()? as i32),
            Cluster::Docker(c) => c.server_pid(node),
        }
    }

    /// `node`'s stop as signals this host sends itself (see [`StopSignal`]); None when it
    /// goes through an engine's API or an image that does not take them.
    pub fn stop_signal(&self, node: &str, mode: StopMode) -> Option<StopSignal> {
        match self {
            Cluster::Process(_) => Some(StopSignal {
                supervisor: None,
                postmaster: (self.server_pid(node)?, mode.signal()),
            }),
            Cluster::Docker(c) => c.stop_signal(node, mode),
        }
    }

    /// What a cpu fault on `node` lands on: its server's processes, or its container.
    pub fn cpu_target(&self, node: &str) -> Option<CpuTarget> {
        match self {
            Cluster::Process(_) => self.server_pid(node).map(CpuTarget::Tree),
            Cluster::Docker(c) => c
                .node_container(node)
                .map(|(docker, id)| CpuTarget::Container { docker, id }),
        }
    }

    /// Start a stopped node on its kept data; returns how long until it accepted connections.
    pub async fn start_node(&mut self, node: &str) -> anyhow::Result<Duration> {
        match self {
            Cluster::Process(c) => c.start_node(node).await,
            Cluster::Docker(c) => c.start_node(node).await,
        }
    }

    pub fn last_start(&self, node: &str) -> Duration {
        match self {
            Cluster::Process(c) => c.last_start(node),
            Cluster::Docker(c) => c.last_start(node),
        }
    }

    /// The least a database start is begun ahead of its instant (see the docker backend's).
    pub fn start_lead_floor(&self) -> Duration {
        match self {
            Cluster::Process(_) => Duration::ZERO,
            Cluster::Docker(c) => c.start_lead_floor(),
        }
    }

    pub fn start_time(&self) -> Duration {
        match self {
            Cluster::Process(c) => c.start_time,
            Cluster::Docker(c) => c.start_time(),
        }
    }

    /// Start the movers before the scenario clock, each held at its start gate once connected
    /// (`gate`), so that `spawn` at the clock's start only lets them go.
    /// A mover that cannot be executed, or no box's mover reaching its gate, is a setup
    /// mistake: an error (exit 3) before the clock starts, naming the box, its exit status and
    /// the last line of its stderr.
    pub async fn prepare_movers(&self, specs: &[MoverSpec]) -> anyhow::Result<()> {
        let not_started = match self {
            Cluster::Process(c) => c.launcher.prepare_all(specs).await?,
            Cluster::Docker(c) => c.prepare_movers(specs).await?,
        };
        gate::check_started(&not_started, specs.len())
    }

    /// How movers are started on this backend.
    pub fn launcher(&self) -> Launcher {
        match self {
            Cluster::Process(c) => Launcher::Process(c.launcher.clone()),
            Cluster::Docker(c) => Launcher::Docker(c.launcher()),
        }
    }

    /// Stop everything and remove what the run created (data directories, containers, network).
    pub async fn stop_all(&mut self) {
        match self {
            Cluster::Process(c) => c.stop_all().await,
            Cluster::Docker(c) => c.stop_all().await,
        }
    }
}

/// Starts movers on a backend.
#[derive(Clone)]
pub enum Launcher {
    Process(process::ProcessLauncher),
    Docker(docker::DockerLauncher),
}

impl Launcher {
    /// Start one mover now, held at its gate (connected), for a `spawn` later to let go.
    pub async fn prepare(&self, spec: &MoverSpec) -> anyhow::Result<()> {
        match self {
            Launcher::Process(l) => l.prepare_all(std::slice::from_ref(spec)).await.map(drop),
            Launcher::Docker(l) => l.prepare(spec).await.map(drop),
        }
    }

    /// How long ahead of its instant a restarted mover is prepared: a process starts and
    /// connects in tens of ms, a container in about a second.
    pub fn prepare_lead(&self) -> std::time::Duration {
        match self {
            Launcher::Process(_) => std::time::Duration::from_millis(200),
            Launcher::Docker(_) => std::time::Duration::from_millis(2500),
        }
    }

    pub async fn spawn(&self, spec: &MoverSpec) -> anyhow::Result<(Mover, MoverStdout)> {
        match self {
            Launcher::Process(l) => {
                let (m, out) = l.spawn(spec).await?;
                Ok((Mover::Process(m), Box::new(out)))
            }
            Launcher::Docker(l) => {
                let (m, out) = l.spawn(spec).await?;
                Ok((Mover::Docker(m), out))
            }
        }
    }
}

/// A running mover.
pub enum Mover {
    Process(process::ProcessMover),
    Docker(docker::DockerMover),
}

impl Mover {
    /// A handle that can signal the mover without owning it.
    pub fn signaller(&self) -> Signaller {
        match self {
            Mover::Process(m) => Signaller::Process(m.pid),
            Mover::Docker(m) => Signaller::Docker(m.signaller()),
        }
    }

    /// Wait for exit; the exit code (None: killed by a signal).
    pub async fn wait(&mut self) -> Option<i32> {
        match self {
            Mover::Process(m) => m.wait().await,
            Mover::Docker(m) => m.wait().await,
        }
    }
}

/// Signals a mover by pid (its process group) or by container.
#[derive(Clone)]
pub enum Signaller {
    Process(i32),
    Docker(docker::DockerSignaller),
}

impl Signaller {
    /// SIGSTOP/SIGCONT/SIGKILL...; `freezer` asks docker for the cgroup freezer instead of a signal.
    pub async fn signal(&self, sig: i32, freezer: bool) -> anyhow::Result<()> {
        match self {
            Signaller::Process(_) => self.signal_now(sig).expect("a process is signalled here"),
            Signaller::Docker(s) => s.signal(sig, freezer).await,
        }
    }

    /// `sig` sent now, synchronously, where it goes straight to the process (kill(2)): the
    /// process backend's group, a container's main process on this host's engine. None: it
    /// goes through the engine's API ([`Signaller::signal`]).
    pub fn signal_now(&self, sig: i32) -> Option<anyhow::Result<()>> {
        match self {
            // SAFETY: kill(2) on the process group of a mover this harness started.
            Signaller::Process(pid) => Some(match unsafe { libc::kill(-*pid, sig) } {
                0 => Ok(()),
                _ => Err(anyhow::anyhow!(
                    "signal {sig} to process group {pid}: {}",
                    std::io::Error::last_os_error()
                )),
            }),
            Signaller::Docker(s) => s.signal_now(sig),
        }
    }

    /// After a SIGKILL sent by [`Signaller::signal_now`]: a frozen container is thawed so it dies.
    pub async fn after_kill(&self) {
        if let Signaller::Docker(s) = self {
            s.after_kill().await;
        }
    }

    /// What a cpu fault on this mover lands on: its process group, or its container.
    pub fn cpu_target(&self) -> CpuTarget {
        match self {
            Signaller::Process(pid) => CpuTarget::Group(*pid),
            Signaller::Docker(s) => {
                let (docker, id) = s.container();
                CpuTarget::Container { docker, id }
            }
        }
    }

    /// Kill at once, on exit paths (blocking-safe, best effort).
    pub fn kill_now(&self) {
        match self {
            Signaller::Process(pid) => unsafe {
                libc::kill(-*pid, libc::SIGCONT);
                libc::kill(-*pid, libc::SIGKILL);
            },
            Signaller::Docker(s) => s.kill_now(),
        }
    }
}

/// Label on every container and network the docker backend creates.
pub const DOCKER_LABEL: &str = "chaos.harness";

/// Remove every container and network carrying our label (leftovers of crashed runs).
/// Returns (containers, networks) removed. No engine: (0, 0) and a line on stderr.
pub async fn docker_cleanup_all() -> anyhow::Result<(usize, usize)> {
    let engine = match docker::engine::engine().await {
        Ok(e) => e,
        Err(e) => {
            eprintln!("chaos: {e}; nothing to remove");
            return Ok((0, 0));
        }
    };
    match tokio::time::timeout(
        Duration::from_secs(120),
        docker::engine::remove_labelled(&engine.docker, DOCKER_LABEL),
    )
    .await
    {
        Ok(r) => r,
        Err(_) => anyhow::bail!(
            "removing containers labelled {DOCKER_LABEL}: no answer from the Docker engine in 120 s; try `docker ps -a --filter label={DOCKER_LABEL}`"
        ),
    }
}
