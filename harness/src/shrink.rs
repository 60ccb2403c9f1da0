//! `chaos shrink DIR`: from a failing run, the smallest schedule that still fails with the same anomaly class. Delta debugging over its faults (drop halves, then quarters, ... and their complements), then each remaining fault made smaller (a shorter duration, an earlier instant, an earlier trigger). Every candidate runs K times on real databases and is kept only when it fails in at least K-1 of them (all of them when K is 1 or 2), so a flaky failure is not taken for a smaller one.

use crate::run::{self, RunOptions};
use crate::scenario::Scenario;
use crate::{results, values};
use chaos_checkers::{Severity, Verdict};
use chaos_nemesis::Fault;
use serde_json::json;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

#[derive(clap::Args, Debug, Clone)]
pub struct ShrinkArgs {
    /// A failing run's directory (its config.json holds the schedule, generated faults included).
    pub dir: PathBuf,
    /// Wall-time budget for the search; the smallest schedule found so far is the answer.
    #[arg(long, default_value = "20m", value_parser = values::budget_s, allow_hyphen_values = true)]
    pub budget: f64,
    /// Runs per candidate (kept when it fails in at least K-1 of them, all when K <= 2).
    #[arg(long, default_value = "3", value_parser = values::count_u32, allow_hyphen_values = true)]
    pub repeat: u32,
    /// The lock service: the stored run's, always (every candidate replays the run on the
    /// service it failed on); given, it must be that one.
    #[arg(long, value_enum)]
    pub lock: Option<crate::lock::LockKind>,
    /// Where `shrink/<stamp>/` goes.
    #[arg(long, default_value = "results")]
    pub results: PathBuf,
}

/// What a candidate did: failures with the class out of runs, and a failing run's directory.
#[derive(Debug, Clone, Default)]
struct Trial {
    failed: u32,
    runs: u32,
    example: Option<PathBuf>,
}

/// The search's state: the class it keeps, the runs it spent, the budget it has.
struct Search {
    base: Scenario,
    opts: RunOptions,
    class: String,
    repeat: u32,
    need: u32,
    runs_dir: PathBuf,
    began: Instant,
    budget: Duration,
    runs: u32,
    steps: Vec<serde_json::Value>,
}

impl Search {
    fn out_of_budget(&self) -> bool {
        self.began.elapsed() >= self.budget
    }

    /// Run `faults` up to K times; stop as soon as the answer is known.
    async fn trial(&mut self, faults: &[Fault], what: &str) -> anyhow::Result<Trial> {
        let scenario = self.base.with_faults(faults)?;
        let mut t = Trial::default();
        while t.runs < self.repeat {
            let left = self.budget.saturating_sub(self.began.elapsed());
            if left.is_zero() {
                break;
            }
            let mut o = self.opts.clone();
            o.prepared = Some(Arc::new(scenario.clone()));
            o.results = self.runs_dir.clone();
            o.quiet = true;
            let Ok(outcome) = tokio::time::timeout(left, run::run(&o)).await else {
                break;
            };
            let outcome = outcome?;
            self.runs += 1;
            t.runs += 1;
            if has_error(&outcome.verdict, &self.class) {
                t.failed += 1;
                t.example.get_or_insert(outcome.dir.clone());
            }
            if t.failed >= self.need || t.runs - t.failed > self.repeat - self.need {
                break;
            }
        }
        let kept = t.failed >= self.need;
        eprintln!(
            "shrink: {what}: {} fault(s): fails {} of {} -> {}  ({} runs, {:.0} s)",
            faults.len(),
            t.failed,
            t.runs,
            if kept { "kept" } else { "no" },
            self.runs,
            self.began.elapsed().as_secs_f64()
        );
        self.steps.push(json!({ "step": what, "faults": faults.len(), "failed": t.failed, "runs": t.runs, "kept": kept }));
        Ok(t)
    }

    fn kept(&self, t: &Trial) -> bool {
        t.failed >= self.need
    }
}

fn has_error(v: &Verdict, class: &str) -> bool {
    v.anomalies
        .iter()
        .any(|a| a.severity == Severity::Error && a.class.name() == class)
}

/// Search; 0 when a schedule that still fails was written, 3 otherwise.
pub async fn shrink(a: ShrinkArgs) -> anyhow::Result<u8> {
    let verdict: Verdict = results::read_json(&a.dir.join("verdict.json"))?;
    let class = verdict
        .anomalies
        .iter()
        .find(|x| x.severity == Severity::Error)
        .map(|x| x.class.name().to_string())
        .ok_or_else(|| {
            anyhow::anyhow!(
                "{}: not a failing run (no error anomaly in its verdict): nothing to shrink",
                a.dir.display()
            )
        })?;
    let opts = run::replay(&a.dir, None, None)?;
    let base = opts
        .prepared
        .as_deref()
        .cloned()
        .expect("a replay is prepared");
    let stored = base.file.lock.service;
    if let Some(lock) = a.lock.filter(|l| *l != stored) {
        anyhow::bail!(
            "--lock {}: {} failed on {}, and shrink replays a run on the service it failed on; to look for a failure on {} run `chaos run {} --lock {}` and shrink that run",
            lock.name(),
            a.dir.display(),
            stored.name(),
            lock.name(),
            base.file.name,
            lock.name()
        );
    }
    let stamp = results::utc_stamp(std::time::SystemTime::now());
    let out = a
        .results
        .join("shrink")
        .join(format!("{}-{stamp}", base.file.name));
    std::fs::create_dir_all(out.join("runs"))
        .map_err(|e| anyhow::anyhow!("cannot create {}: {e}", out.display()))?;
    let original = base.faults.clone();
    eprintln!(
        "chaos shrink: {} ({} faults, lock {}) fails with {class}; {} run(s) per candidate, budget {:.0} s -> {}",
        a.dir.display(),
        original.len(),
        stored.name(),
        a.repeat,
        a.budget,
        out.display()
    );
    let need = if a.repeat <= 2 {
        a.repeat
    } else {
        a.repeat - 1
    };
    let mut s = Search {
        base,
        opts,
        class: class.clone(),
        repeat: a.repeat,
        need,
        runs_dir: out.join("runs"),
        began: Instant::now(),
        budget: Duration::from_secs_f64(a.budget),
        runs: 0,
        steps: vec![],
    };
    let first = s.trial(&original, "the schedule as it ran").await?;
    if !s.kept(&first) {
        anyhow::bail!(
            "{} failed with {class} in {} of {} runs again: too flaky to shrink (try --repeat with more runs)",
            a.dir.display(),
            first.failed,
            first.runs
        );
    }
    let mut best = (original.clone(), first);
    best = ddmin(&mut s, best).await?;
    best = smaller_faults(&mut s, best).await?;
    write_answer(&s, &out, &original, &best, &a.dir)
}

/// Delta debugging: the schedule cut into n chunks; a chunk alone, or the schedule without
/// one, that still fails becomes the schedule; else n doubles, until chunks are single faults.
async fn ddmin(
    s: &mut Search,
    mut best: (Vec<Fault>, Trial),
) -> anyhow::Result<(Vec<Fault>, Trial)> {
    if !best.0.is_empty() {
        let none = s.trial(&[], "no faults at all").await?;
        if s.kept(&none) {
            return Ok((vec![], none));
        }
    }
    let mut n = 2;
    while best.0.len() >= 2 && !s.out_of_budget() {
        let faults = best.0.clone();
        let chunks: Vec<Vec<usize>> = split(faults.len(), n);
        let mut reduced = false;
        for (k, chunk) in chunks.iter().enumerate() {
            let only: Vec<Fault> = chunk.iter().map(|&i| faults[i].clone()).collect();
            let t = s
                .trial(&only, &format!("chunk {} of {n} alone", k + 1))
                .await?;
            if s.kept(&t) {
                best = (only, t);
                n = 2;
                reduced = true;
                break;
            }
        }
        if !reduced && n > 2 {
            for (k, chunk) in chunks.iter().enumerate() {
                let rest: Vec<Fault> = (0..faults.len())
                    .filter(|i| !chunk.contains(i))
                    .map(|i| faults[i].clone())
                    .collect();
                let t = s
                    .trial(&rest, &format!("without chunk {} of {n}", k + 1))
                    .await?;
                if s.kept(&t) {
                    best = (rest, t);
                    n = (n - 1).max(2);
                    reduced = true;
                    break;
                }
            }
        }
        if !reduced {
            if n >= faults.len() {
                break;
            }
            n = (2 * n).min(faults.len());
        }
    }
    Ok(best)
}

/// `len` indices cut into `n` chunks as even as can be.
fn split(len: usize, n: usize) -> Vec<Vec<usize>> {
    let n = n.clamp(1, len.max(1));
    (0..n)
        .map(|k| (k * len / n..(k + 1) * len / n).collect())
        .filter(|c: &Vec<usize>| !c.is_empty())
        .collect()
}

/// Each remaining fault made smaller while the schedule still fails: its duration halved, its
/// instant moved halfway to the start, its trigger's n-th event halved.
async fn smaller_faults(
    s: &mut Search,
    mut best: (Vec<Fault>, Trial),
) -> anyhow::Result<(Vec<Fault>, Trial)> {
    let start_ms = s.base.start_ms;
    for i in 0..best.0.len() {
        for _ in 0..4 {
            if s.out_of_budget() {
                return Ok(best);
            }
            let f = &best.0[i];
            let mut tries: Vec<(Fault, String)> = vec![];
            if let Some(d) = f.duration_ms.filter(|d| *d >= 2_000) {
                let mut g = f.clone();
                g.duration_ms = Some(d / 2);
                tries.push((g, format!("fault {i} lasting {:.1} s", d as f64 / 2000.0)));
            }
            if f.when.as_ref().is_some_and(|w| w.nth > 1) {
                let mut g = f.clone();
                let w = g.when.as_mut().expect("checked");
                w.nth = w.nth.div_ceil(2);
                let nth = w.nth;
                tries.push((g, format!("fault {i} at event {nth}")));
            } else if f.when.is_none() && f.at_ms - start_ms >= 2_000 {
                let mut g = f.clone();
                g.at_ms = start_ms + (f.at_ms - start_ms) / 2;
                let at = chaos_history::ScenarioClock::format(g.at_ms);
                tries.push((g, format!("fault {i} at {at}")));
            }
            let mut smaller = false;
            for (g, what) in tries {
                let mut cand = best.0.clone();
                cand[i] = g;
                if s.with_faults_ok(&cand) {
                    let t = s.trial(&cand, &what).await?;
                    if s.kept(&t) {
                        let was = original_note(&best.0[i]);
                        cand[i].note = Some(format!("{was} [chaos shrink: {what}]"));
                        best = (cand, t);
                        smaller = true;
                        break;
                    }
                }
            }
            if !smaller {
                break;
            }
        }
    }
    Ok(best)
}

/// A fault's note without what an earlier shrink step added to it.
fn original_note(f: &Fault) -> String {
    let note = f.note.clone().unwrap_or_else(|| f.kind.verb().to_string());
    note.split(" [chaos shrink:")
        .next()
        .unwrap_or_default()
        .to_string()
}

impl Search {
    /// Whether a candidate is a schedule the scenario takes (a moved fault can collide).
    fn with_faults_ok(&self, faults: &[Fault]) -> bool {
        self.base.with_faults(faults).is_ok()
    }
}

/// `minimal.toml`, `shrink.json` and the line that says what was found.
fn write_answer(
    s: &Search,
    out: &Path,
    original: &[Fault],
    best: &(Vec<Fault>, Trial),
    from: &Path,
) -> anyhow::Result<u8> {
    let minimal = s.base.with_faults(&best.0)?;
    let toml = format!(
        "# chaos shrink of {}: the smallest schedule found that still fails with {} ({} of {} runs)\n# run it: chaos run {}\n{}",
        from.display(),
        s.class,
        best.1.failed,
        best.1.runs,
        out.join("minimal.toml").display(),
        minimal.to_toml()
    );
    std::fs::write(out.join("minimal.toml"), toml)
        .map_err(|e| anyhow::anyhow!("cannot write {}: {e}", out.join("minimal.toml").display()))?;
    let replay = best
        .1
        .example
        .as_ref()
        .map(|d| format!("chaos run --replay {}", d.display()));
    results::write_json(
        &out.join("shrink.json"),
        &json!({
            "from": from.display().to_string(),
            "class": s.class,
            "faults_before": original.len(),
            "faults_after": best.0.len(),
            "faults": best.0,
            "reproduced": { "failed": best.1.failed, "runs": best.1.runs },
            "runs_spent": s.runs,
            "wall_s": s.began.elapsed().as_secs_f64(),
            "budget_exhausted": s.out_of_budget(),
            "example_run": best.1.example,
            "replay": replay,
            "steps": s.steps,
        }),
    )?;
    println!(
        "chaos shrink: {} -> {} fault(s), still {} in {} of {} runs; {} runs spent in {:.0} s{}\n  schedule: {}\n  replay:   {}",
        original.len(),
        best.0.len(),
        s.class,
        best.1.failed,
        best.1.runs,
        s.runs,
        s.began.elapsed().as_secs_f64(),
        if s.out_of_budget() { " (the budget ran out: smaller may exist)" } else { "" },
        out.join("minimal.toml").display(),
        replay.unwrap_or_default()
    );
    Ok(0)
}

#[cfg(test)]
mod tests {
    #[test]
    fn chunks_cover_every_fault_once() {
        for (len, n) in [(8, 2), (8, 3), (5, 4), (3, 8), (1, 2)] {
            let c = super::split(len, n);
            let all: Vec<usize> = c.iter().flatten().copied().collect();
            assert_eq!(all, (0..len).collect::<Vec<_>>(), "{len} into {n}");
            assert!(c.len() <= n);
        }
    }
}
