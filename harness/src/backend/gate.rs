//! The start gate: movers are started before the scenario clock and held at a fifo, so the clock
//! starts with every box connected and waiting rather than with four processes (or containers)
//! still starting. The reference mover reads `CHAOS_GATE` itself after connecting to its
//! databases; a user's `--mover-cmd` is held by a shell that reads the gate before `exec`ing it.
//! A mover that cannot wait (it failed to connect and exited) is simply not waited for.

use std::fs::File;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// The environment variable naming a mover's gate.
pub const GATE_VAR: &str = "CHAOS_GATE";

/// The shell line that holds a user's command at the gate, then lets it be the main process.
/// `CHAOS_GATE` is unset first so a gate-aware program under it does not wait a second time.
pub const SHELL_HOLD: &str = r#"read go < "$CHAOS_GATE"; unset CHAOS_GATE; exec "$@""#;

/// One mover's gate: a fifo in the run's logs folder.
pub struct Gate {
    path: PathBuf,
    /// The write end, held once the mover has the gate open for reading.
    writer: Option<File>,
}

impl Gate {
    /// Make the fifo `.<box>.gate` in `dir`.
    pub fn create(dir: &Path, box_name: &str) -> anyhow::Result<Gate> {
        let path = dir.join(format!(".{box_name}.gate"));
        let _ = std::fs::remove_file(&path);
        let c = std::ffi::CString::new(path.display().to_string())?;
        // SAFETY: a valid NUL-terminated path; mkfifo only creates a file.
        if unsafe { libc::mkfifo(c.as_ptr(), 0o600) } != 0 {
            anyhow::bail!(
                "mkfifo {}: {}",
                path.display(),
                std::io::Error::last_os_error()
            );
        }
        Ok(Gate { path, writer: None })
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Open the write end if the mover has the gate open for reading (non-blocking:
    /// opening a fifo for writing fails with ENXIO until its reader is there).
    fn try_open(&mut self) -> bool {
        use std::os::unix::fs::OpenOptionsExt;
        if self.writer.is_some() {
            return true;
        }
        match std::fs::OpenOptions::new()
            .write(true)
            .custom_flags(libc::O_NONBLOCK)
            .open(&self.path)
        {
            Ok(f) => {
                self.writer = Some(f);
                true
            }
            Err(_) => false,
        }
    }

    /// Wait until the mover waits at the gate, it is `gone()` (exited first), or `limit` passes.
    pub async fn wait_reader(&mut self, limit: Duration, mut gone: impl FnMut() -> bool) -> Waited {
        let began = Instant::now();
        loop {
            if self.try_open() {
                return Waited::Ready;
            }
            if gone() {
                return Waited::Gone;
            }
            if began.elapsed() > limit {
                return Waited::TimedOut;
            }
            tokio::time::sleep(Duration::from_millis(2)).await;
        }
    }

    /// Let the mover go: one line into the gate. A mover that is gone is not an error here
    /// (its exit is recorded where every exit is); one that never came within `limit` is.
    pub async fn release(
        mut self,
        box_name: &str,
        limit: Duration,
        gone: impl FnMut() -> bool,
    ) -> anyhow::Result<()> {
        use std::io::Write;
        match self.wait_reader(limit, gone).await {
            Waited::Ready => {
                if let Some(mut w) = self.writer.take() {
                    // EPIPE: the mover exited between opening and reading; its exit tells the rest.
                    let _ = w.write_all(b"go\n");
                }
                Ok(())
            }
            Waited::Gone => Ok(()),
            Waited::TimedOut => anyhow::bail!(
                "{box_name}: it never waited at its start gate {} within {} s: see logs/{box_name}.log",
                self.path.display(),
                limit.as_secs()
            ),
        }
    }
}

/// How a wait at the gate ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Waited {
    Ready,
    Gone,
    TimedOut,
}

impl Drop for Gate {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.path);
    }
}
