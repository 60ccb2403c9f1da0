//! A campaign's record: one line per run (scenario, seed, verdict, its first error, where it is, how to replay it) and the campaign's verdict; written as `summary.json` after every run, read back by `chaos nightly merge`.

use chaos_checkers::{Severity, Validity, Verdict};
use chaos_history::Moment;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::path::Path;

/// One run of a campaign.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RunLine {
    /// Its place in the whole campaign (a shard runs every n-th).
    pub index: usize,
    pub scenario: String,
    pub seed: u64,
    /// `scenario[seed]`, the testcase's name.
    pub name: String,
    /// `valid`, `invalid` or `unknown`; none when the harness failed.
    pub verdict: Option<Validity>,
    /// The first error anomaly (class, summary), when invalid.
    pub first_error: Option<(String, String)>,
    /// Why the run could not be judged (unknown) or why the harness failed.
    pub reasons: Vec<String>,
    /// The harness's own failure (exit 3), in one line.
    pub error: Option<String>,
    pub wall_s: f64,
    /// The run directory, and the command that runs it again.
    pub dir: Option<String>,
    pub replay: Option<String>,
    /// Whether its bulky files (history, logs, audit, final state) were pruned.
    pub pruned: bool,
    /// The dangerous moments the run reached (none: it proved nothing about them).
    #[serde(default)]
    pub reached: Vec<Moment>,
}

impl RunLine {
    /// A judged run's line.
    pub fn judged(
        index: usize,
        scenario: &str,
        seed: u64,
        verdict: &Verdict,
        dir: &Path,
        wall_s: f64,
    ) -> RunLine {
        let first_error = verdict
            .anomalies
            .iter()
            .find(|a| a.severity == Severity::Error)
            .map(|a| (a.class.name().to_string(), a.summary.clone()));
        RunLine {
            index,
            scenario: scenario.to_string(),
            seed,
            name: format!("{scenario}[{seed}]"),
            verdict: Some(verdict.valid),
            first_error,
            reasons: verdict.reasons.clone(),
            error: None,
            wall_s,
            dir: Some(dir.display().to_string()),
            replay: Some(format!("chaos run --replay {}", dir.display())),
            pruned: false,
            reached: verdict.reached.iter().map(|r| r.moment).collect(),
        }
    }

    /// A run the harness could not carry out.
    pub fn failed(index: usize, scenario: &str, seed: u64, error: String, wall_s: f64) -> RunLine {
        RunLine {
            index,
            scenario: scenario.to_string(),
            seed,
            name: format!("{scenario}[{seed}]"),
            verdict: None,
            first_error: None,
            reasons: vec![],
            error: Some(error),
            wall_s,
            dir: None,
            replay: None,
            pruned: false,
            reached: Vec::new(),
        }
    }

    /// One line a person reads: the verdict and, when not valid, why.
    pub fn outcome(&self) -> String {
        match (&self.verdict, &self.error) {
            (_, Some(e)) => format!("HARNESS FAILED: {e}"),
            (Some(Validity::Invalid), _) => match &self.first_error {
                Some((class, summary)) => format!("INVALID: {class}: {summary}"),
                None => "INVALID".into(),
            },
            (Some(Validity::Unknown), _) => format!("UNKNOWN: {}", self.reasons.join("; ")),
            (Some(Validity::Valid), _) => "valid".into(),
            (None, None) => "not run".into(),
        }
    }
}

/// The campaign as it was asked, so a merge and a person can tell what ran.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CampaignInfo {
    pub seed: u64,
    pub scenarios: Vec<String>,
    /// Generated schedules asked for (none: as many as the budget allows).
    pub generated: Option<u32>,
    /// `i/n` when this is one slice of a campaign.
    pub shard: Option<String>,
    pub budget_s: f64,
    /// The system under test: a `--mover-cmd` or the reference mover's switches.
    pub mover: String,
    pub command: String,
    pub git_commit: String,
    pub started: String,
}

/// `summary.json`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Summary {
    pub campaigns: Vec<CampaignInfo>,
    pub runs: Vec<RunLine>,
    /// Why the campaign stopped before its list was done (budget, disk, a setup mistake).
    pub stopped: Vec<String>,
    pub wall_s: f64,
}

/// The counts a CI system shows.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Counts {
    pub runs: usize,
    pub invalid: usize,
    pub unknown: usize,
    pub failed: usize,
}

impl Summary {
    pub fn counts(&self) -> Counts {
        let mut c = Counts {
            runs: self.runs.len(),
            ..Default::default()
        };
        for r in &self.runs {
            match (r.verdict, &r.error) {
                (_, Some(_)) => c.failed += 1,
                (Some(Validity::Invalid), _) => c.invalid += 1,
                (Some(Validity::Unknown), _) => c.unknown += 1,
                _ => {}
            }
        }
        c
    }

    /// Per moment, the runs that reached it; every moment a lease's run (or, for a campaign of
    /// the failover, the failover's) can reach is listed, with 0 when none did.
    pub fn reached(&self) -> BTreeMap<Moment, usize> {
        let failover = self
            .runs
            .iter()
            .any(|r| r.reached.iter().any(|m| m.failover()));
        let mut out: BTreeMap<Moment, usize> = Moment::ALL
            .into_iter()
            .filter(|m| m.failover() == failover)
            .map(|m| (m, 0))
            .collect();
        for m in self.runs.iter().flat_map(|r| &r.reached) {
            *out.entry(*m).or_default() += 1;
        }
        out
    }

    /// One line: each moment and how many runs reached it, then the ones none did.
    pub fn reached_line(&self) -> String {
        let counts = self.reached();
        let met: Vec<String> = (counts.iter())
            .filter(|(_, n)| **n > 0)
            .map(|(m, n)| format!("{m} {n}/{}", self.runs.len()))
            .collect();
        let never: Vec<&str> = (counts.iter())
            .filter(|(_, n)| **n == 0)
            .map(|(m, _)| m.name())
            .collect();
        let mut line = match met.is_empty() {
            true => "reached no dangerous moment".to_string(),
            false => format!("reached: {}", met.join(", ")),
        };
        if !never.is_empty() && !met.is_empty() {
            line.push_str(&format!("; never: {}", never.join(", ")));
        }
        line
    }

    /// The campaign's verdict: invalid if any run lost data; else unknown if any could not
    /// be judged; else valid. None when the harness failed on some run (exit 3) and nothing
    /// was found invalid.
    pub fn verdict(&self) -> Option<Validity> {
        let c = self.counts();
        if c.invalid > 0 {
            Some(Validity::Invalid)
        } else if c.failed > 0 || c.runs == 0 {
            None
        } else if c.unknown > 0 {
            Some(Validity::Unknown)
        } else {
            Some(Validity::Valid)
        }
    }

    /// Join slices of one campaign (or several campaigns): runs in campaign order, one each.
    pub fn merge(parts: Vec<Summary>) -> Summary {
        let mut campaigns = vec![];
        let mut runs: Vec<RunLine> = vec![];
        let mut stopped = vec![];
        let mut wall_s: f64 = 0.0;
        for p in parts {
            campaigns.extend(p.campaigns);
            stopped.extend(p.stopped);
            wall_s = wall_s.max(p.wall_s);
            for r in p.runs {
                if !runs.iter().any(|x| x.index == r.index && x.name == r.name) {
                    runs.push(r);
                }
            }
        }
        runs.sort_by(|a, b| a.index.cmp(&b.index).then(a.name.cmp(&b.name)));
        Summary {
            campaigns,
            runs,
            stopped,
            wall_s,
        }
    }
}
