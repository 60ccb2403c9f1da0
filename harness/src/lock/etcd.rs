//! etcd as the lock service's server: Debian's `etcd-server` (3.4) run as local processes on 127.0.0.1 and free ports, as the unprivileged user when the harness is root, their data under the run's data directory and their logs in the run's `logs/`; stopped (and their data removed) on every path.
//!
//! One member is the node `lock`. Three members (`lock-1`, `lock-2`, `lock-3`) form a real
//! cluster whose peer traffic goes through the proxy, one link per direction (`peers.rs`): each
//! member advertises a host name (`http://lock-2:P`), the same for all, and finds the others at
//! loopback addresses unique to the pair, where the proxy's links listen.

use super::member::{self, stop_now};
use super::peers;
use crate::{ports, procs};
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::{Duration, Instant};
use tokio::process::{Child, Command};

/// How long a member may take to answer its first status call (and the cluster to elect).
const READY_TIMEOUT: Duration = Duration::from_secs(20);
/// How long one status call may take (a paused member never answers).
const STATUS_TIMEOUT: Duration = Duration::from_millis(200);

/// The etcd binary: `CHAOS_ETCD` or Debian's.
fn binary() -> anyhow::Result<PathBuf> {
    let path = std::env::var_os("CHAOS_ETCD")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from("/usr/bin/etcd"));
    if path.is_file() {
        return Ok(path);
    }
    anyhow::bail!(
        "--lock etcd needs etcd: {} is not there; install it with `apt-get install etcd-server` (scripts/setup does) or set CHAOS_ETCD",
        path.display()
    )
}

/// One member of the cluster.
struct Member {
    /// The node name scenarios give it: `lock` (one member) or `lock-N`.
    node: String,
    /// Its number, from 1 (etcd's `--name` is `lock-N`).
    n: usize,
    child: Option<Child>,
    client_port: u16,
    /// Its peer listener on 127.0.0.1, also the port its advertised peer URL names.
    peer_port: u16,
    data_dir: PathBuf,
    log_path: PathBuf,
    /// Its own `/etc/hosts` (three members), bind-mounted in its mount namespace.
    hosts: Option<PathBuf>,
    /// etcd's member id, learnt from its first status answer.
    id: u64,
    paused: bool,
    started_in: Duration,
}

impl Member {
    fn name(&self) -> String {
        peers::host(self.n)
    }

    fn client_addr(&self) -> String {
        format!("127.0.0.1:{}", self.client_port)
    }

    /// The peer URL every member knows it by.
    fn peer_url(&self, cluster: bool) -> String {
        match cluster {
            true => format!("http://{}:{}", self.name(), self.peer_port),
            false => format!("http://127.0.0.1:{}", self.peer_port),
        }
    }
}

/// The etcd members, planned (ports and names) or running.
pub struct EtcdServer {
    members: Vec<Member>,
    bin: PathBuf,
    run_as: Option<(u32, u32)>,
    version: String,
    /// Real time from the first spawn to every member answering with a leader.
    pub started_in: Duration,
}

impl EtcdServer {
    /// Choose the members' names, ports and directories; nothing runs yet (the peer links
    /// must be up before a cluster can form).
    /// `nodes` are the members' node names (`lock`, or `lock-1` .. `lock-3`).
    pub async fn plan(
        run_id: &str,
        log_dir: &Path,
        nodes: &[String],
    ) -> anyhow::Result<EtcdServer> {
        let count = nodes.len();
        let bin = binary()?;
        peers::need_root(count)?;
        let run_as = crate::pg::PgInstall::find().ok().and_then(|i| i.run_as);
        // Inside the run's data directory, so whatever removes the databases' data (the run,
        // or the next command after a SIGKILL) removes the members' too.
        let run_dir = crate::backend::process::data_root().join(run_id);
        let mut members = Vec::new();
        for (n, node) in (1..=count).zip(nodes) {
            let data_dir = run_dir.join(format!("lock-{n}"));
            std::fs::create_dir_all(&data_dir)
                .map_err(|e| anyhow::anyhow!("create {}: {e}", data_dir.display()))?;
            if let Some((uid, gid)) = run_as {
                std::os::unix::fs::chown(&data_dir, Some(uid), Some(gid))
                    .map_err(|e| anyhow::anyhow!("chown {}: {e}", data_dir.display()))?;
            }
            members.push(Member {
                node: node.clone(),
                n,
                child: None,
                client_port: ports::free_port()?,
                peer_port: ports::free_port()?,
                data_dir,
                log_path: log_dir.join(format!("lock-{n}.log")),
                hosts: (count > 1).then(|| run_dir.join(format!("lock-{n}.hosts"))),
                id: 0,
                paused: false,
                started_in: Duration::ZERO,
            });
        }
        let all: Vec<usize> = members.iter().map(|m| m.n).collect();
        for m in &members {
            if let Some(path) = &m.hosts {
                peers::write_hosts(path, m.n, &all)?;
            }
        }
        Ok(EtcdServer {
            members,
            version: version(&bin).await,
            bin,
            run_as,
            started_in: Duration::ZERO,
        })
    }

    /// Start every member and wait until each answers and knows a leader.
    pub async fn launch(&mut self) -> anyhow::Result<()> {
        let began = Instant::now();
        // One after another, each once it serves its peers: a new member first asks every
        // other member whether it was bootstrapped, and a member that is listening but not yet
        // serving (itself still asking) holds the question for etcd's whole 1 s timeout; a
        // member not started yet refuses at once. Together the three took 2.06 s; so, 0.2 s.
        for i in 0..self.members.len() {
            self.spawn(i)?;
            if self.members.len() > 1 {
                self.wait_serving_peers(i, began).await?;
            }
        }
        for i in 0..self.members.len() {
            self.wait_ready(i, began, true).await?;
            self.members[i].started_in = began.elapsed();
        }
        self.started_in = began.elapsed();
        Ok(())
    }

    /// The peer links (three members): `(link, listen, upstream)`, `lock-1->lock-2` listening
    /// where lock-1 finds lock-2 and forwarding to lock-2's peer listener.
    pub fn peer_links(&self) -> Vec<(String, String, String)> {
        let members: Vec<_> = self
            .members
            .iter()
            .map(|m| (m.n, m.node.clone(), vec![m.peer_port]))
            .collect();
        peers::links(&members)
    }

    /// The member scenarios call `node`.
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

    /// What a cpu fault on `node` lands on: its server's process (and any children).
    pub fn cpu_target(&self, node: &str) -> Option<crate::backend::CpuTarget> {
        let i = self.index(node).ok()?;
        let pid = self.members[i].child.as_ref()?.id()?;
        Some(crate::backend::CpuTarget::Tree(pid as i32))
    }

    /// The members' node names, in order.
    pub fn nodes(&self) -> Vec<String> {
        self.members.iter().map(|m| m.node.clone()).collect()
    }

    /// Spawn member `i` on its data directory and ports (a restart keeps both).
    fn spawn(&mut self, i: usize) -> anyhow::Result<()> {
        let cluster = self.members.len() > 1;
        let initial = self
            .members
            .iter()
            .map(|m| format!("{}={}", m.name(), m.peer_url(cluster)))
            .collect::<Vec<_>>()
            .join(",");
        let m = &self.members[i];
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&m.log_path)
            .map_err(|e| anyhow::anyhow!("open {}: {e}", m.log_path.display()))?;
        let client = format!("http://{}", m.client_addr());
        let listen_peer = format!("http://127.0.0.1:{}", m.peer_port);
        let mut cmd = Command::new(&self.bin);
        cmd.args(["--name", &m.name(), "--data-dir"])
            .arg(&m.data_dir)
            .args([
                "--listen-client-urls",
                &client,
                "--advertise-client-urls",
                &client,
            ])
            .args([
                "--listen-peer-urls",
                &listen_peer,
                "--initial-advertise-peer-urls",
                &m.peer_url(cluster),
            ])
            .args(["--initial-cluster", &initial])
            .args(["--initial-cluster-state", "new"])
            // A scenario second is tens of real ms: elections and lease checks on that scale.
            .args(["--heartbeat-interval", "10", "--election-timeout", "100"])
            .args(["--logger", "zap", "--log-outputs", "stderr"])
            .stdin(Stdio::null())
            .stdout(log.try_clone()?)
            .stderr(log)
            .current_dir("/");
        // Its own /etc/hosts, then its user: both in the child, in that order.
        peers::user_and_hosts(&mut cmd, m.hosts.as_deref(), self.run_as)?;
        procs::own_group(&mut cmd);
        procs::die_with_parent(&mut cmd);
        let child = cmd
            .spawn()
            .map_err(|e| anyhow::anyhow!("start {}: {e}", self.bin.display()))?;
        let m = &mut self.members[i];
        m.child = Some(child);
        m.paused = false;
        Ok(())
    }

    /// The nemesis's stop of `node`: SIGTERM (`Fast`) or SIGKILL (`Immediate`, a crash, and
    /// a `kill`); the data kept.
    pub async fn stop_member(
        &mut self,
        node: &str,
        mode: crate::pg::StopMode,
    ) -> anyhow::Result<()> {
        let i = self.index(node)?;
        member::stop(node, &mut self.members[i].child, mode).await?;
        self.members[i].paused = false;
        Ok(())
    }

    /// The nemesis's start of `node`: the member again on its data; how long until it answered.
    pub async fn start_member(&mut self, node: &str) -> anyhow::Result<Duration> {
        let i = self.index(node)?;
        if self.members[i].child.is_some() {
            anyhow::bail!("{node} is already running");
        }
        let began = Instant::now();
        self.spawn(i)?;
        // A member started again answers once up; it may find no leader (its peers cut off).
        self.wait_ready(i, began, false).await?;
        self.members[i].started_in = began.elapsed();
        Ok(self.members[i].started_in)
    }

    /// The nemesis's pause (SIGSTOP) or resume (SIGCONT) of `node`.
    pub fn pause_member(&mut self, node: &str, pause: bool) -> anyhow::Result<()> {
        let i = self.index(node)?;
        member::pause(node, &self.members[i].child, pause)?;
        self.members[i].paused = pause;
        Ok(())
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
        let asks = self
            .members
            .iter()
            .filter(|m| m.child.is_some() && !m.paused)
            .map(|m| {
                let endpoint = format!("http://{}", m.client_addr());
                async move { status(&endpoint).await }
            });
        let answers = futures_util::future::join_all(asks).await;
        let (_, leader) = answers
            .into_iter()
            .flatten()
            .filter(|(_, leader, _)| *leader != 0)
            .map(|(term, leader, _)| (term, leader))
            .max()?;
        self.members
            .iter()
            .find(|m| m.id == leader)
            .map(|m| m.node.clone())
    }

    /// What each member says now: its node name, the member it names as leader (None: none,
    /// or it did not answer) and its raft term (0 when it did not answer).
    pub async fn views(&self) -> Vec<(String, Option<String>, u64)> {
        let asks = self.members.iter().map(|m| {
            let endpoint = format!("http://{}", m.client_addr());
            let running = m.child.is_some() && !m.paused;
            async move {
                match running {
                    true => status(&endpoint).await,
                    false => None,
                }
            }
        });
        let answers = futures_util::future::join_all(asks).await;
        self.members
            .iter()
            .zip(answers)
            .map(|(m, a)| {
                let (term, leader) = a.map_or((0, 0), |(t, l, _)| (t, l));
                let named = self.members.iter().find(|o| o.id == leader && leader != 0);
                (m.node.clone(), named.map(|o| o.node.clone()), term)
            })
            .collect()
    }

    /// Each member's node name and etcd id, for the record.
    pub fn ids(&self) -> Vec<(String, u64)> {
        self.members
            .iter()
            .map(|m| (m.node.clone(), m.id))
            .collect()
    }

    /// Wait until member `i` answers on its peer listener (an HTTP answer to `/version`).
    async fn wait_serving_peers(&mut self, i: usize, began: Instant) -> anyhow::Result<()> {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let addr = format!("127.0.0.1:{}", self.members[i].peer_port);
        loop {
            let ask = async {
                let mut s = tokio::net::TcpStream::connect(&addr).await.ok()?;
                s.write_all(b"GET /version HTTP/1.0\r\n\r\n").await.ok()?;
                let mut buf = [0u8; 16];
                let n = s.read(&mut buf).await.ok()?;
                buf[..n].starts_with(b"HTTP/").then_some(())
            };
            let wait = Duration::from_millis(50);
            if let Ok(Some(())) = tokio::time::timeout(wait, ask).await {
                return Ok(());
            }
            self.exited_at_start(i)?;
            let m = &mut self.members[i];
            if began.elapsed() > READY_TIMEOUT {
                let log = m.log_path.display().to_string();
                let node = m.node.clone();
                self.stop().await;
                anyhow::bail!(
                    "etcd {node} did not serve its peers within {} s; its log: {log}",
                    READY_TIMEOUT.as_secs()
                );
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    }

    /// An error naming member `i`'s log if it has exited while starting.
    fn exited_at_start(&mut self, i: usize) -> anyhow::Result<()> {
        let m = &mut self.members[i];
        if let Some(Ok(Some(exit))) = m.child.as_mut().map(|c| c.try_wait()) {
            m.child = None;
            anyhow::bail!(
                "etcd {} exited at start ({exit}); its log: {}",
                m.node,
                m.log_path.display()
            );
        }
        Ok(())
    }

    /// Wait until member `i` answers a status call (and, with `leader`, names a leader).
    async fn wait_ready(&mut self, i: usize, began: Instant, leader: bool) -> anyhow::Result<()> {
        let endpoint = format!("http://{}", self.members[i].client_addr());
        loop {
            self.exited_at_start(i)?;
            let m = &mut self.members[i];
            let mine = ports::ours(m.child.as_ref().and_then(|c| c.id()), m.client_port);
            if let Some((_, lead, id)) = status(&endpoint).await.filter(|_| mine) {
                m.id = id;
                if lead != 0 || !leader {
                    return Ok(());
                }
            }
            if began.elapsed() > READY_TIMEOUT {
                let log = m.log_path.display().to_string();
                let node = m.node.clone();
                self.stop().await;
                anyhow::bail!(
                    "etcd {node} did not answer{} within {} s; its log: {log}",
                    if leader { " with a leader" } else { "" },
                    READY_TIMEOUT.as_secs(),
                );
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }

    /// Every member's client address (`127.0.0.1:PORT`) by node name: where the proxy
    /// forwards the boxes' links and where the observer watches.
    pub fn client_addrs(&self) -> Vec<(String, String)> {
        self.members
            .iter()
            .map(|m| (m.node.clone(), m.client_addr()))
            .collect()
    }

    pub fn describe(&self) -> String {
        let how = match self.members.len() {
            1 => "one member".to_string(),
            n => format!("{n} members {}", self.nodes().join(", ")),
        };
        format!(
            "etcd {} ({how}, started in {:.2} s)",
            self.version,
            self.started_in.as_secs_f64()
        )
    }

    /// SIGTERM each member, then SIGKILL after 3 s; the data removed.
    pub async fn stop(&mut self) {
        for m in &mut self.members {
            if let Some(mut child) = m.child.take() {
                if let Some(pid) = child.id() {
                    let pid = pid as i32;
                    tokio::task::spawn_blocking(move || stop_now(pid, libc::SIGTERM))
                        .await
                        .ok();
                }
                let _ = child.wait().await;
            }
        }
        self.remove_data();
    }

    fn remove_data(&self) {
        if std::env::var_os("CHAOS_KEEP_DATA").is_none() {
            for m in &self.members {
                let _ = std::fs::remove_dir_all(&m.data_dir);
                if let Some(h) = &m.hosts {
                    let _ = std::fs::remove_file(h);
                }
            }
        }
    }
}

impl Drop for EtcdServer {
    fn drop(&mut self) {
        for m in &mut self.members {
            if let Some(child) = m.child.take() {
                if let Some(pid) = child.id() {
                    stop_now(pid as i32, libc::SIGTERM);
                }
            }
        }
        self.remove_data();
    }
}

/// One status call: (raft term, the leader it names or 0, its own id); None when it does not
/// answer in time.
async fn status(endpoint: &str) -> Option<(u64, u64, u64)> {
    let options = etcd_client::ConnectOptions::new()
        .with_connect_timeout(STATUS_TIMEOUT)
        .with_timeout(STATUS_TIMEOUT);
    let ask = async {
        let mut c = etcd_client::Client::connect([endpoint], Some(options))
            .await
            .ok()?;
        let s = c.status().await.ok()?;
        let id = s.header().map_or(0, |h| h.member_id());
        Some((s.raft_term(), s.leader(), id))
    };
    tokio::time::timeout(2 * STATUS_TIMEOUT, ask)
        .await
        .ok()
        .flatten()
}

/// `3.4.23`, from `etcd --version`.
async fn version(bin: &Path) -> String {
    let out = Command::new(bin).arg("--version").output().await;
    out.ok()
        .and_then(|o| {
            String::from_utf8_lossy(&o.stdout)
                .lines()
                .find_map(|l| l.strip_prefix("etcd Version: ").map(str::to_string))
        })
        .unwrap_or_else(|| "?".into())
}
