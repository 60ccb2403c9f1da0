//! etcd as the lock service's server on the docker backend: each member in a container of the locally built `chaos-etcd` image (Debian's `etcd-server` 3.4, scripts/build-images), with the run's labels (so the run's removal, `chaos down --all` and the next command's reap cover it), its data on a tmpfs, its client port published on 127.0.0.1 for the harness's observer. The boxes reach a member through the proxy container (`box-K->lock`, `box-K->lock-2`), which forwards to the container's name. The image's entrypoint stays PID 1 as a supervisor (label `chaos.etcd.signals`): SIGUSR1 stops etcd, SIGUSR2 kills it (a crash), SIGHUP starts it again, so a nemesis stop keeps the container, its address and its data; a pause stops etcd's own process (`supervised.rs`).
//!
//! One member (`lock`) sits on the run's network. Three (`lock-1` .. `lock-3`) sit each on a
//! network of its own with the proxy, their peer traffic through the proxy one link per
//! direction (`lock_net.rs`).

use super::containers::*;
use super::engine;
use super::lock_net::PeerNets;
use super::supervised::Supervised;
use testcontainers::core::Host;

/// etcd's client port inside its container.
const CLIENT_PORT: u16 = 2379;
/// One member's peer port; member N of three listens on this + N (its peer URL names a port of
/// its own: see `lock_net.rs`).
const PEER_PORT: u16 = 2380;
/// Where the members' data lives in the container (a tmpfs).
const DATA_DIR: &str = "/var/lib/chaos-etcd";
/// `CHAOS_ETCD_IMAGE`, default the locally built image.
const DEFAULT_ETCD_IMAGE: &str = "chaos-etcd:3.4";
/// The image's entrypoint, the supervisor (run by a gate's shell with three members).
const ENTRYPOINT: &str = "/usr/local/bin/chaos-etcd";
/// The label our image carries when its entrypoint takes the stop and start signals.
const ETCD_SIGNALS_LABEL: &str = "chaos.etcd.signals";
/// How long one status call may take (a paused member never answers).
const STATUS_TIMEOUT: Duration = Duration::from_millis(200);

/// One member: its container and what the harness knows of it.
struct Member {
    /// The node name scenarios give it: `lock` (one member) or `lock-N`.
    node: String,
    /// Its number, from 1: etcd's `--name` is `lock-N`, its container `chaos-<run>-lock-N`.
    n: usize,
    /// Its container's name.
    name: String,
    container: Option<ContainerAsync<GenericImage>>,
    id: String,
    sup: Option<Supervised>,
    host_port: u16,
    /// The container's own address when the host reaches it (the observer's path: no
    /// docker-proxy between the watch and the harness), else None.
    direct: Option<String>,
    running: bool,
    paused: bool,
    /// etcd's member id, from its status answers.
    etcd_id: u64,
    log_path: PathBuf,
    /// Real time from the first container's creation (or a start signal) to its answer.
    started_in: Duration,
}

impl Member {
    fn etcd_name(&self) -> String {
        format!("lock-{}", self.n)
    }

    fn peer_port(&self, cluster: bool) -> u16 {
        match cluster {
            true => PEER_PORT + self.n as u16,
            false => PEER_PORT,
        }
    }

    /// The peer URL every member knows it by: its etcd name, which each member's hosts file
    /// maps to the proxy (three members), or its container's name (one).
    fn peer_url(&self, cluster: bool) -> String {
        match cluster {
            true => format!("http://{}:{}", self.etcd_name(), self.peer_port(true)),
            false => format!("http://{}:{PEER_PORT}", self.name),
        }
    }

    /// `127.0.0.1:PORT`, its client port published on the host.
    fn client_addr(&self) -> String {
        format!("127.0.0.1:{}", self.host_port)
    }

    fn observe_addr(&self) -> String {
        self.direct.clone().unwrap_or_else(|| self.client_addr())
    }

    fn sup(&self) -> anyhow::Result<&Supervised> {
        self.sup
            .as_ref()
            .ok_or_else(|| anyhow::anyhow!("{} was never started", self.node))
    }
}

/// The etcd members in containers of the run.
pub struct DockerEtcd {
    docker: Docker,
    run_id: String,
    image: String,
    members: Vec<Member>,
    /// Three members: each one's network and the proxy's address on it.
    nets: Option<PeerNets>,
    version: String,
    /// Real time from the first container's creation to every member answering (with a leader).
    pub started_in: Duration,
}

impl DockerEtcd {
    /// The members `nodes` (`lock`, or `lock-1` .. `lock-3`) planned: names and ports, and for
    /// three their networks with the proxy container on each (the run's cluster started it), so
    /// the peer links can be made before any member starts (`launch`).
    pub async fn plan(
        run_id: &str,
        log_dir: &Path,
        nodes: &[String],
    ) -> anyhow::Result<DockerEtcd> {
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
        let mut members = Vec::new();
        for (n, node) in (1..=nodes.len()).zip(nodes) {
            members.push(Member {
                node: node.clone(),
                n,
                name: docker_name(run_id, &format!("lock-{n}")),
                container: None,
                id: String::new(),
                sup: None,
                host_port: crate::ports::free_port()
                    .map_err(|e| anyhow::anyhow!("no free port for the lock container: {e}"))?,
                direct: None,
                running: false,
                paused: false,
                etcd_id: 0,
                log_path: log_dir.join(format!("lock-{n}.log")),
                started_in: Duration::ZERO,
            });
        }
        let nets = match nodes.len() {
            1 => None,
            n => Some(PeerNets::create(&engine.docker, run_id, n).await?),
        };
        Ok(DockerEtcd {
            docker: engine.docker.clone(),
            run_id: run_id.to_string(),
            image,
            members,
            nets,
            version: String::new(),
            started_in: Duration::ZERO,
        })
    }

    /// The container request for member `i`; with `gate`, its entrypoint held by a shell at
    /// that fifo (in the run's logs folder, mounted at its own path) until released.
    fn request(&self, i: usize, gate: Option<&Path>) -> ContainerRequest<GenericImage> {
        let cluster = self.members.len() > 1;
        let initial = self
            .members
            .iter()
            .map(|m| format!("{}={}", m.etcd_name(), m.peer_url(cluster)))
            .collect::<Vec<_>>()
            .join(",");
        let m = &self.members[i];
        let args: Vec<String> = [
            "--name",
            &m.etcd_name(),
            "--data-dir",
            &format!("{DATA_DIR}/{}", m.etcd_name()),
            "--listen-client-urls",
            &format!("http://0.0.0.0:{CLIENT_PORT}"),
            "--advertise-client-urls",
            &format!("http://{}:{CLIENT_PORT}", m.name),
            "--listen-peer-urls",
            &format!("http://0.0.0.0:{}", m.peer_port(cluster)),
            "--initial-advertise-peer-urls",
            &m.peer_url(cluster),
            "--initial-cluster",
            &initial,
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
        let network = match &self.nets {
            Some(nets) => nets.network(i).to_string(),
            None => docker_name(&self.run_id, "net"),
        };
        let (image, args) = match gate {
            Some(_) => {
                let mut held = vec![
                    "-c".to_string(),
                    gate::SHELL_HOLD.to_string(),
                    "chaos-gate".into(),
                    String::new(),
                    ENTRYPOINT.into(),
                ];
                held.extend(args);
                (generic(&self.image).with_entrypoint("/bin/sh"), held)
            }
            None => (generic(&self.image), args),
        };
        let mut req = image
            .with_exposed_port(ContainerPort::Tcp(CLIENT_PORT))
            .with_container_name(&m.name)
            .with_network(network)
            .with_labels(labels(&self.run_id))
            .with_mount(Mount::tmpfs_mount(DATA_DIR))
            .with_cmd(args)
            .with_startup_timeout(START_TIMEOUT);
        if let Some(gate) = gate {
            let dir = gate
                .parent()
                .unwrap_or(Path::new("/"))
                .display()
                .to_string();
            req = req
                .with_mount(Mount::bind_mount(dir.clone(), dir))
                .with_env_var(gate::GATE_VAR, gate.display().to_string());
        }
        if let Some(nets) = &self.nets {
            // Its own name is itself; every other member is the proxy on its network.
            req = req.with_host(m.etcd_name(), Host::Addr([127, 0, 0, 1].into()));
            if let Ok(proxy) = nets.proxy_ip(i).parse::<std::net::IpAddr>() {
                for o in self.members.iter().filter(|o| o.n != m.n) {
                    req = req.with_host(o.etcd_name(), Host::Addr(proxy));
                }
            }
        }
        publish_on_loopback(req, vec![(CLIENT_PORT, m.host_port)])
    }

    /// Start every member's container at once and wait until each answers (three: and names
    /// a leader). A container left by a failure is removed with the run's label.
    ///
    /// Three members' containers start held at a gate each, then their etcds are let go one
    /// after another, each once the one before serves its peers, as on the process backend: a
    /// new member asks every other whether it was bootstrapped, and one listening but not yet
    /// serving (itself still asking) holds the question for etcd's whole 1 s timeout. Let go
    /// together they took 3.0-3.2 s in 2 of 5 starts here, 1.3-1.4 s in the others.
    pub async fn launch(&mut self) -> anyhow::Result<()> {
        let began = Instant::now();
        let cluster = self.members.len() > 1;
        let mut gates = Vec::new();
        if cluster {
            for m in &self.members {
                let dir = m.log_path.parent().unwrap_or(Path::new("."));
                gates.push(Gate::create(dir, &m.etcd_name())?);
            }
        }
        let reqs: Vec<_> = (0..self.members.len())
            .map(|i| self.request(i, gates.get(i).map(|g| g.path())))
            .collect();
        let started = futures_util::future::join_all(reqs.into_iter().map(|r| r.start())).await;
        let mut first_error = None;
        for (m, r) in self.members.iter_mut().zip(started) {
            match r {
                Ok(c) => {
                    m.id = c.id().to_string();
                    m.container = Some(c);
                    m.running = true;
                }
                Err(e) => {
                    first_error = first_error.or(Some(anyhow::anyhow!(
                        "start the {} container ({}): {e}",
                        m.node,
                        self.image
                    )))
                }
            }
        }
        if let Some(e) = first_error {
            return Err(e);
        }
        for (i, gate) in gates.into_iter().enumerate() {
            // Whether the container exited before its gate, asked every 100 ms.
            let exited = Arc::new(std::sync::atomic::AtomicBool::new(false));
            let watch = {
                let (docker, id, exited) = (
                    self.docker.clone(),
                    self.members[i].id.clone(),
                    exited.clone(),
                );
                tokio::spawn(async move {
                    loop {
                        tokio::time::sleep(Duration::from_millis(100)).await;
                        if let Some((false, _)) = container_state(&docker, &id).await {
                            exited.store(true, Ordering::Relaxed);
                            return;
                        }
                    }
                })
            };
            let node = self.members[i].node.clone();
            let released = gate
                .release(&node, START_TIMEOUT, || exited.load(Ordering::Relaxed))
                .await;
            watch.abort();
            released?;
            self.wait_serving_peers(i, began).await?;
        }
        for i in 0..self.members.len() {
            self.wait_ready(i, began, cluster).await?;
            self.members[i].started_in = began.elapsed();
        }
        self.started_in = began.elapsed();
        for m in &mut self.members {
            m.sup = Some(Supervised::new(&self.docker, &m.id, "etcd").await);
            if let Some(ip) = container_ip(&self.docker, &m.id).await {
                let addr = format!("{ip}:{CLIENT_PORT}");
                if status(&addr).await.is_some() {
                    m.direct = Some(addr);
                }
            }
        }
        self.version = self.read_version().await;
        Ok(())
    }

    /// The first member's version, as it answers a status call.
    async fn read_version(&self) -> String {
        match client(&self.members[0].client_addr()).await {
            Some(mut c) => c
                .status()
                .await
                .map(|s| s.version().to_string())
                .unwrap_or_else(|_| "?".into()),
            None => "?".into(),
        }
    }

    /// Wait until member `i` answers a status call (and, with `leader`, names a leader).
    async fn wait_ready(&mut self, i: usize, began: Instant, leader: bool) -> anyhow::Result<()> {
        let addr = self.members[i].client_addr();
        loop {
            let m = &mut self.members[i];
            if let Some((_, lead, id)) = status(&addr).await {
                m.etcd_id = id;
                if lead != 0 || !leader {
                    return Ok(());
                }
            }
            if let Some((false, code)) = container_state(&self.docker, &m.id).await {
                anyhow::bail!(
                    "etcd's container {} exited at start (status {code}): see `docker logs {}` or logs/lock-{}.log of the run",
                    m.name,
                    m.name,
                    m.n
                );
            }
            if began.elapsed() > START_TIMEOUT {
                anyhow::bail!(
                    "etcd in container {} did not answer{} on {addr} within {} s: see logs/lock-{}.log of the run",
                    m.name,
                    if leader { " with a leader" } else { "" },
                    START_TIMEOUT.as_secs(),
                    m.n
                );
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }

    /// Wait until member `i` answers on its peer listener (an HTTP answer to `/version`), at
    /// its container's address: the host reaches it where the engine runs here; elsewhere the
    /// wait is a fixed 0.3 s.
    async fn wait_serving_peers(&self, i: usize, began: Instant) -> anyhow::Result<()> {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let m = &self.members[i];
        let Some(ip) = container_ip(&self.docker, &m.id).await else {
            tokio::time::sleep(Duration::from_millis(300)).await;
            return Ok(());
        };
        let addr = format!("{ip}:{}", m.peer_port(true));
        let waited = Instant::now();
        loop {
            let ask = async {
                let mut s = tokio::net::TcpStream::connect(&addr).await.ok()?;
                s.write_all(b"GET /version HTTP/1.0\r\n\r\n").await.ok()?;
                let mut buf = [0u8; 16];
                let n = s.read(&mut buf).await.ok()?;
                buf[..n].starts_with(b"HTTP/").then_some(())
            };
            if let Ok(Some(())) = tokio::time::timeout(Duration::from_millis(50), ask).await {
                return Ok(());
            }
            if let Some((false, code)) = container_state(&self.docker, &m.id).await {
                anyhow::bail!(
                    "etcd's container {} exited at start (status {code}): see logs/lock-{}.log of the run",
                    m.name,
                    m.n
                );
            }
            if waited.elapsed() > Duration::from_secs(5) || began.elapsed() > START_TIMEOUT {
                // Not reachable from here: the start goes on, and the leader wait judges it.
                return Ok(());
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    }

    /// The peer links (three members): `(link, listen, upstream)`, `lock-1->lock-2` listening
    /// on the proxy's address in lock-1's network at lock-2's peer port, forwarding to lock-2's
    /// container.
    pub fn peer_links(&self) -> Vec<(String, String, String)> {
        let Some(nets) = &self.nets else {
            return vec![];
        };
        let members: Vec<_> = self
            .members
            .iter()
            .map(|m| (m.node.as_str(), m.name.as_str(), vec![m.peer_port(true)]))
            .collect();
        nets.links(&members)
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
        let i = self.index(node).ok()?;
        Some(self.members[i].sup().ok()?.cpu_target())
    }

    /// Where the proxy forwards the boxes' links to `node`: its container's name.
    pub fn upstream(&self, node: &str) -> Option<String> {
        let i = self.index(node).ok()?;
        Some(format!("{}:{CLIENT_PORT}", self.members[i].name))
    }

    /// Where the harness's observer watches: each member's own address when the host reaches
    /// it (one hop fewer than the published port's docker-proxy, so a grant is heard sooner),
    /// else its published port; comma-separated.
    pub fn observe_addrs(&self) -> String {
        self.members
            .iter()
            .map(|m| m.observe_addr())
            .collect::<Vec<_>>()
            .join(",")
    }

    pub fn describe(&self) -> String {
        let how = match self.members.len() {
            1 => format!("one member, container {}", self.members[0].name),
            n => format!(
                "{n} members {}, containers {}..., peer traffic through the proxy",
                self.members
                    .iter()
                    .map(|m| m.node.as_str())
                    .collect::<Vec<_>>()
                    .join(", "),
                docker_name(&self.run_id, "lock-")
            ),
        };
        format!(
            "etcd {} ({how}, of {}, started in {:.2} s)",
            self.version,
            self.image,
            self.started_in.as_secs_f64()
        )
    }

    /// The nemesis's stop of `node`: SIGTERM to etcd (`Fast`) or SIGKILL (`Immediate`, a crash,
    /// and a `kill`), through the container's supervisor; the container, its address and its
    /// data kept. Returns when etcd has exited (or, its pid unknown, no longer answers).
    pub async fn stop_member(&mut self, node: &str, mode: StopMode) -> anyhow::Result<()> {
        let i = self.index(node)?;
        let m = &mut self.members[i];
        if !m.running {
            anyhow::bail!("{node} is not running");
        }
        let exited = m.sup()?.stop(mode).await?;
        let began = Instant::now();
        let addr = m.client_addr();
        while !exited && answers(&addr).await {
            if began.elapsed() > STOP_TIMEOUT {
                anyhow::bail!(
                    "etcd in container {} still answers {} s after its stop",
                    m.name,
                    STOP_TIMEOUT.as_secs()
                );
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        m.running = false;
        m.paused = false;
        Ok(())
    }

    /// The nemesis's start of `node`: etcd again in its container, on its data; how long until
    /// it answered (it may find no leader: its peers cut off).
    pub async fn start_member(&mut self, node: &str) -> anyhow::Result<Duration> {
        let i = self.index(node)?;
        if self.members[i].running {
            anyhow::bail!("{node} is already running");
        }
        let began = Instant::now();
        let sup = self.members[i].sup()?.clone();
        sup.start().await?;
        self.members[i].running = true;
        sup.start_again_until(RESIGNAL, self.wait_ready(i, began, false))
            .await?;
        self.members[i].started_in = began.elapsed();
        Ok(self.members[i].started_in)
    }

    /// The nemesis's pause (SIGSTOP of etcd's own process) or resume (SIGCONT); how.
    pub async fn pause_member(&mut self, node: &str, pause: bool) -> anyhow::Result<&'static str> {
        let i = self.index(node)?;
        let m = &mut self.members[i];
        if !m.running {
            anyhow::bail!("{node} is not running");
        }
        let how = m.sup()?.pause(pause).await?;
        m.paused = pause;
        Ok(how)
    }

    /// How long `node`'s last start took (the longest of all when `node` is none of them).
    pub fn last_start(&self, node: &str) -> Duration {
        match self.index(node) {
            Ok(i) => self.members[i].started_in,
            Err(_) => self
                .members
                .iter()
                .map(|m| m.started_in)
                .max()
                .unwrap_or_default(),
        }
    }

    /// The member that leads now, as the members say: of those that answer (a paused member
    /// does not), the leader named at the highest raft term. None when none names one.
    pub async fn leader(&self) -> Option<String> {
        let (_, leader) = self
            .ask_all()
            .await
            .into_iter()
            .flatten()
            .filter(|(_, leader, _)| *leader != 0)
            .map(|(term, leader, _)| (term, leader))
            .max()?;
        self.members
            .iter()
            .find(|m| m.etcd_id == leader)
            .map(|m| m.node.clone())
    }

    /// What each member says now: its node name, the member it names as leader (None: none,
    /// or it did not answer) and its raft term (0 when it did not answer).
    pub async fn views(&self) -> Vec<(String, Option<String>, u64)> {
        let answers = self.ask_all().await;
        self.members
            .iter()
            .zip(answers)
            .map(|(m, a)| {
                let (term, leader) = a.map_or((0, 0), |(t, l, _)| (t, l));
                let named = self
                    .members
                    .iter()
                    .find(|o| o.etcd_id == leader && leader != 0);
                (m.node.clone(), named.map(|o| o.node.clone()), term)
            })
            .collect()
    }

    /// Every running, unpaused member's status, in order (None for the others).
    async fn ask_all(&self) -> Vec<Option<(u64, u64, u64)>> {
        let asks = self.members.iter().map(|m| {
            let addr = m.observe_addr();
            let running = m.running && !m.paused;
            async move {
                match running {
                    true => status(&addr).await,
                    false => None,
                }
            }
        });
        futures_util::future::join_all(asks).await
    }

    /// Each member's node name and etcd id, for the record.
    pub fn ids(&self) -> Vec<(String, u64)> {
        self.members
            .iter()
            .map(|m| (m.node.clone(), m.etcd_id))
            .collect()
    }

    /// Copy each member's log into the run's logs and remove its container (the networks go
    /// with the run's label, after the proxy's container that is on them).
    pub async fn stop(&mut self) {
        let removes = self.members.iter_mut().filter_map(|m| {
            let c = m.container.take()?;
            m.running = false;
            let (docker, id, log) = (self.docker.clone(), m.id.clone(), m.log_path.clone());
            Some(async move {
                copy_log(&docker, &id, &log).await;
                let _ = tokio::time::timeout(STOP_TIMEOUT, c.rm()).await;
            })
        });
        futures_util::future::join_all(removes).await;
        if let Some(nets) = &self.nets {
            nets.release(&self.docker, &self.run_id).await;
        }
    }
}

impl Drop for DockerEtcd {
    fn drop(&mut self) {
        // A path that skipped `stop` (an error, a panic, Ctrl-C): the containers carry the
        // run's label, which the run's cluster removes on the same path (or the next command's
        // reap); testcontainers' own drop-time removal is not relied on.
        for m in &mut self.members {
            if let Some(c) = m.container.take() {
                std::mem::forget(c);
            }
        }
    }
}

/// One status call: (raft term, the leader it names or 0, its own id); None when it does not
/// answer in time.
async fn status(addr: &str) -> Option<(u64, u64, u64)> {
    let ask = async {
        let mut c = client(addr).await?;
        let s = c.status().await.ok()?;
        let id = s.header().map_or(0, |h| h.member_id());
        Some((s.raft_term(), s.leader(), id))
    };
    tokio::time::timeout(2 * STATUS_TIMEOUT, ask)
        .await
        .ok()
        .flatten()
}

/// A client of one member, with short timeouts.
async fn client(addr: &str) -> Option<etcd_client::Client> {
    let options = etcd_client::ConnectOptions::new()
        .with_connect_timeout(STATUS_TIMEOUT)
        .with_timeout(STATUS_TIMEOUT);
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
