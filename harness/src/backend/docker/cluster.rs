//! The run's databases and proxy, each in a container on the run's network: start, stop and start a node again, and remove everything on every path.

use super::containers::*;
use super::engine;
use super::movers::{DockerLauncher, LauncherInner, MoverShared};
use super::supervised::Supervised;
use crate::link_events::EVENTS_PORT;

/// One database container.
pub(super) struct DbNode {
    pub(super) container: Option<ContainerAsync<GenericImage>>,
    pub(super) id: String,
    pub(super) host_port: u16,
    pub(super) running: bool,
    pub(super) last_start: Duration,
    /// Postgres under our image's supervisor, signalled from this host (`supervised.rs`), when
    /// the image takes the signals and the engine runs here.
    pub(super) sup: Option<Supervised>,
}

/// The run's databases and proxy, in containers on the run's network.
pub struct DockerCluster {
    pub(super) engine: &'static Engine,
    pub(super) run_id: String,
    pub(super) network: String,
    pub(super) images: Images,
    /// The postgres image takes `SIGNALS_LABEL`'s signals: a stop keeps the container running.
    pub(super) db_signals: bool,
    /// Its supervisor also lets a stop's signal go to postgres itself (`DIRECT_LABEL`).
    pub(super) db_direct: bool,
    /// Databases keep their data on a tmpfs (`pg_data_on_tmpfs`), not a volume.
    pub(super) pg_tmpfs: bool,
    pub(super) nodes: BTreeMap<String, DbNode>,
    pub(super) proxy: Option<ContainerAsync<GenericImage>>,
    pub(super) proxy_name: String,
    pub(super) proxy_api_host_port: u16,
    /// The host port of our proxy's link events (`chaos proxy --events`).
    pub(super) proxy_events_host_port: u16,
    /// The proxy container's own address when the host reaches it: its API and events are
    /// read there, with no docker-proxy between (a held change lands a hop sooner).
    pub(super) proxy_direct: Option<String>,
    /// Link name -> its port inside the proxy container.
    pub(super) link_index: HashMap<String, u16>,
    /// Port inside the proxy container -> 127.0.0.1 port on the host.
    pub(super) link_host_ports: HashMap<u16, u16>,
    pub(super) start_time: Duration,
    pub(super) log_dir: PathBuf,
    pub(super) bin_dir: PathBuf,
    pub(super) stopped: bool,
    /// Mover state every launcher of this cluster shares.
    pub(super) movers: Arc<MoverShared>,
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
        let db_direct =
            db_signals && has_label(&engine.docker, &images.postgres, DIRECT_LABEL).await;
        let setting = std::env::var("CHAOS_DOCKER_PG_DATA").ok();
        let pg_tmpfs = pg_data_on_tmpfs(setting.as_deref(), &images.postgres, db_signals)?;
        let bin_dir = folder_and_name(&chaos_binary()?)?.0;
        let network = docker_name(&spec.run_id, "net");
        // Written down before anything is created: a harness killed from here on leaves its
        // run's label for the next command to remove (`reap`).
        crate::owned::hold(crate::owned::Thing::DockerRun(spec.run_id.clone()));
        let free = || crate::ports::free_port().map_err(|e| anyhow::anyhow!("no free port: {e}"));
        let mut cluster = DockerCluster {
            engine,
            run_id: spec.run_id.clone(),
            network: network.clone(),
            images,
            db_signals,
            db_direct,
            pg_tmpfs,
            nodes: BTreeMap::new(),
            proxy: None,
            proxy_name: docker_name(&spec.run_id, "proxy"),
            proxy_api_host_port: free()?,
            proxy_events_host_port: free()?,
            proxy_direct: None,
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
            let host_port = crate::ports::free_port()
                .map_err(|e| anyhow::anyhow!("no free port for {node}: {e}"))?;
            starts.push(self.start_db(
                node.clone(),
                host_port,
                spec.asynchronous_commit.contains(node),
            ));
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
            Ok(c) => {
                if let Some(ip) = container_ip(&self.engine.docker, c.id()).await {
                    let direct = format!("{ip}:{PROXY_API_PORT}");
                    self.proxy_direct = proxy_answers(&direct).await.then_some(ip);
                }
                self.proxy = Some(c);
            }
            Err(e) => first_error = first_error.or(Some(e)),
        }
        match first_error {
            Some(e) => Err(e),
            None => Ok(()),
        }
    }

    /// One database container, started and answering (`asynchronous`: it runs asynchronous
    /// commit, `pg::ASYNCHRONOUS_COMMIT`).
    fn start_db(
        &self,
        node: String,
        host_port: u16,
        asynchronous: bool,
    ) -> impl std::future::Future<Output = anyhow::Result<(String, DbNode)>> + Send + 'static {
        let image = self.images.postgres.clone();
        let name = docker_name(&self.run_id, &node);
        let network = self.network.clone();
        let run_id = self.run_id.clone();
        let tmpfs = self.pg_tmpfs;
        let log_dir = self.log_dir.clone();
        let (docker, supervised) = (self.engine.docker.clone(), self.db_signals);
        async move {
            // Our image and postgres:16 both take extra `-c` settings as arguments; the unix
            // socket setting is left out (postgres:16's init needs its socket).
            let own = crate::pg::ASYNCHRONOUS_COMMIT.map(String::from);
            let settings: Vec<String> = crate::pg::server_settings(&node, PG_PORT, "*")
                .into_iter()
                .chain(own.into_iter().filter(|_| asynchronous))
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
            // A clock fault's node: the image's libfaketime reads the offset file the
            // nemesis writes, in the logs folder mounted at its own path.
            let clock = crate::faketime::faketime_file(&log_dir, &node);
            let req = match clock.is_file() {
                false => req,
                // The entrypoint preloads postgres alone (CHAOS_LD_PRELOAD), not itself as root.
                true => crate::faketime::env_for(&clock)
                    .into_iter()
                    .map(|(k, v)| match k.as_str() {
                        "LD_PRELOAD" => ("CHAOS_LD_PRELOAD".to_string(), v),
                        _ => (k, v),
                    })
                    .fold(req, |r, (k, v)| r.with_env_var(k, v))
                    .with_mount(Mount::bind_mount(
                        log_dir.display().to_string(),
                        log_dir.display().to_string(),
                    )),
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
                sup: None,
            };
            if supervised {
                let sup = Supervised::new(&docker, &db.id, "postgres").await;
                db.sup = sup.on_this_host().then_some(sup);
            }
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
        if self.images.proxy_is_ours() {
            ports.push((EVENTS_PORT, self.proxy_events_host_port));
        }
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
                    // The triggers read the links through it (link_events.rs).
                    "--events".into(),
                    format!("0.0.0.0:{EVENTS_PORT}"),
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

    /// Where the harness reaches the proxy's API: its own address, else its publication.
    pub fn proxy_api(&self) -> String {
        match &self.proxy_direct {
            Some(ip) => format!("{ip}:{PROXY_API_PORT}"),
            None => format!("127.0.0.1:{}", self.proxy_api_host_port),
        }
    }

    /// Where the triggers read the links: our proxy container's events port on the host.
    pub fn link_events(&self) -> Option<String> {
        self.images
            .proxy_is_ours()
            .then(|| match &self.proxy_direct {
                Some(ip) => format!("{ip}:{EVENTS_PORT}"),
                None => format!("127.0.0.1:{}", self.proxy_events_host_port),
            })
    }

    /// The proxy's API as a container on the run's network reaches it.
    pub fn proxy_api_in_network(&self) -> String {
        format!("{}:{PROXY_API_PORT}", self.proxy_name)
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
    /// The engine and `node`'s container (a cpu fault changes its quota).
    pub fn node_container(&self, node: &str) -> Option<(testcontainers::bollard::Docker, String)> {
        let n = self.nodes.get(node)?;
        Some((self.engine.docker.clone(), n.id.clone()))
    }

    pub async fn stop_node(&mut self, node: &str, mode: StopMode) -> anyhow::Result<()> {
        let docker = self.engine.docker.clone();
        let (supervised, direct) = (self.db_signals, self.db_direct);
        let n = self
            .nodes
            .get_mut(node)
            .ok_or_else(|| anyhow::anyhow!("unknown node {node}"))?;
        if !n.running {
            anyhow::bail!("{node} is not running");
        }
        if let Some(sup) = &n.sup {
            // From this host: the supervisor's signal, then postgres's own (SIGINT fast,
            // SIGQUIT immediate) with an image that takes it; returns once postgres has gone.
            if sup.stop_with(mode, direct.then_some(mode.signal())).await? {
                n.running = false;
                return Ok(());
            }
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
        if let (true, Some(sup)) = (supervised && up, &n.sup) {
            sup.start().await?;
        } else if supervised && up {
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
            let (id, d, sup) = (n.id.clone(), docker.clone(), n.sup.clone());
            let again = async move {
                loop {
                    tokio::time::sleep(RESIGNAL).await;
                    let _ = match &sup {
                        Some(sup) => sup.start().await,
                        None => signal(&d, &id, "SIGHUP").await.map_err(Into::into),
                    };
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

    /// `node`'s stop as signals from this host (see [`crate::backend::StopSignal`]), when its
    /// image takes postgres's own signal after the supervisor's (`DIRECT_LABEL`).
    pub fn stop_signal(&self, node: &str, mode: StopMode) -> Option<crate::backend::StopSignal> {
        let sup = self
            .nodes
            .get(node)?
            .sup
            .as_ref()
            .filter(|_| self.db_direct)?;
        Some(crate::backend::StopSignal {
            supervisor: Some((sup.supervisor()?, mode.supervisor_signal())),
            postmaster: (sup.server_pid()?, mode.signal()),
        })
    }

    /// `node`'s postmaster on this host (see [`Supervised::server_pid`]).
    pub fn server_pid(&self, node: &str) -> Option<i32> {
        self.nodes.get(node)?.sup.as_ref()?.server_pid()
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
    /// Returns the movers that exited before their gate (`gate::check_started` judges them).
    pub async fn prepare_movers(&self, specs: &[MoverSpec]) -> anyhow::Result<Vec<NotStarted>> {
        let launcher = self.launcher();
        let starts = specs.iter().map(|s| launcher.prepare(s));
        let mut not_started = Vec::new();
        for r in futures_util::future::join_all(starts).await {
            not_started.extend(r?);
        }
        Ok(not_started)
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
            Ok(Ok(_)) => crate::owned::let_go(&crate::owned::Thing::DockerRun(self.run_id.clone())),
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
        let thing = crate::owned::Thing::DockerRun(self.run_id.clone());
        match crate::reap::remove(&thing) {
            Ok(_) => crate::owned::let_go(&thing),
            // Kept in the ledger: removed again on the way out, or by the next command.
            Err(e) => eprintln!("chaos: {e}"),
        }
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
pub(super) async fn proxy_answers(addr: &str) -> bool {
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
