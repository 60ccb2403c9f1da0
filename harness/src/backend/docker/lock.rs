//! etcd as the lock service's server on the docker backend: one member in a container of the locally built `chaos-etcd` image (Debian's `etcd-server` 3.4, scripts/build-images) on the run's network, with the run's labels (so the run's removal, `chaos down --all` and the next command's reap cover it), its data on a tmpfs, its client port published on 127.0.0.1 for the harness's observer. The boxes reach it through the proxy container (`box-K->lock`), which forwards to the container's name on the network. The image's entrypoint stays PID 1 as a supervisor (label `chaos.etcd.signals`): SIGUSR1 stops etcd, SIGUSR2 kills it (a crash), SIGHUP starts it again, so a nemesis stop keeps the container, its address and its data.

use super::containers::*;
use super::engine;

/// etcd's client and peer ports inside its container.
const CLIENT_PORT: u16 = 2379;
const PEER_PORT: u16 = 2380;
/// Where the member's data lives in the container (a tmpfs).
const DATA_DIR: &str = "/var/lib/chaos-etcd";
/// The member's name, its container's suffix and its log's name.
const MEMBER: &str = "lock-1";
/// `CHAOS_ETCD_IMAGE`, default the locally built image.
const DEFAULT_ETCD_IMAGE: &str = "chaos-etcd:3.4";
/// The label our image carries when its entrypoint takes the stop and start signals.
const ETCD_SIGNALS_LABEL: &str = "chaos.etcd.signals";

/// One etcd member in a container of the run.
pub struct DockerEtcd {
    docker: Docker,
    container: Option<ContainerAsync<GenericImage>>,
    id: String,
    name: String,
    image: String,
    host_port: u16,
    /// The container's own address on the run's network when the host reaches it (the
    /// observer's path: no docker-proxy between the watch and the harness), else None.
    direct: Option<String>,
    running: bool,
    log_path: PathBuf,
    version: String,
    /// Real time from the container's creation (or a start signal) to its first answer.
    pub started_in: Duration,
}

impl DockerEtcd {
    /// Start the member on the run's network (which the run's cluster created) and wait until
    /// it answers on its published port. A container left by a failure is removed with the
    /// run's label (the cluster's removal, or the next command's reap).
    pub async fn start(run_id: &str, log_dir: &Path) -> anyhow::Result<DockerEtcd> {
        let began = Instant::now();
        let engine = engine::engine().await?;
        let image = std::env::var("CHAOS_ETCD_IMAGE")
            .ok()
            .filter(|v| !v.trim().is_empty())
            .unwrap_or_else(|| DEFAULT_ETCD_IMAGE.to_string());
        require_image(&engine.docker, &image).await?;
        if !has_label(&engine.docker, &image, ETCD_SIGNALS_LABEL).await {
            anyhow::bail!(
                "image {image} has no label {ETCD_SIGNALS_LABEL}: the harness stops and starts etcd inside its container by signals; build chaos-etcd with scripts/build-images"
            );
        }
        let name = docker_name(run_id, MEMBER);
        let host_port = crate::procs::free_port()
            .map_err(|e| anyhow::anyhow!("no free port for the lock container: {e}"))?;
        let client = format!("http://{name}:{CLIENT_PORT}");
        let peer = format!("http://{name}:{PEER_PORT}");
        let args: Vec<String> = [
            "--name",
            MEMBER,
            "--data-dir",
            &format!("{DATA_DIR}/{MEMBER}"),
            "--listen-client-urls",
            &format!("http://0.0.0.0:{CLIENT_PORT}"),
            "--advertise-client-urls",
            &client,
            "--listen-peer-urls",
            &format!("http://0.0.0.0:{PEER_PORT}"),
            "--initial-advertise-peer-urls",
            &peer,
            "--initial-cluster",
            &format!("{MEMBER}={peer}"),
            "--initial-cluster-state",
            "new",
            // A scenario second is tens of real ms: elections and lease checks on that scale
            // (as on the process backend).
            "--heartbeat-interval",
            "10",
            "--election-timeout",
            "100",
            "--logger",
            "zap",
            "--log-outputs",
            "stderr",
        ]
        .iter()
        .map(|s| s.to_string())
        .collect();
        let req = generic(&image)
            .with_exposed_port(ContainerPort::Tcp(CLIENT_PORT))
            .with_container_name(&name)
            .with_network(docker_name(run_id, "net"))
            .with_labels(labels(run_id))
            .with_mount(Mount::tmpfs_mount(DATA_DIR))
            .with_cmd(args)
            .with_startup_timeout(START_TIMEOUT);
        let req = publish_on_loopback(req, vec![(CLIENT_PORT, host_port)]);
        let container = req
            .start()
            .await
            .map_err(|e| anyhow::anyhow!("start the lock container ({image}): {e}"))?;
        let mut etcd = DockerEtcd {
            docker: engine.docker.clone(),
            id: container.id().to_string(),
            container: Some(container),
            name,
            image,
            host_port,
            direct: None,
            running: true,
            log_path: log_dir.join(format!("{MEMBER}.log")),
            version: String::new(),
            started_in: Duration::ZERO,
        };
        etcd.wait_ready(began).await?;
        etcd.started_in = began.elapsed();
        etcd.version = etcd.read_version().await;
        if let Some(ip) = container_ip(&etcd.docker, &etcd.id).await {
            let addr = format!("{ip}:{CLIENT_PORT}");
            if answers(&addr).await {
                etcd.direct = Some(addr);
            }
        }
        Ok(etcd)
    }

    /// The member's own version, as it answers a status call.
    async fn read_version(&self) -> String {
        match client(&self.client_addr()).await {
            Some(mut c) => c
                .status()
                .await
                .map(|s| s.version().to_string())
                .unwrap_or_else(|_| "?".into()),
            None => "?".into(),
        }
    }

    async fn wait_ready(&mut self, began: Instant) -> anyhow::Result<()> {
        loop {
            if answers(&self.client_addr()).await {
                return Ok(());
            }
            if let Some((false, code)) = container_state(&self.docker, &self.id).await {
                anyhow::bail!(
                    "etcd's container {} exited at start (status {code}): see `docker logs {}` or logs/{MEMBER}.log of the run",
                    self.name,
                    self.name
                );
            }
            if began.elapsed() > START_TIMEOUT {
                anyhow::bail!(
                    "etcd in container {} did not answer on {} within {} s: see logs/{MEMBER}.log of the run",
                    self.name,
                    self.client_addr(),
                    START_TIMEOUT.as_secs()
                );
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }

    /// Where the proxy forwards the boxes' links: the container's name on the run's network.
    pub fn upstream(&self) -> String {
        format!("{}:{CLIENT_PORT}", self.name)
    }

    /// `127.0.0.1:PORT`, the member's client port published on the host.
    pub fn client_addr(&self) -> String {
        format!("127.0.0.1:{}", self.host_port)
    }

    /// Where the harness's observer watches the member: the container's own address when the
    /// host reaches it (one hop fewer than the published port's docker-proxy, so a grant is
    /// heard sooner), else the published port.
    pub fn observe_addr(&self) -> String {
        self.direct.clone().unwrap_or_else(|| self.client_addr())
    }

    pub fn describe(&self) -> String {
        format!(
            "etcd {} (one member, container {} of {}, started in {:.2} s)",
            self.version,
            self.name,
            self.image,
            self.started_in.as_secs_f64()
        )
    }

    /// The nemesis's stop: SIGTERM to etcd (`Fast`) or SIGKILL (`Immediate`, a crash), through
    /// the container's supervisor; the container, its address and its data kept. Returns when
    /// the member no longer answers.
    pub async fn stop_member(&mut self, mode: StopMode) -> anyhow::Result<()> {
        if !self.running {
            anyhow::bail!("the etcd member is not running");
        }
        let sig = match mode {
            StopMode::Fast => "SIGUSR1",
            StopMode::Immediate => "SIGUSR2",
        };
        bounded(
            &format!("send {sig} to the lock container"),
            signal(&self.docker, &self.id, sig),
        )
        .await?;
        let began = Instant::now();
        let mut sent = Instant::now();
        let addr = self.client_addr();
        while answers(&addr).await {
            if sent.elapsed() > RESIGNAL {
                let _ = signal(&self.docker, &self.id, sig).await;
                sent = Instant::now();
            }
            if began.elapsed() > STOP_TIMEOUT {
                anyhow::bail!(
                    "etcd in container {} still answers {} s after {sig}",
                    self.name,
                    STOP_TIMEOUT.as_secs()
                );
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        self.running = false;
        Ok(())
    }

    /// The nemesis's start: etcd again in its container, on its data; how long until it
    /// answered.
    pub async fn start_member(&mut self) -> anyhow::Result<Duration> {
        if self.running {
            anyhow::bail!("the etcd member is already running");
        }
        let began = Instant::now();
        bounded(
            "send SIGHUP (start etcd) to the lock container",
            signal(&self.docker, &self.id, "SIGHUP"),
        )
        .await?;
        self.running = true;
        let (id, docker) = (self.id.clone(), self.docker.clone());
        // Repeat the start until etcd answers (a start of a running etcd does nothing).
        let again = async move {
            loop {
                tokio::time::sleep(RESIGNAL).await;
                let _ = signal(&docker, &id, "SIGHUP").await;
            }
        };
        tokio::select! {
            r = self.wait_ready(began) => r?,
            _ = again => unreachable!(),
        }
        self.started_in = began.elapsed();
        Ok(self.started_in)
    }

    /// Copy its log into the run's logs and remove the container.
    pub async fn stop(&mut self) {
        if let Some(c) = self.container.take() {
            copy_log(&self.docker, &self.id, &self.log_path).await;
            let _ = tokio::time::timeout(STOP_TIMEOUT, c.rm()).await;
        }
        self.running = false;
    }
}

impl Drop for DockerEtcd {
    fn drop(&mut self) {
        // A path that skipped `stop` (an error, a panic, Ctrl-C): the container carries the
        // run's label, which the run's cluster removes on the same path (or the next command's
        // reap); testcontainers' own drop-time removal is not relied on.
        if let Some(c) = self.container.take() {
            std::mem::forget(c);
        }
    }
}

/// A client of one member, with short timeouts.
async fn client(addr: &str) -> Option<etcd_client::Client> {
    let options = etcd_client::ConnectOptions::new()
        .with_connect_timeout(Duration::from_millis(200))
        .with_timeout(Duration::from_millis(200));
    etcd_client::Client::connect([format!("http://{addr}")], Some(options))
        .await
        .ok()
}

/// Whether the member answers a status call (docker's port forwarder accepts connections
/// before the server listens, so a connect alone proves nothing).
async fn answers(addr: &str) -> bool {
    match client(addr).await {
        Some(mut c) => c.status().await.is_ok(),
        None => false,
    }
}

/// The container's address on its (one) network.
pub(super) async fn container_ip(docker: &Docker, id: &str) -> Option<String> {
    inspect(docker, id)
        .await?
        .network_settings?
        .networks?
        .into_values()
        .find_map(|n| n.ip_address.filter(|ip| !ip.is_empty()))
}

/// Whether `image` carries `label`.
pub(super) async fn has_label(docker: &Docker, image: &str, label: &str) -> bool {
    match tokio::time::timeout(CALL_TIMEOUT, docker.inspect_image(image)).await {
        Ok(Ok(info)) => info
            .config
            .and_then(|c| c.labels)
            .is_some_and(|l| l.contains_key(label)),
        _ => false,
    }
}
