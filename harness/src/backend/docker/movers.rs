//! Mover containers: started ahead of the clock and held at a gate, signalled (SIGSTOP, SIGCONT, SIGKILL or the cgroup freezer), followed, and removed.

use super::containers::*;
use super::engine;

/// Shared by every launcher of a cluster: container name serials, and movers started ahead of
/// the scenario clock and held at a gate (`prepare_movers`).
#[derive(Default)]
pub(super) struct MoverShared {
    pub(super) serial: AtomicUsize,
    prepared: std::sync::Mutex<HashMap<String, Prepared>>,
}

/// A mover container started and waiting at its gate (a fifo its shell reads before `exec`ing
/// the mover).
struct Prepared {
    mover: DockerMover,
    stdout: MoverStdout,
    gate: Gate,
    /// The mover exited before it waited at its gate.
    gone: bool,
}

pub(super) struct LauncherInner {
    pub(super) engine: &'static Engine,
    pub(super) run_id: String,
    pub(super) network: String,
    pub(super) image: String,
    pub(super) bin_dir: PathBuf,
    pub(super) log_dir: PathBuf,
    pub(super) shared: Arc<MoverShared>,
}

/// Starts mover containers on the run's network.
#[derive(Clone)]
pub struct DockerLauncher {
    pub(super) inner: Arc<LauncherInner>,
}

impl DockerLauncher {
    /// One mover container whose main process is the mover itself (exec form, no shell or init
    /// in between), so SIGSTOP/SIGCONT/SIGKILL reach it; its stdout is followed as history,
    /// its stderr appended to `spec.log_path`.
    pub async fn spawn(&self, spec: &MoverSpec) -> anyhow::Result<(DockerMover, MoverStdout)> {
        let prepared = self
            .inner
            .shared
            .prepared
            .lock()
            .unwrap()
            .remove(&spec.box_name);
        match prepared {
            Some(p) => {
                // A mover that exited before its gate is handed over as it is: its exit is
                // recorded where every exit is.
                if !p.gone {
                    p.gate
                        .release(&spec.box_name, START_TIMEOUT, || false)
                        .await?;
                }
                Ok((p.mover, p.stdout))
            }
            None => self.start(spec, None).await,
        }
    }

    /// Start a box's container held at a gate (see `DockerCluster::prepare_movers`) and wait
    /// until it waits there: the reference mover after connecting to its databases, a user's
    /// command in the shell before it.
    /// Returns the box when its mover exited before its gate.
    pub async fn prepare(&self, spec: &MoverSpec) -> anyhow::Result<Option<NotStarted>> {
        let mut gate = Gate::create(&self.inner.log_dir, &spec.box_name)?;
        let (mover, stdout) = self.start(spec, Some(gate.path())).await?;
        // Whether the container exited, asked of the engine every 100 ms beside the gate's
        // 2 ms polls; a mover that never comes is released (and reported) at `spawn`.
        let exited: Arc<std::sync::Mutex<Option<i64>>> = Arc::new(std::sync::Mutex::new(None));
        let watch = {
            let (docker, id, exited) = (
                mover.signaller.docker.clone(),
                mover.signaller.id.clone(),
                exited.clone(),
            );
            tokio::spawn(async move {
                loop {
                    tokio::time::sleep(Duration::from_millis(100)).await;
                    if let Some((false, code)) = container_state(&docker, &id).await {
                        *exited.lock().unwrap() = Some(code);
                        return;
                    }
                }
            })
        };
        let waited = gate
            .wait_reader(spec.ready_timeout, || exited.lock().unwrap().is_some())
            .await;
        watch.abort();
        let not_started = (waited != Waited::Ready).then(|| {
            let code = exited.lock().unwrap().unwrap_or(-1);
            NotStarted {
                box_name: spec.box_name.clone(),
                code: (0..=128).contains(&code).then_some(code as i32),
                log_path: spec.log_path.clone(),
                never_ready: (waited == Waited::TimedOut).then_some(spec.ready_timeout),
            }
        });
        if not_started.is_some() {
            // The stderr follower ends with the container: let it write the last line.
            let _ = tokio::time::timeout(Duration::from_secs(2), async {
                while !mover.stderr_task.as_ref().is_none_or(|t| t.is_finished()) {
                    tokio::time::sleep(Duration::from_millis(10)).await;
                }
            })
            .await;
        }
        self.inner.shared.prepared.lock().unwrap().insert(
            spec.box_name.clone(),
            Prepared {
                mover,
                stdout,
                gate,
                gone: not_started
                    .as_ref()
                    .is_some_and(|n| n.never_ready.is_none()),
            },
        );
        Ok(not_started)
    }

    async fn start(
        &self,
        spec: &MoverSpec,
        gate: Option<&Path>,
    ) -> anyhow::Result<(DockerMover, MoverStdout)> {
        let me = &self.inner;
        let n = me.shared.serial.fetch_add(1, Ordering::SeqCst);
        let name = docker_name(&me.run_id, &format!("{}-{n}", spec.box_name));
        let mut req = generic(&me.image)
            .with_container_name(&name)
            .with_network(&me.network)
            .with_labels(labels(&me.run_id))
            .with_mount(
                Mount::bind_mount(me.bin_dir.display().to_string(), BIN_MOUNT)
                    .with_access_mode(AccessMode::ReadOnly),
            )
            // The logs folder at its own path: libfaketime's per-box offset files live there.
            .with_mount(Mount::bind_mount(
                me.log_dir.display().to_string(),
                me.log_dir.display().to_string(),
            ))
            .with_startup_timeout(START_TIMEOUT);
        req = match &spec.program {
            MoverProgram::Exec { program, args } => {
                let (dir, file) = folder_and_name(program)?;
                let mut cmd = vec![format!("{MOVER_MOUNT}/{file}")];
                cmd.extend(args.iter().cloned());
                req.with_mount(
                    Mount::bind_mount(dir.display().to_string(), MOVER_MOUNT)
                        .with_access_mode(AccessMode::ReadOnly),
                )
                .with_cmd(cmd)
            }
            // `exec`: the user's program replaces the shell and is the container's main process.
            MoverProgram::Shell(line) => {
                req.with_cmd(["/bin/sh".to_string(), "-c".into(), gate::exec_line(line)])
            }
        };
        if let Some(gate) = gate {
            // The reference mover reads the gate itself once connected. A user's command is
            // held by a shell that reads it, then `exec`s the command in its place: from then on
            // the mover is the container's main process, as without a gate.
            if let MoverProgram::Shell(_) = &spec.program {
                let program = match &spec.program {
                    MoverProgram::Shell(line) => gate::program_of(line).unwrap_or_default(),
                    MoverProgram::Exec { .. } => String::new(),
                };
                let shell = if spec.reads_gate {
                    gate::SHELL_CHECK
                } else {
                    gate::SHELL_HOLD
                };
                let mut cmd = vec![
                    "/bin/sh".to_string(),
                    "-c".into(),
                    shell.into(),
                    "chaos-gate".into(),
                    program,
                ];
                let inner: Vec<String> = req.cmd().map(|c| c.into_owned()).collect();
                cmd.extend(inner);
                req = req.with_cmd(cmd);
            }
            req = req.with_env_var(gate::GATE_VAR, gate.display().to_string());
        }
        for (k, v) in &spec.env {
            req = req.with_env_var(k, v);
        }
        // Publishes nothing: a mover only dials out to the proxy on the run's network.
        let req = publish_on_loopback(req, vec![]);
        let container = req.start().await.map_err(|e| {
            anyhow::anyhow!(
                "{}: start the mover container ({}): {e}",
                spec.box_name,
                me.image
            )
        })?;
        let id = container.id().to_string();
        let stdout: MoverStdout = Box::new(container.stdout(true));
        let mut stderr = container.stderr(true);
        let log_path = spec.log_path.clone();
        let stderr_task = tokio::spawn(async move {
            if let Ok(mut f) = tokio::fs::OpenOptions::new()
                .create(true)
                .append(true)
                .open(&log_path)
                .await
            {
                let _ = tokio::io::copy(&mut stderr, &mut f).await;
            }
        });
        let docker = me.engine.docker.clone();
        let host_pid = host_pid(&docker, &id).await;
        Ok((
            DockerMover {
                container: Some(container),
                signaller: DockerSignaller {
                    docker,
                    id,
                    host_pid,
                    box_name: spec.box_name.clone(),
                    frozen: Arc::default(),
                },
                stderr_task: Some(stderr_task),
            },
            stdout,
        ))
    }
}

/// A running mover container.
pub struct DockerMover {
    container: Option<ContainerAsync<GenericImage>>,
    signaller: DockerSignaller,
    stderr_task: Option<tokio::task::JoinHandle<()>>,
}

impl DockerMover {
    pub fn signaller(&self) -> DockerSignaller {
        self.signaller.clone()
    }

    /// Wait for the mover to exit; its exit code (None: killed by a signal, which docker reports
    /// as 128+n, or the container is gone). Then its stderr is flushed and the container removed.
    pub async fn wait(&mut self) -> Option<i32> {
        let s = &self.signaller;
        let code = loop {
            match container_state(&s.docker, &s.id).await {
                Some((true, _)) => tokio::time::sleep(Duration::from_millis(20)).await,
                Some((false, code)) => break code,
                None => break -1,
            }
        };
        if let Some(t) = self.stderr_task.take() {
            let _ = tokio::time::timeout(Duration::from_secs(5), t).await;
        }
        if let Some(c) = self.container.take() {
            let _ = tokio::time::timeout(STOP_TIMEOUT, c.rm()).await;
        }
        match code {
            129..=159 | -1 => None,
            c => Some(c as i32),
        }
    }
}

impl Drop for DockerMover {
    fn drop(&mut self) {
        if let Some(c) = self.container.take() {
            // Removed from a thread of its own (works even when the runtime is shutting down);
            // testcontainers' drop-time removal would need a live runtime.
            self.signaller.kill_now();
            std::mem::forget(c);
        }
        if let Some(t) = self.stderr_task.take() {
            t.abort();
        }
    }
}

/// Signals a mover container without owning it.
#[derive(Clone)]
pub struct DockerSignaller {
    docker: Docker,
    id: String,
    /// The mover's pid on this host when the engine runs here: a signal goes straight to it
    /// (tens of µs), not through the engine's API (about 15 ms on this machine).
    host_pid: Option<i32>,
    box_name: String,
    /// Frozen by the cgroup freezer (a `pause` with `freezer`): a kill then thaws it.
    frozen: Arc<std::sync::atomic::AtomicBool>,
}

impl DockerSignaller {
    /// The engine and the container, for a change of its resources (a cpu fault).
    pub fn container(&self) -> (Docker, String) {
        (self.docker.clone(), self.id.clone())
    }

    /// A signal to the container's main process (the mover), or, with `freezer`, the cgroup
    /// freezer: SIGSTOP -> pause, SIGCONT -> unpause (a frozen mover cannot tell it was stopped;
    /// a SIGSTOPped one's children and its parent-visible state can).
    pub async fn signal(&self, sig: i32, freezer: bool) -> anyhow::Result<()> {
        let who = format!("{}'s container", self.box_name);
        if freezer && sig == libc::SIGSTOP {
            bounded(
                &format!("freeze {who}"),
                self.docker.pause_container(&self.id),
            )
            .await?;
            self.frozen.store(true, Ordering::SeqCst);
            return Ok(());
        }
        if freezer && sig == libc::SIGCONT {
            self.frozen.store(false, Ordering::SeqCst);
            return bounded(
                &format!("thaw {who}"),
                self.docker.unpause_container(&self.id),
            )
            .await;
        }
        let r = match self.signal_now(sig) {
            Some(Ok(())) => Ok(()),
            _ => {
                bounded(
                    &format!("send signal {sig} to {who}"),
                    signal(&self.docker, &self.id, &sig.to_string()),
                )
                .await
            }
        };
        if sig == libc::SIGKILL {
            self.after_kill().await;
        }
        r
    }

    /// `sig` sent now with kill(2) when the engine runs here (None: it must go through the
    /// engine's API).
    pub fn signal_now(&self, sig: i32) -> Option<anyhow::Result<()>> {
        let pid = self.host_pid.filter(|pid| runs_in(*pid, &self.id))?;
        // SAFETY: kill(2) on a pid checked just now to be the container's main process.
        Some(match unsafe { libc::kill(pid, sig) } {
            0 => Ok(()),
            _ => Err(anyhow::anyhow!(
                "signal {sig} to {}'s mover (pid {pid}): {}",
                self.box_name,
                std::io::Error::last_os_error()
            )),
        })
    }

    /// After a SIGKILL: a frozen mover dies only once thawed.
    pub async fn after_kill(&self) {
        if self.frozen.swap(false, Ordering::SeqCst) {
            let _ =
                tokio::time::timeout(CALL_TIMEOUT, self.docker.unpause_container(&self.id)).await;
        }
    }

    /// Remove the container at once (blocking-safe, usable from Drop): a fresh client on a
    /// thread of its own, bounded by the engine call timeout.
    pub fn kill_now(&self) {
        let id = self.id.clone();
        let worker = std::thread::spawn(move || {
            let Ok(rt) = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
            else {
                return;
            };
            rt.block_on(async move {
                let Some(e) = engine::ENGINE_FOR_DROP.get() else {
                    return;
                };
                let Ok(docker) = engine::client(&e.0, &e.1) else {
                    return;
                };
                let opts = testcontainers::bollard::query_parameters::RemoveContainerOptions {
                    force: true,
                    v: true,
                    link: false,
                };
                let _ =
                    tokio::time::timeout(CALL_TIMEOUT, docker.remove_container(&id, Some(opts)))
                        .await;
            });
        });
        let _ = worker.join();
    }
}
