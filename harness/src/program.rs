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

/// A section that runs a program under test (`[mover]`, `[failover]`): its own fields, then
/// the fields every such section has (a team's program in the reference one's place, how it
/// says it is ready, its supervision). `program_defaults!` builds it with their defaults.
macro_rules! program_section {
    ($(#[$attr:meta])* pub struct $name:ident {
        $($(#[$field_attr:meta])* pub $field:ident: $ty:ty,)*
    }) => {
        $(#[$attr])*
        pub struct $name {
            $($(#[$field_attr])* pub $field: $ty,)*
            /// A program following the protocol (docs/mover-protocol.md,
            /// docs/watcher-protocol.md) instead of the reference program.
            pub command: Option<String>,
            /// Extra arguments for the reference program.
            pub args: Vec<String>,
            /// How a `command` says it is ready: held by a shell before it starts (`exec`), or
            /// it reads `CHAOS_GATE` itself once connected (`gate`).
            pub ready: $crate::program::Ready,
            /// What the harness does when the program exits non-zero, as a supervisor would.
            pub restart: $crate::program::Restart,
            /// How long after such an exit it is started again, scenario seconds.
            pub restart_delay_s: f64,
            /// How long it may take to connect and wait at its gate, REAL seconds (a setup
            /// bound, not scenario time): past it the run is refused before the clock starts.
            pub ready_timeout_real_s: f64,
        }

        impl $name {
            /// The command line's program (`--mover-cmd`, `--watcher-cmd`), its readiness and
            /// its restart policy, where given, over the file's.
            pub fn override_program(
                &mut self,
                command: Option<&String>,
                ready: Option<$crate::program::Ready>,
                restart: Option<$crate::program::Restart>,
            ) {
                if let Some(c) = command {
                    self.command = Some(c.clone());
                }
                if let Some(r) = ready {
                    self.ready = r;
                }
                if let Some(r) = restart {
                    self.restart = r;
                }
            }
        }
    };
}
pub(crate) use program_section;

/// A `program_section!` struct with its own fields as given and the program's defaults: the
/// reference program, held by a shell, restarted 5 s after a failure, 30 real s to be ready.
macro_rules! program_defaults {
    ($name:ident { $($field:ident: $value:expr,)* }) => {
        $name {
            $($field: $value,)*
            command: None,
            args: vec![],
            ready: $crate::program::Ready::Exec,
            restart: $crate::program::Restart::OnFailure,
            restart_delay_s: 5.0,
            ready_timeout_real_s: 30.0,
        }
    };
}
pub(crate) use program_defaults;

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
