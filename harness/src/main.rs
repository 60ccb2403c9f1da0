//! `chaos`: the command line. Flags are parsed once into validated options; exit codes 0 valid, 1 invalid, 2 unknown, 3 the harness failed.

use chaos_harness::{bench, check, install, nightly, run, scenario, shrink, sweep, up, values};
use clap::{Parser, Subcommand};
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

#[derive(Parser)]
#[command(
    name = "chaos",
    version,
    about = "Fault injection for leases and fencing: what happens to your data when two processes both believe they are in charge."
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(clap::Args, Debug, Clone)]
struct RunArgs {
    /// Scenario name (scenarios/NAME.toml) or path to a TOML file.
    #[arg(required_unless_present = "replay")]
    scenario: Option<String>,
    /// Run a stored run again exactly: its resolved scenario, seed, schedule (generated faults
    /// included), mover settings and backend, from DIR/config.json.
    #[arg(long, value_name = "DIR", conflicts_with = "scenario")]
    replay: Option<PathBuf>,
    /// Seed for everything random (overrides the scenario's).
    #[arg(long, value_parser = values::seed, allow_hyphen_values = true)]
    seed: Option<u64>,
    #[command(flatten)]
    sut: run::SutArgs,
    /// Exit 0 when the verdict is this one, 1 when it is not.
    #[arg(long, value_enum)]
    expect: Option<values::Expect>,
    /// Where run directories go.
    #[arg(long, default_value = "results")]
    results: PathBuf,
    /// Print only the verdict line.
    #[arg(long, short)]
    quiet: bool,
}

#[derive(Subcommand)]
enum Command {
    /// Run a scenario end to end and judge it.
    Run(RunArgs),
    /// Re-check a stored run directory (no database needed).
    Check {
        /// A run directory, e.g. results/latest.
        dir: PathBuf,
        /// Exit 0 when the verdict is this one, 1 when it is not.
        #[arg(long, value_enum)]
        expect: Option<values::Expect>,
        /// Duplicated rows make the run invalid (default: as the run was judged, see its run.json); `--strict-duplicates false` reports them as cleanup work.
        #[arg(long, num_args = 0..=1, default_missing_value = "true", value_name = "BOOL")]
        strict_duplicates: Option<bool>,
        /// Print only the verdict line.
        #[arg(long, short)]
        quiet: bool,
    },
    /// A CI campaign: the listed scenarios and seeded generated schedules within a budget, with junit.xml, replay commands and slices for a CI matrix (`chaos nightly merge` joins them).
    Nightly(nightly::NightlyArgs),
    /// Cut a failing run's schedule down to the smallest one that still fails the same way.
    Shrink(shrink::ShrinkArgs),
    /// Run a scenario for several lock services, fencing settings and lease durations: the decision table (false expiries, vacancy, loss, stale writes, the lease to choose).
    Sweep(sweep::SweepArgs),
    /// Start a cluster (routing + shards + proxies) for manual poking; prints connection strings, runs until Ctrl-C or `chaos down`.
    Up(up::UpArgs),
    /// Stop the cluster `chaos up` started.
    Down(up::DownArgs),
    /// Install a scenario's schema, plan, seeded data and links on databases and a Toxiproxy that something else runs (docker-compose.yml's init service).
    Install(install::InstallArgs),
    /// List the scenarios in scenarios/.
    List,
    /// Serve the Toxiproxy HTTP API (standalone).
    Proxy {
        /// Address for the API.
        #[arg(long, default_value = "127.0.0.1:8474")]
        listen: std::net::SocketAddr,
        /// Also tell a harness what the box-to-shard links' servers say, for its triggers (the docker backend's proxy container).
        #[arg(long)]
        events: Option<std::net::SocketAddr>,
    },
    /// Measure the harness: cluster start/stop, proxy overhead, checker throughput.
    Bench(bench::BenchArgs),
}

/// The run `chaos run` was asked for: a scenario with overrides, or a stored run replayed.
fn run_options(a: &RunArgs) -> anyhow::Result<run::RunOptions> {
    let mut opts = match &a.replay {
        Some(dir) => {
            if a.seed.is_some() || a.sut.changes_the_scenario() {
                anyhow::bail!("--replay runs the stored run as it was: give only --results, --quiet, --expect, --backend or --toxiproxy with it");
            }
            let stored = run::replay(dir, a.sut.backend, a.sut.toxiproxy.clone())?;
            eprintln!("chaos: replaying {}", dir.display());
            stored
        }
        None => a
            .sut
            .options(a.scenario.as_deref().unwrap_or_default(), a.seed),
    };
    opts.results = a.results.clone();
    opts.quiet = a.quiet;
    Ok(opts)
}

async fn main_inner(cli: Cli) -> anyhow::Result<u8> {
    match cli.command {
        Command::Run(a) => {
            let opts = run_options(&a)?;
            let outcome = run::run(&opts).await?;
            let code = run::exit_code(outcome.verdict.valid, a.expect.map(Into::into));
            let name = opts
                .prepared
                .as_ref()
                .map_or(opts.scenario.as_str(), |s| s.file.name.as_str());
            println!(
                "{name}: {:?} (exit {code}) {}",
                outcome.verdict.valid,
                outcome.dir.display()
            );
            Ok(code)
        }
        Command::Check {
            dir,
            expect,
            strict_duplicates,
            quiet,
        } => {
            // The check is CPU-bound: on a blocking thread, so that a signal is seen at once.
            let shown = dir.clone();
            let verdict = tokio::task::spawn_blocking(move || {
                check::check_dir(
                    &dir,
                    &check::CheckOptions {
                        extra: None,
                        quiet,
                        strict_duplicates,
                    },
                )
            })
            .await??;
            let code = run::exit_code(verdict.valid, expect.map(Into::into));
            let why = match verdict.reasons.as_slice() {
                [] => String::new(),
                reasons => format!(": {}", reasons.join("; ")),
            };
            println!(
                "{}: {:?} (exit {code}){why}",
                shown.display(),
                verdict.valid
            );
            Ok(code)
        }
        Command::Nightly(a) => nightly::nightly(a).await,
        Command::Shrink(a) => shrink::shrink(a).await,
        Command::Sweep(a) => sweep::sweep(a).await,
        Command::Up(a) => up::up(a).await,
        Command::Down(a) => up::down(a).await,
        Command::Install(a) => install::install(a).await,
        Command::List => {
            let all = scenario::load::list();
            if all.is_empty() {
                println!("no scenarios in {}", scenario::scenarios_dir().display());
            }
            for line in list_lines(&all) {
                println!("{line}");
            }
            Ok(0)
        }
        Command::Proxy { listen, events } => {
            if let Err(e) = std::net::TcpListener::bind(listen) {
                anyhow::bail!("{}", busy_listen(listen, &e));
            }
            let server = chaos_proxy::start_on_own_threads(listen, 2)?;
            eprintln!("chaos proxy: Toxiproxy API on http://{listen} (Ctrl-C to stop)");
            let events = match events {
                Some(addr) => {
                    let listener = tokio::net::TcpListener::bind(addr)
                        .await
                        .map_err(|e| anyhow::anyhow!("{}", busy_listen(addr, &e)))?;
                    eprintln!("chaos proxy: link events on {addr}");
                    tokio::spawn(chaos_harness::link_events::serve(listener, server.taps()))
                }
                None => tokio::spawn(std::future::pending::<anyhow::Result<()>>()),
            };
            let mut term =
                tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())?;
            tokio::select! {
                r = events => r??,
                _ = tokio::signal::ctrl_c() => {}
                _ = term.recv() => {}
            }
            server.shutdown().await;
            Ok(0)
        }
        Command::Bench(a) => bench::bench(a).await,
    }
}

fn main() -> ExitCode {
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        Err(e) => return usage_error(e),
    };
    // What a harness killed with SIGKILL left (its ledger names it, its pid is gone) is removed
    // before anything else, and said in one line.
    if let Some(line) = chaos_harness::reap::dead() {
        eprintln!("{line}");
    }
    // On every way out, the panic's unwinding included, whatever this process still holds
    // (containers, networks, data directories, the docker socket) is removed: after the
    // runtime is shut down, so nothing can start anything new meanwhile.
    let _on_exit = RemoveOwnOnExit;
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("chaos: error: cannot start the async runtime: {e}");
            return ExitCode::from(3);
        }
    };
    let outcome = runtime.block_on(main_signalled(cli));
    // Tasks still going (an interrupted run's nemesis, supervisor, followers) are dropped here,
    // and with them what they own.
    runtime.shutdown_timeout(Duration::from_secs(10));
    chaos_harness::reap::own();
    match outcome {
        Ok(code) => ExitCode::from(code),
        Err(e) => {
            eprintln!("chaos: error: {}", chaos_harness::one_line(&e));
            ExitCode::from(3)
        }
    }
}

/// Removes what this process still holds when dropped (`reap::own`), the panic's unwinding
/// included.
struct RemoveOwnOnExit;

impl Drop for RemoveOwnOnExit {
    fn drop(&mut self) {
        chaos_harness::reap::own();
    }
}

/// The command, or its end on Ctrl-C or SIGTERM: the run's future is dropped, and every owner
/// stops what it started in `Drop`.
async fn main_signalled(cli: Cli) -> anyhow::Result<u8> {
    // Both handlers are installed before the command does anything: a signal in its first
    // moments is seen too (ctrl_c() would install its handler only when first polled).
    use tokio::signal::unix::{signal, SignalKind};
    let mut term = signal(SignalKind::terminate())
        .map_err(|e| anyhow::anyhow!("install the SIGTERM handler: {e}"))?;
    let mut int = signal(SignalKind::interrupt())
        .map_err(|e| anyhow::anyhow!("install the SIGINT handler: {e}"))?;
    // `chaos up` and `chaos proxy` end on Ctrl-C/SIGTERM by design, and stop what they hold themselves.
    let holds_until_signal = matches!(cli.command, Command::Up(_) | Command::Proxy { .. });
    let checking = match &cli.command {
        Command::Check { dir, .. } => Some(dir.clone()),
        _ => None,
    };
    let stopped = |how: &str| match &checking {
        Some(dir) => format!("{how}: stopped checking {}", dir.display()),
        None => format!("{how}: stopped every server and mover this run started"),
    };
    let result = if holds_until_signal {
        main_inner(cli).await
    } else {
        tokio::select! {
        r = main_inner(cli) => r,
        _ = int.recv() => {
            check::cancel();
            Err(anyhow::anyhow!(stopped("interrupted")))
        }
        _ = term.recv() => {
            check::cancel();
            Err(anyhow::anyhow!(stopped("terminated")))
        }
        }
    };
    if let (Err(e), Some(_)) = (&result, &checking) {
        // An interrupted check stops at its next chunk, but nothing of it needs waiting for:
        // report.html is written whole or not at all, and a check holds nothing to remove.
        eprintln!("chaos: error: {}", chaos_harness::one_line(e));
        std::process::exit(3);
    }
    result
}

/// `chaos list`'s lines: every description starts in one column, past the longest name.
fn list_lines(all: &[(String, String, PathBuf)]) -> Vec<String> {
    let width = all
        .iter()
        .map(|(n, ..)| n.chars().count())
        .max()
        .unwrap_or(0);
    all.iter()
        .map(|(name, desc, _)| format!("{name:<width$}  {desc}").trim_end().to_string())
        .collect()
}

/// Why `chaos proxy --listen ADDR` cannot listen, and who holds the address when that can be told.
fn busy_listen(listen: std::net::SocketAddr, e: &std::io::Error) -> String {
    if e.kind() != std::io::ErrorKind::AddrInUse {
        return format!("chaos proxy cannot listen on {listen}: {e}");
    }
    let holder = chaos_harness::ports::listener_of(listen.port())
        .map(|(pid, name)| format!(" (held by pid {pid}, {name})"))
        .unwrap_or_default();
    format!("{listen} is already in use{holder}: stop that process or pick another address with --listen")
}

/// `--help` and `--version` print as clap prints them (exit 0); any other parse error is a
/// mistake in the input: its first line, exit 3 (clap's own exit 2 would read as "unknown").
fn usage_error(e: clap::Error) -> ExitCode {
    use clap::error::ErrorKind;
    if matches!(
        e.kind(),
        ErrorKind::DisplayHelp
            | ErrorKind::DisplayVersion
            | ErrorKind::DisplayHelpOnMissingArgumentOrSubcommand
    ) {
        let _ = e.print();
        return ExitCode::from(
            if e.kind() == ErrorKind::DisplayHelpOnMissingArgumentOrSubcommand {
                3
            } else {
                0
            },
        );
    }
    let text = e.render().to_string();
    let first = text
        .lines()
        .map(str::trim)
        .find(|l| !l.is_empty())
        .unwrap_or("bad arguments");
    let first = first.strip_prefix("error: ").unwrap_or(first);
    // "the following required arguments were not provided:" names them on the next lines.
    let named: Vec<&str> = if first.ends_with(':') {
        text.lines()
            .skip_while(|l| !l.trim_end().ends_with(':'))
            .skip(1)
            .map(str::trim)
            .take_while(|l| !l.is_empty())
            .collect()
    } else {
        vec![]
    };
    let first = if named.is_empty() {
        first.to_string()
    } else {
        format!("{first} {}", named.join(", "))
    };
    // A bad choice says what the choices are, on the same line.
    let choices = text
        .lines()
        .map(str::trim)
        .find(|l| l.starts_with("[possible values:"))
        .map(|l| format!(" {l}"))
        .unwrap_or_default();
    eprintln!("chaos: error: {first}{choices} (try --help)");
    ExitCode::from(3)
}

#[cfg(test)]
mod tests {
    use super::list_lines;

    /// Names over 12 characters pushed their descriptions out of line (issue 33).
    #[test]
    fn chaos_list_aligns_every_description() {
        let row = |n: &str, d: &str| (n.to_string(), d.to_string(), std::path::PathBuf::new());
        let lines = list_lines(&[
            row("april", "the April night"),
            row("ten-objects-interleaved", "ten objects, interleaved"),
            row("wedged", ""),
        ]);
        let column = |l: &str, d: &str| l.find(d).unwrap();
        assert_eq!(
            column(&lines[0], "the April"),
            column(&lines[1], "ten objects,")
        );
        assert_eq!(lines[2], "wedged", "no trailing blanks");
    }
}
