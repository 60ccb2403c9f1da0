//! The docker backend: every database, the proxy and every mover in its own container (started and removed through testcontainers) on one private network per run, published on 127.0.0.1 only.
//!
//! Images are settings (environment variables, see `Images`): by default the locally built
//! `chaos-postgres:15` and `chaos-runtime:bookworm` (scripts/build-images); nothing is ever
//! pulled. The chaos binaries are bind-mounted read-only into the proxy and mover containers
//! (`/opt/chaos/bin`, `/opt/chaos/mover`) rather than baked into an image, so a rebuilt binary is
//! used at once and the images never go stale. Every container and the network carry the labels
//! `chaos.harness=1` and `chaos.run=<run id>`; `chaos down --all` removes leftovers by label.

pub mod engine;

use super::gate::{self, Gate};
use super::{
    ClusterSpec, MoverProgram, MoverSpec, MoverStdout, StopMode, DOCKER_LABEL, START_TIMEOUT,
    STOP_TIMEOUT,
};
use engine::{Engine, CALL_TIMEOUT};
use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};
use testcontainers::bollard::errors::Error as DockerError;
use testcontainers::bollard::models::{HostConfig, PortBinding};
use testcontainers::bollard::query_parameters::{
    InspectContainerOptions, KillContainerOptions, LogsOptions,
};
use testcontainers::bollard::Docker;
use testcontainers::core::{AccessMode, ContainerPort, Mount};
use testcontainers::runners::AsyncRunner;
use testcontainers::{ContainerAsync, ContainerRequest, GenericImage, ImageExt};

/// Label carrying the run id, beside `DOCKER_LABEL`.
pub const RUN_LABEL: &str = "chaos.run";
/// Postgres's port inside its container.
const PG_PORT: u16 = 5432;
/// The Toxiproxy API port inside the proxy container.
const PROXY_API_PORT: u16 = 8474;
/// Link number i listens on this + i inside the proxy container.
const FIRST_LINK_PORT: u16 = 20000;
/// Where the chaos binaries (the proxy's `chaos`, a shell mover's PATH) are mounted.
const BIN_MOUNT: &str = "/opt/chaos/bin";
/// Where the reference mover's folder is mounted.
const MOVER_MOUNT: &str = "/opt/chaos/mover";
/// How long `prepare_movers` waits for a mover container to reach its start gate.
const PREPARE_WAIT: Duration = Duration::from_secs(20);
/// Cap on a container log copied into the run's logs folder.
const LOG_COPY_LIMIT_BYTES: usize = 64 << 20;

/// Image names: settings, so users with a registry can point at `postgres:16` and
/// `ghcr.io/shopify/toxiproxy` (which must already be on the engine: nothing is pulled).
#[derive(Debug, Clone)]
pub struct Images {
    /// `CHAOS_POSTGRES_IMAGE`, default `chaos-postgres:15`.
    pub postgres: String,
    /// `CHAOS_PROXY_IMAGE`, default `chaos-runtime:bookworm` running `chaos proxy`; any other
    /// image is run with its own command and must serve the Toxiproxy API on 8474 (as
    /// `ghcr.io/shopify/toxiproxy` does).
    pub proxy: String,
    /// `CHAOS_MOVER_IMAGE`, default `chaos-runtime:bookworm`: a bookworm userland for the
    /// bind-mounted mover (and libfaketime for clock faults).
    pub mover: String,
}

const DEFAULT_POSTGRES_IMAGE: &str = "chaos-postgres:15";
const DEFAULT_RUNTIME_IMAGE: &str = "chaos-runtime:bookworm";

impl Images {
    pub fn from_env() -> Images {
        let var = |k: &str, d: &str| {
            std::env::var(k)
                .ok()
                .filter(|v| !v.trim().is_empty())
                .unwrap_or_else(|| d.to_string())
        };
        Images {
            postgres: var("CHAOS_POSTGRES_IMAGE", DEFAULT_POSTGRES_IMAGE),
            proxy: var("CHAOS_PROXY_IMAGE", DEFAULT_RUNTIME_IMAGE),
            mover: var("CHAOS_MOVER_IMAGE", DEFAULT_RUNTIME_IMAGE),
        }
    }

    /// Whether the proxy image is ours (so it runs the bind-mounted `chaos proxy`).
    fn proxy_is_ours(&self) -> bool {
        self.proxy.starts_with("chaos-runtime")
    }
}

/// `name[:tag]` -> GenericImage (the tag after the last ':' that follows the last '/').
fn generic(image: &str) -> GenericImage {
    let slash = image.rfind('/').map(|i| i + 1).unwrap_or(0);
    match image[slash..].rfind(':') {
        Some(i) => GenericImage::new(&image[..slash + i], &image[slash + i + 1..]),
        None => GenericImage::new(image, "latest"),
    }
}

/// A container or network name from the run id: docker allows `[a-zA-Z0-9][a-zA-Z0-9_.-]*`.
fn docker_name(run_id: &str, what: &str) -> String {
    let clean = |s: &str| {
        s.chars()
            .map(|c| {
                if c.is_ascii_alphanumeric() || c == '_' || c == '.' || c == '-' {
                    c
                } else {
                    '-'
                }
            })
            .collect::<String>()
    };
    format!("chaos-{}-{}", clean(run_id), clean(what))
}

fn labels(run_id: &str) -> [(String, String); 2] {
    [
        (DOCKER_LABEL.to_string(), "1".to_string()),
        (RUN_LABEL.to_string(), run_id.to_string()),
    ]
}

/// Bind each container port to 127.0.0.1:<host port> and publish nothing else (testcontainers
/// would otherwise publish every exposed port on all interfaces).
fn publish_on_loopback(
    req: ContainerRequest<GenericImage>,
    ports: Vec<(u16, u16)>,
) -> ContainerRequest<GenericImage> {
    req.with_host_config_modifier(move |hc: &mut HostConfig| {
        hc.publish_all_ports = Some(false);
        hc.port_bindings = Some(
            ports
                .iter()
                .map(|(container, host)| {
                    (
                        format!("{container}/tcp"),
                        Some(vec![PortBinding {
                            host_ip: Some("127.0.0.1".into()),
                            host_port: Some(host.to_string()),
                        }]),
                    )
                })
                .collect(),
        );
    })
}

/// The `chaos` binary to run as the proxy: this executable, or (in test binaries) the one
/// cargo built beside it; `CHAOS_BIN` overrides.
fn chaos_binary() -> anyhow::Result<PathBuf> {
    if let Some(p) = std::env::var_os("CHAOS_BIN") {
        return Ok(PathBuf::from(p));
    }
    let exe = std::env::current_exe()?;
    if exe.file_name().is_some_and(|n| n == "chaos") {
        return Ok(exe);
    }
    let dir = exe.parent().unwrap_or(Path::new("."));
    for c in [dir.join("chaos"), dir.join("../chaos")] {
        if c.is_file() {
            return Ok(c);
        }
    }
    anyhow::bail!(
        "no chaos binary beside {}: build it (cargo build --release -p chaos-harness) or set CHAOS_BIN",
        exe.display()
    )
}

/// A file's real folder and name (bind mounts need the real path).
fn folder_and_name(path: &Path) -> anyhow::Result<(PathBuf, String)> {
    let real = path
        .canonicalize()
        .map_err(|e| anyhow::anyhow!("{}: {e}", path.display()))?;
    let dir = real.parent().unwrap_or(Path::new("/")).to_path_buf();
    let name = real
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    Ok((dir, name))
}

fn is_404(e: &DockerError) -> bool {
    matches!(
        e,
        DockerError::DockerResponseServerError {
            status_code: 404,
            ..
        }
    )
}

/// Run one engine call with the backend's time limit; errors say what failed.
async fn bounded<T>(
    what: &str,
    call: impl std::future::Future<Output = Result<T, DockerError>>,
) -> anyhow::Result<T> {
    match tokio::time::timeout(CALL_TIMEOUT, call).await {
        Ok(Ok(v)) => Ok(v),
        Ok(Err(e)) => anyhow::bail!("{what}: {e}"),
        Err(_) => anyhow::bail!(
            "{what}: no answer from the Docker engine in {} s",
            CALL_TIMEOUT.as_secs()
        ),
    }
}

/// Fail early, with the fix, when an image is missing (testcontainers would try to pull it).
async fn require_image(docker: &Docker, image: &str) -> anyhow::Result<()> {
    match tokio::time::timeout(CALL_TIMEOUT, docker.inspect_image(image)).await {
        Ok(Ok(_)) => Ok(()),
        Ok(Err(e)) if is_404(&e) => anyhow::bail!(
            "image {image} is not on this Docker engine and nothing is pulled: run scripts/build-images (first build takes a few minutes), or load the image yourself"
        ),
        Ok(Err(e)) => anyhow::bail!("inspect image {image}: {e}"),
        Err(_) => anyhow::bail!("inspect image {image}: no answer from the Docker engine"),
    }
}

/// Whether a container's main process is running, and its exit code if not. `None`: gone.
async fn container_state(docker: &Docker, id: &str) -> Option<(bool, i64)> {
    match tokio::time::timeout(
        CALL_TIMEOUT,
        docker.inspect_container(id, None::<InspectContainerOptions>),
    )
    .await
    {
        Ok(Ok(info)) => {
            let st = info.state.unwrap_or_default();
            Some((st.running.unwrap_or(false), st.exit_code.unwrap_or(-1)))
        }
        _ => None,
    }
}

/// Copy a container's whole log (stdout and stderr) into `path`, bounded.
async fn copy_log(docker: &Docker, id: &str, path: &Path) {
    use futures_util::StreamExt;
    let opts = LogsOptions {
        follow: false,
        stdout: true,
        stderr: true,
        since: 0,
        until: 0,
        timestamps: false,
        tail: "all".into(),
    };
    let mut stream = docker.logs(id, Some(opts));
    let mut text = Vec::new();
    let copy = async {
        while let Some(Ok(chunk)) = stream.next().await {
            text.extend_from_slice(&chunk.into_bytes());
            if text.len() > LOG_COPY_LIMIT_BYTES {
                break;
            }
        }
    };
    let _ = tokio::time::timeout(CALL_TIMEOUT, copy).await;
    let _ = std::fs::write(path, &text);
}

/// The label an image carries when its main process stops and starts postgres by signals
/// (ours: images/postgres/entrypoint.sh), so the container stays up across a database stop.
const SIGNALS_LABEL: &str = "chaos.postgres.signals";

/// Whether `image` says (by `SIGNALS_LABEL`) that its main process takes the stop/start signals.
async fn takes_db_signals(docker: &Docker, image: &str) -> bool {
    match tokio::time::timeout(CALL_TIMEOUT, docker.inspect_image(image)).await {
        Ok(Ok(info)) => info
            .config
            .and_then(|c| c.labels)
            .is_some_and(|l| l.contains_key(SIGNALS_LABEL)),
        _ => false,
    }
}

/// Where a database container keeps its data directory.
///
/// `tmpfs` (the default with an image that stops and starts postgres inside its container):
/// memory, kept as long as the container, which the supervisor keeps up through every database
/// stop and crash. `volume`: a volume per container on the engine's disk, removed with it (the
/// only choice for an image that restarts as a container, such as postgres:16). Measured on
/// our 2-core VM, April lease-only: on a volume the disk's load moved the night off its
/// figures in 8 of 9 runs (box 2 behind its pace, 97-106 turbines before the outage, 35-83 s
/// of vacancy); on tmpfs 4 of 4 kept them (106, 31.7-32.4 s, box 2 late 73-76 s) and seeding
/// took 2.0-2.2 s instead of 3.6-5.6 s. `CHAOS_DOCKER_PG_DATA=tmpfs|volume` chooses.
fn pg_data_on_tmpfs(setting: Option<&str>, image: &str, supervised: bool) -> anyhow::Result<bool> {
    match setting {
        None | Some("") => Ok(supervised),
        Some("volume") => Ok(false),
        Some("tmpfs") if supervised => Ok(true),
        Some("tmpfs") => anyhow::bail!(
            "CHAOS_DOCKER_PG_DATA=tmpfs needs a postgres image that stops and starts inside its container (label {SIGNALS_LABEL}); {image} restarts as a container and would lose its data: use volume"
        ),
        Some(other) => anyhow::bail!("CHAOS_DOCKER_PG_DATA={other}: expected tmpfs or volume"),
    }
}

/// The data directory of our image and of the official postgres images.
const PG_DATA_DIR: &str = "/var/lib/postgresql/data";

/// Send signal `sig` ("SIGHUP", or a number as "1") to a container's main process.
async fn signal(docker: &Docker, id: &str, sig: &str) -> Result<(), DockerError> {
    docker
        .kill_container(id, Some(KillContainerOptions { signal: sig.into() }))
        .await
}

/// How long the harness waits for a supervised database's stop or start to show before it
/// sends the signal again.
const RESIGNAL: Duration = Duration::from_millis(300);

/// One database container.
struct DbNode {
    container: Option<ContainerAsync<GenericImage>>,
    id: String,
    host_port: u16,
    running: bool,
    last_start: Duration,
}

/// The run's databases and proxy, in containers on the run's network.
pub struct DockerCluster {
    engine: &'static Engine,
    run_id: String,
    network: String,
    images: Images,
    /// The postgres image takes `SIGNALS_LABEL`'s signals: a stop keeps the container running.
    db_signals: bool,
    /// Databases keep their data on a tmpfs (`pg_data_on_tmpfs`), not a volume.
    pg_tmpfs: bool,
    nodes: BTreeMap<String, DbNode>,
    proxy: Option<ContainerAsync<GenericImage>>,
    proxy_name: String,
    proxy_api_host_port: u16,
    /// Link name -> its port inside the proxy container.
    link_index: HashMap<String, u16>,
    /// Port inside the proxy container -> 127.0.0.1 port on the host.
    link_host_ports: HashMap<u16, u16>,
    start_time: Duration,
    log_dir: PathBuf,
    bin_dir: PathBuf,
    stopped: bool,
    /// Mover state every launcher of this cluster shares.
    movers: Arc<MoverShared>,
}

/// Shared by every launcher of a cluster: container name serials, and movers started ahead of
/// the scenario clock and held at a gate (`prepare_movers`).
#[derive(Default)]
struct MoverShared {
    serial: AtomicUsize,
    prepared: std::sync::Mutex<HashMap<String, Prepared>>,
}

/// A mover container started and waiting at its gate (a fifo its shell reads before `exec`ing
/// the mover).
struct Prepared {
    mover: DockerMover,
    stdout: MoverStdout,
    gate: Gate,
}

impl DockerCluster {
    /// Create the network, start every database and the proxy in parallel, wait until each
    /// answers. On any failure everything created so far is removed.
    pub async fn start(spec: &ClusterSpec) -> anyhow::Result<DockerCluster> {
        let began = Instant::now();
        let engine = engine::engine().await?;
        let images = Images::from_env();
        for image in [&images.postgres, &images.proxy, &images.mover] {
            require_image(&engine.docker, image).await?;
        }
        let db_signals = takes_db_signals(&engine.docker, &images.postgres).await;
        let setting = std::env::var("CHAOS_DOCKER_PG_DATA").ok();
        let pg_tmpfs = pg_data_on_tmpfs(setting.as_deref(), &images.postgres, db_signals)?;
        let bin_dir = folder_and_name(&chaos_binary()?)?.0;
        let network = docker_name(&spec.run_id, "net");
        let free = || crate::procs::free_port().map_err(|e| anyhow::anyhow!("no free port: {e}"));
        let mut cluster = DockerCluster {
            engine,
            run_id: spec.run_id.clone(),
            network: network.clone(),
            images,
            db_signals,
            pg_tmpfs,
            nodes: BTreeMap::new(),
            proxy: None,
            proxy_name: docker_name(&spec.run_id, "proxy"),
            proxy_api_host_port: free()?,
            link_index: HashMap::new(),
            link_host_ports: HashMap::new(),
            start_time: Duration::ZERO,
            log_dir: spec.log_dir.clone(),
            bin_dir,
            stopped: false,
            movers: Arc::new(MoverShared::default()),
        };
        for (i, link) in spec.links.iter().enumerate() {
            let port = FIRST_LINK_PORT + i as u16;
            cluster.link_index.insert(link.clone(), port);
            cluster.link_host_ports.insert(port, free()?);
        }
        if let Err(e) = cluster.start_inner(spec).await {
            cluster.stop_all().await;
            return Err(e);
        }
        cluster.start_time = began.elapsed();
        Ok(cluster)
    }

    async fn start_inner(&mut self, spec: &ClusterSpec) -> anyhow::Result<()> {
        use testcontainers::bollard::models::NetworkCreateRequest;
        let create = NetworkCreateRequest {
            name: self.network.clone(),
            driver: Some("bridge".into()),
            labels: Some(labels(&self.run_id).into_iter().collect()),
            ..Default::default()
        };
        bounded(
            &format!("create network {}", self.network),
            self.engine.docker.create_network(create),
        )
        .await?;

        let mut starts = Vec::new();
        for node in &spec.nodes {
            let host_port = crate::procs::free_port()
                .map_err(|e| anyhow::anyhow!("no free port for {node}: {e}"))?;
            starts.push(self.start_db(node.clone(), host_port));
        }
        let (dbs, proxy) = tokio::join!(futures_util::future::join_all(starts), self.start_proxy());
        let mut first_error = None;
        for r in dbs {
            match r {
                Ok((name, node)) => {
                    self.nodes.insert(name, node);
                }
                Err(e) => first_error = first_error.or(Some(e)),
            }
        }
        match proxy {
            Ok(c) => self.proxy = Some(c),
            Err(e) => first_error = first_error.or(Some(e)),
        }
        match first_error {
            Some(e) => Err(e),
            None => Ok(()),
        }
    }

    /// One database container, started and answering.
    fn start_db(
        &self,
        node: String,
        host_port: u16,
    ) -> impl std::future::Future<Output = anyhow::Result<(String, DbNode)>> + Send + 'static {
        let image = self.images.postgres.clone();
        let name = docker_name(&self.run_id, &node);
        let network = self.network.clone();
        let run_id = self.run_id.clone();
        let tmpfs = self.pg_tmpfs;
        async move {
            // Our image and postgres:16 both take extra `-c` settings as arguments; the unix
            // socket setting is left out (postgres:16's init needs its socket).
            let settings: Vec<String> = crate::pg::server_settings(PG_PORT, "*")
                .into_iter()
                .filter(|s| !s.starts_with("unix_socket_directories"))
                .flat_map(|s| ["-c".to_string(), s])
                .collect();
            let req = generic(&image)
                .with_exposed_port(ContainerPort::Tcp(PG_PORT))
                .with_container_name(&name)
                .with_network(&network)
                .with_labels(labels(&run_id))
                .with_env_var("POSTGRES_HOST_AUTH_METHOD", "trust")
                .with_cmd(settings)
                .with_startup_timeout(START_TIMEOUT);
            // On tmpfs the image's VOLUME gets no volume; our entrypoint fills the empty
            // data directory from the template its build initdb'd.
            let req = if tmpfs {
                req.with_mount(Mount::tmpfs_mount(PG_DATA_DIR))
            } else {
                req
            };
            let req = publish_on_loopback(req, vec![(PG_PORT, host_port)]);
            let began = Instant::now();
            let container = req
                .start()
                .await
                .map_err(|e| anyhow::anyhow!("start the {node} container ({image}): {e}"))?;
            let id = container.id().to_string();
            let url = format!("postgres://postgres@127.0.0.1:{host_port}/postgres");
            // Keep the handle even when the wait fails, so stop_all removes the container.
            let mut db = DbNode {
                container: Some(container),
                id,
                host_port,
                running: true,
                last_start: Duration::ZERO,
            };
            match wait_for_postgres(&url, &node, began).await {
                Ok(d) => {
                    db.last_start = d;
                    Ok((node, db))
                }
                Err(e) => {
                    if let Some(c) = db.container.take() {
                        let _ = tokio::time::timeout(STOP_TIMEOUT, c.rm()).await;
                    }
                    Err(e)
                }
            }
        }
    }

    /// The proxy container (ours: `chaos proxy`; another image: its own command).
    async fn start_proxy(&self) -> anyhow::Result<ContainerAsync<GenericImage>> {
        let mut ports = vec![(PROXY_API_PORT, self.proxy_api_host_port)];
        ports.extend(self.link_host_ports.iter().map(|(c, h)| (*c, *h)));
        let mut image =
            generic(&self.images.proxy).with_exposed_port(ContainerPort::Tcp(PROXY_API_PORT));
        for (c, _) in &ports[1..] {
            image = image.with_exposed_port(ContainerPort::Tcp(*c));
        }
        let mut req = image
            .with_container_name(&self.proxy_name)
            .with_network(&self.network)
            .with_labels(labels(&self.run_id))
            .with_startup_timeout(START_TIMEOUT);
        if self.images.proxy_is_ours() {
            req = req
                .with_mount(
                    Mount::bind_mount(self.bin_dir.display().to_string(), BIN_MOUNT)
                        .with_access_mode(AccessMode::ReadOnly),
                )
                // Its workers ask for real-time priority (chaos_proxy::realtime), as in-process.
                .with_cap_add("SYS_NICE")
                .with_cmd([
                    format!("{BIN_MOUNT}/chaos"),
                    "proxy".into(),
                    "--listen".into(),
                    format!("0.0.0.0:{PROXY_API_PORT}"),
                ]);
        }
        let req = publish_on_loopback(req, ports);
        let began = Instant::now();
        let container = req.start().await.map_err(|e| {
            anyhow::anyhow!("start the proxy container ({}): {e}", self.images.proxy)
        })?;
        let api = format!("127.0.0.1:{}", self.proxy_api_host_port);
        loop {
            if proxy_answers(&api).await {
                return Ok(container);
            }
            if began.elapsed() > START_TIMEOUT {
                let _ = tokio::time::timeout(STOP_TIMEOUT, container.rm()).await;
                anyhow::bail!(
                    "the proxy container ({}) did not answer GET /version on {api} within {} s: see `docker logs` of {} or use --backend process",
                    self.images.proxy,
                    START_TIMEOUT.as_secs(),
                    self.proxy_name
                );
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    pub fn describe(&self) -> String {
        let proxy = if self.images.proxy_is_ours() {
            format!("{} running chaos proxy", self.images.proxy)
        } else {
            self.images.proxy.clone()
        };
        format!(
            "containers on network {}: databases {} (data on {}), proxy {proxy}, movers {}; Docker API {}, testcontainers via {}",
            self.network,
            self.images.postgres,
            if self.pg_tmpfs { "tmpfs" } else { "a volume" },
            self.images.mover,
            self.engine.api_version,
            self.engine.testcontainers_host
        )
    }

    pub fn admin_url(&self, node: &str) -> String {
        let port = self.nodes.get(node).map(|n| n.host_port).unwrap_or(0);
        format!("postgres://postgres@127.0.0.1:{port}/postgres")
    }

    /// The proxy reaches a database by its container name on the run's network.
    pub fn upstream(&self, node: &str) -> String {
        format!("{}:{PG_PORT}", docker_name(&self.run_id, node))
    }

    pub fn proxy_api(&self) -> String {
        format!("127.0.0.1:{}", self.proxy_api_host_port)
    }

    pub fn link_listen(&self, link: &str, index: usize) -> String {
        let port = self
            .link_index
            .get(link)
            .copied()
            .unwrap_or(FIRST_LINK_PORT + index as u16);
        format!("0.0.0.0:{port}")
    }

    /// A mover reaches link port P as `<proxy container>:P`; the harness (on the host) through
    /// that port's 127.0.0.1 publication.
    pub fn client_addr(&self, link: &str, reported: &str, for_harness: bool) -> String {
        let port = reported
            .rsplit_once(':')
            .and_then(|(_, p)| p.parse::<u16>().ok())
            .or_else(|| self.link_index.get(link).copied())
            .unwrap_or(0);
        if for_harness {
            let host = self.link_host_ports.get(&port).copied().unwrap_or(0);
            format!("127.0.0.1:{host}")
        } else {
            format!("{}:{port}", self.proxy_name)
        }
    }

    /// Fast: Postgres rolls back, checkpoints and exits; Immediate: a crash (SIGQUIT), the next
    /// start runs recovery. With our image (`SIGNALS_LABEL`) the container's main process stops
    /// postgres and the container stays up; any other image's container is stopped (SIGINT or
    /// SIGQUIT to postgres as its main process). Either way the data is kept.
    pub async fn stop_node(&mut self, node: &str, mode: StopMode) -> anyhow::Result<()> {
        let docker = self.engine.docker.clone();
        let supervised = self.db_signals;
        let n = self
            .nodes
            .get_mut(node)
            .ok_or_else(|| anyhow::anyhow!("unknown node {node}"))?;
        if !n.running {
            anyhow::bail!("{node} is not running");
        }
        let sig = match (mode, supervised) {
            (StopMode::Fast, true) => "SIGUSR1",
            (StopMode::Immediate, true) => "SIGUSR2",
            (StopMode::Fast, false) => "SIGINT",
            (StopMode::Immediate, false) => "SIGQUIT",
        };
        bounded(
            &format!("send {sig} to the {node} container"),
            signal(&docker, &n.id, sig),
        )
        .await?;
        // Down means "Postgres no longer accepts connections" (as when the process backend's
        // server has exited). Without the supervisor, docker's own teardown of the stopped
        // container (often a second or more) is waited for by start_node, whose duration the
        // nemesis already allows for.
        let url = format!("postgres://postgres@127.0.0.1:{}/postgres", n.host_port);
        let began = Instant::now();
        let mut sent = Instant::now();
        loop {
            if !crate::db::ping(&url).await {
                break;
            }
            if supervised && sent.elapsed() > RESIGNAL {
                // The supervisor acts on a signal within a second even if it came at a bad
                // moment; a repeat costs nothing (a stop of a stopped postgres does nothing).
                let _ = signal(&docker, &n.id, sig).await;
                sent = Instant::now();
            }
            if began.elapsed() > STOP_TIMEOUT {
                // Postgres did not go in time: stop the container hard, as the process backend
                // kills its server; start_node then starts the container again.
                let _ = signal(&docker, &n.id, "SIGKILL").await;
                break;
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        n.running = false;
        Ok(())
    }

    /// Start the stopped database again (same data, same 127.0.0.1 port): a signal to the
    /// supervisor when the container is still up, else a start of the container. Returns how
    /// long until Postgres accepted connections.
    pub async fn start_node(&mut self, node: &str) -> anyhow::Result<Duration> {
        let supervised = self.db_signals;
        let docker = self.engine.docker.clone();
        let n = self
            .nodes
            .get_mut(node)
            .ok_or_else(|| anyhow::anyhow!("unknown node {node}"))?;
        if n.running {
            anyhow::bail!("{node} is already running");
        }
        let container = n
            .container
            .as_ref()
            .ok_or_else(|| anyhow::anyhow!("{node}'s container is gone"))?;
        let began = Instant::now();
        let up = matches!(container_state(&docker, &n.id).await, Some((true, _)));
        if supervised && up {
            bounded(
                &format!("send SIGHUP (start postgres) to the {node} container"),
                signal(&docker, &n.id, "SIGHUP"),
            )
            .await?;
        } else {
            // The stop may have returned while docker was still tearing the container down.
            while let Some((true, _)) = container_state(&docker, &n.id).await {
                if began.elapsed() > STOP_TIMEOUT {
                    anyhow::bail!(
                        "{node}'s container is still running {} s after its stop: see `docker ps`",
                        STOP_TIMEOUT.as_secs()
                    );
                }
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
            tokio::time::timeout(CALL_TIMEOUT, container.start())
                .await
                .map_err(|_| {
                    anyhow::anyhow!(
                        "start the {node} container: no answer in {} s",
                        CALL_TIMEOUT.as_secs()
                    )
                })?
                .map_err(|e| anyhow::anyhow!("start the {node} container: {e}"))?;
        }
        n.running = true;
        let url = format!("postgres://postgres@127.0.0.1:{}/postgres", n.host_port);
        if supervised && up {
            // Repeat the start until postgres answers (a start of a running postgres does
            // nothing), as the stop is repeated.
            let (id, d) = (n.id.clone(), docker.clone());
            let again = async move {
                loop {
                    tokio::time::sleep(RESIGNAL).await;
                    let _ = signal(&d, &id, "SIGHUP").await;
                }
            };
            tokio::select! {
                r = wait_for_postgres(&url, node, began) => n.last_start = r?,
                _ = again => unreachable!(),
            }
        } else {
            n.last_start = wait_for_postgres(&url, node, began).await?;
        }
        Ok(n.last_start)
    }

    /// The least a database start is begun ahead of its instant: restarting a stopped
    /// container took 0.8 s on our engine (fuse-overlayfs), far longer than its first start,
    /// which is all `last_start` knows before the first restart. With the supervisor a start
    /// is postgres's own, and `last_start` (first: the container's start) is enough.
    pub fn start_lead_floor(&self) -> Duration {
        if self.db_signals {
            Duration::ZERO
        } else {
            Duration::from_millis(1000)
        }
    }

    pub fn last_start(&self, node: &str) -> Duration {
        self.nodes
            .get(node)
            .map(|n| n.last_start)
            .unwrap_or_default()
    }

    pub fn start_time(&self) -> Duration {
        self.start_time
    }

    pub fn launcher(&self) -> DockerLauncher {
        DockerLauncher {
            inner: Arc::new(LauncherInner {
                engine: self.engine,
                run_id: self.run_id.clone(),
                network: self.network.clone(),
                image: self.images.mover.clone(),
                bin_dir: self.bin_dir.clone(),
                log_dir: self.log_dir.clone(),
                shared: self.movers.clone(),
            }),
        }
    }

    /// Start every mover's container now, each held at a gate, so that `spawn` at the scenario's
    /// start only opens the gate (milliseconds) instead of starting a container (about a
    /// second each here). Call before the scenario clock starts; a box never spawned is removed
    /// with the cluster.
    pub async fn prepare_movers(&self, specs: &[MoverSpec]) -> anyhow::Result<()> {
        let launcher = self.launcher();
        let starts = specs.iter().map(|s| launcher.prepare(s));
        for r in futures_util::future::join_all(starts).await {
            r?;
        }
        Ok(())
    }

    /// Copy each container's log into the run's logs, remove every container and the network
    /// (and anything else labelled with this run, e.g. a mover somebody forgot).
    pub async fn stop_all(&mut self) {
        if self.stopped {
            return;
        }
        let docker = self.engine.docker.clone();
        let mut removes = Vec::new();
        for (name, mut n) in std::mem::take(&mut self.nodes) {
            let docker = docker.clone();
            let log = self.log_dir.join(format!("{name}.log"));
            removes.push(tokio::spawn(async move {
                copy_log(&docker, &n.id, &log).await;
                if let Some(c) = n.container.take() {
                    let _ = tokio::time::timeout(STOP_TIMEOUT, c.rm()).await;
                }
            }));
        }
        if let Some(c) = self.proxy.take() {
            let docker = docker.clone();
            let log = self.log_dir.join("proxy.log");
            removes.push(tokio::spawn(async move {
                copy_log(&docker, c.id(), &log).await;
                let _ = tokio::time::timeout(STOP_TIMEOUT, c.rm()).await;
            }));
        }
        for r in removes {
            let _ = r.await;
        }
        let filter = format!("{RUN_LABEL}={}", self.run_id);
        match tokio::time::timeout(CALL_TIMEOUT, engine::remove_labelled(&docker, &filter)).await {
            Ok(Ok(_)) => {}
            Ok(Err(e)) => eprintln!(
                "chaos: clean up run {}: {e}; run `chaos down --all`",
                self.run_id
            ),
            Err(_) => eprintln!(
                "chaos: clean up run {}: no answer from the Docker engine; run `chaos down --all`",
                self.run_id
            ),
        }
        self.stopped = true;
    }
}

impl Drop for DockerCluster {
    fn drop(&mut self) {
        if self.stopped {
            return;
        }
        // An exit path that skipped stop_all (an error, a panic, Ctrl-C): remove everything of
        // this run by label, from a thread of its own (works with or without a runtime), then
        // let go of the handles without testcontainers' own drop-time removal (already done).
        engine::remove_labelled_blocking(RUN_LABEL, Some(&self.run_id));
        for (_, mut n) in std::mem::take(&mut self.nodes) {
            if let Some(c) = n.container.take() {
                std::mem::forget(c);
            }
        }
        if let Some(c) = self.proxy.take() {
            std::mem::forget(c);
        }
    }
}

/// Poll until Postgres at `url` answers a query; the time since `began`.
async fn wait_for_postgres(url: &str, node: &str, began: Instant) -> anyhow::Result<Duration> {
    loop {
        if crate::db::ping(url).await {
            return Ok(began.elapsed());
        }
        if began.elapsed() > START_TIMEOUT {
            anyhow::bail!(
                "{node} (in a container) did not accept connections on {url} within {} s: see logs/{node}.log of the run, or `docker logs` while it runs",
                START_TIMEOUT.as_secs()
            );
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// Whether a Toxiproxy API answers `GET /version` with 200 (docker's port forwarder accepts
/// connections before the server listens, so a connect alone proves nothing).
async fn proxy_answers(addr: &str) -> bool {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let ask = async {
        let mut s = tokio::net::TcpStream::connect(addr).await.ok()?;
        s.write_all(b"GET /version HTTP/1.0\r\nHost: proxy\r\n\r\n")
            .await
            .ok()?;
        let mut buf = [0u8; 64];
        let n = s.read(&mut buf).await.ok()?;
        let head = String::from_utf8_lossy(&buf[..n]);
        Some(head.starts_with("HTTP/1.") && head.get(9..12) == Some("200"))
    };
    matches!(
        tokio::time::timeout(Duration::from_millis(500), ask).await,
        Ok(Some(true))
    )
}

struct LauncherInner {
    engine: &'static Engine,
    run_id: String,
    network: String,
    image: String,
    bin_dir: PathBuf,
    log_dir: PathBuf,
    shared: Arc<MoverShared>,
}

/// Starts mover containers on the run's network.
#[derive(Clone)]
pub struct DockerLauncher {
    inner: Arc<LauncherInner>,
}

impl DockerLauncher {
    /// One mover container whose main process is the mover itself (exec form, no shell or init
    /// in between), so SIGSTOP/SIGCONT/SIGKILL reach it; its stdout is followed as history,
    /// its stderr appended to `spec.log_path`.
    pub async fn spawn(&self, spec: &MoverSpec) -> anyhow::Result<(DockerMover, MoverStdout)> {
        let prepared = self
            .inner
            .shared
            .prepared
            .lock()
            .unwrap()
            .remove(&spec.box_name);
        match prepared {
            Some(p) => {
                p.gate
                    .release(&spec.box_name, START_TIMEOUT, || false)
                    .await?;
                Ok((p.mover, p.stdout))
            }
            None => self.start(spec, None).await,
        }
    }

    /// Start a box's container held at a gate (see `DockerCluster::prepare_movers`) and wait
    /// until it waits there: the reference mover after connecting to its databases, a user's
    /// command in the shell before it.
    pub async fn prepare(&self, spec: &MoverSpec) -> anyhow::Result<()> {
        let mut gate = Gate::create(&self.inner.log_dir, &spec.box_name)?;
        let (mover, stdout) = self.start(spec, Some(gate.path())).await?;
        // A container's exit is not cheap to poll; a mover that never comes is released
        // (and reported) at `spawn`.
        let _ = gate.wait_reader(PREPARE_WAIT, || false).await;
        self.inner.shared.prepared.lock().unwrap().insert(
            spec.box_name.clone(),
            Prepared {
                mover,
                stdout,
                gate,
            },
        );
        Ok(())
    }

    async fn start(
        &self,
        spec: &MoverSpec,
        gate: Option<&Path>,
    ) -> anyhow::Result<(DockerMover, MoverStdout)> {
        let me = &self.inner;
        let n = me.shared.serial.fetch_add(1, Ordering::SeqCst);
        let name = docker_name(&me.run_id, &format!("{}-{n}", spec.box_name));
        let mut req = generic(&me.image)
            .with_container_name(&name)
            .with_network(&me.network)
            .with_labels(labels(&me.run_id))
            .with_mount(
                Mount::bind_mount(me.bin_dir.display().to_string(), BIN_MOUNT)
                    .with_access_mode(AccessMode::ReadOnly),
            )
            // The logs folder at its own path: libfaketime's per-box offset files live there.
            .with_mount(Mount::bind_mount(
                me.log_dir.display().to_string(),
                me.log_dir.display().to_string(),
            ))
            .with_startup_timeout(START_TIMEOUT);
        req = match &spec.program {
            MoverProgram::Exec { program, args } => {
                let (dir, file) = folder_and_name(program)?;
                let mut cmd = vec![format!("{MOVER_MOUNT}/{file}")];
                cmd.extend(args.iter().cloned());
                req.with_mount(
                    Mount::bind_mount(dir.display().to_string(), MOVER_MOUNT)
                        .with_access_mode(AccessMode::ReadOnly),
                )
                .with_cmd(cmd)
            }
            // `exec`: the user's program replaces the shell and is the container's main process.
            MoverProgram::Shell(line) => {
                req.with_cmd(["/bin/sh".to_string(), "-c".into(), format!("exec {line}")])
            }
        };
        if let Some(gate) = gate {
            // The reference mover reads the gate itself once connected. A user's command is
            // held by a shell that reads it, then `exec`s the command in its place: from then on
            // the mover is the container's main process, as without a gate.
            if let MoverProgram::Shell(_) = &spec.program {
                let mut cmd = vec![
                    "/bin/sh".to_string(),
                    "-c".into(),
                    gate::SHELL_HOLD.into(),
                    "chaos-gate".into(),
                ];
                let inner: Vec<String> = req.cmd().map(|c| c.into_owned()).collect();
                cmd.extend(inner);
                req = req.with_cmd(cmd);
            }
            req = req.with_env_var(gate::GATE_VAR, gate.display().to_string());
        }
        for (k, v) in &spec.env {
            req = req.with_env_var(k, v);
        }
        // Publishes nothing: a mover only dials out to the proxy on the run's network.
        let req = publish_on_loopback(req, vec![]);
        let container = req.start().await.map_err(|e| {
            anyhow::anyhow!(
                "{}: start the mover container ({}): {e}",
                spec.box_name,
                me.image
            )
        })?;
        let id = container.id().to_string();
        let stdout: MoverStdout = Box::new(container.stdout(true));
        let mut stderr = container.stderr(true);
        let log_path = spec.log_path.clone();
        let stderr_task = tokio::spawn(async move {
            if let Ok(mut f) = tokio::fs::OpenOptions::new()
                .create(true)
                .append(true)
                .open(&log_path)
                .await
            {
                let _ = tokio::io::copy(&mut stderr, &mut f).await;
            }
        });
        let docker = me.engine.docker.clone();
        Ok((
            DockerMover {
                container: Some(container),
                signaller: DockerSignaller {
                    docker,
                    id,
                    box_name: spec.box_name.clone(),
                },
                stderr_task: Some(stderr_task),
            },
            stdout,
        ))
    }
}

/// A running mover container.
pub struct DockerMover {
    container: Option<ContainerAsync<GenericImage>>,
    signaller: DockerSignaller,
    stderr_task: Option<tokio::task::JoinHandle<()>>,
}

impl DockerMover {
    pub fn signaller(&self) -> DockerSignaller {
        self.signaller.clone()
    }

    /// Wait for the mover to exit; its exit code (None: killed by a signal, which docker reports
    /// as 128+n, or the container is gone). Then its stderr is flushed and the container removed.
    pub async fn wait(&mut self) -> Option<i32> {
        let s = &self.signaller;
        let code = loop {
            match container_state(&s.docker, &s.id).await {
                Some((true, _)) => tokio::time::sleep(Duration::from_millis(20)).await,
                Some((false, code)) => break code,
                None => break -1,
            }
        };
        if let Some(t) = self.stderr_task.take() {
            let _ = tokio::time::timeout(Duration::from_secs(5), t).await;
        }
        if let Some(c) = self.container.take() {
            let _ = tokio::time::timeout(STOP_TIMEOUT, c.rm()).await;
        }
        match code {
            129..=159 | -1 => None,
            c => Some(c as i32),
        }
    }
}

impl Drop for DockerMover {
    fn drop(&mut self) {
        if let Some(c) = self.container.take() {
            // Removed from a thread of its own (works even when the runtime is shutting down);
            // testcontainers' drop-time removal would need a live runtime.
            self.signaller.kill_now();
            std::mem::forget(c);
        }
        if let Some(t) = self.stderr_task.take() {
            t.abort();
        }
    }
}

/// Signals a mover container without owning it.
#[derive(Clone)]
pub struct DockerSignaller {
    docker: Docker,
    id: String,
    box_name: String,
}

impl DockerSignaller {
    /// A signal to the container's main process (the mover), or, with `freezer`, the cgroup
    /// freezer: SIGSTOP -> pause, SIGCONT -> unpause (a frozen mover cannot tell it was stopped;
    /// a SIGSTOPped one's children and its parent-visible state can).
    pub async fn signal(&self, sig: i32, freezer: bool) -> anyhow::Result<()> {
        let who = format!("{}'s container", self.box_name);
        if freezer && sig == libc::SIGSTOP {
            return bounded(
                &format!("freeze {who}"),
                self.docker.pause_container(&self.id),
            )
            .await;
        }
        if freezer && sig == libc::SIGCONT {
            return bounded(
                &format!("thaw {who}"),
                self.docker.unpause_container(&self.id),
            )
            .await;
        }
        let r = bounded(
            &format!("send signal {sig} to {who}"),
            signal(&self.docker, &self.id, &sig.to_string()),
        )
        .await;
        if sig == libc::SIGKILL {
            // A frozen mover dies only once thawed.
            let _ =
                tokio::time::timeout(CALL_TIMEOUT, self.docker.unpause_container(&self.id)).await;
        }
        r
    }

    /// Remove the container at once (blocking-safe, usable from Drop): a fresh client on a
    /// thread of its own, bounded by the engine call timeout.
    pub fn kill_now(&self) {
        let id = self.id.clone();
        let worker = std::thread::spawn(move || {
            let Ok(rt) = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
            else {
                return;
            };
            rt.block_on(async move {
                let Some(e) = engine::ENGINE_FOR_DROP.get() else {
                    return;
                };
                let Ok(docker) = engine::client(&e.0, &e.1) else {
                    return;
                };
                let opts = testcontainers::bollard::query_parameters::RemoveContainerOptions {
                    force: true,
                    v: true,
                    link: false,
                };
                let _ =
                    tokio::time::timeout(CALL_TIMEOUT, docker.remove_container(&id, Some(opts)))
                        .await;
            });
        });
        let _ = worker.join();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pg_data_goes_to_tmpfs_only_where_the_container_outlives_a_stop() {
        let ours = "chaos-postgres:15";
        assert!(pg_data_on_tmpfs(None, ours, true).unwrap());
        assert!(!pg_data_on_tmpfs(None, "postgres:16", false).unwrap());
        assert!(!pg_data_on_tmpfs(Some("volume"), ours, true).unwrap());
        assert!(pg_data_on_tmpfs(Some("tmpfs"), ours, true).unwrap());
        let refused = pg_data_on_tmpfs(Some("tmpfs"), "postgres:16", false)
            .unwrap_err()
            .to_string();
        assert!(
            refused.contains("postgres:16 restarts as a container") && !refused.contains('\n'),
            "{refused}"
        );
        let bad = pg_data_on_tmpfs(Some("ram"), ours, true)
            .unwrap_err()
            .to_string();
        assert_eq!(bad, "CHAOS_DOCKER_PG_DATA=ram: expected tmpfs or volume");
    }

    #[test]
    fn image_names_split_into_name_and_tag() {
        let i = generic("chaos-postgres:15");
        assert_eq!(
            (
                testcontainers::Image::name(&i),
                testcontainers::Image::tag(&i)
            ),
            ("chaos-postgres", "15")
        );
        let i = generic("ghcr.io/shopify/toxiproxy");
        assert_eq!(testcontainers::Image::tag(&i), "latest");
        let i = generic("localhost:5000/postgres:16");
        assert_eq!(
            (
                testcontainers::Image::name(&i),
                testcontainers::Image::tag(&i)
            ),
            ("localhost:5000/postgres", "16")
        );
    }

    /// Start and stop a cluster through the backend: databases answer on 127.0.0.1, a stopped
    /// node keeps its data, the proxy answers, and nothing labelled with the run is left.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn cluster_starts_keeps_data_across_a_stop_and_leaves_nothing() {
        if engine::probe_api_version(Path::new("/var/run/docker.sock"))
            .await
            .is_err()
            && std::env::var_os("DOCKER_HOST").is_none()
        {
            println!(
                "SKIP: no Docker engine answers (docker info failed): docker backend tests not run"
            );
            return;
        }
        let images = Images::from_env();
        let docker = engine::engine().await.expect("engine").docker.clone();
        for i in [&images.postgres, &images.proxy] {
            if require_image(&docker, i).await.is_err() {
                let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
                println!("building images (first build: about 4 minutes)");
                let ok = std::process::Command::new(root.join("scripts/build-images"))
                    .current_dir(&root)
                    .status()
                    .map(|s| s.success())
                    .unwrap_or(false);
                assert!(ok, "scripts/build-images failed");
            }
        }
        let log_dir =
            std::env::temp_dir().join(format!("chaos-docker-unit-{}", std::process::id()));
        std::fs::create_dir_all(&log_dir).unwrap();
        let run_id = format!("unit-{}", std::process::id());
        let spec = ClusterSpec {
            nodes: vec![
                "routing".into(),
                "shard1".into(),
                "shard2".into(),
                "shard3".into(),
            ],
            links: vec!["ingest->shard1".into(), "box-1->routing".into()],
            log_dir: log_dir.clone(),
            run_id: run_id.clone(),
        };
        let mut c = DockerCluster::start(&spec).await.expect("cluster starts");
        println!(
            "docker cluster (routing + 3 shards + proxy) ready in {:.2} s",
            c.start_time().as_secs_f64()
        );
        assert!(proxy_answers(&c.proxy_api()).await, "the proxy answers");
        let url = c.admin_url("shard1");
        let db = crate::db::connect(&url, "test", Duration::from_secs(5))
            .await
            .unwrap();
        db.batch_execute("create table kept(x int); insert into kept values (7)")
            .await
            .unwrap();
        drop(db);
        assert!(
            c.db_signals || !images.postgres.starts_with("chaos-postgres"),
            "our postgres image carries {SIGNALS_LABEL}"
        );
        c.stop_node("shard1", StopMode::Fast).await.expect("stop");
        assert!(!crate::db::ping(&url).await, "a stopped node refuses");
        let shard1_id = c.nodes["shard1"].id.clone();
        // Our image keeps its data on a tmpfs (the stop below keeps the container, so the data).
        let info = docker
            .inspect_container(&shard1_id, None::<InspectContainerOptions>)
            .await
            .expect("inspect shard1");
        let data_on_tmpfs = info
            .host_config
            .and_then(|h| h.mounts)
            .unwrap_or_default()
            .iter()
            .any(|m| {
                m.target.as_deref() == Some(PG_DATA_DIR)
                    && m.typ == Some(testcontainers::bollard::models::MountType::TMPFS)
            });
        assert_eq!(
            data_on_tmpfs, c.db_signals,
            "data on a tmpfs exactly when the image is supervised"
        );
        if c.db_signals {
            assert_eq!(
                container_state(&docker, &shard1_id).await.map(|s| s.0),
                Some(true),
                "the supervisor keeps the container up while postgres is stopped"
            );
        }
        let took = c.start_node("shard1").await.expect("start");
        println!(
            "shard1 restarted after a fast stop in {:.2} s",
            took.as_secs_f64()
        );
        let db = crate::db::connect(&url, "test", Duration::from_secs(5))
            .await
            .unwrap();
        let row = db.query_one("select x from kept", &[]).await.unwrap();
        assert_eq!(row.get::<_, i32>(0), 7, "the data survived the stop");
        drop(db);
        // A crash (SIGQUIT to postgres) and recovery.
        c.stop_node("shard1", StopMode::Immediate)
            .await
            .expect("crash");
        let took = c.start_node("shard1").await.expect("start after crash");
        println!(
            "shard1 restarted after a crash in {:.2} s",
            took.as_secs_f64()
        );
        assert!(crate::db::ping(&url).await);
        let crash_log = log_dir.join("shard1-now.log");
        copy_log(&docker, &shard1_id, &crash_log).await;
        let text = std::fs::read_to_string(&crash_log).unwrap_or_default();
        assert!(
            text.contains("automatic recovery in progress"),
            "the start after a crash runs recovery; shard1's log:\n{text}"
        );
        assert_eq!(
            c.client_addr("ingest->shard1", "0.0.0.0:20000", false),
            format!("{}:20000", c.proxy_name)
        );
        assert!(c
            .client_addr("ingest->shard1", "0.0.0.0:20000", true)
            .starts_with("127.0.0.1:"));
        // A mover held at its gate starts in milliseconds, as its own main process.
        let spec = MoverSpec {
            box_name: "box-1".into(),
            program: MoverProgram::Shell("sh -c 'echo pid-$$ $CHAOS_BOX'".into()),
            env: vec![("CHAOS_BOX".into(), "box-1".into())],
            log_path: log_dir.join("box-1.log"),
        };
        c.prepare_movers(std::slice::from_ref(&spec))
            .await
            .expect("prepare");
        let t = Instant::now();
        let (mut mover, stdout) = c.launcher().spawn(&spec).await.expect("spawn");
        println!(
            "a prepared mover spawned in {:.1} ms",
            t.elapsed().as_secs_f64() * 1000.0
        );
        let mut line = String::new();
        use tokio::io::AsyncBufReadExt;
        tokio::io::BufReader::new(stdout)
            .read_line(&mut line)
            .await
            .unwrap();
        assert_eq!(
            line.trim(),
            "pid-1 box-1",
            "the mover is the container's main process"
        );
        assert_eq!(mover.wait().await, Some(0));
        let t = Instant::now();
        c.stop_all().await;
        println!(
            "docker cluster stopped and removed in {:.2} s",
            t.elapsed().as_secs_f64()
        );
        let left = engine::remove_labelled(&docker, &format!("{RUN_LABEL}={run_id}"))
            .await
            .unwrap();
        assert_eq!(left, (0, 0), "stop_all left containers or networks");
        assert!(log_dir.join("shard1.log").is_file(), "node logs copied");
        let _ = std::fs::remove_dir_all(&log_dir);
    }

    #[test]
    fn names_are_docker_safe() {
        assert_eq!(
            docker_name("april-20250101T000000Z-42", "box 2"),
            "chaos-april-20250101T000000Z-42-box-2"
        );
    }
}
