//! Redis as the lock service's server: Debian's `redis-server` (7.0) run as local processes on 127.0.0.1 and free ports, as the unprivileged user when the harness is root, with keyspace notifications on and no persistence, each member's directory under the run's data directory and its log in the run's `logs/`; stopped (and their directories removed) on every path. One server (`lock`), or with `[lock] replica = true` a primary `lock` and its asynchronous replica `lock-2`, whose replication connection goes through the proxy (`lock-2->lock`; `lock->lock-2` once the roles are swapped), and which the sentinel (`sentinel.rs`) promotes.

use super::member::{self, stop_now};
use crate::{ports, procs};
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::{Duration, Instant};
use tokio::process::{Child, Command};

/// How long a server may take to answer its first PING (a replica: to finish its first sync).
const READY_TIMEOUT: Duration = Duration::from_secs(10);

/// The redis-server binary: `CHAOS_REDIS` or Debian's.
fn binary() -> anyhow::Result<PathBuf> {
    let path = std::env::var_os("CHAOS_REDIS")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from("/usr/bin/redis-server"));
    if path.is_file() {
        return Ok(path);
    }
    anyhow::bail!(
        "--lock redis needs redis-server: {} is not there; install it with `apt-get install redis-server` (scripts/setup does) or set CHAOS_REDIS",
        path.display()
    )
}

/// The server's configuration: the port, its directory, keyspace notifications for the
/// observer, no snapshots and no append-only file (a restart forgets the lock, as a crash of a
/// server without persistence does), and expiry checked 100 times a second (Redis's default 10
/// would see an expired lock up to 100 ms late; a scenario second is tens of real ms); its
/// process title names its configuration file, under the run's data directory. A replica
/// names where it reaches its primary (`replicaof`, through the proxy) and syncs at once (no
/// 5 s wait for more replicas before a diskless sync).
pub fn config(port: u16, dir: &Path, replicaof: Option<&str>) -> String {
    let mut conf = format!(
        "bind 127.0.0.1\nport {port}\nprotected-mode no\ndaemonize no\ndir {}\n\
         save \"\"\nappendonly no\nnotify-keyspace-events {}\nhz 100\n\
         databases 1\nloglevel notice\nrepl-diskless-sync-delay 0\n\
         proc-title-template \"{{title}} {{listen-addr}} {{config-file}}\"\n",
        dir.display(),
        chaos_workloads::lock::REDIS_NOTIFY
    );
    if let Some(addr) = replicaof {
        let (host, port) = addr.rsplit_once(':').unwrap_or((addr, "6379"));
        conf.push_str(&format!("replicaof {host} {port}\n"));
    }
    conf
}

/// One server of the service: `lock`, or the replica `lock-2`.
struct Member {
    node: String,
    child: Option<Child>,
    port: u16,
    dir: PathBuf,
    conf: PathBuf,
    log_path: PathBuf,
    last_start: Duration,
}

impl Member {
    fn addr(&self) -> String {
        format!("127.0.0.1:{}", self.port)
    }
}

/// The Redis service, planned (ports and directories) or running: its members, which one is
/// the primary now, and the links between them.
pub struct RedisServer {
    bin: PathBuf,
    run_as: Option<(u32, u32)>,
    version: String,
    members: Vec<Member>,
    /// The member the boxes reach now: 0 (`lock`) until the sentinel promotes the replica.
    primary: usize,
    /// `(link, listen, upstream)`: `lock-2->lock` and `lock->lock-2` with a replica.
    peers: Vec<(String, String, String)>,
    /// Real time from the first spawn to every member answering (a replica in sync).
    pub started_in: Duration,
}

impl RedisServer {
    /// Choose the ports and directories; nothing runs yet. `replica`: a second member.
    pub async fn plan(
        run_id: &str,
        log_dir: &Path,
        replica: Option<&str>,
    ) -> anyhow::Result<RedisServer> {
        let bin = binary()?;
        let run_as = crate::pg::PgInstall::find().ok().and_then(|i| i.run_as);
        let mut members = Vec::new();
        for (node, suffix) in std::iter::once(("lock", "")).chain(replica.map(|r| (r, "-2"))) {
            // Inside the run's data directory, so whatever removes the databases' data (the
            // run, or the next command after a SIGKILL) removes the server's too.
            let dir = crate::backend::process::data_root()
                .join(run_id)
                .join(format!("lock-redis{suffix}"));
            std::fs::create_dir_all(&dir)
                .map_err(|e| anyhow::anyhow!("create {}: {e}", dir.display()))?;
            if let Some((uid, gid)) = run_as {
                std::os::unix::fs::chown(&dir, Some(uid), Some(gid))
                    .map_err(|e| anyhow::anyhow!("chown {}: {e}", dir.display()))?;
            }
            members.push(Member {
                node: node.to_string(),
                child: None,
                port: ports::free_port()?,
                conf: dir.join("redis.conf"),
                dir,
                log_path: log_dir.join(format!("{node}.log")),
                last_start: Duration::ZERO,
            });
        }
        let mut peers = Vec::new();
        for from in members.iter().filter(|_| members.len() > 1) {
            for to in members.iter().filter(|t| t.node != from.node) {
                peers.push((
                    chaos_nemesis::Link::name(&from.node, &to.node),
                    format!("127.0.0.1:{}", ports::free_port()?),
                    to.addr(),
                ));
            }
        }
        Ok(RedisServer {
            version: version(&bin).await,
            bin,
            run_as,
            members,
            primary: 0,
            peers,
            started_in: Duration::ZERO,
        })
    }

    /// Start every member and wait until each answers (a replica: until it is in sync).
    pub async fn launch(&mut self) -> anyhow::Result<()> {
        let began = Instant::now();
        for i in 0..self.members.len() {
            self.spawn(i)?;
        }
        for i in 0..self.members.len() {
            self.wait_ready(i, began).await?;
            self.members[i].last_start = began.elapsed();
        }
        self.started_in = began.elapsed();
        Ok(())
    }

    /// Where member `i` reaches the primary through the proxy (None: it is the primary).
    fn replicaof(&self, i: usize) -> Option<String> {
        if i == self.primary {
            return None;
        }
        let link =
            chaos_nemesis::Link::name(&self.members[i].node, &self.members[self.primary].node);
        self.peers.iter().find(|p| p.0 == link).map(|p| p.1.clone())
    }

    fn spawn(&mut self, i: usize) -> anyhow::Result<()> {
        let conf = config(
            self.members[i].port,
            &self.members[i].dir,
            self.replicaof(i).as_deref(),
        );
        let m = &mut self.members[i];
        std::fs::write(&m.conf, conf)
            .map_err(|e| anyhow::anyhow!("write {}: {e}", m.conf.display()))?;
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&m.log_path)
            .map_err(|e| anyhow::anyhow!("open {}: {e}", m.log_path.display()))?;
        let mut cmd = Command::new(&self.bin);
        cmd.arg(&m.conf)
            .stdin(Stdio::null())
            .stdout(log.try_clone()?)
            .stderr(log)
            .current_dir("/");
        if let Some((uid, gid)) = self.run_as {
            cmd.uid(uid).gid(gid);
        }
        procs::own_group(&mut cmd);
        procs::die_with_parent(&mut cmd);
        let child = cmd
            .spawn()
            .map_err(|e| anyhow::anyhow!("start {}: {e}", self.bin.display()))?;
        m.child = Some(child);
        Ok(())
    }

    /// Wait until member `i` answers PING and, a replica whose primary runs, is in sync.
    async fn wait_ready(&mut self, i: usize, began: Instant) -> anyhow::Result<()> {
        let sync = i != self.primary && self.members[self.primary].child.is_some();
        loop {
            let m = &mut self.members[i];
            if let Some(Ok(Some(exit))) = m.child.as_mut().map(|c| c.try_wait()) {
                m.child = None;
                anyhow::bail!(
                    "redis-server ({}) exited at start ({exit}); its log: {}",
                    m.node,
                    m.log_path.display()
                );
            }
            let addr = m.addr();
            let mine = ports::ours(m.child.as_ref().and_then(|c| c.id()), m.port);
            let up = mine
                && if sync {
                    in_sync(&addr).await
                } else {
                    ping(&addr).await
                };
            if up {
                return Ok(());
            }
            if began.elapsed() > READY_TIMEOUT {
                let (node, log) = (m.node.clone(), m.log_path.display().to_string());
                self.stop().await;
                anyhow::bail!(
                    "redis-server ({node}) did not {} within {} s; its log: {log}",
                    if sync {
                        "sync with its primary"
                    } else {
                        "answer"
                    },
                    READY_TIMEOUT.as_secs()
                );
            }
            tokio::time::sleep(Duration::from_millis(2)).await;
        }
    }

    /// `127.0.0.1:PORT` of the primary now: where the proxy forwards the boxes' links.
    pub fn addr(&self) -> String {
        self.members[self.primary].addr()
    }

    /// Every member's own address, the primary's first as planned (`lock`, then `lock-2`).
    pub fn addrs(&self) -> Vec<(String, String)> {
        self.members
            .iter()
            .map(|m| (m.node.clone(), m.addr()))
            .collect()
    }

    /// The links between the members, `(link, listen, upstream)`.
    pub fn peer_links(&self) -> Vec<(String, String, String)> {
        self.peers.clone()
    }

    /// The primary now (`lock`, or `lock-2` once promoted) and the replica, when there is one.
    pub fn roles(&self) -> (String, Option<String>) {
        let replica = self
            .members
            .iter()
            .enumerate()
            .find(|(i, _)| *i != self.primary);
        (
            self.members[self.primary].node.clone(),
            replica.map(|(_, m)| m.node.clone()),
        )
    }

    /// Make the replica the primary: `REPLICAOF NO ONE` on it (directly, not through a link),
    /// and the record of it from now on (a restarted old primary comes back as its replica).
    /// Returns the promoted member's name and its address (the harness's and the proxy's).
    pub async fn promote(&mut self) -> anyhow::Result<(String, String, String)> {
        let (_, Some(replica)) = self.roles() else {
            anyhow::bail!("the Redis lock service has no replica to promote");
        };
        let i = self.index(&replica)?;
        let addr = self.members[i].addr();
        promote_at(&addr).await?;
        self.primary = i;
        Ok((replica, addr.clone(), addr))
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

    /// What a cpu fault on `node` lands on: its server's process (and any children).
    pub fn cpu_target(&self, node: &str) -> Option<crate::backend::CpuTarget> {
        let i = self.index(node).ok()?;
        let pid = self.members[i].child.as_ref()?.id()?;
        Some(crate::backend::CpuTarget::Tree(pid as i32))
    }

    pub fn describe(&self) -> String {
        let what = if self.members.len() > 1 {
            "a primary and an asynchronous replica"
        } else {
            "one server"
        };
        format!(
            "redis {} ({what}, no persistence, started in {:.3} s)",
            self.version,
            self.started_in.as_secs_f64()
        )
    }

    /// The nemesis's stop: SIGTERM (`Fast`) or SIGKILL (`Immediate`, a crash, and a `kill`).
    /// Without persistence the server forgets the lock either way.
    pub async fn stop_member(
        &mut self,
        node: &str,
        mode: crate::pg::StopMode,
    ) -> anyhow::Result<()> {
        let i = self.index(node)?;
        member::stop(node, &mut self.members[i].child, mode).await
    }

    /// The nemesis's start: the server again on its port (the replica of whichever member is
    /// the primary now, unless it is); how long until it answered.
    pub async fn start_member(&mut self, node: &str) -> anyhow::Result<Duration> {
        let i = self.index(node)?;
        if self.members[i].child.is_some() {
            anyhow::bail!("{node} is already running");
        }
        let began = Instant::now();
        self.spawn(i)?;
        self.wait_ready(i, began).await?;
        self.members[i].last_start = began.elapsed();
        Ok(self.members[i].last_start)
    }

    /// The nemesis's pause (SIGSTOP) or resume (SIGCONT).
    pub fn pause_member(&mut self, node: &str, pause: bool) -> anyhow::Result<()> {
        let i = self.index(node)?;
        member::pause(node, &self.members[i].child, pause)
    }

    /// How long member `node`'s last start took (the longest of all for any other name).
    pub fn last_start(&self, node: &str) -> Duration {
        match self.index(node) {
            Ok(i) => self.members[i].last_start,
            Err(_) => self
                .members
                .iter()
                .map(|m| m.last_start)
                .max()
                .unwrap_or_default(),
        }
    }

    /// SIGTERM, then SIGKILL after 3 s; the directories removed.
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

impl Drop for RedisServer {
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

/// A promotion: `REPLICAOF NO ONE` to the server at `addr`, directly (not through a link).
pub async fn promote_at(addr: &str) -> anyhow::Result<()> {
    let client = redis::Client::open(format!("redis://{addr}"))?;
    let ask = async {
        let mut c = client.get_multiplexed_async_connection().await?;
        redis::cmd("REPLICAOF")
            .arg("NO")
            .arg("ONE")
            .query_async::<String>(&mut c)
            .await
    };
    tokio::time::timeout(Duration::from_secs(2), ask)
        .await
        .map_err(|_| anyhow::anyhow!("{addr} did not answer REPLICAOF NO ONE within 2 s"))??;
    Ok(())
}

/// Whether the replica at `addr` answers and its link to the primary is up (in sync).
pub async fn in_sync(addr: &str) -> bool {
    let ask = async {
        let client = redis::Client::open(format!("redis://{addr}")).ok()?;
        let mut c = client.get_multiplexed_async_connection().await.ok()?;
        redis::cmd("INFO")
            .arg("replication")
            .query_async::<String>(&mut c)
            .await
            .ok()
    };
    tokio::time::timeout(Duration::from_millis(200), ask)
        .await
        .ok()
        .flatten()
        .is_some_and(|info| info.contains("master_link_status:up"))
}

/// Whether the server at `addr` answers PING within 200 ms.
pub async fn ping(addr: &str) -> bool {
    let ask = async {
        let client = redis::Client::open(format!("redis://{addr}")).ok()?;
        let mut c = client.get_multiplexed_async_connection().await.ok()?;
        redis::cmd("PING")
            .query_async::<String>(&mut c)
            .await
            .ok()
            .filter(|p| p == "PONG")
    };
    tokio::time::timeout(Duration::from_millis(200), ask)
        .await
        .ok()
        .flatten()
        .is_some()
}

/// `7.0.15`, from `redis-server --version`.
async fn version(bin: &Path) -> String {
    let out = Command::new(bin).arg("--version").output().await;
    out.ok()
        .and_then(|o| {
            let text = String::from_utf8_lossy(&o.stdout).into_owned();
            text.split_whitespace()
                .find_map(|w| w.strip_prefix("v=").map(str::to_string))
        })
        .unwrap_or_else(|| "?".into())
}
