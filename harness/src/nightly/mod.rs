//! `chaos nightly`: a CI campaign against a mover. The listed scenarios, then seeded generated schedules, one after another within a time budget, each judged as `chaos run` judges; `junit.xml`, `summary.json` and `index.html` in `results/nightly/<stamp>/`, rewritten after every run; failing runs kept whole with their replay command, passing ones pruned to their verdict and report; `--shard i/n` runs one deterministic slice, and `chaos nightly merge` joins slices.
//!
//! `summary.rs` is the campaign's record, `junit.rs` and `index.rs` render it.

mod index;
mod junit;
pub mod summary;

use crate::results;
use crate::run::{self, SutArgs};
use crate::values;
use chaos_checkers::Validity;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};
use summary::{CampaignInfo, RunLine, Summary};

/// The scenarios a campaign runs when none are named: the seed's two stories, the pause both
/// between and inside a write's transaction.
pub const DEFAULT_SCENARIOS: &str = "april,gc-pause,gc-pause-in-txn";
/// The scenario whose seeded nemesis draws a whole schedule (`scenarios/generated.toml`).
pub const GENERATED: &str = "generated";

#[derive(clap::Args, Debug, Clone)]
#[command(args_conflicts_with_subcommands = true)]
pub struct NightlyArgs {
    #[command(subcommand)]
    pub merge: Option<NightlyCommand>,
    #[command(flatten)]
    pub campaign: CampaignArgs,
}

#[derive(clap::Subcommand, Debug, Clone)]
pub enum NightlyCommand {
    /// Join the results of campaign slices (`--shard i/n`) into one junit.xml, summary.json and index.html.
    Merge {
        /// Campaign directories (results/nightly/<stamp>...), each with a summary.json.
        #[arg(required = true)]
        dirs: Vec<PathBuf>,
        /// Where the merged files go [default: results/nightly/<stamp>-merged].
        #[arg(long)]
        out: Option<PathBuf>,
        /// Exit 0 when the merged verdict is this one, 1 when it is not.
        #[arg(long, value_enum)]
        expect: Option<values::Expect>,
    },
}

#[derive(clap::Args, Debug, Clone)]
pub struct CampaignArgs {
    /// Wall-time budget for the whole campaign (e.g. 30m, 2h); no run starts that would not fit.
    #[arg(long, default_value = "30m", value_parser = values::budget_s, allow_hyphen_values = true)]
    pub budget: f64,
    /// Scenarios to run, comma-separated (names in scenarios/ or TOML paths).
    #[arg(long, default_value = DEFAULT_SCENARIOS)]
    pub scenarios: String,
    /// Generated schedules after the scenarios (`scenarios/generated.toml`, one seed each)
    /// [default: as many as the budget allows].
    #[arg(long, value_parser = values::whole_u32, allow_hyphen_values = true)]
    pub generated: Option<u32>,
    /// The campaign's seed: run k gets seed S+k [default: today's date, YYYYMMDD].
    #[arg(long, value_parser = values::seed, allow_hyphen_values = true)]
    pub seed: Option<u64>,
    /// Run the i-th of n disjoint slices of the campaign (1/3, 2/3, 3/3), for a CI matrix.
    #[arg(long, value_parser = parse_shard)]
    pub shard: Option<(usize, usize)>,
    /// Keep every run's files (default: passing runs keep only their verdict, report and config).
    #[arg(long, value_enum, default_value = "failing")]
    pub keep: Keep,
    /// Stop the campaign cleanly when its directory holds this much (e.g. 5G, 500M).
    #[arg(long, default_value = "10G", value_parser = values::bytes)]
    pub disk_budget: u64,
    #[command(flatten)]
    pub sut: SutArgs,
    /// Exit 0 when the campaign's verdict is this one, 1 when it is not.
    #[arg(long, value_enum)]
    pub expect: Option<values::Expect>,
    /// Where `nightly/<stamp>/` goes.
    #[arg(long, default_value = "results")]
    pub results: PathBuf,
    /// Draw every schedule from its scenario's `[nemesis.random]` alone (default: a drawn
    /// schedule, generated.toml's or a listed scenario's, seeks the dangerous moments no earlier
    /// run of the campaign reached; its scenario is stored as it ran, so `chaos run --replay
    /// DIR` runs it again).
    #[arg(long)]
    pub no_seek: bool,
}

/// Which runs keep their bulky files.
#[derive(clap::ValueEnum, Debug, Clone, Copy, PartialEq, Eq)]
pub enum Keep {
    /// Failing runs keep everything; passing runs keep their verdict, report and config.
    Failing,
    All,
}

fn parse_shard(text: &str) -> Result<(usize, usize), String> {
    let bad = || format!("'{text}' is not a slice like 1/3 (i of n, 1 <= i <= n)");
    let (i, n) = text.split_once('/').ok_or_else(bad)?;
    let (i, n): (usize, usize) = (
        i.trim().parse().map_err(|_| bad())?,
        n.trim().parse().map_err(|_| bad())?,
    );
    if n == 0 || i == 0 || i > n || n > 1000 {
        return Err(bad());
    }
    Ok((i, n))
}

/// One run of the campaign, before it runs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Entry {
    pub index: usize,
    pub scenario: String,
    pub seed: u64,
}

/// The campaign's runs in order: each listed scenario once, then generated schedules (up to
/// `generated`, or without end), run k with seed S+k; a shard keeps every n-th from its own.
pub fn entries(
    scenarios: &[String],
    generated: Option<u32>,
    seed: u64,
    shard: Option<(usize, usize)>,
) -> impl Iterator<Item = Entry> + '_ {
    let listed = scenarios.iter().cloned();
    let gen: Box<dyn Iterator<Item = String>> = match generated {
        Some(n) => Box::new(std::iter::repeat_n(GENERATED.to_string(), n as usize)),
        None => Box::new(std::iter::repeat(GENERATED.to_string())),
    };
    listed
        .chain(gen)
        .enumerate()
        .map(move |(index, scenario)| Entry {
            index,
            scenario,
            seed: seed.wrapping_add(index as u64),
        })
        .filter(move |e| shard.is_none_or(|(i, n)| e.index % n == i - 1))
}

/// Run the campaign; the exit code as `chaos run`'s.
pub async fn nightly(a: NightlyArgs) -> anyhow::Result<u8> {
    match a.merge {
        Some(NightlyCommand::Merge { dirs, out, expect }) => merge(&dirs, out, expect),
        None => campaign(a.campaign).await,
    }
}

async fn campaign(a: CampaignArgs) -> anyhow::Result<u8> {
    let wall = Instant::now();
    let scenarios: Vec<String> = a
        .scenarios
        .split(',')
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .map(String::from)
        .collect();
    // Every scenario must load, with the flags, before anything runs; those whose nemesis
    // draws a schedule (`[nemesis.random]`) seek what the campaign has not reached.
    let mut drawn = std::collections::BTreeSet::new();
    for s in scenarios
        .iter()
        .chain(std::iter::once(&GENERATED.to_string()))
    {
        if s == GENERATED && a.generated == Some(0) {
            continue;
        }
        let resolved = run::resolve(&a.sut.options(s, None))
            .map_err(|e| anyhow::anyhow!("--scenarios: {e:#}"))?;
        if resolved.file.nemesis.random.is_some() {
            drawn.insert(s.clone());
        }
    }
    let stamp = results::utc_stamp(std::time::SystemTime::now());
    let seed = a.seed.unwrap_or_else(|| today(&stamp));
    let dir = campaign_dir(&a.results, &stamp, a.shard)?;
    let info = CampaignInfo {
        seed,
        scenarios: scenarios.clone(),
        generated: a.generated,
        shard: a.shard.map(|(i, n)| format!("{i}/{n}")),
        budget_s: a.budget,
        mover: a
            .sut
            .mover_cmd
            .clone()
            .unwrap_or_else(|| reference_switches(&a.sut)),
        command: std::env::args().collect::<Vec<_>>().join(" "),
        git_commit: results::git_commit(),
        started: stamp.clone(),
    };
    eprintln!(
        "chaos nightly: seed {seed} (give --seed {seed} to run this campaign again), budget {:.0} s, scenarios {}, generated {}{} -> {}",
        a.budget,
        scenarios.join(","),
        a.generated.map_or("until the budget".to_string(), |n| n.to_string()),
        info.shard.as_ref().map(|s| format!(", shard {s}")).unwrap_or_default(),
        dir.display()
    );
    let mut summary = Summary {
        campaigns: vec![info],
        runs: vec![],
        stopped: vec![],
        wall_s: 0.0,
    };
    write(&summary, &dir)?;
    let budget = Duration::from_secs_f64(a.budget);
    for e in entries(&scenarios, a.generated, seed, a.shard) {
        if let Some(why) = stop_before(&summary, &e, wall.elapsed(), budget, &dir, a.disk_budget) {
            eprintln!("chaos nightly: {why}");
            summary.stopped.push(why);
            break;
        }
        // A drawn schedule seeks the dangerous moments no run has reached yet (the first runs
        // as written: what its profile reaches on its own is the evidence).
        let seek = match drawn.contains(&e.scenario) && !a.no_seek && !summary.runs.is_empty() {
            true => run::seek::missing(summary.runs.iter().flat_map(|r| &r.reached)),
            false => Vec::new(),
        };
        if !seek.is_empty() {
            let names: Vec<&str> = seek.iter().map(|m| m.name()).collect();
            eprintln!("nightly: run {} seeks {}", e.index, names.join(", "));
        }
        let left = budget.saturating_sub(wall.elapsed());
        let line = one_run(&a, &e, &dir, left, seek).await;
        let Some(line) = line else {
            let why = format!(
                "the budget of {:.0} s ran out during {}[{}] (not judged)",
                a.budget, e.scenario, e.seed
            );
            eprintln!("chaos nightly: {why}");
            summary.stopped.push(why);
            break;
        };
        let left = budget.saturating_sub(wall.elapsed()).as_secs_f64();
        eprintln!(
            "nightly: run {} {}: {} in {:.1} s; {:.0} s of the budget left",
            e.index,
            line.name,
            line.outcome(),
            line.wall_s,
            left
        );
        if let Some(r) = &line.replay {
            if line.verdict != Some(Validity::Valid) {
                eprintln!("nightly:   replay: {r}");
            }
        }
        let setup_mistake = line.error.is_some() && summary.runs.iter().all(|r| r.error.is_some());
        summary.runs.push(line);
        summary.wall_s = wall.elapsed().as_secs_f64();
        write(&summary, &dir)?;
        if setup_mistake {
            // The first run could not even be made: every other would fail the same way.
            let why =
                "the first run failed in the harness (a setup mistake?): nothing more was run"
                    .to_string();
            eprintln!("chaos nightly: {why}");
            summary.stopped.push(why);
            break;
        }
    }
    summary.wall_s = wall.elapsed().as_secs_f64();
    write(&summary, &dir)?;
    Ok(finish(&summary, &dir, a.expect))
}

/// Why the next run must not start: the budget would not hold it, or the disk budget is spent.
fn stop_before(
    s: &Summary,
    e: &Entry,
    elapsed: Duration,
    budget: Duration,
    dir: &Path,
    disk_budget: u64,
) -> Option<String> {
    // The longest earlier run of the same scenario (else of any) is what the next may take.
    let same: Vec<f64> = s
        .runs
        .iter()
        .filter(|r| r.scenario == e.scenario)
        .map(|r| r.wall_s)
        .collect();
    let any: Vec<f64> = s.runs.iter().map(|r| r.wall_s).collect();
    let guess = same
        .iter()
        .chain(if same.is_empty() {
            any.iter()
        } else {
            [].iter()
        })
        .fold(0.0f64, |m, x| m.max(*x));
    if elapsed + Duration::from_secs_f64(guess) > budget {
        return Some(format!(
            "the budget of {:.0} s is spent: {} runs in {:.0} s (the next, {}[{}], takes about {:.0} s)",
            budget.as_secs_f64(),
            s.runs.len(),
            elapsed.as_secs_f64(),
            e.scenario,
            e.seed,
            guess
        ));
    }
    // Checked after each run: the first always runs.
    let used = if s.runs.is_empty() {
        0
    } else {
        disk_usage(dir)
    };
    if used >= disk_budget {
        return Some(format!(
            "the disk budget of {} is reached: {} holds {}",
            values::show_bytes(disk_budget),
            dir.display(),
            values::show_bytes(used)
        ));
    }
    None
}

/// `summary.json`, `junit.xml` and `index.html` into `dir`, each whole or not at all: a
/// campaign killed mid-run leaves the record of every run before.
fn write(s: &Summary, dir: &Path) -> anyhow::Result<()> {
    results::write_json(&dir.join("summary.json"), s)?;
    write_whole(&dir.join("junit.xml"), &junit::render(s))?;
    write_whole(&dir.join("index.html"), &index::render(s, dir))
}

/// Write through a temporary file and rename: a reader never sees half a file.
fn write_whole(path: &Path, text: &str) -> anyhow::Result<()> {
    let tmp = path.with_extension("tmp");
    std::fs::write(&tmp, text)
        .map_err(|e| anyhow::anyhow!("cannot write {}: {e}", tmp.display()))?;
    std::fs::rename(&tmp, path).map_err(|e| anyhow::anyhow!("cannot write {}: {e}", path.display()))
}

/// One run, judged and pruned. None when the budget ran out before it finished (dropping the
/// run stops its servers and movers).
async fn one_run(
    a: &CampaignArgs,
    e: &Entry,
    dir: &Path,
    left: Duration,
    seek: Vec<chaos_history::Moment>,
) -> Option<RunLine> {
    let began = Instant::now();
    let mut opts = a.sut.options(&e.scenario, Some(e.seed));
    opts.seek = seek;
    opts.results = dir.join("runs");
    opts.quiet = true;
    let outcome = tokio::time::timeout(left.max(Duration::from_secs(1)), run::run(&opts)).await;
    let wall_s = began.elapsed().as_secs_f64();
    let outcome = match outcome {
        Err(_) => return None,
        Ok(Err(err)) => {
            let msg = crate::one_line(&err);
            return Some(RunLine::failed(e.index, &e.scenario, e.seed, msg, wall_s));
        }
        Ok(Ok(o)) => o,
    };
    let mut line = RunLine::judged(
        e.index,
        &e.scenario,
        e.seed,
        &outcome.verdict,
        &outcome.dir,
        wall_s,
    );
    if outcome.verdict.valid == Validity::Valid && a.keep == Keep::Failing {
        line.pruned = prune(&outcome.dir);
    }
    Some(line)
}

/// A passing run keeps what a person looks at and what replays it; its bulk goes.
fn prune(dir: &Path) -> bool {
    let mut all = true;
    for f in [
        chaos_history::HISTORY_FILE,
        chaos_history::AUDIT_FILE,
        chaos_history::FINAL_STATE_FILE,
    ] {
        let p = dir.join(f);
        if p.exists() {
            all &= std::fs::remove_file(&p).is_ok();
        }
    }
    let logs = dir.join("logs");
    if logs.exists() {
        all &= std::fs::remove_dir_all(&logs).is_ok();
    }
    all
}

/// Bytes under `dir` (files only; bounded depth, symlinks not followed).
fn disk_usage(dir: &Path) -> u64 {
    fn walk(p: &Path, depth: u32) -> u64 {
        let Ok(entries) = std::fs::read_dir(p) else {
            return 0;
        };
        entries
            .flatten()
            .map(|e| match e.file_type() {
                Ok(t) if t.is_dir() && depth < 16 => walk(&e.path(), depth + 1),
                Ok(t) if t.is_file() => e.metadata().map(|m| m.len()).unwrap_or(0),
                _ => 0,
            })
            .sum()
    }
    walk(dir, 0)
}

/// `results/nightly/<stamp>[-shard-i-of-n]`, new.
fn campaign_dir(
    root: &Path,
    stamp: &str,
    shard: Option<(usize, usize)>,
) -> anyhow::Result<PathBuf> {
    let base = match shard {
        Some((i, n)) => format!("{stamp}-shard-{i}-of-{n}"),
        None => stamp.to_string(),
    };
    let mut dir = root.join("nightly").join(&base);
    let mut k = 1;
    while dir.exists() {
        k += 1;
        dir = root.join("nightly").join(format!("{base}-{k}"));
    }
    std::fs::create_dir_all(dir.join("runs"))
        .map_err(|e| anyhow::anyhow!("cannot create {}: {e}", dir.display()))?;
    Ok(dir)
}

/// `20261202` from a stamp `20261202T070000Z`.
fn today(stamp: &str) -> u64 {
    stamp.get(..8).and_then(|d| d.parse().ok()).unwrap_or(1)
}

fn reference_switches(sut: &SutArgs) -> String {
    let mut s = format!(
        "reference mover, fencing {}",
        sut.fencing
            .map(chaos_workloads::mover::switch_name)
            .unwrap_or_else(|| "as each scenario says".into())
    );
    if let Some(v) = sut.on_renew_failure {
        s.push_str(&format!(
            ", on-renew-failure {}",
            chaos_workloads::mover::switch_name(v)
        ));
    }
    if let Some(v) = sut.on_lost {
        s.push_str(&format!(
            ", on-lost {}",
            chaos_workloads::mover::switch_name(v)
        ));
    }
    s
}

/// The campaign's last words and its exit code.
fn finish(s: &Summary, dir: &Path, expect: Option<values::Expect>) -> u8 {
    let c = s.counts();
    let verdict = s.verdict();
    let code = match (verdict, expect) {
        (None, _) => 3,
        (Some(v), e) => run::exit_code(v, e.map(Into::into)),
    };
    let said = match verdict {
        Some(v) => format!("{v:?}"),
        None if c.runs == 0 => "nothing was judged".to_string(),
        None => "HARNESS FAILED".to_string(),
    };
    // What this machine does in an hour, scenario by scenario, from the runs themselves.
    let mut walls: std::collections::BTreeMap<&str, Vec<f64>> = Default::default();
    for r in s.runs.iter().filter(|r| r.error.is_none()) {
        walls.entry(r.scenario.as_str()).or_default().push(r.wall_s);
    }
    let rates: Vec<String> = walls
        .iter()
        .map(|(name, w)| {
            let mean = w.iter().sum::<f64>() / w.len() as f64;
            format!(
                "{name} {:.0}/h ({:.1} s a run)",
                3600.0 / mean.max(0.001),
                mean
            )
        })
        .collect();
    if !rates.is_empty() {
        println!("chaos nightly: runs per hour here: {}", rates.join(", "));
    }
    println!("chaos nightly: {}", s.reached_line());
    println!(
        "chaos nightly: {said} (exit {code}): {} runs, {} invalid, {} unknown, {} failed in the harness; {}",
        c.runs,
        c.invalid,
        c.unknown,
        c.failed,
        dir.join("junit.xml").display()
    );
    code
}

/// `chaos nightly merge`: the slices' runs in one record.
fn merge(
    dirs: &[PathBuf],
    out: Option<PathBuf>,
    expect: Option<values::Expect>,
) -> anyhow::Result<u8> {
    let mut parts = vec![];
    for d in dirs {
        let s: Summary = results::read_json(&d.join("summary.json"))?;
        parts.push(s);
    }
    let merged = Summary::merge(parts);
    let out = match out {
        Some(o) => o,
        None => {
            let stamp = results::utc_stamp(std::time::SystemTime::now());
            let root = dirs[0].parent().map(Path::to_path_buf).unwrap_or_default();
            root.join(format!("{stamp}-merged"))
        }
    };
    std::fs::create_dir_all(&out)
        .map_err(|e| anyhow::anyhow!("cannot create {}: {e}", out.display()))?;
    write(&merged, &out)?;
    Ok(finish(&merged, &out, expect))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slices_are_disjoint_and_cover_the_campaign() {
        let scen = vec!["april".to_string(), "gc-pause".to_string()];
        let whole: Vec<Entry> = entries(&scen, Some(5), 100, None).collect();
        assert_eq!(whole.len(), 7);
        assert_eq!(
            whole[0],
            Entry {
                index: 0,
                scenario: "april".into(),
                seed: 100
            }
        );
        assert_eq!(
            whole[6],
            Entry {
                index: 6,
                scenario: GENERATED.into(),
                seed: 106
            }
        );
        let mut sliced: Vec<Entry> = (1..=3)
            .flat_map(|i| entries(&scen, Some(5), 100, Some((i, 3))).collect::<Vec<_>>())
            .collect();
        sliced.sort_by_key(|e| e.index);
        assert_eq!(sliced, whole);
        let unbounded: Vec<Entry> = entries(&scen, None, 1, Some((2, 2))).take(3).collect();
        assert_eq!(
            unbounded.iter().map(|e| e.index).collect::<Vec<_>>(),
            vec![1, 3, 5]
        );
    }

    #[test]
    fn a_slice_is_i_of_n() {
        assert_eq!(parse_shard("2/3"), Ok((2, 3)));
        for bad in ["0/3", "4/3", "3", "a/b", "1/0"] {
            assert!(
                parse_shard(bad).unwrap_err().contains("is not a slice"),
                "{bad}"
            );
        }
    }
}
