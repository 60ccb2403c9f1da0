//! ZooKeeper as the lock service's server on the docker backend: each member in a container of the locally built `chaos-zookeeper` image (Debian's `zookeeper` 3.8 and `default-jre-headless`, scripts/build-images), configured as on the process backend (the same `zoo.cfg` but for its ports on 0.0.0.0, and the same JVM flags), its client port published on 127.0.0.1 for the harness's observer (`lock_box.rs`: the container, its supervisor, the nemesis's stop, start and pause). The boxes reach a member through the proxy container (`box-K->lock`). The image's entrypoint stays PID 1 as a supervisor (label `chaos.zookeeper.signals`): SIGUSR1 stops the JVM, SIGUSR2 kills it (a crash), SIGHUP starts it again on its data, so a nemesis stop keeps the container and its address.
//!
//! One member (`lock`, standalone) sits on the run's network. An ensemble of three (`lock-1` ..
//! `lock-3`, `server.N=lock-N:2880+N:3880+N`) sits as etcd's three members do (`lock_net.rs`):
//! each member on a network of its own with the proxy, every other member's name mapped to the
//! proxy's address there, so each ordered pair's quorum and election connections go through the
//! link `lock-I->lock-J` (two proxies, one per port of J).

use super::containers::*;
use super::engine;
use super::lock_box::{self, LockBox};
use super::lock_net::PeerNets;
use testcontainers::core::Host;

/// ZooKeeper's client port inside its container.
const PORT: u16 = 2181;
/// An ensemble's member N listens for followers on this + N and for elections on
/// `ELECTION_PORT` + N: a port of its own each, so the proxy tells `lock-1->lock-2` from
/// `lock-1->lock-3` by the port (`lock_net.rs`).
const QUORUM_PORT: u16 = 2880;
const ELECTION_PORT: u16 = 3880;
/// `CHAOS_ZOOKEEPER_IMAGE`, default the locally built image.
const DEFAULT_ZK_IMAGE: &str = "chaos-zookeeper:3.8";
/// The label our image carries when its entrypoint takes the stop and start signals.
const ZK_SIGNALS_LABEL: &str = "chaos.zookeeper.signals";
/// The member's directory in its container (its `zoo.cfg`, and its data under `data/`).
const DIR: &str = "/var/lib/chaos-zookeeper";
/// How long the JVMs may take to serve in their containers.
const ZK_START_TIMEOUT: Duration = Duration::from_secs(30);

fn serving(addr: String) -> std::pin::Pin<Box<dyn std::future::Future<Output = bool> + Send>> {
    Box::pin(async move { crate::lock::zk_srvr_mode(&addr).await.is_some() })
}

fn answering(addr: String) -> std::pin::Pin<Box<dyn std::future::Future<Output = bool> + Send>> {
    Box::pin(async move { answers(&addr).await })
}

/// ZooKeeper in containers of the run: one member, or an ensemble of three.
pub struct DockerZk {
    docker: Docker,
    run_id: String,
    image: String,
    members: Vec<LockBox>,
    /// An ensemble: each member's network and the proxy's address on it.
    nets: Option<PeerNets>,
    version: String,
    /// Real time from the first container's creation to every member serving.
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
    /// The members `nodes` (`lock`, or `lock-1` .. `lock-3`) planned: names and ports, and for
    /// an ensemble their networks with the proxy container on each, so the peer links can be
    /// made before any member starts (`launch`).
    pub async fn plan(run_id: &str, log_dir: &Path, nodes: &[String]) -> anyhow::Result<DockerZk> {
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
        let mut members = Vec::new();
        for (n, node) in (1..).zip(nodes) {
            members.push(LockBox::plan(
                run_id,
                node,
                n,
                log_dir,
                ("zookeeper", "java"),
            )?);
        }
        let nets = match nodes.len() {
            1 => None,
            n => Some(PeerNets::create(&engine.docker, run_id, n).await?),
        };
        Ok(DockerZk {
            docker: engine.docker.clone(),
            run_id: run_id.to_string(),
            image,
            members,
            nets,
            version: String::new(),
            started_in: Duration::ZERO,
        })
    }

    /// Member `i`'s container: the process backend's `zoo.cfg` but for its client port on
    /// 0.0.0.0 and, in an ensemble, its quorum and election ports on every address of the
    /// container (its own name is 127.0.0.1 in its hosts file; every other member's is the
    /// proxy's address on its network).
    fn request(&self, i: usize) -> ContainerRequest<GenericImage> {
        let servers: Vec<(usize, u16, u16)> = (1..=self.members.len())
            .map(|n| (n, QUORUM_PORT + n as u16, ELECTION_PORT + n as u16))
            .collect();
        let mut cfg = crate::lock::zoo_cfg_on(Path::new(DIR), "0.0.0.0", PORT, &servers);
        if self.nets.is_some() {
            cfg.push_str("quorumListenOnAllIPs=true\n");
        }
        let network = match &self.nets {
            Some(nets) => nets.network(i).to_string(),
            None => docker_name(&self.run_id, "net"),
        };
        let mut req = generic(&self.image)
            .with_exposed_port(ContainerPort::Tcp(PORT))
            .with_network(network)
            .with_env_var("ZOO_CFG", cfg)
            .with_env_var("ZOO_MYID", (i + 1).to_string())
            .with_cmd(java_args());
        if let Some(nets) = &self.nets {
            // A member that opens an election connection to one with a higher id announces
            // its own address, 127.0.0.1 here, and that member drops the connection and calls
            // back there: the image's forwarders (`ZOO_FORWARD`) take that call from its own
            // loopback to the link. Without them an ensemble never formed in 2 starts of 9.
            let forward: Vec<String> = (1..=self.members.len())
                .filter(|n| *n != i + 1)
                .map(|n| {
                    let port = ELECTION_PORT + n as u16;
                    format!("{port}:{}:{port}", lock_name(n))
                })
                .collect();
            req = req
                .with_env_var("ZOO_FORWARD", forward.join(" "))
                .with_host(lock_name(i + 1), Host::Addr([127, 0, 0, 1].into()));
            if let Ok(proxy) = nets.proxy_ip(i).parse::<std::net::IpAddr>() {
                for n in (1..=self.members.len()).filter(|n| *n != i + 1) {
                    req = req.with_host(lock_name(n), Host::Addr(proxy));
                }
            }
        }
        req
    }

    /// The peer links (an ensemble): `(link, listen, upstream)`, twice per ordered pair:
    /// `lock-1->lock-2` listening on the proxy's address in lock-1's network at lock-2's quorum
    /// port and at its election port, forwarding to lock-2's container.
    pub fn peer_links(&self) -> Vec<(String, String, String)> {
        let Some(nets) = &self.nets else {
            return vec![];
        };
        let members: Vec<_> = (1..)
            .zip(&self.members)
            .map(|(n, m)| {
                let ports = vec![QUORUM_PORT + n, ELECTION_PORT + n];
                (m.node.as_str(), m.name.as_str(), ports)
            })
            .collect();
        nets.links(&members)
    }

    /// Start every member's container at once and wait until each serves (an ensemble's: once
    /// a leader is elected and it has joined).
    pub async fn launch(&mut self) -> anyhow::Result<()> {
        let began = Instant::now();
        let reqs: Vec<_> = (0..self.members.len()).map(|i| self.request(i)).collect();
        let (docker, image, run_id) = (&self.docker, &self.image, &self.run_id);
        let started = futures_util::future::join_all(
            self.members
                .iter_mut()
                .zip(reqs)
                .map(|(m, req)| m.create(docker, req, PORT, image, run_id)),
        )
        .await;
        started.into_iter().collect::<anyhow::Result<Vec<()>>>()?;
        for m in &mut self.members {
            m.wait_ready(&self.docker, began, ZK_START_TIMEOUT, serving)
                .await?;
            m.started_in = began.elapsed();
        }
        self.started_in = began.elapsed();
        self.version = version(&self.members[0].client_addr()).await;
        for m in &mut self.members {
            m.find_direct(&self.docker, PORT, serving).await;
        }
        Ok(())
    }

    fn index(&self, node: &str) -> anyhow::Result<usize> {
        self.members
            .iter()
            .position(|m| m.node == node)
            .ok_or_else(|| anyhow::anyhow!("{node} is not a member of the lock service"))
    }

    /// Whether `node` names a member.
    pub fn has(&self, node: &str) -> bool {
        self.index(node).is_ok()
    }

    /// What a cpu fault on `node` lands on: its container.
    pub fn cpu_target(&self, node: &str) -> Option<crate::backend::CpuTarget> {
        self.members[self.index(node).ok()?].cpu_target()
    }

    /// Where the proxy forwards the boxes' links to `node`: its container's name.
    pub fn upstream(&self, node: &str) -> Option<String> {
        let i = self.index(node).ok()?;
        Some(format!("{}:{PORT}", self.members[i].name))
    }

    /// Where the harness's observer watches: each member's own address when the host reaches
    /// it, else its published port; comma-separated.
    pub fn observe_addrs(&self) -> String {
        let addrs: Vec<String> = self.members.iter().map(|m| m.observe_addr()).collect();
        addrs.join(",")
    }

    /// The member that leads (one member: itself, while it serves).
    pub async fn leader(&self) -> Option<String> {
        for m in self.members.iter().filter(|m| m.running && !m.paused) {
            if let Some(mode) = crate::lock::zk_srvr_mode(&m.observe_addr()).await {
                if mode == "leader" || mode == "standalone" {
                    return Some(m.node.clone());
                }
            }
        }
        None
    }

    pub fn describe(&self) -> String {
        let how = match self.members.len() {
            1 => format!("one member, container {}", self.members[0].name),
            n => format!(
                "an ensemble of {n}: {}, containers {}..., peer traffic through the proxy",
                self.members
                    .iter()
                    .map(|m| m.node.as_str())
                    .collect::<Vec<_>>()
                    .join(", "),
                docker_name(&self.run_id, "lock-")
            ),
        };
        format!(
            "zookeeper {} ({how}, tick {} ms, of {}, started in {:.2} s)",
            self.version,
            crate::lock::ZK_TICK_MS,
            self.image,
            self.started_in.as_secs_f64()
        )
    }

    /// The nemesis's pause (SIGSTOP of the JVM's own process) or resume (SIGCONT); how.
    pub async fn pause_member(&mut self, node: &str, pause: bool) -> anyhow::Result<&'static str> {
        let i = self.index(node)?;
        self.members[i].pause(pause).await
    }

    /// The nemesis's stop: SIGTERM to the JVM (`Fast`) or SIGKILL (`Immediate`, a crash)
    /// through the container's supervisor; the container, its address and its data kept.
    pub async fn stop_member(&mut self, node: &str, mode: StopMode) -> anyhow::Result<()> {
        let i = self.index(node)?;
        self.members[i].stop_server(mode, answering).await
    }

    /// The nemesis's start: the JVM again in its container on its data; how long until it
    /// answered (standalone: served; an ensemble's member serves only once it finds a quorum,
    /// which a scenario may have taken away).
    pub async fn start_member(&mut self, node: &str) -> anyhow::Result<Duration> {
        let i = self.index(node)?;
        let probe = match self.members.len() {
            1 => serving,
            _ => answering,
        };
        let docker = self.docker.clone();
        self.members[i]
            .start_server(&docker, RESIGNAL * 10, ZK_START_TIMEOUT, probe)
            .await
    }

    /// How long `node`'s last start took (the longest of all for any other name).
    pub fn last_start(&self, node: &str) -> Duration {
        lock_box::last_start(&self.members, node)
    }

    /// Copy the logs into the run's logs and remove the containers (an ensemble's networks go
    /// with the run's label, after the proxy's container that is on them).
    pub async fn stop(&mut self) {
        lock_box::remove_all(&self.docker, &mut self.members).await;
        if let Some(nets) = &self.nets {
            nets.release(&self.docker, &self.run_id).await;
        }
    }
}

/// The name members know member `n` by.
fn lock_name(n: usize) -> String {
    format!("lock-{n}")
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
