//! ZooKeeper as the lock service's server on the docker backend: one member (standalone) in a container of the locally built `chaos-zookeeper` image (Debian's `zookeeper` 3.8 and `default-jre-headless`, scripts/build-images) on the run's network, with the run's labels (so the run's removal and the next command's reap cover it), configured as on the process backend (the same `zoo.cfg` but for its client port on 0.0.0.0, and the same JVM flags), its client port published on 127.0.0.1 for the harness's observer. The boxes reach it through the proxy container (`box-K->lock`). The image's entrypoint stays PID 1 as a supervisor (label `chaos.zookeeper.signals`): SIGUSR1 stops the JVM, SIGUSR2 kills it (a crash), SIGHUP starts it again on its data, so a nemesis stop keeps the container and its address.

use super::containers::*;
use super::engine;
use super::lock::{container_ip, has_label};

/// ZooKeeper's client port inside its container.
const PORT: u16 = 2181;
/// The container's suffix and its log's name.
const MEMBER: &str = "lock";
/// `CHAOS_ZOOKEEPER_IMAGE`, default the locally built image.
const DEFAULT_ZK_IMAGE: &str = "chaos-zookeeper:3.8";
/// The label our image carries when its entrypoint takes the stop and start signals.
const ZK_SIGNALS_LABEL: &str = "chaos.zookeeper.signals";
/// The member's directory in its container (its `zoo.cfg`, and its data under `data/`).
const DIR: &str = "/var/lib/chaos-zookeeper";
/// How long the JVM may take to serve in its container.
const ZK_START_TIMEOUT: Duration = Duration::from_secs(30);

/// One ZooKeeper member in a container of the run.
pub struct DockerZk {
    docker: Docker,
    container: Option<ContainerAsync<GenericImage>>,
    id: String,
    name: String,
    image: String,
    host_port: u16,
    /// The container's own address on the run's network when the host reaches it (the
    /// observer's path: no docker-proxy between it and the harness), else None.
    direct: Option<String>,
    running: bool,
    /// Its supervisor and the JVM under it, signalled from this host (a pause is a SIGSTOP of
    /// the JVM, not of the container).
    sup: super::supervised::Supervised,
    log_path: PathBuf,
    version: String,
    /// Real time from the container's creation (or a start signal) to its first `srvr` answer
    /// as serving.
    pub started_in: Duration,
}

/// The JVM's command line in the container: the image's Java, the jars Debian installs there.
fn java_args() -> Vec<String> {
    let mut args: Vec<String> = crate::lock::ZK_JVM_FLAGS
        .iter()
        .map(|s| s.to_string())
        .collect();
    args.push(format!("-Djava.io.tmpdir={DIR}"));
    args.push("-cp".into());
    args.push("/usr/share/java/zookeeper.jar:/usr/share/java/slf4j-simple.jar".into());
    args.push("org.apache.zookeeper.server.quorum.QuorumPeerMain".into());
    args.push(format!("{DIR}/zoo.cfg"));
    args
}

impl DockerZk {
    /// Start the member on the run's network and wait until it serves on its published port.
    pub async fn start(run_id: &str, log_dir: &Path) -> anyhow::Result<DockerZk> {
        let began = Instant::now();
        let engine = engine::engine().await?;
        let image = std::env::var("CHAOS_ZOOKEEPER_IMAGE")
            .ok()
            .filter(|v| !v.trim().is_empty())
            .unwrap_or_else(|| DEFAULT_ZK_IMAGE.to_string());
        require_image(&engine.docker, &image).await?;
        if !has_label(&engine.docker, &image, ZK_SIGNALS_LABEL).await {
            anyhow::bail!(
                "image {image} has no label {ZK_SIGNALS_LABEL}: the harness stops and starts ZooKeeper inside its container by signals; build chaos-zookeeper with scripts/build-images"
            );
        }
        let name = docker_name(run_id, MEMBER);
        let host_port = crate::procs::free_port()
            .map_err(|e| anyhow::anyhow!("no free port for the lock container: {e}"))?;
        let cfg = crate::lock::zoo_cfg_on(Path::new(DIR), "0.0.0.0", PORT, &[]);
        let req = generic(&image)
            .with_exposed_port(ContainerPort::Tcp(PORT))
            .with_container_name(&name)
            .with_network(docker_name(run_id, "net"))
            .with_labels(labels(run_id))
            .with_env_var("ZOO_CFG", cfg)
            .with_cmd(java_args())
            .with_startup_timeout(START_TIMEOUT);
        let req = publish_on_loopback(req, vec![(PORT, host_port)]);
        let container = req
            .start()
            .await
            .map_err(|e| anyhow::anyhow!("start the lock container ({image}): {e}"))?;
        let sup = super::supervised::Supervised::new(&engine.docker, container.id(), "java").await;
        let mut zk = DockerZk {
            docker: engine.docker.clone(),
            id: container.id().to_string(),
            container: Some(container),
            name,
            image,
            host_port,
            direct: None,
            running: true,
            sup,
            log_path: log_dir.join(format!("{MEMBER}.log")),
            version: String::new(),
            started_in: Duration::ZERO,
        };
        zk.wait_ready(began).await?;
        zk.started_in = began.elapsed();
        zk.version = version(&zk.client_addr()).await;
        if let Some(ip) = container_ip(&zk.docker, &zk.id).await {
            let addr = format!("{ip}:{PORT}");
            if crate::lock::zk_srvr_mode(&addr).await.is_some() {
                zk.direct = Some(addr);
            }
        }
        Ok(zk)
    }

    /// Wait until the member answers `srvr` as serving.
    async fn wait_ready(&mut self, began: Instant) -> anyhow::Result<()> {
        loop {
            if crate::lock::zk_srvr_mode(&self.client_addr())
                .await
                .is_some()
            {
                return Ok(());
            }
            if let Some((false, code)) = container_state(&self.docker, &self.id).await {
                anyhow::bail!(
                    "zookeeper's container {} exited at start (status {code}): see `docker logs {}` or logs/{MEMBER}.log of the run",
                    self.name,
                    self.name
                );
            }
            if began.elapsed() > ZK_START_TIMEOUT {
                anyhow::bail!(
                    "zookeeper in container {} did not serve on {} within {} s: see logs/{MEMBER}.log of the run",
                    self.name,
                    self.client_addr(),
                    ZK_START_TIMEOUT.as_secs()
                );
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }

    /// Where the proxy forwards the boxes' links: the container's name on the run's network.
    pub fn upstream(&self) -> String {
        format!("{}:{PORT}", self.name)
    }

    /// `127.0.0.1:PORT`, the client port published on the host.
    pub fn client_addr(&self) -> String {
        format!("127.0.0.1:{}", self.host_port)
    }

    /// Where the harness's observer watches: the container's own address when the host
    /// reaches it, else the published port.
    pub fn observe_addr(&self) -> String {
        self.direct.clone().unwrap_or_else(|| self.client_addr())
    }

    /// The member, when it serves: it leads itself (standalone).
    pub async fn leader(&self) -> Option<String> {
        let serving = self.running
            && crate::lock::zk_srvr_mode(&self.client_addr())
                .await
                .is_some();
        serving.then(|| MEMBER.to_string())
    }

    pub fn describe(&self) -> String {
        format!(
            "zookeeper {} (one member, tick {} ms, container {} of {}, started in {:.2} s)",
            self.version,
            crate::lock::ZK_TICK_MS,
            self.name,
            self.image,
            self.started_in.as_secs_f64()
        )
    }

    /// The nemesis's pause (SIGSTOP of the JVM's own process) or resume (SIGCONT); how.
    pub async fn pause_member(&mut self, pause: bool) -> anyhow::Result<&'static str> {
        if !self.running {
            anyhow::bail!("the zookeeper member is not running");
        }
        self.sup.pause(pause).await
    }

    /// The nemesis's stop: SIGTERM to the JVM (`Fast`) or SIGKILL (`Immediate`, a crash),
    /// through the container's supervisor; the container, its address and its data kept.
    /// Returns when the member no longer answers.
    /// A paused JVM is resumed first, so it acts on the stop.
    pub async fn stop_member(&mut self, mode: StopMode) -> anyhow::Result<()> {
        if !self.running {
            anyhow::bail!("the zookeeper member is not running");
        }
        let exited = self.sup.stop(mode).await?;
        let began = Instant::now();
        let addr = self.client_addr();
        while !exited && answers(&addr).await {
            if began.elapsed() > STOP_TIMEOUT {
                anyhow::bail!(
                    "zookeeper in container {} still answers {} s after its stop",
                    self.name,
                    STOP_TIMEOUT.as_secs()
                );
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        self.running = false;
        Ok(())
    }

    /// The nemesis's start: the JVM again in its container on its data; how long until it
    /// served.
    pub async fn start_member(&mut self) -> anyhow::Result<Duration> {
        if self.running {
            anyhow::bail!("the zookeeper member is already running");
        }
        let began = Instant::now();
        let sup = self.sup.clone();
        sup.start().await?;
        self.running = true;
        sup.start_again_until(RESIGNAL * 10, self.wait_ready(began))
            .await?;
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

impl Drop for DockerZk {
    fn drop(&mut self) {
        // A path that skipped `stop`: the container carries the run's label, which the run's
        // cluster removes on the same path (or the next command's reap).
        if let Some(c) = self.container.take() {
            std::mem::forget(c);
        }
    }
}

/// Whether the member answers `srvr` at all, serving or not (a published port's docker-proxy
/// accepts a connection with nothing behind it, and closes it without a word).
async fn answers(addr: &str) -> bool {
    !srvr_text(addr).await.is_empty()
}

/// The `srvr` answer's text; empty when none came in time.
async fn srvr_text(addr: &str) -> String {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let ask = async {
        let mut s = tokio::net::TcpStream::connect(addr).await.ok()?;
        s.write_all(b"srvr").await.ok()?;
        let mut text = String::new();
        s.read_to_string(&mut text).await.ok()?;
        Some(text)
    };
    tokio::time::timeout(Duration::from_millis(300), ask)
        .await
        .ok()
        .flatten()
        .unwrap_or_default()
}

/// `3.8.0`, from `srvr`'s first line (`Zookeeper version: 3.8.0-...`).
async fn version(addr: &str) -> String {
    let text = srvr_text(addr).await;
    text.lines()
        .next()
        .and_then(|l| l.strip_prefix("Zookeeper version: "))
        .and_then(|v| v.split(['-', ',']).next())
        .map(|v| v.trim().to_string())
        .unwrap_or_else(|| "?".into())
}
