//! ZooKeeper as the lock service's server: Debian's `zookeeper` 3.8 run as its JVM directly (`QuorumPeerMain` on a generated `zoo.cfg`: data under the run's data directory, the client port free on 127.0.0.1, a 20 ms tick so session timeouts can be a scenario's short lease, the admin server off, `srvr` allowed), as the unprivileged user when the harness is root, its log in the run's `logs/`; stopped (and its data removed) on every path.
//!
//! One member is the node `lock` (standalone). Three members (`lock-1`, `lock-2`, `lock-3`) are
//! a real ensemble: `server.N=lock-N:QUORUM:ELECTION` lines and a `myid` each, and their peer
//! traffic through the proxy (`peers.rs`, as etcd's): member I finds member J at 127.I.J.1, where
//! the link `lock-I->lock-J` has two proxies, one per port of J. ZooKeeper opens one connection
//! per pair for each purpose, so a link carries what its first member opened: a follower's
//! connection to the leader's quorum port (both ways of their traffic) and the election
//! connection, which the member with the higher id keeps.
//!
//! The JVM is started small and quick: class data sharing, a 128 MiB heap, the C1 compiler only,
//! the serial collector, no perf data file (measured: about 0.6 s to a `srvr` answer on 2 cores).
//! An ensemble's election is made quick too: notifications every 50 ms at first, at most 400 ms.
//! A leader waits `initLimit` (100 ticks, 2 real s) for a quorum of followers before it gives up
//! and elects again: through the proxy, a first round sometimes ends with two members leading
//! (a follower's connection accepted by the proxy before the leader listens is reset), and at
//! 250 ticks each such round cost 5 s (docker starts of 7.5 and 12.7 s, 2 of 6; at 100, 1.8-3.9 s).

use super::member::{self, stop_now};
use super::peers;
use crate::{ports, procs};
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::{Duration, Instant};
use tokio::process::{Child, Command};

/// How long the member may take to answer its first `srvr`.
const READY_TIMEOUT: Duration = Duration::from_secs(20);
/// How long one `srvr` may take (a paused member never answers).
const STATUS_TIMEOUT: Duration = Duration::from_millis(300);
/// ZooKeeper's tick: sessions are checked in buckets of it, and the shortest session it grants
/// is two ticks (a scenario's lease is hundreds of real ms).
pub const TICK_MS: u64 = 20;

/// Where Debian keeps ZooKeeper's jars (`CHAOS_ZOOKEEPER_JARS` overrides).
fn jars() -> anyhow::Result<String> {
    let dir = std::env::var_os("CHAOS_ZOOKEEPER_JARS")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from("/usr/share/java"));
    let server = dir.join("zookeeper.jar");
    let java = std::env::var_os("CHAOS_JAVA")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from("/usr/bin/java"));
    if !server.is_file() || !java.is_file() {
        anyhow::bail!(
            "--lock zookeeper needs ZooKeeper and a Java runtime: {} or {} is not there; install them with `apt-get install zookeeper default-jre-headless` (scripts/setup does) or set CHAOS_ZOOKEEPER_JARS and CHAOS_JAVA",
            server.display(),
            java.display()
        );
    }
    // Its manifest names the rest of its classpath; slf4j-simple gives it a log on stderr.
    let mut cp = server.display().to_string();
    let simple = dir.join("slf4j-simple.jar");
    if simple.is_file() {
        cp.push(':');
        cp.push_str(&simple.display().to_string());
    }
    Ok(cp)
}

fn java() -> PathBuf {
    std::env::var_os("CHAOS_JAVA")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from("/usr/bin/java"))
}

/// The JVM flags that make a start quick on a small machine.
pub const JVM_FLAGS: &[&str] = &[
    "-Xshare:auto",
    "-Xms16m",
    "-Xmx128m",
    "-Xss512k",
    "-XX:TieredStopAtLevel=1",
    "-XX:+UseSerialGC",
    "-XX:-UsePerfData",
    "-Djava.net.preferIPv4Stack=true",
    "-Dorg.slf4j.simpleLogger.defaultLogLevel=warn",
    "-Dorg.slf4j.simpleLogger.showDateTime=true",
    "-Dzookeeper.jmx.log4j.disable=true",
    // An ensemble's election: a member not heard from is asked again after 50 ms, doubling to
    // 400 ms at most (ZooKeeper's own are 200 ms and 60 s: a member that starts before its
    // peers otherwise waits seconds to ask again); its peers' sockets time out in 500 ms.
    "-Dzookeeper.fastleader.minNotificationInterval=50",
    "-Dzookeeper.fastleader.maxNotificationInterval=400",
    "-Dzookeeper.cnxTimeout=500",
];

/// One member.
struct Member {
    node: String,
    /// Its number (`myid`), from 1.
    n: usize,
    child: Option<Child>,
    client_port: u16,
    /// Where followers connect to it when it leads, and where elections reach it.
    quorum_port: u16,
    election_port: u16,
    dir: PathBuf,
    /// Its own `/etc/hosts` (an ensemble), bind-mounted in its mount namespace.
    hosts: Option<PathBuf>,
    log_path: PathBuf,
    paused: bool,
    started_in: Duration,
}

impl Member {
    fn client_addr(&self) -> String {
        format!("127.0.0.1:{}", self.client_port)
    }

    fn cfg(&self) -> PathBuf {
        self.dir.join("zoo.cfg")
    }
}

/// The ZooKeeper server, planned (port and directories) or running.
pub struct ZkServer {
    members: Vec<Member>,
    classpath: String,
    run_as: Option<(u32, u32)>,
    version: String,
    /// Real time from the spawn to the member answering `srvr`.
    pub started_in: Duration,
}

/// `zoo.cfg` for a member serving on 127.0.0.1: standalone, or one of `servers`
/// (`(myid, quorum, election)`).
fn zoo_cfg(data_dir: &Path, client_port: u16, servers: &[(usize, u16, u16)]) -> String {
    zoo_cfg_on(data_dir, "127.0.0.1", client_port, servers)
}

/// `zoo.cfg` for a member whose client port listens on `bind` (a container's: 0.0.0.0).
pub fn zoo_cfg_on(
    data_dir: &Path,
    bind: &str,
    client_port: u16,
    servers: &[(usize, u16, u16)],
) -> String {
    let mut cfg = format!(
        "tickTime={TICK_MS}\n\
         initLimit=100\n\
         syncLimit=50\n\
         dataDir={}\n\
         clientPort={client_port}\n\
         clientPortAddress={bind}\n\
         minSessionTimeout={}\n\
         maxSessionTimeout=120000\n\
         maxClientCnxns=0\n\
         admin.enableServer=false\n\
         4lw.commands.whitelist=srvr,mntr,ruok\n\
         autopurge.purgeInterval=0\n",
        data_dir.join("data").display(),
        2 * TICK_MS,
    );
    for (n, quorum, election) in servers.iter().filter(|_| servers.len() > 1) {
        cfg.push_str(&format!(
            "server.{n}={}:{quorum}:{election}\n",
            peers::host(*n)
        ));
    }
    cfg
}

impl ZkServer {
    /// Choose the members' ports and directories and write their `zoo.cfg` (and, for an
    /// ensemble, `myid` and `/etc/hosts`); nothing runs yet (an ensemble's peer links first).
    pub async fn plan(run_id: &str, log_dir: &Path, nodes: &[String]) -> anyhow::Result<ZkServer> {
        let count = nodes.len();
        let classpath = jars()?;
        peers::need_root(count)?;
        let run_as = crate::pg::PgInstall::find().ok().and_then(|i| i.run_as);
        // Inside the run's data directory, so whatever removes the databases' data (the run,
        // or the next command after a SIGKILL) removes the members' too.
        let run_dir = crate::backend::process::data_root().join(run_id);
        let mut members = Vec::new();
        for (n, node) in (1..).zip(nodes) {
            let dir = run_dir.join(format!("lock-{n}"));
            members.push(Member {
                node: node.clone(),
                n,
                child: None,
                client_port: ports::free_port()?,
                quorum_port: ports::free_port()?,
                election_port: ports::free_port()?,
                log_path: log_dir.join(format!("lock-{n}.log")),
                hosts: (count > 1).then(|| dir.join("hosts")),
                dir,
                paused: false,
                started_in: Duration::ZERO,
            });
        }
        let servers: Vec<(usize, u16, u16)> = members
            .iter()
            .map(|m| (m.n, m.quorum_port, m.election_port))
            .collect();
        let all: Vec<usize> = members.iter().map(|m| m.n).collect();
        for m in &members {
            let data = m.dir.join("data");
            std::fs::create_dir_all(&data)
                .map_err(|e| anyhow::anyhow!("create {}: {e}", data.display()))?;
            let write = |path: PathBuf, text: String| {
                std::fs::write(&path, text)
                    .map_err(|e| anyhow::anyhow!("write {}: {e}", path.display()))
            };
            write(m.cfg(), zoo_cfg(&m.dir, m.client_port, &servers))?;
            write(data.join("myid"), format!("{}\n", m.n))?;
            if let Some(path) = &m.hosts {
                peers::write_hosts(path, m.n, &all)?;
            }
            if let Some((uid, gid)) = run_as {
                for p in [&m.dir, &data] {
                    std::os::unix::fs::chown(p, Some(uid), Some(gid))
                        .map_err(|e| anyhow::anyhow!("chown {}: {e}", p.display()))?;
                }
            }
        }
        Ok(ZkServer {
            members,
            classpath,
            run_as,
            version: version(),
            started_in: Duration::ZERO,
        })
    }

    /// The peer links (an ensemble): `(link, listen, upstream)`, twice per ordered pair
    /// (`lock-1->lock-2` on lock-2's quorum port and on its election port).
    pub fn peer_links(&self) -> Vec<(String, String, String)> {
        let members: Vec<_> = self
            .members
            .iter()
            .map(|m| (m.n, m.node.clone(), vec![m.quorum_port, m.election_port]))
            .collect();
        peers::links(&members)
    }

    /// Start every member at once and wait until each answers `srvr` as serving (an
    /// ensemble's: once a leader is elected and it has joined).
    pub async fn launch(&mut self) -> anyhow::Result<()> {
        let began = Instant::now();
        for i in 0..self.members.len() {
            self.spawn(i)?;
        }
        for i in 0..self.members.len() {
            self.wait_ready(i, began, true).await?;
            self.members[i].started_in = began.elapsed();
        }
        self.started_in = began.elapsed();
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

    /// What a cpu fault on `node` lands on: its server's process (and any children).
    pub fn cpu_target(&self, node: &str) -> Option<crate::backend::CpuTarget> {
        let i = self.index(node).ok()?;
        let pid = self.members[i].child.as_ref()?.id()?;
        Some(crate::backend::CpuTarget::Tree(pid as i32))
    }

    /// Spawn member `i` on its data directory and port (a restart keeps both).
    fn spawn(&mut self, i: usize) -> anyhow::Result<()> {
        let m = &self.members[i];
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&m.log_path)
            .map_err(|e| anyhow::anyhow!("open {}: {e}", m.log_path.display()))?;
        let mut cmd = Command::new(java());
        cmd.args(JVM_FLAGS)
            .arg(format!("-Djava.io.tmpdir={}", m.dir.display()))
            .args(["-cp", &self.classpath])
            .arg("org.apache.zookeeper.server.quorum.QuorumPeerMain")
            .arg(m.cfg())
            .stdin(Stdio::null())
            .stdout(log.try_clone()?)
            .stderr(log)
            .current_dir(&m.dir);
        // Its own /etc/hosts (an ensemble's member), then its user: both in the child.
        peers::user_and_hosts(&mut cmd, m.hosts.as_deref(), self.run_as)?;
        procs::own_group(&mut cmd);
        procs::die_with_parent(&mut cmd);
        let child = cmd
            .spawn()
            .map_err(|e| anyhow::anyhow!("start {}: {e}", java().display()))?;
        let m = &mut self.members[i];
        m.child = Some(child);
        m.paused = false;
        Ok(())
    }

    /// The nemesis's stop of `node`: SIGTERM (`Fast`) or SIGKILL (`Immediate`, a crash, and a
    /// `kill`); the data kept (sessions outlive a restart, as ZooKeeper keeps them in its log).
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

    /// The nemesis's start of `node` on its data; how long until it answered.
    pub async fn start_member(&mut self, node: &str) -> anyhow::Result<Duration> {
        let i = self.index(node)?;
        if self.members[i].child.is_some() {
            anyhow::bail!("{node} is already running");
        }
        let began = Instant::now();
        self.spawn(i)?;
        // Standalone, it serves at once; an ensemble's member answers once up, and serves only
        // when it finds a quorum (which a scenario may have taken away).
        let alone = self.members.len() == 1;
        self.wait_ready(i, began, alone).await?;
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

    /// The member that leads (for one member: itself, while it serves).
    pub async fn leader(&self) -> Option<String> {
        for m in self
            .members
            .iter()
            .filter(|m| m.child.is_some() && !m.paused)
        {
            if let Some(mode) = srvr_mode(&m.client_addr()).await {
                if mode == "leader" || mode == "standalone" {
                    return Some(m.node.clone());
                }
            }
        }
        None
    }

    /// An error naming member `i`'s log if it has exited while starting.
    fn exited_at_start(&mut self, i: usize) -> anyhow::Result<()> {
        let m = &mut self.members[i];
        if let Some(Ok(Some(exit))) = m.child.as_mut().map(|c| c.try_wait()) {
            m.child = None;
            anyhow::bail!(
                "zookeeper {} exited at start ({exit}); its log: {}",
                m.node,
                m.log_path.display()
            );
        }
        Ok(())
    }

    /// Wait until member `i` answers `srvr` (with `serving`, with a mode: it serves).
    async fn wait_ready(&mut self, i: usize, began: Instant, serving: bool) -> anyhow::Result<()> {
        let addr = self.members[i].client_addr();
        loop {
            self.exited_at_start(i)?;
            let m = &self.members[i];
            let mine = ports::ours(m.child.as_ref().and_then(|c| c.id()), m.client_port);
            match srvr(&addr).await.filter(|_| mine) {
                Some(Some(_)) => return Ok(()),
                Some(None) if !serving => return Ok(()),
                _ => {}
            }
            if began.elapsed() > READY_TIMEOUT {
                let m = &self.members[i];
                let log = m.log_path.display().to_string();
                let node = m.node.clone();
                self.stop().await;
                anyhow::bail!(
                    "zookeeper {node} did not {} within {} s; its log: {log}",
                    if serving { "serve" } else { "answer" },
                    READY_TIMEOUT.as_secs()
                );
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }

    /// Every member's client address by node name: where the proxy forwards the boxes'
    /// links and where the observer watches.
    pub fn client_addrs(&self) -> Vec<(String, String)> {
        self.members
            .iter()
            .map(|m| (m.node.clone(), m.client_addr()))
            .collect()
    }

    pub fn describe(&self) -> String {
        let how = match self.members.len() {
            1 => "one member".to_string(),
            n => {
                let nodes: Vec<&str> = self.members.iter().map(|m| m.node.as_str()).collect();
                format!("an ensemble of {n}: {}", nodes.join(", "))
            }
        };
        format!(
            "zookeeper {} ({how}, tick {TICK_MS} ms, started in {:.2} s)",
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
                let _ = std::fs::remove_dir_all(&m.dir);
            }
        }
    }
}

impl Drop for ZkServer {
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

/// The `Mode:` a member's `srvr` answer names (`standalone`, `leader`, `follower`); None when
/// it does not answer in time or does not serve yet.
pub async fn srvr_mode(addr: &str) -> Option<String> {
    srvr(addr).await.flatten()
}

/// A member's `srvr` answer: None when it does not answer in time, `Some(None)` when it answers
/// but does not serve (an ensemble's member with no quorum), else the `Mode:` it names.
async fn srvr(addr: &str) -> Option<Option<String>> {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let ask = async {
        let mut s = tokio::net::TcpStream::connect(addr).await.ok()?;
        s.write_all(b"srvr").await.ok()?;
        let mut text = String::new();
        s.read_to_string(&mut text).await.ok()?;
        if text.is_empty() {
            return None;
        }
        Some(
            text.lines()
                .find_map(|l| l.strip_prefix("Mode: ").map(|m| m.trim().to_string())),
        )
    };
    tokio::time::timeout(STATUS_TIMEOUT, ask)
        .await
        .ok()
        .flatten()
}

/// `3.8.0`, from the versioned jar beside `zookeeper.jar`.
fn version() -> String {
    std::fs::read_dir("/usr/share/java")
        .ok()
        .and_then(|dir| {
            dir.flatten().find_map(|e| {
                let name = e.file_name().to_string_lossy().into_owned();
                let v = name.strip_prefix("zookeeper-")?.strip_suffix(".jar")?;
                v.starts_with(|c: char| c.is_ascii_digit())
                    .then(|| v.to_string())
            })
        })
        .unwrap_or_else(|| "3.8".into())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_config_serves_on_loopback_with_short_sessions_and_srvr() {
        let cfg = zoo_cfg(Path::new("/d"), 7, &[(1, 8, 9)]);
        assert!(
            cfg.contains("clientPort=7\nclientPortAddress=127.0.0.1\n"),
            "{cfg}"
        );
        assert!(cfg.contains("minSessionTimeout=40\n"), "{cfg}");
        assert!(cfg.contains("admin.enableServer=false"), "{cfg}");
        assert!(cfg.contains("4lw.commands.whitelist=srvr"), "{cfg}");
        assert!(cfg.contains("dataDir=/d/data\n"), "{cfg}");
        assert!(!cfg.contains("server."), "standalone: {cfg}");
        let three = zoo_cfg(Path::new("/d"), 7, &[(1, 8, 9), (2, 10, 11), (3, 12, 13)]);
        assert!(
            three.contains("server.1=lock-1:8:9\nserver.2=lock-2:10:11\nserver.3=lock-3:12:13\n"),
            "{three}"
        );
    }
}
