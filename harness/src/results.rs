//! The run directory: `results/<scenario>/<start>-<seed>/` with config, history, audit, final state, verdict, report and logs; `results/latest` points at the newest judged run (a run the harness failed keeps its reason in `no-verdict.txt`).

use std::path::{Path, PathBuf};

/// A run's directory and the names of what goes in it.
pub struct RunDir {
    pub path: PathBuf,
    pub logs: PathBuf,
    pub run_id: String,
    root: PathBuf,
}

/// Where a run the harness failed (a setup mistake, a database that would not start) says
/// why it has no verdict, in one line: `chaos check` on that folder prints it.
pub const NO_VERDICT_FILE: &str = "no-verdict.txt";

impl RunDir {
    /// Create `root/<scenario>/<YYYYmmddTHHMMSSZ>-<seed>/logs`. `root/latest` moves to it
    /// only once it is judged ([`RunDir::settle`]).
    pub fn create(root: &Path, scenario: &str, seed: u64) -> anyhow::Result<RunDir> {
        let stamp = utc_stamp(std::time::SystemTime::now());
        let mut path = root.join(scenario).join(format!("{stamp}-{seed}"));
        let mut n = 1;
        while path.exists() {
            n += 1;
            path = root.join(scenario).join(format!("{stamp}-{seed}-{n}"));
        }
        let logs = path.join("logs");
        std::fs::create_dir_all(&logs).map_err(|e| {
            anyhow::anyhow!("cannot create the run directory {}: {e}", logs.display())
        })?;
        // Absolute: containers bind-mount it, and movers find their gates and clock files in it.
        let logs = std::path::absolute(&logs).unwrap_or(logs);
        let run_id = format!("{}-{}-{}", scenario, stamp, std::process::id());
        Ok(RunDir {
            path,
            logs,
            run_id,
            root: root.to_path_buf(),
        })
    }

    /// The end of a run: judged, `root/latest` points at it (so `chaos check results/latest`
    /// and `chaos shrink results/latest` always find a run with a verdict); failed in the
    /// harness, its reason goes to [`NO_VERDICT_FILE`] and `latest` stays where it was.
    pub fn settle<T>(&self, outcome: anyhow::Result<T>) -> anyhow::Result<T> {
        match &outcome {
            Ok(_) => {
                let latest = self.root.join("latest");
                let _ = std::fs::remove_file(&latest);
                let rel = self.path.strip_prefix(&self.root).unwrap_or(&self.path);
                let _ = std::os::unix::fs::symlink(rel, &latest);
            }
            Err(e) => {
                let line = format!("{}\n", crate::one_line(e));
                let _ = std::fs::write(self.file(NO_VERDICT_FILE), line);
            }
        }
        outcome
    }

    pub fn file(&self, name: &str) -> PathBuf {
        self.path.join(name)
    }
}

/// Write pretty JSON, naming the file on failure.
pub fn write_json(path: &Path, value: &impl serde::Serialize) -> anyhow::Result<()> {
    let text = serde_json::to_string_pretty(value)?;
    std::fs::write(path, text).map_err(|e| anyhow::anyhow!("cannot write {}: {e}", path.display()))
}

/// Read JSON, naming the file on failure.
pub fn read_json<T: serde::de::DeserializeOwned>(path: &Path) -> anyhow::Result<T> {
    let text = std::fs::read_to_string(path)
        .map_err(|e| anyhow::anyhow!("cannot read {}: {e}", path.display()))?;
    serde_json::from_str(&text).map_err(|e| anyhow::anyhow!("{}: {e}", path.display()))
}

/// A JSON file of the run directory: `None` when it is absent; an error
/// naming the file when it cannot be read or is not what it should be.
pub fn read_optional<T: serde::de::DeserializeOwned>(path: &Path) -> anyhow::Result<Option<T>> {
    let text = match std::fs::read_to_string(path) {
        Ok(text) => text,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => anyhow::bail!("{}: cannot read: {e}", path.display()),
    };
    serde_json::from_str(&text)
        .map(Some)
        .map_err(|e| anyhow::anyhow!("{}: corrupt: {e}", path.display()))
}

/// The project's git commit (with `-dirty` when the tree has changes), or "unknown".
pub fn git_commit() -> String {
    let run = |args: &[&str]| {
        std::process::Command::new("git")
            .args(args)
            .current_dir(env!("CARGO_MANIFEST_DIR"))
            .output()
            .ok()
            .filter(|o| o.status.success())
    };
    match run(&["rev-parse", "HEAD"]) {
        Some(o) => {
            let mut c = String::from_utf8_lossy(&o.stdout).trim().to_string();
            if run(&["diff", "--quiet", "HEAD"]).is_none() {
                c.push_str("-dirty");
            }
            c
        }
        None => "unknown".into(),
    }
}

/// `20261130T064455Z` for a wall-clock time.
pub fn utc_stamp(t: std::time::SystemTime) -> String {
    let secs = t
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs() as i64)
        .unwrap_or(0);
    let (days, rem) = (secs.div_euclid(86_400), secs.rem_euclid(86_400));
    let (y, m, d) = civil_from_days(days);
    format!(
        "{y:04}{m:02}{d:02}T{:02}{:02}{:02}Z",
        rem / 3600,
        rem / 60 % 60,
        rem % 60
    )
}

fn civil_from_days(z: i64) -> (i64, i64, i64) {
    let z = z + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    (yoe + era * 400 + if m <= 2 { 1 } else { 0 }, m, d)
}

#[cfg(test)]
mod tests {
    #[test]
    fn stamps_are_utc() {
        let t = std::time::UNIX_EPOCH + std::time::Duration::from_secs(1_776_116_675);
        assert_eq!(super::utc_stamp(t), "20260413T214435Z");
    }
}
