//! Loading a scenario: the file parsed, every section checked (the sections every scenario
//! has here and in `scenario.rs`, its system's own through `systems::of`), its times resolved
//! and its faults expanded into the schedule. Here rather than in `scenario.rs` because the
//! systems read the scenario's types.

use super::{
    parse_date, scenarios_dir, Scenario, ScenarioError, ScenarioFile, Validator,
    RESTART_FLOOR_REAL_MS,
};
use crate::systems;
use chaos_history::ScenarioClock;
use chaos_nemesis::Fault;
use serde::Deserialize;
use std::path::{Path, PathBuf};

/// Every scenario in the scenarios folder: (name, description).
pub fn list() -> Vec<(String, String, PathBuf)> {
    let mut out = Vec::new();
    if let Ok(entries) = std::fs::read_dir(scenarios_dir()) {
        for e in entries.flatten() {
            let path = e.path();
            if path.extension().and_then(|x| x.to_str()) == Some("toml") {
                let desc = file(&path)
                    .map(|s| s.file.description.lines().next().unwrap_or("").to_string())
                    .unwrap_or_else(|e| format!("(does not load: {e})"));
                out.push((
                    path.file_stem()
                        .unwrap_or_default()
                        .to_string_lossy()
                        .into_owned(),
                    desc,
                    path,
                ));
            }
        }
    }
    out.sort();
    out
}

/// Load and validate a scenario file.
pub fn file(path: &Path) -> Result<Scenario, ScenarioError> {
    validate(parse(path)?, path, &[])
}

/// A scenario file parsed, not yet checked (`chaos run` applies its flags in between); a
/// TOML error in one line.
pub fn parse(path: &Path) -> Result<ScenarioFile, ScenarioError> {
    let text = std::fs::read_to_string(path).map_err(|source| ScenarioError::Read {
        path: path.display().to_string(),
        source,
    })?;
    toml::from_str(&text).map_err(|e| ScenarioError::Parse {
        path: path.display().to_string(),
        message: e
            .to_string()
            .split_whitespace()
            .collect::<Vec<_>>()
            .join(" "),
    })
}

/// Check a parsed scenario file (also after command-line overrides) and resolve its times;
/// `extra` faults (already in scenario ms, e.g. a sweep's latency weather) join the file's
/// before the schedule is checked and expanded.
pub fn validate(
    file: ScenarioFile,
    path: &Path,
    extra: &[Fault],
) -> Result<Scenario, ScenarioError> {
    let v = Validator {
        path: path.display().to_string(),
    };
    let mut file = file;
    let service = file.lock.service;
    file.faults.retain(|f| f.lands_on(service));
    for (i, f) in file.faults.iter_mut().enumerate() {
        crate::lock::alias_routing(&file.lock, &mut f.kind)
            .map_err(|m| v.field(&format!("fault[{i}]"), m))?;
    }
    let start_ms = v.time("start", &file.start)?;
    let mut end_ms = v.time("end", &file.end)?;
    if end_ms <= start_ms {
        end_ms += 86_400_000; // a night that crosses midnight
    }
    let day_unix_ms = parse_date(&file.date)
        .ok_or_else(|| v.field("date", format!("'{}' is not a date YYYY-MM-DD", file.date)))?;
    let system = systems::of(file.system);
    // What its faults can name: its system's boxes, nodes and links.
    let mut topology = system.topology(&file);
    topology.asynchronous_commit = file.cluster.asynchronous_commit.clone();
    v.settings(&file)?;
    v.expect(&file, system.holds_lease())?;
    v.asynchronous_commit(&file, &topology, system.holds_lease())?;
    system.check_file(&v, &file)?;
    let mut faults = file
        .faults
        .iter()
        .enumerate()
        .map(|(i, f)| v.fault(i, f, start_ms))
        .collect::<Result<Vec<_>, _>>()?;
    faults.extend(extra.iter().cloned());
    if let Some(profile) = &file.nemesis.random {
        // A generated stop, crash or kill lasts at least RESTART_FLOOR_REAL_MS of real time,
        // so the database or mover is back in time for its start to land on its instant.
        let floor_ms = (RESTART_FLOOR_REAL_MS * 1000.0 / file.time_scale_ms).round() as i64;
        let lease_ms = (file.lease.lease_s * 1000.0).round() as i64;
        let generated = chaos_nemesis::generate(
            file.seed, profile, &topology, start_ms, end_ms, floor_ms, lease_ms,
        )
        .map_err(|m| v.field("nemesis.random", m))?;
        faults.extend(generated);
    }
    let schedule =
        chaos_nemesis::expand(&faults, &topology, start_ms, end_ms, ScenarioClock::format)
            .map_err(|e| v.field("fault", e.to_string()))?;
    Ok(Scenario {
        file,
        path: path.to_path_buf(),
        start_ms,
        end_ms,
        day_unix_ms,
        faults,
        schedule,
        topology,
    })
}

impl Scenario {
    /// The scenario a stored run ran, from its `config.json`: the resolved file (every
    /// override applied) with its faults as they were drawn, generated ones included, so the
    /// run can be made again exactly (`chaos run --replay DIR`).
    pub fn from_run(dir: &Path) -> Result<Scenario, ScenarioError> {
        let path = dir.join("config.json");
        let p = path.display().to_string();
        let text = std::fs::read_to_string(&path).map_err(|source| ScenarioError::Read {
            path: p.clone(),
            source,
        })?;
        #[derive(Deserialize)]
        struct Stored {
            file: ScenarioFile,
            faults: Vec<Fault>,
        }
        #[derive(Deserialize)]
        struct Config {
            scenario: Stored,
        }
        let config: Config = serde_json::from_str(&text).map_err(|e| ScenarioError::Parse {
            path: p.clone(),
            message: format!("not a run's config.json: {e}"),
        })?;
        let Stored { file, faults } = config.scenario;
        validate(without_generator(file), &path, &faults)
    }

    /// The same scenario with `faults` as its whole schedule (no generator): a candidate of
    /// `chaos shrink`.
    pub fn with_faults(&self, faults: &[Fault]) -> Result<Scenario, ScenarioError> {
        validate(without_generator(self.file.clone()), &self.path, faults)
    }
}

fn without_generator(mut file: ScenarioFile) -> ScenarioFile {
    file.nemesis.random = None;
    file.faults.clear();
    file
}
