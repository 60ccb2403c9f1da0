//! Redis as the lock service's server: Debian's `redis-server` (7.0) run as one local process on 127.0.0.1 and a free port, as the unprivileged user when the harness is root, with keyspace notifications on and no persistence, its directory under the run's data directory and its log in the run's `logs/`; stopped (and its directory removed) on every path.

use super::member::{self, stop_now};
use crate::procs;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::{Duration, Instant};
use tokio::process::{Child, Command};

/// How long the server may take to answer its first PING.
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
/// process title names its configuration file, under the run's data directory.
pub fn config(port: u16, dir: &Path) -> String {
    format!(
        "bind 127.0.0.1\nport {port}\nprotected-mode no\ndaemonize no\ndir {}\n\
         save \"\"\nappendonly no\nnotify-keyspace-events {}\nhz 100\n\
         databases 1\nloglevel notice\n\
         proc-title-template \"{{title}} {{listen-addr}} {{config-file}}\"\n",
        dir.display(),
        chaos_workloads::lock::REDIS_NOTIFY
    )
}

/// The Redis server, planned (port and directory) or running.
pub struct RedisServer {
    child: Option<Child>,
    bin: PathBuf,
    run_as: Option<(u32, u32)>,
    version: String,
    port: u16,
    dir: PathBuf,
    conf: PathBuf,
    log_path: PathBuf,
    paused: bool,
    last_start: Duration,
    /// Real time from the spawn to the first PONG.
    pub started_in: Duration,
}

impl RedisServer {
    /// Choose the port and directory and write the configuration; nothing runs yet.
    pub async fn plan(run_id: &str, log_dir: &Path) -> anyhow::Result<RedisServer> {
        let bin = binary()?;
        let run_as = crate::pg::PgInstall::find().ok().and_then(|i| i.run_as);
        // Inside the run's data directory, so whatever removes the databases' data (the run,
        // or the next command after a SIGKILL) removes the server's too.
        let dir = crate::backend::process::data_root()
            .join(run_id)
            .join("lock-redis");
        std::fs::create_dir_all(&dir)
            .map_err(|e| anyhow::anyhow!("create {}: {e}", dir.display()))?;
        if let Some((uid, gid)) = run_as {
            std::os::unix::fs::chown(&dir, Some(uid), Some(gid))
                .map_err(|e| anyhow::anyhow!("chown {}: {e}", dir.display()))?;
        }
        let port = procs::free_port()?;
        let conf = dir.join("redis.conf");
        std::fs::write(&conf, config(port, &dir))
            .map_err(|e| anyhow::anyhow!("write {}: {e}", conf.display()))?;
        Ok(RedisServer {
            child: None,
            version: version(&bin).await,
            bin,
            run_as,
            port,
            dir,
            conf,
            log_path: log_dir.join("lock.log"),
            paused: false,
            last_start: Duration::ZERO,
            started_in: Duration::ZERO,
        })
    }

    /// Start the server and wait until it answers.
    pub async fn launch(&mut self) -> anyhow::Result<()> {
        let began = Instant::now();
        self.spawn()?;
        self.wait_ready(began).await?;
        self.started_in = began.elapsed();
        self.last_start = self.started_in;
        Ok(())
    }

    fn spawn(&mut self) -> anyhow::Result<()> {
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&self.log_path)
            .map_err(|e| anyhow::anyhow!("open {}: {e}", self.log_path.display()))?;
        let mut cmd = Command::new(&self.bin);
        cmd.arg(&self.conf)
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
        self.child = Some(child);
        self.paused = false;
        Ok(())
    }

    /// Wait until the server answers PING.
    async fn wait_ready(&mut self, began: Instant) -> anyhow::Result<()> {
        loop {
            if let Some(Ok(Some(exit))) = self.child.as_mut().map(|c| c.try_wait()) {
                self.child = None;
                anyhow::bail!(
                    "redis-server exited at start ({exit}); its log: {}",
                    self.log_path.display()
                );
            }
            if ping(&self.addr()).await {
                return Ok(());
            }
            if began.elapsed() > READY_TIMEOUT {
                let log = self.log_path.display().to_string();
                self.stop().await;
                anyhow::bail!(
                    "redis-server did not answer within {} s; its log: {log}",
                    READY_TIMEOUT.as_secs()
                );
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    }

    /// `127.0.0.1:PORT`: where the proxy forwards the boxes' links and the observer connects.
    pub fn addr(&self) -> String {
        format!("127.0.0.1:{}", self.port)
    }

    pub fn describe(&self) -> String {
        format!(
            "redis {} (one server, no persistence, started in {:.3} s)",
            self.version,
            self.started_in.as_secs_f64()
        )
    }

    /// The nemesis's stop: SIGTERM (`Fast`) or SIGKILL (`Immediate`, a crash, and a `kill`).
    /// Without persistence the server forgets the lock either way.
    pub async fn stop_member(&mut self, mode: crate::pg::StopMode) -> anyhow::Result<()> {
        member::stop("lock", &mut self.child, mode).await?;
        self.paused = false;
        Ok(())
    }

    /// The nemesis's start: the server again on its port; how long until it answered.
    pub async fn start_member(&mut self) -> anyhow::Result<Duration> {
        if self.child.is_some() {
            anyhow::bail!("lock is already running");
        }
        let began = Instant::now();
        self.spawn()?;
        self.wait_ready(began).await?;
        self.last_start = began.elapsed();
        Ok(self.last_start)
    }

    /// The nemesis's pause (SIGSTOP) or resume (SIGCONT).
    pub fn pause_member(&mut self, pause: bool) -> anyhow::Result<()> {
        member::pause("lock", &self.child, pause)?;
        self.paused = pause;
        Ok(())
    }

    /// How long the last start took.
    pub fn last_start(&self) -> Duration {
        self.last_start
    }

    /// SIGTERM, then SIGKILL after 3 s; the directory removed.
    pub async fn stop(&mut self) {
        if let Some(mut child) = self.child.take() {
            if let Some(pid) = child.id() {
                let pid = pid as i32;
                tokio::task::spawn_blocking(move || stop_now(pid, libc::SIGTERM))
                    .await
                    .ok();
            }
            let _ = child.wait().await;
        }
        self.remove_data();
    }

    fn remove_data(&self) {
        if std::env::var_os("CHAOS_KEEP_DATA").is_none() {
            let _ = std::fs::remove_dir_all(&self.dir);
        }
    }
}

impl Drop for RedisServer {
    fn drop(&mut self) {
        if let Some(child) = self.child.take() {
            if let Some(pid) = child.id() {
                stop_now(pid as i32, libc::SIGTERM);
            }
        }
        self.remove_data();
    }
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
