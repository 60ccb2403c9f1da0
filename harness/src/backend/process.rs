//! The process backend: local Postgres servers on 127.0.0.1 from one cached template, movers as child processes in their own process groups.

use super::gate::{self, Gate, NotStarted, Waited};
use super::{ClusterSpec, MoverProgram, MoverSpec, StopMode, START_TIMEOUT, STOP_TIMEOUT};
use crate::pg::{PgInstall, PgNode};
use crate::{ports, procs};
use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tokio::process::{Child, ChildStdout, Command};

/// Local database servers for one run.
pub struct ProcessCluster {
    pub install: PgInstall,
    pub nodes: BTreeMap<String, PgNode>,
    pub(crate) data_root: PathBuf,
    /// Time to copy the template and start every node.
    pub start_time: Duration,
    /// Starts the movers (and holds those prepared before the clock).
    pub launcher: ProcessLauncher,
}

/// Free space a tmpfs needs for the data to go there: April's four servers peak at 1.2 GB.
const TMPFS_ROOM: u64 = 4 << 30;
const TMPFS_MAGIC: i64 = 0x0102_1994;

/// Where the servers' data directories go: `CHAOS_DATA_DIR`, else `/dev/shm/chaos-data` when
/// /dev/shm is a tmpfs with 4 GiB free, else `/tmp/chaos-data`.
///
/// Why memory: the servers run with `fsync=off` already (a crash stop still loses nothing
/// acknowledged: a commit reaches the kernel before it is acknowledged), but their writes
/// still go to the disk behind the page cache, and with the data on a busy disk April's
/// figures drift with the disk's load (docs/figures.md has the measurements).
pub fn data_root() -> PathBuf {
    if let Some(dir) = std::env::var_os("CHAOS_DATA_DIR") {
        return PathBuf::from(dir);
    }
    let shm = Path::new("/dev/shm");
    if tmpfs_with_room(shm, TMPFS_ROOM) {
        return shm.join("chaos-data");
    }
    PathBuf::from("/tmp/chaos-data")
}

fn tmpfs_with_room(dir: &Path, room: u64) -> bool {
    use std::os::unix::ffi::OsStrExt;
    let Ok(c) = std::ffi::CString::new(dir.as_os_str().as_bytes()) else {
        return false;
    };
    let mut st: libc::statfs = unsafe { std::mem::zeroed() };
    // SAFETY: a valid C string and a zeroed statfs the call fills in.
    if unsafe { libc::statfs(c.as_ptr(), &mut st) } != 0 {
        return false;
    }
    let free = (st.f_bavail as u64).saturating_mul(st.f_bsize as u64);
    st.f_type as i64 == TMPFS_MAGIC
        && free >= room
        && unsafe { libc::access(c.as_ptr(), libc::W_OK) } == 0
}

impl ProcessCluster {
    /// Copy the template and start every node in parallel.
    pub async fn start(spec: &ClusterSpec) -> anyhow::Result<ProcessCluster> {
        let began = Instant::now();
        let install = PgInstall::find()?;
        let template = install.template().await?;
        let data_root = data_root().join(&spec.run_id);
        // Written down before it is created: a harness killed from here on leaves it (and any
        // server on it) for the next command to remove (`reap`).
        crate::owned::hold(crate::owned::Thing::DataDir(data_root.clone()));
        std::fs::create_dir_all(&data_root)
            .map_err(|e| anyhow::anyhow!("create {}: {e}", data_root.display()))?;
        if let Some(parent) = data_root.parent() {
            let _ = install.give(parent);
        }
        install.give(&data_root)?;
        let mut cluster = ProcessCluster {
            install: install.clone(),
            nodes: BTreeMap::new(),
            data_root: data_root.clone(),
            start_time: Duration::ZERO,
            launcher: ProcessLauncher::default(),
        };
        let creates = spec.nodes.iter().map(|name| {
            let install = install.clone();
            let template = template.clone();
            let dir = data_root.join(name);
            let log = spec.log_dir.join(format!("{name}.log"));
            let log_dir = spec.log_dir.clone();
            let asynchronous = spec.asynchronous_commit.contains(name);
            let name = name.clone();
            async move {
                let port = ports::free_port().map_err(|e| anyhow::anyhow!("no free port: {e}"))?;
                let mut node = PgNode::create(&install, &name, &template, dir, port, log).await?;
                // A clock fault's node: its offset file was written before the start.
                let clock = crate::faketime::faketime_file(&log_dir, &name);
                if clock.is_file() {
                    node.env = crate::faketime::env_for(&clock);
                }
                if asynchronous {
                    node.settings = crate::pg::ASYNCHRONOUS_COMMIT.map(String::from).to_vec();
                }
                node.start(START_TIMEOUT).await?;
                anyhow::Ok(node)
            }
        });
        // Every node is kept (and so stopped on drop) even when another failed.
        let results = futures_util::future::join_all(creates).await;
        let mut first_error = None;
        for r in results {
            match r {
                Ok(node) => {
                    cluster.nodes.insert(node.name.clone(), node);
                }
                Err(e) => first_error = first_error.or(Some(e)),
            }
        }
        if let Some(e) = first_error {
            cluster.stop_all().await;
            return Err(e);
        }
        cluster.start_time = began.elapsed();
        Ok(cluster)
    }

    /// The harness's own (unproxied) URL of a node.
    pub fn admin_url(&self, node: &str) -> String {
        self.nodes[node].url()
    }

    /// Where the proxy should forward a link to `node`.
    pub fn upstream(&self, node: &str) -> String {
        format!("127.0.0.1:{}", self.nodes[node].port)
    }

    pub async fn stop_node(&mut self, node: &str, mode: StopMode) -> anyhow::Result<()> {
        let n = self
            .nodes
            .get_mut(node)
            .ok_or_else(|| anyhow::anyhow!("unknown node {node}"))?;
        if !n.is_running() {
            anyhow::bail!("{node} is not running");
        }
        n.stop(mode, STOP_TIMEOUT).await?;
        Ok(())
    }

    /// Start a stopped node on its kept data; returns how long until it accepted connections.
    pub async fn start_node(&mut self, node: &str) -> anyhow::Result<Duration> {
        let n = self
            .nodes
            .get_mut(node)
            .ok_or_else(|| anyhow::anyhow!("unknown node {node}"))?;
        if n.is_running() {
            anyhow::bail!("{node} is already running");
        }
        Ok(n.start(START_TIMEOUT).await?)
    }

    pub fn last_start(&self, node: &str) -> Duration {
        self.nodes
            .get(node)
            .map(|n| n.last_start)
            .unwrap_or_default()
    }

    /// Stop every node (fast, then immediate) and remove the data directories.
    pub async fn stop_all(&mut self) {
        let stops = self
            .nodes
            .values_mut()
            .map(|n| n.stop(StopMode::Fast, Duration::from_secs(10)));
        futures_util::future::join_all(stops).await;
        self.nodes.clear();
        self.remove_data(true);
    }

    /// Remove the data directories (unless `CHAOS_KEEP_DATA` keeps them) and, with `done`,
    /// strike them off the ledger.
    fn remove_data(&self, done: bool) {
        let keep = std::env::var_os("CHAOS_KEEP_DATA").is_some();
        if !keep {
            let _ = std::fs::remove_dir_all(&self.data_root);
        }
        if done || keep {
            crate::owned::let_go(&crate::owned::Thing::DataDir(self.data_root.clone()));
        }
    }
}

impl Drop for ProcessCluster {
    fn drop(&mut self) {
        // PgNode's own Drop stops any server still running.
        self.nodes.clear();
        // Dropped mid-start (Ctrl-C), a template copy may still be writing: the directory
        // stays in the ledger and is removed again once the command's runtime is shut down.
        self.remove_data(false);
    }
}

/// Starts movers as child processes; movers prepared before the scenario clock wait at their
/// start gate (`gate`) until `spawn` lets them go.
#[derive(Clone, Default)]
pub struct ProcessLauncher {
    prepared: Arc<Mutex<HashMap<String, Prepared>>>,
}

/// A mover started ahead of the clock and (unless it exited) waiting at its gate.
struct Prepared {
    mover: ProcessMover,
    stdout: ChildStdout,
    gate: Gate,
    waited: Waited,
}

impl ProcessLauncher {
    /// Start every mover now and wait until each waits at its gate (connected to its
    /// databases) or has exited; a prepared mover never spawned is killed with the launcher.
    /// Returns the movers that exited before their gate (`gate::check_started` judges them).
    pub async fn prepare_all(&self, specs: &[MoverSpec]) -> anyhow::Result<Vec<NotStarted>> {
        let mut started = Vec::new();
        for spec in specs {
            let dir = spec.log_path.parent().unwrap_or(std::path::Path::new("."));
            let gate = Gate::create(dir, &spec.box_name)?;
            let (mover, stdout) = ProcessMover::start(spec, Some(gate.path()))?;
            started.push((spec.box_name.clone(), mover, stdout, gate));
        }
        let waits = started.into_iter().zip(specs).map(
            |((name, mut mover, stdout, mut gate), spec)| async move {
                let waited = gate
                    .wait_reader(spec.ready_timeout, || {
                        matches!(mover.child.try_wait(), Ok(Some(_)))
                    })
                    .await;
                let prepared = Prepared {
                    mover,
                    stdout,
                    gate,
                    waited,
                };
                (name, spec, prepared)
            },
        );
        let ready = futures_util::future::join_all(waits).await;
        let mut prepared = self.prepared.lock().unwrap();
        let mut not_started = Vec::new();
        for (name, spec, mut p) in ready {
            if p.waited != Waited::Ready {
                let code = p
                    .mover
                    .child
                    .try_wait()
                    .ok()
                    .flatten()
                    .and_then(|s| s.code());
                not_started.push(NotStarted {
                    box_name: name.clone(),
                    code,
                    log_path: spec.log_path.clone(),
                    never_ready: (p.waited == Waited::TimedOut).then_some(spec.ready_timeout),
                });
            }
            prepared.insert(name, p);
        }
        Ok(not_started)
    }

    /// The prepared mover let through its gate, or (a restart, a box not prepared) a new one.
    pub async fn spawn(&self, spec: &MoverSpec) -> anyhow::Result<(ProcessMover, ChildStdout)> {
        let prepared = self.prepared.lock().unwrap().remove(&spec.box_name);
        match prepared {
            Some(mut p) => {
                let limit = match p.waited {
                    Waited::TimedOut => Duration::ZERO,
                    _ => spec.ready_timeout,
                };
                let child = &mut p.mover.child;
                p.gate
                    .release(&spec.box_name, limit, || {
                        matches!(child.try_wait(), Ok(Some(_)))
                    })
                    .await?;
                Ok((p.mover, p.stdout))
            }
            None => ProcessMover::start(spec, None),
        }
    }
}

/// A mover running as a local child process, in its own process group.
pub struct ProcessMover {
    child: Child,
    pub pid: i32,
}

impl ProcessMover {
    /// Start the mover; its stdout (history lines) is handed back to the caller. With a
    /// `gate`, the reference mover waits there once connected; a user's command is held
    /// before it starts by a shell reading the gate.
    pub fn start(
        spec: &MoverSpec,
        gate: Option<&std::path::Path>,
    ) -> anyhow::Result<(ProcessMover, ChildStdout)> {
        let mut cmd = match (&spec.program, gate) {
            (MoverProgram::Exec { program, args }, _) => {
                let mut c = Command::new(program);
                c.args(args);
                c
            }
            (MoverProgram::Shell(line), None) => {
                let mut c = Command::new("/bin/sh");
                c.arg("-c").arg(gate::exec_line(line));
                c
            }
            (MoverProgram::Shell(line), Some(_)) => {
                let mut c = Command::new("/bin/sh");
                let shell = if spec.reads_gate {
                    gate::SHELL_CHECK
                } else {
                    gate::SHELL_HOLD
                };
                c.args(["-c", shell, "chaos-gate"])
                    .arg(gate::program_of(line).unwrap_or_default())
                    .args(["/bin/sh", "-c"])
                    .arg(gate::exec_line(line));
                c
            }
        };
        match gate {
            Some(g) => cmd.env(gate::GATE_VAR, g),
            None => cmd.env_remove(gate::GATE_VAR),
        };
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&spec.log_path)
            .map_err(|e| anyhow::anyhow!("open {}: {e}", spec.log_path.display()))?;
        cmd.envs(spec.env.iter().map(|(k, v)| (k.as_str(), v.as_str())))
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(log)
            .kill_on_drop(true);
        procs::own_group(&mut cmd);
        procs::die_with_parent(&mut cmd);
        let mut child = cmd.spawn().map_err(|e| {
            anyhow::anyhow!(
                "{}: cannot start {}: {e}",
                spec.box_name,
                gate::role(&spec.box_name)
            )
        })?;
        let stdout = child.stdout.take().expect("stdout is piped");
        // Never -1: signals go to -pid, and kill(-(-1)) would be PID 1.
        let Some(pid) = child.id().map(|p| p as i32).filter(|p| *p > 1) else {
            anyhow::bail!(
                "{}: the mover exited before it could be watched",
                spec.box_name
            );
        };
        Ok((ProcessMover { child, pid }, stdout))
    }

    /// Wait for exit; returns the exit code (None: killed by a signal).
    pub async fn wait(&mut self) -> Option<i32> {
        self.child.wait().await.ok().and_then(|s| s.code())
    }
}

impl Drop for ProcessMover {
    fn drop(&mut self) {
        if let Ok(None) = self.child.try_wait() {
            unsafe { libc::kill(-self.pid, libc::SIGCONT) };
            unsafe { libc::kill(-self.pid, libc::SIGKILL) };
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_a_tmpfs_with_room_holds_the_data() {
        // /dev/shm is a tmpfs on Linux; /proc never is.
        assert!(tmpfs_with_room(Path::new("/dev/shm"), 1));
        assert!(!tmpfs_with_room(Path::new("/dev/shm"), u64::MAX));
        assert!(!tmpfs_with_room(Path::new("/proc"), 1));
        assert!(!tmpfs_with_room(Path::new("/no/such/dir"), 1));
    }
}
