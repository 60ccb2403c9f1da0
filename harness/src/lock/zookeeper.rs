//! ZooKeeper as the lock service's server: Debian's `zookeeper` 3.8 run as its JVM directly (`QuorumPeerMain` on a generated `zoo.cfg`: data under the run's data directory, the client port free on 127.0.0.1, a 20 ms tick so session timeouts can be a scenario's short lease, the admin server off, `srvr` allowed), as the unprivileged user when the harness is root, its log in the run's `logs/`; stopped (and its data removed) on every path. One member, the node `lock`.
//!
//! The JVM is started small and quick: class data sharing, a 128 MiB heap, the C1 compiler only,
//! the serial collector, no perf data file (measured: about 0.6 s to a `srvr` answer on 2 cores).

use super::member::{self, stop_now};
use crate::procs;
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
const JVM_FLAGS: &[&str] = &[
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
];

/// The one member.
struct Member {
    node: String,
    child: Option<Child>,
    client_port: u16,
    dir: PathBuf,
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

/// `zoo.cfg` for a standalone member.
fn zoo_cfg(data_dir: &Path, client_port: u16) -> String {
    format!(
        "tickTime={TICK_MS}\n\
         initLimit=250\n\
         syncLimit=50\n\
         dataDir={}\n\
         clientPort={client_port}\n\
         clientPortAddress=127.0.0.1\n\
         minSessionTimeout={}\n\
         maxSessionTimeout=120000\n\
         maxClientCnxns=0\n\
         admin.enableServer=false\n\
         4lw.commands.whitelist=srvr,mntr,ruok\n\
         autopurge.purgeInterval=0\n",
        data_dir.join("data").display(),
        2 * TICK_MS,
    )
}

impl ZkServer {
    /// Choose the member's port and directory and write its `zoo.cfg`; nothing runs yet.
    pub async fn plan(run_id: &str, log_dir: &Path, nodes: &[String]) -> anyhow::Result<ZkServer> {
        if nodes.len() != 1 {
            anyhow::bail!(
                "--lock-members {}: a ZooKeeper ensemble is not built yet; use one member",
                nodes.len()
            );
        }
        let classpath = jars()?;
        let run_as = crate::pg::PgInstall::find().ok().and_then(|i| i.run_as);
        // Inside the run's data directory, so whatever removes the databases' data (the run,
        // or the next command after a SIGKILL) removes the member's too.
        let run_dir = crate::backend::process::data_root().join(run_id);
        let mut members = Vec::new();
        for (n, node) in (1..).zip(nodes) {
            let dir = run_dir.join(format!("lock-{n}"));
            let data = dir.join("data");
            std::fs::create_dir_all(&data)
                .map_err(|e| anyhow::anyhow!("create {}: {e}", data.display()))?;
            let m = Member {
                node: node.clone(),
                child: None,
                client_port: procs::free_port()?,
                log_path: log_dir.join(format!("lock-{n}.log")),
                dir,
                paused: false,
                started_in: Duration::ZERO,
            };
            std::fs::write(m.cfg(), zoo_cfg(&m.dir, m.client_port))
                .map_err(|e| anyhow::anyhow!("write {}: {e}", m.cfg().display()))?;
            if let Some((uid, gid)) = run_as {
                for p in [&m.dir, &data] {
                    std::os::unix::fs::chown(p, Some(uid), Some(gid))
                        .map_err(|e| anyhow::anyhow!("chown {}: {e}", p.display()))?;
                }
            }
            members.push(m);
        }
        Ok(ZkServer {
            members,
            classpath,
            run_as,
            version: version(),
            started_in: Duration::ZERO,
        })
    }

    /// Start the member and wait until it answers `srvr` as serving.
    pub async fn launch(&mut self) -> anyhow::Result<()> {
        let began = Instant::now();
        for i in 0..self.members.len() {
            self.spawn(i)?;
        }
        for i in 0..self.members.len() {
            self.wait_ready(i, began).await?;
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
        if let Some((uid, gid)) = self.run_as {
            cmd.uid(uid).gid(gid);
        }
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
        self.wait_ready(i, began).await?;
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

    /// Wait until member `i` answers `srvr` with a mode (it serves).
    async fn wait_ready(&mut self, i: usize, began: Instant) -> anyhow::Result<()> {
        let addr = self.members[i].client_addr();
        loop {
            self.exited_at_start(i)?;
            if srvr_mode(&addr).await.is_some() {
                return Ok(());
            }
            if began.elapsed() > READY_TIMEOUT {
                let m = &self.members[i];
                let log = m.log_path.display().to_string();
                let node = m.node.clone();
                self.stop().await;
                anyhow::bail!(
                    "zookeeper {node} did not serve within {} s; its log: {log}",
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
        format!(
            "zookeeper {} (one member, tick {TICK_MS} ms, started in {:.2} s)",
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
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let ask = async {
        let mut s = tokio::net::TcpStream::connect(addr).await.ok()?;
        s.write_all(b"srvr").await.ok()?;
        let mut text = String::new();
        s.read_to_string(&mut text).await.ok()?;
        text.lines()
            .find_map(|l| l.strip_prefix("Mode: ").map(|m| m.trim().to_string()))
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
        let cfg = zoo_cfg(Path::new("/d"), 7);
        assert!(
            cfg.contains("clientPort=7\nclientPortAddress=127.0.0.1\n"),
            "{cfg}"
        );
        assert!(cfg.contains("minSessionTimeout=40\n"), "{cfg}");
        assert!(cfg.contains("admin.enableServer=false"), "{cfg}");
        assert!(cfg.contains("4lw.commands.whitelist=srvr"), "{cfg}");
        assert!(cfg.contains("dataDir=/d/data\n"), "{cfg}");
    }
}
