//! The start gate: movers are started before the scenario clock and held at a fifo, so the clock
//! starts with every box connected and waiting rather than with four processes (or containers)
//! still starting. The reference mover reads `CHAOS_GATE` itself after connecting to its
//! databases; a user's `--mover-cmd` is held by a shell that reads the gate before `exec`ing it.
//! A mover that cannot wait (it failed to connect and exited) is simply not waited for.

use std::fs::File;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// The environment variable naming a mover's gate.
pub const GATE_VAR: &str = chaos_workloads::mover::env::GATE;

/// The shell's first lines for a user's command: `$1` is the command's program (empty: not
/// checked), the rest the command. The program is looked up BEFORE the gate, in the mover's
/// own environment (its container on docker), so a typo exits 127 (126: not executable)
/// before the scenario clock starts instead of after.
macro_rules! check_program {
    () => {
        r#"p=$1; shift
case $p in
  "") ;;
  */*) if [ ! -e "$p" ]; then echo "chaos: cannot start $p: no such file" >&2; exit 127;
       elif [ -d "$p" ] || [ ! -x "$p" ]; then echo "chaos: cannot start $p: not an executable file" >&2; exit 126; fi ;;
  *) command -v "$p" >/dev/null 2>&1 || { echo "chaos: cannot start $p: not found on PATH" >&2; exit 127; } ;;
esac
"#
    };
}

/// The shell that holds a user's command at the gate (`[mover] ready = "exec"`), then lets it
/// be the main process: the clock starts before the program does. `CHAOS_GATE` is unset first
/// so a gate-aware program under it does not wait a second time.
pub const SHELL_HOLD: &str = concat!(
    check_program!(),
    r#"read go < "$CHAOS_GATE"; unset CHAOS_GATE; exec "$@""#
);

/// The shell for a command that reads its gate itself once connected (`ready = "gate"`):
/// checked, then run with `CHAOS_GATE` in its environment.
pub const SHELL_CHECK: &str = concat!(check_program!(), r#"exec "$@""#);

/// The program a `--mover-cmd` line runs, for [`SHELL_HOLD`] to look up: its first word after
/// any `NAME=value` assignments, unquoted. `None` (not checked) where the line starts with
/// something only the shell can tell (an expansion, a subshell, a redirection, a compound).
pub fn program_of(line: &str) -> Option<String> {
    split_program(line).map(|(_, word)| word)
}

/// The shell line that runs a `--mover-cmd` as the process itself: `exec` put before its
/// program, after any leading `NAME=value` assignments (`exec A=1 prog` is no command).
pub fn exec_line(line: &str) -> String {
    match split_program(line) {
        Some((at, _)) => format!("{}exec {}", &line[..at], &line[at..]),
        None => format!("exec {line}"),
    }
}

/// Where the program word starts (a byte offset) and the word, unquoted.
fn split_program(line: &str) -> Option<(usize, String)> {
    let mut word = String::new();
    let mut in_word = false;
    let mut start = 0;
    let mut chars = line.char_indices();
    while let Some((i, c)) = chars.next() {
        if !in_word && !c.is_whitespace() {
            start = i;
        }
        match c {
            '\'' => {
                in_word = true;
                for (_, q) in chars.by_ref() {
                    if q == '\'' {
                        break;
                    }
                    word.push(q);
                }
            }
            '"' => {
                in_word = true;
                while let Some((_, q)) = chars.next() {
                    match q {
                        '"' => break,
                        '$' | '`' => return None,
                        '\\' => word.extend(chars.next().map(|(_, c)| c)),
                        _ => word.push(q),
                    }
                }
            }
            '\\' => {
                in_word = true;
                word.extend(chars.next().map(|(_, c)| c));
            }
            '$' | '`' | '(' | ')' | '<' | '>' | '{' | '}' | '*' | '?' | '[' | '~' => return None,
            ';' | '&' | '|' => break,
            c if c.is_whitespace() => {
                if in_word {
                    let w = std::mem::take(&mut word);
                    if !is_assignment(&w) {
                        return Some((start, w));
                    }
                    in_word = false;
                }
            }
            c => {
                in_word = true;
                word.push(c);
            }
        }
    }
    (in_word && !is_assignment(&word)).then_some((start, word))
}

/// `NAME=value`, as the shell reads a word before the command.
fn is_assignment(word: &str) -> bool {
    word.split_once('=').is_some_and(|(name, _)| {
        !name.is_empty()
            && !name.starts_with(|c: char| c.is_ascii_digit())
            && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
    })
}

/// A mover that exited before it waited at its gate: which box, its exit status, and the
/// last line it wrote to stderr (its log).
#[derive(Debug, Clone)]
pub struct NotStarted {
    pub box_name: String,
    /// None: killed by a signal, or the status could not be read.
    pub code: Option<i32>,
    pub log_path: PathBuf,
    /// It did not exit but never waited at its gate within this bound.
    pub never_ready: Option<Duration>,
}

impl NotStarted {
    fn line(&self) -> String {
        let status = self
            .code
            .map_or("it was killed by a signal".to_string(), |c| {
                format!("exit {c}")
            });
        let last = last_line(&self.log_path)
            .map(|l| format!(": {l}"))
            .unwrap_or_default();
        format!(
            "{}: {} could not start ({status}){last} (log: {})",
            self.box_name,
            role(&self.box_name),
            self.log_path.display()
        )
    }
}

/// What runs under a name: the failover system's watcher, or a box's mover.
pub fn role(box_name: &str) -> &'static str {
    if box_name == chaos_history::failover_names::WATCHER {
        "the watcher"
    } else {
        "the mover"
    }
}

/// The last non-empty line of a log (its last 8 KiB), trimmed to 300 characters.
pub fn last_line(path: &Path) -> Option<String> {
    use std::io::{Read, Seek, SeekFrom};
    let mut f = File::open(path).ok()?;
    let len = f.metadata().ok()?.len();
    f.seek(SeekFrom::Start(len.saturating_sub(8192))).ok()?;
    let mut bytes = Vec::new();
    f.read_to_end(&mut bytes).ok()?;
    let text = String::from_utf8_lossy(&bytes);
    let line = text.lines().map(str::trim).rfind(|l| !l.is_empty())?;
    Some(line.chars().take(300).collect())
}

/// Before the scenario clock: the run cannot go on when a mover could not be executed
/// (126, 127: the same command runs on every box) or when no box's mover reached its gate.
/// A setup mistake is the harness's failure (exit 3), never a verdict about the data.
pub fn check_started(not_started: &[NotStarted], boxes: usize) -> anyhow::Result<()> {
    if let Some((n, limit)) = not_started
        .iter()
        .find_map(|n| n.never_ready.map(|l| (n, l)))
    {
        let (flag, doc) = match role(&n.box_name) {
            "the watcher" => ("--watcher-ready", "docs/watcher-protocol.md"),
            _ => ("--mover-ready", "docs/mover-protocol.md"),
        };
        anyhow::bail!(
            "{}: {} never said it was ready: it did not read its start gate CHAOS_GATE within {} s (with {flag} gate it reads one line from that fifo once connected; see {doc}) (log: {}); nothing was run or judged",
            n.box_name,
            role(&n.box_name),
            limit.as_secs_f64(),
            n.log_path.display()
        );
    }
    let cannot_exec = not_started
        .iter()
        .find(|n| matches!(n.code, Some(126 | 127)));
    let first = match cannot_exec {
        Some(n) => n,
        None if boxes > 0 && not_started.len() >= boxes => &not_started[0],
        None => return Ok(()),
    };
    let more = match not_started.len() {
        0 | 1 => String::new(),
        n => format!(" ({} of {boxes} boxes exited before their start gate)", n),
    };
    anyhow::bail!("{}{more}; nothing was run or judged", first.line())
}

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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_program_of_a_mover_command() {
        assert_eq!(
            program_of("/nonexistent/bin").as_deref(),
            Some("/nonexistent/bin")
        );
        assert_eq!(
            program_of("python3 movers/mover.py --pace 2").as_deref(),
            Some("python3")
        );
        assert_eq!(
            program_of("PYTHONUNBUFFERED=1 X='a b' python3 m.py").as_deref(),
            Some("python3")
        );
        assert_eq!(
            program_of("'/opt/my mover/run' -v").as_deref(),
            Some("/opt/my mover/run")
        );
        assert_eq!(program_of("cd /tmp && ./m").as_deref(), Some("cd"));
        assert_eq!(program_of("$HOME/bin/m"), None);
        assert_eq!(program_of("(cd x; m)"), None);
        assert_eq!(program_of("FOO=1"), None);
        assert_eq!(program_of("  "), None);
    }

    #[test]
    fn a_mover_command_runs_as_the_process_itself() {
        assert_eq!(exec_line("python3 m.py"), "exec python3 m.py");
        assert_eq!(
            exec_line("FENCING=on X='a b' ./m.sh --x"),
            "FENCING=on X='a b' exec ./m.sh --x"
        );
        assert_eq!(exec_line("$HOME/m"), "exec $HOME/m");
        let out = std::process::Command::new("/bin/sh")
            .arg("-c")
            .arg(exec_line("GREETING=hello sh -c 'echo $GREETING'"))
            .output()
            .unwrap();
        assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), "hello");
    }

    /// The gate's shell: a program that is not there exits 127 before the gate, with one line.
    #[test]
    fn the_hold_refuses_a_missing_program_before_the_gate() {
        let out = std::process::Command::new("/bin/sh")
            .args([
                "-c",
                SHELL_HOLD,
                "chaos-gate",
                "/nonexistent/bin",
                "/bin/sh",
                "-c",
            ])
            .arg("exec /nonexistent/bin")
            .env(GATE_VAR, "/nonexistent/gate")
            .output()
            .expect("sh runs");
        assert_eq!(out.status.code(), Some(127));
        assert_eq!(
            String::from_utf8_lossy(&out.stderr).trim(),
            "chaos: cannot start /nonexistent/bin: no such file"
        );
        let out = std::process::Command::new("/bin/sh")
            .args([
                "-c",
                SHELL_HOLD,
                "chaos-gate",
                "no-such-mover-xyz",
                "/bin/sh",
                "-c",
            ])
            .arg("exec no-such-mover-xyz")
            .env(GATE_VAR, "/nonexistent/gate")
            .output()
            .expect("sh runs");
        assert_eq!(out.status.code(), Some(127));
        let out = std::process::Command::new("/bin/sh")
            .args(["-c", SHELL_HOLD, "chaos-gate", "/etc", "/bin/sh", "-c"])
            .arg("exec /etc")
            .env(GATE_VAR, "/nonexistent/gate")
            .output()
            .expect("sh runs");
        assert_eq!(out.status.code(), Some(126));
    }

    #[test]
    fn a_setup_mistake_stops_the_run_and_a_lone_early_exit_does_not() {
        let dir = std::env::temp_dir().join(format!("chaos-gate-test-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let log = dir.join("box-1.log");
        std::fs::write(
            &log,
            "starting\nTraceback...\nImportError: no module named psycopg\n\n",
        )
        .unwrap();
        let n = |b: &str, code| NotStarted {
            box_name: b.into(),
            code,
            log_path: log.clone(),
            never_ready: None,
        };
        assert!(check_started(&[n("box-3", Some(1))], 4).is_ok());
        let e = check_started(&[n("box-1", Some(127))], 4)
            .unwrap_err()
            .to_string();
        assert!(e.starts_with("box-1: the mover could not start (exit 127): ImportError: no module named psycopg (log: "), "{e}");
        let all: Vec<_> = (1..=4).map(|i| n(&format!("box-{i}"), Some(1))).collect();
        let e = check_started(&all, 4).unwrap_err().to_string();
        assert!(
            e.contains("(4 of 4 boxes exited before their start gate); nothing was run or judged"),
            "{e}"
        );
        // The failover system's watcher is named for what it is.
        let e = check_started(&[n("watcher", Some(127))], 1)
            .unwrap_err()
            .to_string();
        assert!(
            e.starts_with("watcher: the watcher could not start (exit 127)"),
            "{e}"
        );
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
