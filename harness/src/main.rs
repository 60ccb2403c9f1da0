//! `chaos`: the command line. Flags are parsed once into validated options; exit codes 0 valid, 1 invalid, 2 unknown, 3 the harness failed.

use chaos_checkers::Validity;
use chaos_harness::sweep::parse_duration_s;
use chaos_harness::{backend, bench, check, run, scenario, up};
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
    #[arg(long, value_parser = ["off", "on"])]
    fencing: Option<String>,
    /// What the holder does when a renewal cannot reach the routing db.
    #[arg(long, value_parser = ["carry-on", "stop"])]
    on_renew_failure: Option<String>,
    /// What the holder does when a renewal shows it lost the claim.
    #[arg(long, value_parser = ["tidy-up", "stop"])]
    on_lost: Option<String>,
    /// The "local check" variant: check the lease's expiry on the mover's own clock before each write.
    #[arg(long)]
    check_expiry_before_write: bool,
    /// lease (claim with expiry) or unique (lesson 007's at-most-once insert).
    #[arg(long, value_parser = ["lease", "unique"])]
    election: Option<String>,
    /// Lease length in scenario time, e.g. 60s, 5s, 1m.
    #[arg(long, value_parser = parse_duration_s)]
    lease: Option<f64>,
    /// Seed for everything random (overrides the scenario's).
    #[arg(long)]
    seed: Option<u64>,
    /// Run this program (following the mover protocol, see README) instead of the reference mover.
    #[arg(long)]
    mover_cmd: Option<String>,
    /// Where the databases and movers run.
    #[arg(long, value_enum, default_value = "process")]
    backend: backend::BackendKind,
    /// Real milliseconds per scenario second (default: the scenario's, 10).
    #[arg(long)]
    time_scale_ms: Option<f64>,
    /// Seeded readings per turbine (default: the scenario's; 15768 is 1/1000 of a year at 2 s).
    #[arg(long)]
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
        fencing: a.fencing.clone(),
        on_renew_failure: a.on_renew_failure.clone(),
        on_lost: a.on_lost.clone(),
        check_expiry_before_write: a.check_expiry_before_write,
        election: a.election.clone(),
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
        Command::Check { dir, expect } => {
            let verdict = check::check_dir(&dir, None, false)?;
            let code = run::exit_code(verdict.valid, expect.map(Into::into));
            println!("{}: {:?} (exit {code})", dir.display(), verdict.valid);
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
    let cli = Cli::parse();
    // Ctrl-C or SIGTERM drops the whole run: every server, proxy and mover is
    // stopped by its owner's Drop before the process exits.
    let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
        .expect("install SIGTERM handler");
    // `chaos up` and `chaos proxy` end on Ctrl-C/SIGTERM by design, and stop what they hold themselves.
    let holds_until_signal = matches!(cli.command, Command::Up(_) | Command::Proxy { .. });
    let result = if holds_until_signal {
        main_inner(cli).await
    } else {
        tokio::select! {
        r = main_inner(cli) => r,
        _ = tokio::signal::ctrl_c() => Err(anyhow::anyhow!("interrupted: stopped every server and mover this run started")),
        _ = term.recv() => Err(anyhow::anyhow!("terminated: stopped every server and mover this run started")),
        }
    };
    match result {
        Ok(code) => ExitCode::from(code),
        Err(e) => {
            eprintln!("chaos: error: {}", one_line(&e));
            ExitCode::from(3)
        }
    }
}

fn one_line(e: &anyhow::Error) -> String {
    e.chain()
        .map(|c| c.to_string())
        .collect::<Vec<_>>()
        .join(": ")
        .replace('\n', " ")
}
