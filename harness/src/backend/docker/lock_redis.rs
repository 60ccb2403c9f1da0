//! Redis as the lock service's server on the docker backend: one server in a container of the locally built `chaos-redis` image (Debian's `redis-server` 7.0, scripts/build-images) on the run's network, with the run's labels (so the run's removal and the next command's reap cover it), configured as on the process backend (keyspace notifications, no persistence, `hz 100`), its port published on 127.0.0.1 for the harness's observer. The boxes reach it through the proxy container (`box-K->lock`). The image's entrypoint stays PID 1 as a supervisor (label `chaos.redis.signals`): SIGUSR1 stops redis-server, SIGUSR2 kills it (a crash), SIGHUP starts it again, so a nemesis stop keeps the container and its address.

use super::containers::*;
use super::engine;
use super::lock::{container_ip, has_label};
use super::supervised::Supervised;

/// Redis's port inside its container.
const PORT: u16 = 6379;
/// The container's suffix and its log's name.
const MEMBER: &str = "lock";
/// `CHAOS_REDIS_IMAGE`, default the locally built image.
const DEFAULT_REDIS_IMAGE: &str = "chaos-redis:7.0";
/// The label our image carries when its entrypoint takes the stop and start signals.
const REDIS_SIGNALS_LABEL: &str = "chaos.redis.signals";

/// One Redis server in a container of the run.
pub struct DockerRedis {
    docker: Docker,
    container: Option<ContainerAsync<GenericImage>>,
    id: String,
    /// Its supervisor and redis-server, signalled from this host (a pause, a kill).
    sup: Supervised,
    name: String,
    image: String,
    host_port: u16,
    /// The container's own address on the run's network when the host reaches it (the
    /// observer's path: no docker-proxy between it and the harness), else None.
    direct: Option<String>,
    running: bool,
    log_path: PathBuf,
    version: String,
    /// Real time from the container's creation (or a start signal) to its first answer.
    pub started_in: Duration,
}

impl DockerRedis {
    /// Start the server on the run's network and wait until it answers on its published port.
    pub async fn start(run_id: &str, log_dir: &Path) -> anyhow::Result<DockerRedis> {
        let began = Instant::now();
        let engine = engine::engine().await?;
        let image = std::env::var("CHAOS_REDIS_IMAGE")
            .ok()
            .filter(|v| !v.trim().is_empty())
            .unwrap_or_else(|| DEFAULT_REDIS_IMAGE.to_string());
        require_image(&engine.docker, &image).await?;
        if !has_label(&engine.docker, &image, REDIS_SIGNALS_LABEL).await {
            anyhow::bail!(
                "image {image} has no label {REDIS_SIGNALS_LABEL}: the harness stops and starts redis-server inside its container by signals; build chaos-redis with scripts/build-images"
            );
        }
        let name = docker_name(run_id, MEMBER);
        let host_port = crate::procs::free_port()
            .map_err(|e| anyhow::anyhow!("no free port for the lock container: {e}"))?;
        let args: Vec<String> = [
            "--bind",
            "0.0.0.0",
            "--port",
            &PORT.to_string(),
            "--protected-mode",
            "no",
            "--save",
            "",
            "--appendonly",
            "no",
            "--notify-keyspace-events",
            chaos_workloads::lock::REDIS_NOTIFY,
            "--hz",
            "100",
            "--databases",
            "1",
            "--dir",
            "/var/lib/chaos-redis",
        ]
        .iter()
        .map(|s| s.to_string())
        .collect();
        let req = generic(&image)
            .with_exposed_port(ContainerPort::Tcp(PORT))
            .with_container_name(&name)
            .with_network(docker_name(run_id, "net"))
            .with_labels(labels(run_id))
            .with_cmd(args)
            .with_startup_timeout(START_TIMEOUT);
        let req = publish_on_loopback(req, vec![(PORT, host_port)]);
        let container = req
            .start()
            .await
            .map_err(|e| anyhow::anyhow!("start the lock container ({image}): {e}"))?;
        let mut redis = DockerRedis {
            docker: engine.docker.clone(),
            id: container.id().to_string(),
            sup: Supervised::new(&engine.docker, container.id(), "redis-server").await,
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
        redis.wait_ready(began).await?;
        redis.started_in = began.elapsed();
        redis.version = version(&redis.client_addr()).await;
        if let Some(ip) = container_ip(&redis.docker, &redis.id).await {
            let addr = format!("{ip}:{PORT}");
            if crate::lock::redis_ping(&addr).await {
                redis.direct = Some(addr);
            }
        }
        Ok(redis)
    }

    async fn wait_ready(&mut self, began: Instant) -> anyhow::Result<()> {
        loop {
            if crate::lock::redis_ping(&self.client_addr()).await {
                return Ok(());
            }
            if let Some((false, code)) = container_state(&self.docker, &self.id).await {
                anyhow::bail!(
                    "redis's container {} exited at start (status {code}): see `docker logs {}` or logs/{MEMBER}.log of the run",
                    self.name,
                    self.name
                );
            }
            if began.elapsed() > START_TIMEOUT {
                anyhow::bail!(
                    "redis-server in container {} did not answer on {} within {} s: see logs/{MEMBER}.log of the run",
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
        format!("{}:{PORT}", self.name)
    }

    /// `127.0.0.1:PORT`, the server's port published on the host.
    pub fn client_addr(&self) -> String {
        format!("127.0.0.1:{}", self.host_port)
    }

    /// Where the harness's observer subscribes: the container's own address when the host
    /// reaches it, else the published port.
    pub fn observe_addr(&self) -> String {
        self.direct.clone().unwrap_or_else(|| self.client_addr())
    }

    pub fn describe(&self) -> String {
        format!(
            "redis {} (one server, no persistence, container {} of {}, started in {:.2} s)",
            self.version,
            self.name,
            self.image,
            self.started_in.as_secs_f64()
        )
    }

    /// The nemesis's stop: SIGTERM to redis-server (`Fast`) or SIGKILL (`Immediate`, a crash,
    /// and a `kill`), through the container's supervisor (after a SIGCONT, so a paused server
    /// acts on it); the container and its address kept. Returns when redis-server has exited
    /// (or, its pid unknown, no longer answers).
    pub async fn stop_member(&mut self, mode: StopMode) -> anyhow::Result<()> {
        if !self.running {
            anyhow::bail!("the redis server is not running");
        }
        let exited = self.sup.stop(mode).await?;
        let began = Instant::now();
        let addr = self.client_addr();
        while !exited && crate::lock::redis_ping(&addr).await {
            if began.elapsed() > STOP_TIMEOUT {
                anyhow::bail!(
                    "redis-server in container {} still answers {} s after its stop",
                    self.name,
                    STOP_TIMEOUT.as_secs()
                );
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        self.running = false;
        Ok(())
    }

    /// The nemesis's pause (SIGSTOP of redis-server's own process) or resume (SIGCONT); how.
    pub async fn pause_member(&mut self, pause: bool) -> anyhow::Result<&'static str> {
        if !self.running {
            anyhow::bail!("the redis server is not running");
        }
        self.sup.pause(pause).await
    }

    /// The nemesis's start: redis-server again in its container; how long until it answered.
    pub async fn start_member(&mut self) -> anyhow::Result<Duration> {
        if self.running {
            anyhow::bail!("the redis server is already running");
        }
        let began = Instant::now();
        let sup = self.sup.clone();
        sup.start().await?;
        self.running = true;
        sup.start_again_until(RESIGNAL, self.wait_ready(began))
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

impl Drop for DockerRedis {
    fn drop(&mut self) {
        // A path that skipped `stop`: the container carries the run's label, which the run's
        // cluster removes on the same path (or the next command's reap).
        if let Some(c) = self.container.take() {
            std::mem::forget(c);
        }
    }
}

/// `7.0.15`, from `INFO server`.
async fn version(addr: &str) -> String {
    let ask = async {
        let client = redis::Client::open(format!("redis://{addr}")).ok()?;
        let mut c = client.get_multiplexed_async_connection().await.ok()?;
        let info: String = redis::cmd("INFO")
            .arg("server")
            .query_async(&mut c)
            .await
            .ok()?;
        info.lines().find_map(|l| {
            l.strip_prefix("redis_version:")
                .map(|v| v.trim().to_string())
        })
    };
    tokio::time::timeout(Duration::from_secs(1), ask)
        .await
        .ok()
        .flatten()
        .unwrap_or_else(|| "?".into())
}
