//! One lock server in a container of the run, as Redis's and ZooKeeper's members share it: the container (the run's labels, so the run's removal and the next command's reap cover it), its client port published on 127.0.0.1, the container's own address when the host reaches it (the observer's path), and its server under our image's supervisor (`supervised.rs`): the nemesis's stop, start and pause, the wait for its first answer, and its log copied into the run's logs at removal.

use super::containers::*;
use super::supervised::Supervised;
use std::future::Future;

/// A probe of a server's client address: whether it answers as ready.
pub(super) type Probe = fn(String) -> std::pin::Pin<Box<dyn Future<Output = bool> + Send>>;

/// One member's container and what the harness knows of it.
pub(super) struct LockBox {
    /// The node name scenarios give it: `lock`, `lock-2`.
    pub node: String,
    /// Its container's name (`chaos-<run>-lock-N`).
    pub name: String,
    container: Option<ContainerAsync<GenericImage>>,
    pub id: String,
    sup: Option<Supervised>,
    host_port: u16,
    /// The container's own client address when the host reaches it, else None.
    direct: Option<String>,
    pub running: bool,
    pub paused: bool,
    log_path: PathBuf,
    /// What the server is called, for messages (`redis-server`, `zookeeper`).
    what: &'static str,
    /// Its process's name under the supervisor (`/proc/PID/comm`: `redis-server`, `java`).
    comm: &'static str,
    /// Real time from its creation (or a start signal) to its first answer.
    pub started_in: Duration,
}

impl LockBox {
    /// Member `n` (container `chaos-<run>-lock-N`, log `lock-N.log`) planned: a free host port.
    pub fn plan(
        run_id: &str,
        node: &str,
        n: usize,
        log_dir: &Path,
        (what, comm): (&'static str, &'static str),
    ) -> anyhow::Result<LockBox> {
        Ok(LockBox {
            node: node.to_string(),
            name: docker_name(run_id, &format!("lock-{n}")),
            container: None,
            id: String::new(),
            sup: None,
            host_port: crate::ports::free_port()
                .map_err(|e| anyhow::anyhow!("no free port for the lock container: {e}"))?,
            direct: None,
            running: false,
            paused: false,
            log_path: log_dir.join(format!("lock-{n}.log")),
            what,
            comm,
            started_in: Duration::ZERO,
        })
    }

    /// Its container started from `req` (its name, labels and published port added here).
    pub async fn create(
        &mut self,
        docker: &Docker,
        req: ContainerRequest<GenericImage>,
        port: u16,
        image: &str,
        run_id: &str,
    ) -> anyhow::Result<()> {
        let req = req
            .with_container_name(&self.name)
            .with_labels(labels(run_id))
            .with_startup_timeout(START_TIMEOUT);
        let req = publish_on_loopback(req, vec![(port, self.host_port)]);
        let c = req.start().await.map_err(|e| {
            anyhow::anyhow!(
                "start the {} container {} ({image}): {e}",
                self.node,
                self.name
            )
        })?;
        self.id = c.id().to_string();
        self.container = Some(c);
        self.running = true;
        self.sup = Some(Supervised::new(docker, &self.id, self.comm).await);
        Ok(())
    }

    /// Note the container's own address on its network when the host reaches it there.
    pub async fn find_direct(&mut self, docker: &Docker, port: u16, probe: Probe) {
        if let Some(ip) = container_ip(docker, &self.id).await {
            let addr = format!("{ip}:{port}");
            if probe(addr.clone()).await {
                self.direct = Some(addr);
            }
        }
    }

    /// `127.0.0.1:PORT`, its client port published on the host.
    pub fn client_addr(&self) -> String {
        format!("127.0.0.1:{}", self.host_port)
    }

    /// Where the harness reaches it: its own address when the host reaches it (no docker-proxy
    /// between), else its published port.
    pub fn observe_addr(&self) -> String {
        self.direct.clone().unwrap_or_else(|| self.client_addr())
    }

    fn sup(&self) -> anyhow::Result<&Supervised> {
        self.sup
            .as_ref()
            .ok_or_else(|| anyhow::anyhow!("{} was never started", self.node))
    }

    /// Wait until `probe` says it is ready on its published port; an error naming its log
    /// when its container exits or `limit` (from `began`) passes.
    pub async fn wait_ready(
        &self,
        docker: &Docker,
        began: Instant,
        limit: Duration,
        probe: Probe,
    ) -> anyhow::Result<()> {
        let log = self
            .log_path
            .file_name()
            .unwrap_or_default()
            .to_string_lossy();
        loop {
            if probe(self.client_addr()).await {
                return Ok(());
            }
            if let Some((false, code)) = container_state(docker, &self.id).await {
                anyhow::bail!(
                    "{}'s container {} exited at start (status {code}): see `docker logs {}` or logs/{log} of the run",
                    self.what,
                    self.name,
                    self.name
                );
            }
            if began.elapsed() > limit {
                anyhow::bail!(
                    "{} in container {} did not answer on {} within {} s: see logs/{log} of the run",
                    self.what,
                    self.name,
                    self.client_addr(),
                    limit.as_secs()
                );
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }

    /// The nemesis's stop: SIGTERM to the server (`Fast`) or SIGKILL (`Immediate`, a crash,
    /// and a `kill`) through the supervisor; the container and its address kept. Returns when
    /// the server has exited (or, its pid unknown, `answers` no longer says so).
    pub async fn stop_server(&mut self, mode: StopMode, answers: Probe) -> anyhow::Result<()> {
        if !self.running {
            anyhow::bail!("{} is not running", self.node);
        }
        let exited = self.sup()?.stop(mode).await?;
        let began = Instant::now();
        while !exited && answers(self.client_addr()).await {
            if began.elapsed() > STOP_TIMEOUT {
                anyhow::bail!(
                    "{} in container {} still answers {} s after its stop",
                    self.what,
                    self.name,
                    STOP_TIMEOUT.as_secs()
                );
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        self.running = false;
        self.paused = false;
        Ok(())
    }

    /// The nemesis's start: the server again in its container (the start signal resent every
    /// `every` until it answers); how long until it did.
    pub async fn start_server(
        &mut self,
        docker: &Docker,
        every: Duration,
        limit: Duration,
        probe: Probe,
    ) -> anyhow::Result<Duration> {
        if self.running {
            anyhow::bail!("{} is already running", self.node);
        }
        let began = Instant::now();
        let sup = self.sup()?.clone();
        sup.start().await?;
        self.running = true;
        sup.start_again_until(every, self.wait_ready(docker, began, limit, probe))
            .await?;
        self.started_in = began.elapsed();
        Ok(self.started_in)
    }

    /// The nemesis's pause (SIGSTOP of the server's own process) or resume (SIGCONT); how.
    /// Its container, for a cpu fault (None: never started).
    pub fn cpu_target(&self) -> Option<crate::backend::CpuTarget> {
        self.sup.as_ref().map(Supervised::cpu_target)
    }

    pub async fn pause(&mut self, pause: bool) -> anyhow::Result<&'static str> {
        if !self.running {
            anyhow::bail!("{} is not running", self.node);
        }
        let how = self.sup()?.pause(pause).await?;
        self.paused = pause;
        Ok(how)
    }

    /// Copy its log into the run's logs and remove the container.
    pub async fn remove(&mut self, docker: &Docker) {
        if let Some(c) = self.container.take() {
            copy_log(docker, &self.id, &self.log_path).await;
            let _ = tokio::time::timeout(STOP_TIMEOUT, c.rm()).await;
        }
        self.running = false;
    }
}

impl Drop for LockBox {
    fn drop(&mut self) {
        // A path that skipped `remove` (an error, a panic, Ctrl-C): the container carries the
        // run's label, which the run's cluster removes on the same path (or the next command's
        // reap); testcontainers' own drop-time removal is not relied on.
        if let Some(c) = self.container.take() {
            std::mem::forget(c);
        }
    }
}

/// Remove every member's container at once (each log copied first).
pub(super) async fn remove_all(docker: &Docker, members: &mut [LockBox]) {
    futures_util::future::join_all(members.iter_mut().map(|m| m.remove(docker))).await;
}

/// How long the longest of `members`' last starts took, or `node`'s.
pub(super) fn last_start(members: &[LockBox], node: &str) -> Duration {
    match members.iter().find(|m| m.node == node) {
        Some(m) => m.started_in,
        None => members
            .iter()
            .map(|m| m.started_in)
            .max()
            .unwrap_or_default(),
    }
}
