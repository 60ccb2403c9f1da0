//! Redis as the lock service's server on the docker backend: each server in a container of the locally built `chaos-redis` image (Debian's `redis-server` 7.0, scripts/build-images) on the run's network, configured as on the process backend (keyspace notifications, no persistence, `hz 100`), its port published on 127.0.0.1 for the harness's observer (`lock_box.rs`: the container, its supervisor, the nemesis's stop, start and pause). The boxes reach the primary through the proxy container (`box-K->lock`).
//!
//! With `[lock] replica = true` a second container `lock-2` replicates from `lock` through the
//! proxy (`lock-2->lock`, listening in the proxy container), and the sentinel (`run/sentinel.rs`)
//! promotes it from the host and re-points the boxes' links at its container. A member started
//! again after the promotion comes back as the replica of the promoted one (`lock->lock-2`): its
//! role is written into its container first, and the image's entrypoint adds it to the
//! server's arguments.

use super::containers::*;
use super::engine;
use super::lock_box::{self, LockBox, Probe};

/// Redis's port inside its container.
const PORT: u16 = 6379;
/// `CHAOS_REDIS_IMAGE`, default the locally built image.
const DEFAULT_REDIS_IMAGE: &str = "chaos-redis:7.0";
/// The label our image carries when its entrypoint takes the stop and start signals.
const REDIS_SIGNALS_LABEL: &str = "chaos.redis.signals";
/// Where the proxy container listens for the link from member i (0-based) to the other:
/// `lock-2->lock` on this + 1, `lock->lock-2` on this (inside the proxy container only).
const PEER_PORT: u16 = 6380;
/// The server's directory in its container (its role file, read by the entrypoint at a start).
const DIR: &str = "/var/lib/chaos-redis";

fn ping(addr: String) -> std::pin::Pin<Box<dyn std::future::Future<Output = bool> + Send>> {
    Box::pin(async move { crate::lock::redis_ping(&addr).await })
}

fn synced(addr: String) -> std::pin::Pin<Box<dyn std::future::Future<Output = bool> + Send>> {
    Box::pin(async move { crate::lock::redis_in_sync(&addr).await })
}

/// The Redis service in containers of the run: one server, or a primary and its replica.
pub struct DockerRedis {
    docker: Docker,
    run_id: String,
    image: String,
    members: Vec<LockBox>,
    /// The member the boxes reach now: 0 (`lock`) until the sentinel promotes the replica.
    primary: usize,
    version: String,
    /// Real time from the first container's creation to every member answering (a replica in
    /// sync).
    pub started_in: Duration,
}

impl DockerRedis {
    /// The server `lock` (and `replica`, `lock-2`) planned: names and ports; nothing runs yet.
    pub async fn plan(
        run_id: &str,
        log_dir: &Path,
        replica: Option<&str>,
    ) -> anyhow::Result<DockerRedis> {
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
        let mut members = Vec::new();
        for (n, node) in (1..).zip(std::iter::once(crate::lock::LOCK_NODE).chain(replica)) {
            members.push(LockBox::plan(
                run_id,
                node,
                n,
                log_dir,
                ("redis-server", "redis-server"),
            )?);
        }
        Ok(DockerRedis {
            docker: engine.docker.clone(),
            run_id: run_id.to_string(),
            image,
            members,
            primary: 0,
            version: String::new(),
            started_in: Duration::ZERO,
        })
    }

    /// The proxy's listener for the link from member `from` to member `to` (0-based).
    fn peer_listen(&self, from: usize) -> (String, u16) {
        (docker_name(&self.run_id, "proxy"), PEER_PORT + from as u16)
    }

    /// The links between the members (a replica): `(link, listen, upstream)`, `lock-2->lock`
    /// and `lock->lock-2`, each listening in the proxy container on a port of its own and
    /// forwarding to the other member's container.
    pub fn peer_links(&self) -> Vec<(String, String, String)> {
        let mut out = Vec::new();
        for (i, from) in self
            .members
            .iter()
            .enumerate()
            .filter(|_| self.members.len() > 1)
        {
            for to in self.members.iter().filter(|t| t.node != from.node) {
                out.push((
                    chaos_nemesis::Link::name(&from.node, &to.node),
                    format!("0.0.0.0:{}", self.peer_listen(i).1),
                    format!("{}:{PORT}", to.name),
                ));
            }
        }
        out
    }

    /// Start every member's container and wait until each answers (a replica: in sync).
    pub async fn launch(&mut self) -> anyhow::Result<()> {
        let began = Instant::now();
        for i in 0..self.members.len() {
            let req = self.request(i);
            let (docker, image, run_id) =
                (self.docker.clone(), self.image.clone(), self.run_id.clone());
            self.members[i]
                .create(&docker, req, PORT, &image, &run_id)
                .await?;
        }
        for i in 0..self.members.len() {
            self.wait_ready(i, began).await?;
            self.members[i].started_in = began.elapsed();
        }
        self.started_in = began.elapsed();
        self.version = version(&self.members[0].client_addr()).await;
        for m in &mut self.members {
            m.find_direct(&self.docker, PORT, ping).await;
        }
        Ok(())
    }

    /// Member `i`'s container: configured as on the process backend, a replica replicating
    /// through its link to the primary.
    fn request(&self, i: usize) -> ContainerRequest<GenericImage> {
        let mut args: Vec<String> = [
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
            "--repl-diskless-sync-delay",
            "0",
            "--dir",
            DIR,
        ]
        .iter()
        .map(|s| s.to_string())
        .collect();
        if i != self.primary {
            let (host, port) = self.peer_listen(i);
            args.extend(["--replicaof".to_string(), host, port.to_string()]);
        }
        generic(&self.image)
            .with_exposed_port(ContainerPort::Tcp(PORT))
            .with_network(docker_name(&self.run_id, "net"))
            .with_cmd(args)
    }

    /// Wait until member `i` answers and, a replica whose primary runs, is in sync.
    async fn wait_ready(&self, i: usize, began: Instant) -> anyhow::Result<()> {
        let sync = i != self.primary && self.members[self.primary].running;
        let probe: Probe = if sync { synced } else { ping };
        self.members[i]
            .wait_ready(&self.docker, began, START_TIMEOUT, probe)
            .await
    }

    fn index(&self, node: &str) -> anyhow::Result<usize> {
        self.members
            .iter()
            .position(|m| m.node == node)
            .ok_or_else(|| anyhow::anyhow!("{node} is not a member of the Redis lock service"))
    }

    /// Whether `node` names a member.
    pub fn has(&self, node: &str) -> bool {
        self.index(node).is_ok()
    }

    /// What a cpu fault on `node` lands on: its container.
    pub fn cpu_target(&self, node: &str) -> Option<crate::backend::CpuTarget> {
        self.members[self.index(node).ok()?].cpu_target()
    }

    /// Where the proxy forwards the boxes' links: the primary's container (the floating
    /// address: `lock` is whichever member is the primary now).
    pub fn upstream(&self) -> String {
        format!("{}:{PORT}", self.members[self.primary].name)
    }

    /// Where the harness reaches the primary now.
    pub fn primary_addr(&self) -> String {
        self.members[self.primary].observe_addr()
    }

    /// Where the harness's observer subscribes: each member's own address when the host
    /// reaches it, else its published port; comma-separated, `lock` first.
    pub fn observe_addrs(&self) -> String {
        let addrs: Vec<String> = self.members.iter().map(|m| m.observe_addr()).collect();
        addrs.join(",")
    }

    /// The primary now (`lock`, or `lock-2` once promoted) and the replica, when there is one.
    pub fn roles(&self) -> (String, Option<String>) {
        let replica = (0..self.members.len()).find(|i| *i != self.primary);
        (
            self.members[self.primary].node.clone(),
            replica.map(|i| self.members[i].node.clone()),
        )
    }

    /// Make the replica the primary (`REPLICAOF NO ONE` on it, from the host); returns the
    /// promoted member's name, where the harness reaches it and where the proxy does.
    pub async fn promote(&mut self) -> anyhow::Result<(String, String, String)> {
        let (_, Some(replica)) = self.roles() else {
            anyhow::bail!("the Redis lock service has no replica to promote");
        };
        let i = self.index(&replica)?;
        let addr = self.members[i].observe_addr();
        crate::lock::redis_promote_at(&addr).await?;
        self.primary = i;
        Ok((replica, addr, self.upstream()))
    }

    pub fn describe(&self) -> String {
        let what = match self.members.len() {
            1 => format!("one server, container {}", self.members[0].name),
            _ => format!(
                "a primary and an asynchronous replica, containers {} and {}, replication through the proxy",
                self.members[0].name, self.members[1].name
            ),
        };
        format!(
            "redis {} ({what}, no persistence, of {}, started in {:.2} s)",
            self.version,
            self.image,
            self.started_in.as_secs_f64()
        )
    }

    /// The nemesis's stop of `node`: SIGTERM (`Fast`) or SIGKILL (`Immediate`, a crash, and a
    /// `kill`) through its container's supervisor; without persistence it forgets the lock
    /// either way.
    pub async fn stop_member(&mut self, node: &str, mode: StopMode) -> anyhow::Result<()> {
        let i = self.index(node)?;
        self.members[i].stop_server(mode, ping).await
    }

    /// The nemesis's start of `node`: redis-server again in its container. With a replica, its
    /// role is written first (the image's entrypoint adds it to the server's arguments), so a
    /// member that is no longer the primary comes back as the replica of the one that is,
    /// through its link, never for a moment a second primary. How long until it answered.
    pub async fn start_member(&mut self, node: &str) -> anyhow::Result<Duration> {
        let i = self.index(node)?;
        let began = Instant::now();
        if self.members.len() > 1 && !self.members[i].running {
            let role = match i == self.primary {
                true => "--replicaof no one".to_string(),
                false => {
                    let (host, port) = self.peer_listen(i);
                    format!("--replicaof {host} {port}")
                }
            };
            let script = format!("printf '%s\\n' '{role}' > {DIR}/role");
            let (code, out) =
                super::standby::exec(&self.docker, &self.members[i].id, "root", &script).await?;
            if code != 0 {
                anyhow::bail!("write {node}'s role in its container: {}", out.trim());
            }
        }
        let docker = self.docker.clone();
        self.members[i]
            .start_server(&docker, RESIGNAL, START_TIMEOUT, ping)
            .await?;
        self.members[i].started_in = began.elapsed();
        Ok(self.members[i].started_in)
    }

    /// The nemesis's pause (SIGSTOP of redis-server's own process) or resume (SIGCONT); how.
    pub async fn pause_member(&mut self, node: &str, pause: bool) -> anyhow::Result<&'static str> {
        let i = self.index(node)?;
        self.members[i].pause(pause).await
    }

    /// How long `node`'s last start took (the longest of all for any other name).
    pub fn last_start(&self, node: &str) -> Duration {
        lock_box::last_start(&self.members, node)
    }

    /// Copy the logs into the run's logs and remove the containers.
    pub async fn stop(&mut self) {
        lock_box::remove_all(&self.docker, &mut self.members).await;
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
