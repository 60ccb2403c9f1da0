//! The `RunMeta` of a run whose harness was killed before it wrote `run.json` (SIGKILL, a crash, the machine going down): what `config.json` (written when the run starts) and the history itself say.
//!
//! Such a run is judged `unknown`: it did not complete, and the reason says
//! why. What cannot be known (the plan, the seeded turbines, the routing) is
//! left empty; the checkers say what they could not judge.

use chaos_history::{Op, RunMeta, ScenarioClock};
use serde_json::Value;
use std::path::Path;

/// The scale when nothing says otherwise: 1 scenario s = 10 real ms.
const DEFAULT_NS_PER_SCENARIO_S: i64 = 10_000_000;
/// How much of the history's end is read to find its last event.
const TAIL_BYTES: u64 = 1 << 20;

pub fn meta(dir: &Path, history: &Path) -> anyhow::Result<RunMeta> {
    // config.json is a help, not a requirement: a run killed early may lack it too.
    let config: Value = std::fs::read_to_string(dir.join("config.json"))
        .ok()
        .and_then(|t| serde_json::from_str(&t).ok())
        .unwrap_or(Value::Null);
    let scenario = &config["scenario"];
    let file = &scenario["file"];
    let run_dir = dir.file_name().and_then(|n| n.to_str()).unwrap_or("");
    let name = file["name"]
        .as_str()
        .map(str::to_string)
        .or_else(|| {
            std::path::absolute(dir)
                .ok()?
                .parent()?
                .file_name()?
                .to_str()
                .map(str::to_string)
        })
        .unwrap_or_else(|| "unknown".into());
    // Run directories are named <start>-<seed>[-<n>].
    let seed = config["seed"]
        .as_u64()
        .or_else(|| run_dir.split('-').nth(1)?.parse().ok())
        .unwrap_or(0);
    let ns_per_s = file["time_scale_ms"]
        .as_f64()
        .map(|ms| (ms * 1_000_000.0).round() as i64)
        .filter(|&ns| ns > 0)
        .unwrap_or(DEFAULT_NS_PER_SCENARIO_S);
    let (first, last) = ends(history);
    let start_scenario_ms = scenario["start_ms"]
        .as_i64()
        .or_else(|| {
            // The first event's printed time, less the time since the start.
            let op = first.as_ref()?;
            let at = ScenarioClock::parse_time_of_day(&op.scenario_time)?;
            Some(at - op.time_ns / (ns_per_s / 1000).max(1))
        })
        .unwrap_or(0);
    let clock = ScenarioClock {
        start_unix_ns: 0,
        start_scenario_ms,
        real_ns_per_scenario_s: ns_per_s,
        scenario_day_unix_ms: scenario["day_unix_ms"].as_i64().unwrap_or(0),
        wall_check_run_ns: 0,
        wall_check_unix_ns: 0,
    };
    let end_scenario_ms = last
        .map(|op| clock.scenario_ms_at_run_ns(op.time_ns.clamp(0, i64::MAX / 1000)))
        .or_else(|| scenario["end_ms"].as_i64())
        .unwrap_or(start_scenario_ms)
        .max(start_scenario_ms);
    let ms = |v: &Value| v.as_f64().map_or(0, |s| (s * 1000.0) as i64);
    Ok(RunMeta {
        system: Default::default(), payout: None, objects: None,
        scenario: name,
        seed,
        clock,
        job: file["lease"]["job"].as_str().unwrap_or("").to_string(),
        shards: Vec::new(),
        owners: Default::default(),
        plan: Vec::new(),
        seeded: Vec::new(),
        lease_ms: ms(&file["lease"]["lease_s"]),
        copy_ms: ms(&file["lease"]["copy_s"]),
        strict_duplicates: false,
        mover: Default::default(),
        end_scenario_ms,
        completed: false,
        incomplete_reason: Some(format!(
            "{} is missing: the harness did not finish (it was killed), so the history may be cut short and the run's plan is unknown",
            chaos_history::RUN_META_FILE
        )),
        expect_reach: Vec::new(),
    })
}

/// The first and the last event of the history that decode (the last line may be torn).
fn ends(history: &Path) -> (Option<Op>, Option<Op>) {
    use std::io::{BufRead, Read, Seek, SeekFrom};
    let Ok(mut file) = std::fs::File::open(history) else {
        return (None, None);
    };
    let first = std::io::BufReader::new(&mut file)
        .lines()
        .take(100)
        .map_while(Result::ok)
        .find_map(|l| serde_json::from_str::<Op>(&l).ok());
    let len = file.metadata().map(|m| m.len()).unwrap_or(0);
    let mut tail = Vec::new();
    let last = file
        .seek(SeekFrom::Start(len.saturating_sub(TAIL_BYTES)))
        .and_then(|_| file.take(TAIL_BYTES).read_to_end(&mut tail))
        .ok()
        .and_then(|_| {
            String::from_utf8_lossy(&tail)
                .lines()
                .rev()
                .take(100)
                .find_map(|l| serde_json::from_str::<Op>(l).ok())
        });
    (first, last)
}
