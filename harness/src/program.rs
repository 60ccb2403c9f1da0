//! How a program under test (a mover, a watcher) says it is ready and what the supervisor does when it exits: settings every system's section shares (`scenario` re-exports them).

use serde::{Deserialize, Serialize};

/// How a user's program says "connected, ready" (the reference programs always read their gate).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize, clap::ValueEnum)]
#[serde(rename_all = "kebab-case")]
pub enum Ready {
    /// A shell reads the gate, then execs the command: the clock starts before it does.
    #[default]
    Exec,
    /// The command reads one line from the fifo `CHAOS_GATE` once connected.
    Gate,
}

/// The supervisor's restart policy for programs that exit on their own.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize, clap::ValueEnum)]
#[serde(rename_all = "kebab-case")]
pub enum Restart {
    /// Restarted after `restart_delay_s` when it exits non-zero or by a signal the nemesis did
    /// not send (systemd's `Restart=on-failure`).
    #[default]
    OnFailure,
    /// Never restarted (only a nemesis kill with a duration restarts it).
    Never,
}

/// A `--mover-cmd` or `--watcher-cmd` that runs here (the process backend): its program looked
/// up now, in the harness's own directory and PATH, so that a typo is refused before any
/// database starts (the start gate's shell looks again where the program runs, which is all a
/// container can have). A line whose program only the shell can tell is let through.
pub fn check_on_path(flag: &str, line: &str) -> anyhow::Result<()> {
    use std::os::unix::fs::PermissionsExt;
    let Some(program) = crate::backend::gate::program_of(line) else {
        return Ok(());
    };
    let runnable = |p: &std::path::Path| {
        std::fs::metadata(p).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
    };
    let found = if program.contains('/') {
        let p = std::path::Path::new(&program);
        if !p.exists() {
            anyhow::bail!("{flag}: {program}: no such file (from {}); give a path that exists or a program on PATH; nothing was started", std::env::current_dir().map(|d| d.display().to_string()).unwrap_or_default());
        }
        runnable(p)
    } else {
        let path = std::env::var_os("PATH").unwrap_or_default();
        if !std::env::split_paths(&path).any(|d| runnable(&d.join(&program))) {
            anyhow::bail!("{flag}: {program}: not found on PATH; give its path (./{program}) or install it; nothing was started");
        }
        true
    };
    if !found {
        anyhow::bail!("{flag}: {program}: not an executable file (chmod +x {program}, or run it through its interpreter: 'sh {program}'); nothing was started");
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::check_on_path;

    #[test]
    fn a_program_that_is_not_there_is_refused_before_anything_starts() {
        let e = check_on_path("--mover-cmd", "/nonexistent/bin --fast").unwrap_err();
        assert!(
            e.to_string()
                .starts_with("--mover-cmd: /nonexistent/bin: no such file"),
            "{e}"
        );
        let e = check_on_path("--watcher-cmd", "no-such-watcher-9f3 -v").unwrap_err();
        assert!(e.to_string().contains("not found on PATH"), "{e}");
        let e = check_on_path("--mover-cmd", "/etc/passwd").unwrap_err();
        assert!(e.to_string().contains("not an executable file"), "{e}");
        assert!(check_on_path("--mover-cmd", "sh -c 'exit 1'").is_ok());
        assert!(check_on_path("--mover-cmd", "A=1 /bin/sh -c true").is_ok());
        assert!(
            check_on_path("--mover-cmd", "$HOME/mover").is_ok(),
            "only the shell can tell"
        );
    }
}
