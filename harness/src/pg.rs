//! Local Postgres servers: finding the binaries, one cached `initdb` template, and a node process that starts, stops, crashes and restarts with its data.

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::{Duration, Instant};
use tokio::process::{Child, Command};

/// Everything that can go wrong with a local Postgres, said in one line.
#[derive(Debug, thiserror::Error)]
pub enum PgError {
    #[error("no PostgreSQL server binaries found (looked at `pg_config --bindir`, /usr/lib/postgresql/*/bin and PATH); install them with: apt-get install -y postgresql (or run scripts/setup)")]
    NotFound,
    #[error("running as root, but there is no unprivileged `postgres` user to run the servers as (initdb and postgres refuse root); install Debian's postgresql package or create the user")]
    NoPostgresUser,
    #[error("{what}: {source}")]
    Io {
        what: String,
        source: std::io::Error,
    },
    #[error("initdb failed ({status}); its output: {output}")]
    Initdb { status: String, output: String },
    #[error("{node}: did not accept connections within {waited_ms} ms; see its log {log}")]
    NotReady {
        node: String,
        waited_ms: u128,
        log: String,
    },
    #[error("{node}: the server exited during start ({status}); see its log {log}")]
    ExitedEarly {
        node: String,
        status: String,
        log: String,
    },
}

fn io(what: impl Into<String>) -> impl FnOnce(std::io::Error) -> PgError {
    let what = what.into();
    move |source| PgError::Io { what, source }
}

/// The Postgres server binaries and who runs them.
#[derive(Debug, Clone)]
pub struct PgInstall {
    pub bindir: PathBuf,
    /// Major version, e.g. "15".
    pub version: String,
    /// Uid/gid to run as (Some when the harness is root).
    pub run_as: Option<(u32, u32)>,
}

impl PgInstall {
    /// Find `initdb` and `postgres`: `pg_config --bindir`, then the newest
    /// `/usr/lib/postgresql/*/bin`, then PATH.
    pub fn find() -> Result<PgInstall, PgError> {
        let mut candidates: Vec<PathBuf> = Vec::new();
        if let Ok(dir) = std::env::var("CHAOS_PG_BINDIR") {
            candidates.push(dir.into());
        }
        if let Ok(out) = std::process::Command::new("pg_config")
            .arg("--bindir")
            .output()
        {
            if out.status.success() {
                candidates.push(String::from_utf8_lossy(&out.stdout).trim().into());
            }
        }
        if let Ok(entries) = std::fs::read_dir("/usr/lib/postgresql") {
            let mut versions: Vec<(u32, PathBuf)> = entries
                .flatten()
                .filter_map(|e| {
                    Some((
                        e.file_name().to_str()?.parse::<u32>().ok()?,
                        e.path().join("bin"),
                    ))
                })
                .collect();
            versions.sort();
            candidates.extend(versions.into_iter().rev().map(|(_, p)| p));
        }
        if let Ok(path) = std::env::var("PATH") {
            candidates.extend(std::env::split_paths(&path));
        }
        let bindir = candidates
            .into_iter()
            .find(|d| d.join("initdb").is_file() && d.join("postgres").is_file())
            .ok_or(PgError::NotFound)?;
        let out = std::process::Command::new(bindir.join("postgres"))
            .arg("--version")
            .output()
            .map_err(io("postgres --version"))?;
        let text = String::from_utf8_lossy(&out.stdout);
        let version = text
            .split_whitespace()
            .nth(2)
            .and_then(|v| v.split('.').next())
            .unwrap_or("unknown")
            .to_string();
        let run_as = if unsafe { libc::geteuid() } == 0 {
            Some(postgres_user()?)
        } else {
            None
        };
        Ok(PgInstall {
            bindir,
            version,
            run_as,
        })
    }

    /// Where templates are cached: `$CHAOS_CACHE_DIR` or /var/tmp/chaos-cache.
    pub fn cache_dir() -> PathBuf {
        std::env::var_os("CHAOS_CACHE_DIR")
            .map(PathBuf::from)
            .unwrap_or_else(|| PathBuf::from("/var/tmp/chaos-cache"))
    }

    /// The template data directory, made once with `initdb` and reused.
    pub async fn template(&self) -> Result<PathBuf, PgError> {
        let dir = Self::cache_dir().join(format!("pg{}-template", self.version));
        if dir.join("PG_VERSION").is_file() {
            return Ok(dir);
        }
        let parent = Self::cache_dir();
        std::fs::create_dir_all(&parent).map_err(io(format!("create {}", parent.display())))?;
        self.give(&parent)?;
        let tmp = parent.join(format!("template-{}.tmp", std::process::id()));
        let _ = std::fs::remove_dir_all(&tmp);
        let mut cmd = self.command("initdb");
        cmd.args(["-D"]).arg(&tmp).args([
            "-U",
            "postgres",
            "-A",
            "trust",
            "-E",
            "UTF8",
            "--locale=C",
            "--no-sync",
        ]);
        let out = cmd.output().await.map_err(io("run initdb"))?;
        if !out.status.success() {
            return Err(PgError::Initdb {
                status: out.status.to_string(),
                output: String::from_utf8_lossy(&out.stderr)
                    .lines()
                    .last()
                    .unwrap_or("")
                    .to_string(),
            });
        }
        // Another harness may have won the race: keep theirs.
        if std::fs::rename(&tmp, &dir).is_err() {
            let _ = std::fs::remove_dir_all(&tmp);
        }
        Ok(dir)
    }

    /// A command for one of the server binaries, run as the unprivileged user when root.
    pub fn command(&self, program: &str) -> Command {
        let mut cmd = Command::new(self.bindir.join(program));
        if let Some((uid, gid)) = self.run_as {
            cmd.uid(uid).gid(gid);
        }
        cmd.current_dir("/");
        cmd
    }

    /// Hand a directory to the user the servers run as.
    pub fn give(&self, path: &Path) -> Result<(), PgError> {
        if let Some((uid, gid)) = self.run_as {
            std::os::unix::fs::chown(path, Some(uid), Some(gid))
                .map_err(io(format!("chown {}", path.display())))?;
        }
        Ok(())
    }
}

fn postgres_user() -> Result<(u32, u32), PgError> {
    let name = std::ffi::CString::new("postgres").expect("no NUL");
    // SAFETY: getpwnam returns a pointer into static storage; we copy the ids out at once.
    let pw = unsafe { libc::getpwnam(name.as_ptr()) };
    if pw.is_null() {
        return Err(PgError::NoPostgresUser);
    }
    Ok(unsafe { ((*pw).pw_uid, (*pw).pw_gid) })
}

/// How to stop a server.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StopMode {
    /// SIGINT: roll back, checkpoint, exit.
    Fast,
    /// SIGQUIT: exit at once; the next start runs crash recovery.
    Immediate,
}

impl StopMode {
    /// The postmaster's own signal for this stop.
    pub fn signal(self) -> i32 {
        match self {
            StopMode::Fast => libc::SIGINT,
            StopMode::Immediate => libc::SIGQUIT,
        }
    }

    /// Our images' supervisor's signal for this stop (their entrypoints: SIGUSR1 stops the
    /// server, SIGUSR2 kills it).
    pub fn supervisor_signal(self) -> i32 {
        match self {
            StopMode::Fast => libc::SIGUSR1,
            StopMode::Immediate => libc::SIGUSR2,
        }
    }
}

/// One local Postgres server: its data directory, port and process.
pub struct PgNode {
    pub name: String,
    pub data_dir: PathBuf,
    pub port: u16,
    pub log_path: PathBuf,
    install: PgInstall,
    child: Option<Child>,
    /// How long the last start took until it accepted connections.
    pub last_start: Duration,
    /// Extra environment for the server (libfaketime for a clocked node).
    pub env: Vec<(String, String)>,
    /// Settings after the common ones (`ASYNCHRONOUS_COMMIT` for a node that runs it).
    pub settings: Vec<String>,
}

impl PgNode {
    /// Copy the template into `data_dir` (which must not exist).
    pub async fn create(
        install: &PgInstall,
        name: &str,
        template: &Path,
        data_dir: PathBuf,
        port: u16,
        log_path: PathBuf,
    ) -> Result<PgNode, PgError> {
        let mut cp = Command::new("cp");
        cp.arg("-a").arg(template).arg(&data_dir);
        // A start dropped mid-copy (Ctrl-C) stops the copy with it, and so does the harness's
        // death (SIGKILL).
        cp.kill_on_drop(true);
        crate::procs::die_with_parent(&mut cp);
        let status = cp
            .status()
            .await
            .map_err(io(format!("copy the template to {}", data_dir.display())))?;
        if !status.success() {
            return Err(PgError::Io {
                what: format!("cp -a {} {}", template.display(), data_dir.display()),
                source: std::io::Error::other(status.to_string()),
            });
        }
        Ok(PgNode {
            name: name.into(),
            data_dir,
            port,
            log_path,
            install: install.clone(),
            child: None,
            last_start: Duration::ZERO,
            env: vec![],
            settings: vec![],
        })
    }

    pub fn is_running(&self) -> bool {
        self.child.is_some()
    }

    pub fn pid(&self) -> Option<u32> {
        self.child.as_ref().and_then(|c| c.id())
    }

    /// `postgres://postgres@127.0.0.1:PORT/postgres`
    pub fn url(&self) -> String {
        format!("postgres://postgres@127.0.0.1:{}/postgres", self.port)
    }

    /// Start the server and wait until it accepts connections.
    pub async fn start(&mut self, timeout: Duration) -> Result<Duration, PgError> {
        let began = Instant::now();
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&self.log_path)
            .map_err(io(format!("open {}", self.log_path.display())))?;
        let log2 = log.try_clone().map_err(io("dup the log"))?;
        let mut cmd = self.install.command("postgres");
        cmd.arg("-D").arg(&self.data_dir);
        for setting in server_settings(&self.name, self.port, "127.0.0.1")
            .into_iter()
            .chain(self.settings.iter().cloned())
        {
            cmd.arg("-c").arg(setting);
        }
        cmd.envs(self.env.iter().map(|(k, v)| (k.as_str(), v.as_str())));
        cmd.stdin(Stdio::null()).stdout(log).stderr(log2);
        crate::procs::die_with_parent(&mut cmd);
        let child = cmd
            .spawn()
            .map_err(io(format!("start postgres for {}", self.name)))?;
        self.child = Some(child);
        let url = self.url();
        loop {
            if let Some(child) = self.child.as_mut() {
                if let Ok(Some(status)) = child.try_wait() {
                    self.child = None;
                    let log = std::fs::read_to_string(&self.log_path).unwrap_or_default();
                    let status = match log.contains("Address already in use") {
                        true => format!("{status}: port {} is another process's", self.port),
                        false => status.to_string(),
                    };
                    return Err(PgError::ExitedEarly {
                        node: self.name.clone(),
                        status,
                        log: self.log_path.display().to_string(),
                    });
                }
            }
            // An answer from the port is ours only when our postmaster holds it: another
            // run's server handed the same port answers too, while ours fails to bind.
            let pid = self.child.as_ref().and_then(|c| c.id());
            if crate::db::ping(&url).await && crate::ports::ours(pid, self.port) {
                self.last_start = began.elapsed();
                return Ok(self.last_start);
            }
            if began.elapsed() > timeout {
                return Err(PgError::NotReady {
                    node: self.name.clone(),
                    waited_ms: began.elapsed().as_millis(),
                    log: self.log_path.display().to_string(),
                });
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    }

    /// Stop the server and wait for it to exit (SIGKILL after `timeout`).
    pub async fn stop(&mut self, mode: StopMode, timeout: Duration) -> Result<(), PgError> {
        let Some(mut child) = self.child.take() else {
            return Ok(());
        };
        if let Some(pid) = child.id() {
            unsafe { libc::kill(pid as i32, mode.signal()) };
        }
        match tokio::time::timeout(timeout, child.wait()).await {
            Ok(_) => Ok(()),
            Err(_) => {
                let _ = child.kill().await;
                Ok(())
            }
        }
    }
}

impl Drop for PgNode {
    fn drop(&mut self) {
        if let Some(child) = self.child.as_mut() {
            if let Some(pid) = child.id() {
                crate::procs::stop_now(pid as i32, libc::SIGQUIT);
            }
        }
    }
}

/// A node that runs asynchronous commit (`[cluster] asynchronous_commit`), as many run a lock
/// store: a commit is acknowledged before its WAL is written. The WAL writer writes each full
/// page at once and the last partial one every `wal_writer_delay`, here its longest (10 s), so
/// what a crash loses is the commits since the last page boundary, not a 200 ms tick's luck.
/// An immediate stop (a crash) loses them: the WAL buffers die with the server, whatever
/// `fsync` says. The install is written out before the run (`setup::written_out`).
pub const ASYNCHRONOUS_COMMIT: [&str; 2] = ["synchronous_commit=off", "wal_writer_delay=10s"];

/// The settings every node runs with: loopback (or the container's network) only,
/// commit timestamps for the audit, and durability off because the run is throwaway.
/// `cluster_name` is the node's name: a row's default can record which server committed it
/// (the failover system's orders), and a standby is known by it on its primary.
pub fn server_settings(node: &str, port: u16, listen: &str) -> Vec<String> {
    vec![
        format!("port={port}"),
        format!("cluster_name={node}"),
        format!("listen_addresses={listen}"),
        "unix_socket_directories=".into(),
        "track_commit_timestamp=on".into(),
        "fsync=off".into(),
        "synchronous_commit=on".into(), // with fsync off a commit still reaches the kernel before it is acknowledged, so a crash stop loses nothing acknowledged
        "full_page_writes=off".into(),
        "shared_buffers=64MB".into(),
        "max_connections=100".into(),
        "max_wal_size=1GB".into(),
        // Scaled with the scenario clock: see the readings table's settings in workloads/sql/shard.sql.
        "autovacuum_naptime=1s".into(),
        // Each autovacuum in the node's log (a slow existence-check walk is read against them).
        "log_autovacuum_min_duration=0".into(),
        "log_line_prefix=%m [%p] %a ".into(),
        "log_min_messages=warning".into(),
        "log_min_error_statement=panic".into(),
    ]
}
