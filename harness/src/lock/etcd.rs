//! etcd as the lock service's server: Debian's `etcd-server` (3.4) run as a local process on 127.0.0.1 and free ports, as the unprivileged user when the harness is root, its data under the run's data directory and its log in the run's `logs/`; stopped (and its data removed) on every path.

use crate::procs;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::{Duration, Instant};
use tokio::process::{Child, Command};

/// How long a member may take to answer its first status call.
const READY_TIMEOUT: Duration = Duration::from_secs(20);

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

/// One etcd member, running.
pub struct EtcdServer {
    child: Option<Child>,
    client_port: u16,
    peer_port: u16,
    bin: PathBuf,
    run_as: Option<(u32, u32)>,
    data_dir: PathBuf,
    log_path: PathBuf,
    version: String,
    /// Real time from spawn to its first answer.
    pub started_in: Duration,
}

impl EtcdServer {
    /// Start one member and wait until it answers.
    pub async fn start(run_id: &str, log_dir: &Path) -> anyhow::Result<EtcdServer> {
        let began = Instant::now();
        let bin = binary()?;
        let run_as = crate::pg::PgInstall::find().ok().and_then(|i| i.run_as);
        // Inside the run's data directory, so whatever removes the databases' data (the run,
        // or the next command after a SIGKILL) removes the member's too.
        let data_dir = crate::backend::process::data_root()
            .join(run_id)
            .join("lock-1");
        std::fs::create_dir_all(&data_dir)
            .map_err(|e| anyhow::anyhow!("create {}: {e}", data_dir.display()))?;
        if let Some((uid, gid)) = run_as {
            std::os::unix::fs::chown(&data_dir, Some(uid), Some(gid))
                .map_err(|e| anyhow::anyhow!("chown {}: {e}", data_dir.display()))?;
        }
        let mut server = EtcdServer {
            child: None,
            client_port: procs::free_port()?,
            peer_port: procs::free_port()?,
            version: version(&bin).await,
            bin,
            run_as,
            data_dir,
            log_path: log_dir.join("lock-1.log"),
            started_in: Duration::ZERO,
        };
        server.spawn()?;
        server.wait_ready(began).await?;
        server.started_in = began.elapsed();
        Ok(server)
    }

    /// Spawn the member on its data directory and ports (a restart keeps both).
    fn spawn(&mut self) -> anyhow::Result<()> {
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&self.log_path)
            .map_err(|e| anyhow::anyhow!("open {}: {e}", self.log_path.display()))?;
        let client = format!("http://127.0.0.1:{}", self.client_port);
        let peer = format!("http://127.0.0.1:{}", self.peer_port);
        let mut cmd = Command::new(&self.bin);
        cmd.args(["--name", "lock-1", "--data-dir"])
            .arg(&self.data_dir)
            .args([
                "--listen-client-urls",
                &client,
                "--advertise-client-urls",
                &client,
            ])
            .args([
                "--listen-peer-urls",
                &peer,
                "--initial-advertise-peer-urls",
                &peer,
            ])
            .args(["--initial-cluster", &format!("lock-1={peer}")])
            .args(["--initial-cluster-state", "new"])
            // A scenario second is tens of real ms: elections and lease checks on that scale.
            .args(["--heartbeat-interval", "10", "--election-timeout", "100"])
            .args(["--logger", "zap", "--log-outputs", "stderr"])
            .stdin(Stdio::null())
            .stdout(log.try_clone()?)
            .stderr(log)
            .current_dir("/");
        if let Some((uid, gid)) = self.run_as {
            cmd.uid(uid).gid(gid);
        }
        procs::own_group(&mut cmd);
        procs::die_with_parent(&mut cmd);
        self.child = Some(
            cmd.spawn()
                .map_err(|e| anyhow::anyhow!("start {}: {e}", self.bin.display()))?,
        );
        Ok(())
    }

    /// The nemesis's stop: SIGTERM (`Fast`) or SIGKILL (`Immediate`, a crash); the data kept.
    pub async fn stop_member(&mut self, mode: crate::pg::StopMode) -> anyhow::Result<()> {
        let Some(mut child) = self.child.take() else {
            anyhow::bail!("the etcd member is not running");
        };
        let sig = match mode {
            crate::pg::StopMode::Fast => libc::SIGTERM,
            crate::pg::StopMode::Immediate => libc::SIGKILL,
        };
        if let Some(pid) = child.id() {
            let pid = pid as i32;
            tokio::task::spawn_blocking(move || procs::stop_now(pid, sig)).await?;
        }
        let _ = child.wait().await;
        Ok(())
    }

    /// The nemesis's start: the member again on its data; how long until it answered.
    pub async fn start_member(&mut self) -> anyhow::Result<Duration> {
        if self.child.is_some() {
            anyhow::bail!("the etcd member is already running");
        }
        let began = Instant::now();
        self.spawn()?;
        self.wait_ready(began).await?;
        self.started_in = began.elapsed();
        Ok(self.started_in)
    }

    async fn wait_ready(&mut self, began: Instant) -> anyhow::Result<()> {
        let endpoint = format!("http://{}", self.client_addr());
        loop {
            if let Some(Ok(Some(status))) = self.child.as_mut().map(|c| c.try_wait()) {
                self.child = None;
                anyhow::bail!(
                    "etcd exited at start ({status}); its log: {}",
                    self.log_path.display()
                );
            }
            let options = etcd_client::ConnectOptions::new()
                .with_connect_timeout(Duration::from_millis(200))
                .with_timeout(Duration::from_millis(200));
            if let Ok(mut c) = etcd_client::Client::connect([&endpoint], Some(options)).await {
                if c.status().await.is_ok() {
                    return Ok(());
                }
            }
            if began.elapsed() > READY_TIMEOUT {
                self.stop().await;
                anyhow::bail!(
                    "etcd did not answer within {} s; its log: {}",
                    READY_TIMEOUT.as_secs(),
                    self.log_path.display()
                );
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }

    /// `127.0.0.1:PORT`, where the proxy forwards the boxes' links and the observer connects.
    pub fn client_addr(&self) -> String {
        format!("127.0.0.1:{}", self.client_port)
    }

    pub fn describe(&self) -> String {
        format!(
            "etcd {} (one member, started in {:.2} s)",
            self.version,
            self.started_in.as_secs_f64()
        )
    }

    /// SIGTERM, then SIGKILL after 3 s; the data removed.
    pub async fn stop(&mut self) {
        if let Some(mut child) = self.child.take() {
            if let Some(pid) = child.id() {
                let pid = pid as i32;
                tokio::task::spawn_blocking(move || procs::stop_now(pid, libc::SIGTERM))
                    .await
                    .ok();
            }
            let _ = child.wait().await;
        }
        self.remove_data();
    }

    fn remove_data(&self) {
        if std::env::var_os("CHAOS_KEEP_DATA").is_none() {
            let _ = std::fs::remove_dir_all(&self.data_dir);
        }
    }
}

impl Drop for EtcdServer {
    fn drop(&mut self) {
        if let Some(child) = self.child.take() {
            if let Some(pid) = child.id() {
                procs::stop_now(pid as i32, libc::SIGTERM);
            }
        }
        self.remove_data();
    }
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
