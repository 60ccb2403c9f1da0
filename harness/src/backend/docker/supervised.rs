//! A server under our images' supervisor (chaos-postgres, chaos-etcd, chaos-redis, chaos-zookeeper: the entrypoint stays the container's main process and runs the server as its child), signalled from this host: the supervisor's stop and start signals, and the server's own pause (SIGSTOP, SIGCONT), kill and, for postgres, its stop.
//!
//! When the engine runs on this host the supervisor's pid is looked up once (as a mover's, see
//! `DockerSignaller`) and the server's is read from the supervisor's children in `/proc` at each
//! fault (a restart gives it a new pid); both are checked against the container's cgroup before
//! every signal. A signal then goes straight to the process with kill(2), tens of µs, where the
//! engine's API took about 15 ms a call here: a pause lands within the nemesis's 2 ms. Without a
//! local engine the signals go through the API, and a pause freezes the container (`docker
//! pause`) instead.

use super::containers::*;

/// The supervisor and its server in one container.
#[derive(Clone)]
pub(super) struct Supervised {
    docker: Docker,
    id: String,
    /// The supervisor's pid on this host (None: the engine is elsewhere).
    host_pid: Option<i32>,
    /// The server's process name (`/proc/PID/comm`): `etcd`, `redis-server`.
    server: &'static str,
}

/// How a pause was made: the history's `how`.
pub(super) const PAUSED_BY_SIGSTOP: &str = "SIGSTOP";
pub(super) const PAUSED_BY_FREEZER: &str = "freezer";

impl Supervised {
    /// Its container, for a cpu fault.
    pub(super) fn cpu_target(&self) -> crate::backend::CpuTarget {
        crate::backend::CpuTarget::Container {
            docker: self.docker.clone(),
            id: self.id.clone(),
        }
    }

    pub(super) async fn new(docker: &Docker, id: &str, server: &'static str) -> Supervised {
        Supervised {
            docker: docker.clone(),
            id: id.to_string(),
            host_pid: host_pid(docker, id).await,
            server,
        }
    }

    /// Its supervisor's pid is known here: the engine runs on this host.
    pub(super) fn on_this_host(&self) -> bool {
        self.host_pid.is_some()
    }

    /// The supervisor's pid, checked just now to be in the container.
    pub(super) fn supervisor(&self) -> Option<i32> {
        self.host_pid.filter(|pid| runs_in(*pid, &self.id))
    }

    /// The server's pid on this host: the supervisor's child of that name (not its `sleep`
    /// while the server is stopped), checked to be in the container.
    pub(super) fn server_pid(&self) -> Option<i32> {
        let sup = self.supervisor()?;
        let children = std::fs::read_to_string(format!("/proc/{sup}/task/{sup}/children")).ok()?;
        children
            .split_whitespace()
            .filter_map(|p| p.parse::<i32>().ok())
            .find(|pid| {
                std::fs::read_to_string(format!("/proc/{pid}/comm"))
                    .is_ok_and(|c| c.trim() == self.server)
                    && runs_in(*pid, &self.id)
            })
    }

    /// `sig` (SIGUSR1, SIGUSR2, SIGHUP) to the supervisor: kill(2) when it runs here, else the
    /// engine's API.
    pub(super) async fn to_supervisor(&self, sig: i32) -> anyhow::Result<()> {
        // SAFETY: kill(2) on a pid checked just now to be the container's main process.
        if let Some(pid) = self.supervisor() {
            if unsafe { libc::kill(pid, sig) } == 0 {
                return Ok(());
            }
        }
        bounded(
            &format!("send signal {sig} to the lock container"),
            signal(&self.docker, &self.id, &sig.to_string()),
        )
        .await
    }

    /// The nemesis's start of the server again (SIGHUP to the supervisor), sent once before
    /// the caller marks it running and then every `every` until `ready` is done: a start of a
    /// running server does nothing, and one sent while the supervisor was still ending the last
    /// stop is lost.
    pub(super) async fn start(&self) -> anyhow::Result<()> {
        self.to_supervisor(libc::SIGHUP).await
    }

    /// See [`Supervised::start`]: the start repeated until `ready` is done, `ready`'s answer.
    pub(super) async fn start_again_until(
        &self,
        every: Duration,
        ready: impl std::future::Future<Output = anyhow::Result<()>>,
    ) -> anyhow::Result<()> {
        let again = async {
            loop {
                tokio::time::sleep(every).await;
                let _ = self.to_supervisor(libc::SIGHUP).await;
            }
        };
        tokio::select! {
            r = ready => r,
            _ = again => unreachable!(),
        }
    }

    /// The nemesis's pause (`pause`) or resume of the server: SIGSTOP/SIGCONT to its own
    /// process (the supervisor keeps running), or the container frozen when the engine is not
    /// on this host. Says how.
    pub(super) async fn pause(&self, pause: bool) -> anyhow::Result<&'static str> {
        if let Some(pid) = self.server_pid() {
            let sig = if pause { libc::SIGSTOP } else { libc::SIGCONT };
            // SAFETY: kill(2) on a pid checked just now to be the server in the container.
            if unsafe { libc::kill(pid, sig) } != 0 {
                anyhow::bail!(
                    "signal {} (pid {pid}): {}",
                    self.server,
                    std::io::Error::last_os_error()
                );
            }
            return Ok(PAUSED_BY_SIGSTOP);
        }
        if self.host_pid.is_some() {
            anyhow::bail!("{} is not running in its container", self.server);
        }
        let what = format!(
            "{} the lock container",
            if pause { "freeze" } else { "thaw" }
        );
        match pause {
            true => bounded(&what, self.docker.pause_container(&self.id)).await?,
            false => bounded(&what, self.docker.unpause_container(&self.id)).await?,
        }
        Ok(PAUSED_BY_FREEZER)
    }

    /// The nemesis's stop through the supervisor: SIGUSR1 (it sends the server SIGTERM) or
    /// SIGUSR2 (SIGKILL: a crash, and a `kill`), after a SIGCONT so a paused server acts on it.
    /// When the server's pid is known, returns once it has exited (true); else at once (false),
    /// and the caller waits until the server no longer answers.
    pub(super) async fn stop(&self, mode: StopMode) -> anyhow::Result<bool> {
        self.stop_with(mode, None).await
    }

    /// [`Supervised::stop`], and `direct` sent to the server itself right after the
    /// supervisor's signal (chaos-postgres takes it: `DIRECT_LABEL`), so the stop lands at this
    /// call rather than when the supervisor's shell relays it.
    pub(super) async fn stop_with(
        &self,
        mode: StopMode,
        direct: Option<i32>,
    ) -> anyhow::Result<bool> {
        let sig = mode.supervisor_signal();
        let server = self.server_pid();
        if let Some(pid) = server {
            // SAFETY: as in `pause`.
            unsafe { libc::kill(pid, libc::SIGCONT) };
        } else {
            // A frozen container acts on nothing; unfreezing one that is not frozen fails.
            let _ =
                tokio::time::timeout(CALL_TIMEOUT, self.docker.unpause_container(&self.id)).await;
        }
        self.to_supervisor(sig).await?;
        if let (Some(pid), Some(d)) = (server, direct) {
            // SAFETY: as in `pause`; the supervisor has counted its stop by now.
            unsafe { libc::kill(pid, d) };
        }
        let Some(pid) = server else {
            return Ok(false);
        };
        let began = Instant::now();
        let mut sent = Instant::now();
        while crate::procs::running(pid) {
            if sent.elapsed() > RESIGNAL {
                let _ = self.to_supervisor(sig).await;
                sent = Instant::now();
            }
            if began.elapsed() > STOP_TIMEOUT {
                anyhow::bail!(
                    "{} (pid {pid}) still runs {} s after the stop signal",
                    self.server,
                    STOP_TIMEOUT.as_secs()
                );
            }
            tokio::time::sleep(Duration::from_micros(500)).await;
        }
        Ok(true)
    }
}
