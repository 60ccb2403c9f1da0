//! `chaos`: the command line. Flags are parsed once into validated options; exit codes 0 valid, 1 invalid, 2 unknown, 3 the harness failed.

use chaos_checkers::Validity;
use chaos_harness::{backend, bench, check, run, scenario, up, values};
use clap::{Parser, Subcommand, ValueEnum};
use std::path::PathBuf;
use std::process::ExitCode;

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

#[derive(Clone, Copy, ValueEnum, PartialEq, Eq, Debug)]
enum Expect {
    Valid,
    Invalid,
    Unknown,
}

impl From<Expect> for Validity {
    fn from(e: Expect) -> Validity {
        match e {
            Expect::Valid => Validity::Valid,
            Expect::Invalid => Validity::Invalid,
            Expect::Unknown => Validity::Unknown,
        }
    }
}

#[derive(clap::Args, Debug, Clone)]
struct RunArgs {
    /// Scenario name (scenarios/NAME.toml) or path to a TOML file.
    scenario: String,
    /// Fencing tokens checked by the shards: off (April) or on.
    #[arg(long, value_enum)]
    fencing: Option<scenario::Fencing>,
    /// What the holder does when a renewal cannot reach the routing db.
    #[arg(long, value_enum)]
    on_renew_failure: Option<scenario::OnRenewFailure>,
    /// What the holder does when a renewal shows it lost the claim.
    #[arg(long, value_enum)]
    on_lost: Option<scenario::OnLost>,
    /// The "local check" variant: check the lease's expiry on the mover's own clock before each write.
    #[arg(long)]
    check_expiry_before_write: bool,
    /// The reference mover renews the claim from a task of its own, every third of a lease, whatever its work is doing.
    #[arg(long)]
    renew_on_thread: bool,
    /// lease (claim with expiry) or unique (lesson 007's at-most-once insert).
    #[arg(long, value_enum)]
    election: Option<scenario::Election>,
    /// Lease length in scenario time, e.g. 60s, 5s, 1m.
    #[arg(long, value_parser = values::lease_s, allow_hyphen_values = true)]
    lease: Option<f64>,
    /// Seed for everything random (overrides the scenario's).
    #[arg(long, value_parser = values::seed, allow_hyphen_values = true)]
    seed: Option<u64>,
    /// Run this program (following the mover protocol, docs/mover-protocol.md) instead of the reference mover.
    #[arg(long)]
    mover_cmd: Option<String>,
    /// How the --mover-cmd says it is ready: exec (a shell holds it before it starts) or gate (it reads CHAOS_GATE itself once connected).
    #[arg(long, value_enum)]
    mover_ready: Option<scenario::Ready>,
    /// Restart a mover that exits non-zero, as a supervisor would (on-failure), or never.
    #[arg(long, value_enum)]
    restart: Option<scenario::Restart>,
    /// Where the databases and movers run.
    #[arg(long, value_enum, default_value = "process")]
    backend: backend::BackendKind,
    /// Real milliseconds per scenario second (default: the scenario's, 10).
    #[arg(long, value_parser = values::time_scale_ms, allow_hyphen_values = true)]
    time_scale_ms: Option<f64>,
    /// Seeded readings per turbine (default: the scenario's; 15768 is 1/1000 of a year at 2 s).
    #[arg(long, value_parser = values::count_u32, allow_hyphen_values = true)]
    rows_per_turbine: Option<u32>,
    /// Exit 0 when the verdict is this one, 1 when it is not.
    #[arg(long, value_enum)]
    expect: Option<Expect>,
    /// Duplicated rows make the run invalid (default: reported as cleanup work).
    #[arg(long)]
    strict_duplicates: bool,
    /// Use the Toxiproxy server at HOST:PORT instead of the embedded one.
    #[arg(long)]
    toxiproxy: Option<String>,
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
        expect: Option<Expect>,
        /// Duplicated rows make the run invalid (default: as the run was judged, see its run.json); `--strict-duplicates false` reports them as cleanup work.
        #[arg(long, num_args = 0..=1, default_missing_value = "true", value_name = "BOOL")]
        strict_duplicates: Option<bool>,
        /// Print only the verdict line.
        #[arg(long, short)]
        quiet: bool,
    },
    /// Run a scenario for several lease durations and tabulate false expiries, vacancy and loss.
    Sweep(bench::SweepArgs),
    /// Start a cluster (routing + shards + proxies) for manual poking; prints connection strings, runs until Ctrl-C or `chaos down`.
    Up(up::UpArgs),
    /// Stop the cluster `chaos up` started.
    Down(up::DownArgs),
    /// List the scenarios in scenarios/.
    List,
    /// Serve the Toxiproxy HTTP API (standalone).
    Proxy {
        /// Address for the API.
        #[arg(long, default_value = "127.0.0.1:8474")]
        listen: std::net::SocketAddr,
    },
    /// Measure the harness: cluster start/stop, proxy overhead, checker throughput.
    Bench(bench::BenchArgs),
}

fn run_options(a: &RunArgs) -> run::RunOptions {
    run::RunOptions {
        scenario: a.scenario.clone(),
        fencing: a.fencing,
        on_renew_failure: a.on_renew_failure,
        on_lost: a.on_lost,
        check_expiry_before_write: a.check_expiry_before_write,
        renew_on_thread: a.renew_on_thread,
        election: a.election,
        lease_s: a.lease,
        seed: a.seed,
        mover_cmd: a.mover_cmd.clone(),
        time_scale_ms: a.time_scale_ms,
        rows_per_turbine: a.rows_per_turbine,
        strict_duplicates: a.strict_duplicates,
        toxiproxy: a.toxiproxy.clone(),
        results: a.results.clone(),
        quiet: a.quiet,
        extra_faults: vec![],
        label: None,
        backend: Some(a.backend),
        mover_ready: a.mover_ready,
        restart: a.restart,
    }
}

async fn main_inner(cli: Cli) -> anyhow::Result<u8> {
    match cli.command {
        Command::Run(a) => {
            let opts = run_options(&a);
            let outcome = run::run(&opts).await?;
            let code = run::exit_code(outcome.verdict.valid, a.expect.map(Into::into));
            println!(
                "{}: {:?} (exit {code}) {}",
                a.scenario,
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
        Command::Sweep(a) => bench::sweep(a).await,
        Command::Up(a) => up::up(a).await,
        Command::Down(a) => up::down(a).await,
        Command::List => {
            let all = scenario::list();
            if all.is_empty() {
                println!("no scenarios in {}", scenario::scenarios_dir().display());
            }
            for (name, desc, _) in all {
                println!("{name:<12} {desc}");
            }
            Ok(0)
        }
        Command::Proxy { listen } => {
            if let Err(e) = std::net::TcpListener::bind(listen) {
                anyhow::bail!("{}", busy_listen(listen, &e));
            }
            eprintln!("chaos proxy: Toxiproxy API on http://{listen} (Ctrl-C to stop)");
            let mut term =
                tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())?;
            tokio::select! {
                r = chaos_proxy::serve_forever(listen) => r?,
                _ = tokio::signal::ctrl_c() => {}
                _ = term.recv() => {}
            }
            Ok(0)
        }
        Command::Bench(a) => bench::bench(a).await,
    }
}

#[tokio::main]
async fn main() -> ExitCode {
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        Err(e) => return usage_error(e),
    };
    // Ctrl-C or SIGTERM drops the whole run: every server, proxy and mover is
    // stopped by its owner's Drop before the process exits.
    let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
        .expect("install SIGTERM handler");
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
        _ = tokio::signal::ctrl_c() => {
            check::cancel();
            Err(anyhow::anyhow!(stopped("interrupted")))
        }
        _ = term.recv() => {
            check::cancel();
            Err(anyhow::anyhow!(stopped("terminated")))
        }
        }
    };
    match result {
        Ok(code) => ExitCode::from(code),
        Err(e) => {
            eprintln!("chaos: error: {}", one_line(&e));
            if checking.is_some() {
                // An interrupted check stops at its next chunk, but nothing of it needs
                // waiting for: report.html is written whole or not at all.
                std::process::exit(3);
            }
            ExitCode::from(3)
        }
    }
}

/// An error and its causes on one line, each cause once. Each level should say only what
/// it adds (an error that prints its cause does not also chain it); where one still quotes
/// its cause, the cause is not printed again.
fn one_line(e: &anyhow::Error) -> String {
    let mut line = String::new();
    for cause in e.chain().map(|c| c.to_string()) {
        if line.contains(cause.as_str()) {
            continue;
        }
        if !line.is_empty() {
            line.push_str(": ");
        }
        line.push_str(&cause);
    }
    line.replace('\n', " ")
}

/// Why `chaos proxy --listen ADDR` cannot listen, and who holds the address when that can be told.
fn busy_listen(listen: std::net::SocketAddr, e: &std::io::Error) -> String {
    if e.kind() != std::io::ErrorKind::AddrInUse {
        return format!("chaos proxy cannot listen on {listen}: {e}");
    }
    let holder = chaos_harness::procs::listener_of(listen.port())
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
