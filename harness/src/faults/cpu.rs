//! The CPU family: a box, a database node or a lock service's member starved to a share of one CPU, as under a noisy neighbour, and given its CPU back. On the process backend a cgroup of our own with a CFS quota (v1's `cpu` controller or v2's `cpu.max`), the processes moved in and back out; in containers the container's own cgroup when the engine runs here, else its CPU quota through the engine. The processes are moved in ahead, so only the quota's write lands at the instant.

use super::{at_instant, Applied, Invoke, Nemesis};
use crate::backend::CpuTarget;
use chaos_nemesis::{FaultKind, NemesisOp};
use serde_json::json;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};
use testcontainers::bollard::models::ContainerUpdateBody;
use testcontainers::bollard::Docker;

/// The CFS period a share is cut from, µs (the kernel's default); lengthened when the share's
/// quota would be under the kernel's 1 ms floor.
const PERIOD_US: i64 = 100_000;

/// Where a share is set: a cgroup of ours (the processes moved in ahead, to go back to `back`),
/// the container's own cgroup on this host, or the container through the engine.
pub enum Starved {
    Ours {
        dir: PathBuf,
        back: PathBuf,
        v2: bool,
    },
    Host {
        dir: PathBuf,
        v2: bool,
    },
    Engine {
        docker: Docker,
        id: String,
    },
}

/// Moving processes between cgroups takes ms (the kernel waits out an RCU grace period):
/// they are moved ahead, into a cgroup with no limit yet, so only the quota's one write lands
/// at the instant.
pub(super) fn lead() -> Duration {
    Duration::from_millis(60)
}

/// The quota and period for `share` of one CPU, µs.
pub fn quota(share: f64) -> (i64, i64) {
    let mut period = PERIOD_US;
    let mut quota = (share * period as f64).round() as i64;
    if quota < 1_000 {
        period = ((1_000.0 / share).round() as i64).min(1_000_000);
        quota = (share * period as f64).round().max(1_000.0) as i64;
    }
    (quota, period)
}

pub(super) async fn apply(
    n: &Nemesis,
    op: &NemesisOp,
    at: Instant,
    invoke: &Invoke,
) -> Result<Applied, String> {
    let FaultKind::Cpu { target, share } = &op.kind else {
        return Err(format!("{} is not a cpu fault", op.kind.verb()));
    };
    // One placement at a time, each kept until its cgroup is back in the map: a trigger firing
    // while the run's start still places waits for it.
    let _one = n.placing.lock().await;
    if op.heal {
        let taken = n.starved.lock().unwrap().remove(&op.fault);
        let placed = taken.and_then(|t| n.cgroups.lock().unwrap().remove(&t).map(|s| (t, s)));
        let Some((target, s)) = placed else {
            tokio::time::sleep_until(at.into()).await;
            invoke.fire();
            return Ok(Applied::now(json!({ "why": "its share was never taken" })));
        };
        let lifted = set(&s, None, at, invoke).await;
        // The cgroup stays for the target's next cpu fault; the run's end gives it back.
        n.cgroups.lock().unwrap().insert(target, s);
        return Ok(Applied {
            extra: json!({}),
            landed: Some(lifted?),
        });
    }
    let s = placed(n, target).await?;
    let (q, period) = quota(*share);
    let done = set(&s, Some((q, period)), at, invoke).await;
    let how = match &s {
        Starved::Ours { .. } => "cgroup",
        Starved::Host { .. } => "container's cgroup",
        Starved::Engine { .. } => "container quota (engine)",
    };
    n.cgroups.lock().unwrap().insert(target.clone(), s);
    let landed = done?;
    n.starved.lock().unwrap().insert(op.fault, target.clone());
    Ok(Applied {
        extra: json!({ "how": how, "quota_us": q, "period_us": period }),
        landed: Some(landed),
    })
}

/// Where `target`'s share is set: placed ahead (the run's start put every target a cpu fault
/// may name in its cgroup), or placed now (a mover restarted since is a new process).
/// The caller holds `n.placing` until the cgroup is back in `n.cgroups`.
async fn placed(n: &Nemesis, target: &str) -> Result<Starved, String> {
    let on = what(n, target).await?;
    let kept = n.cgroups.lock().unwrap().remove(target);
    match kept {
        Some(s) if holds(&s, &on) => Ok(s),
        old => {
            if let Some(old) = old {
                give_back(old).await?;
            }
            static MADE: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
            let k = MADE.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            let name = format!("chaos-{}-{k}-{target}", std::process::id());
            prepare(&name, on).await
        }
    }
}

/// What a cpu fault on `target` lands on while it runs: a box, a lock service's member, else
/// a database node.
async fn what(n: &Nemesis, target: &str) -> Result<CpuTarget, String> {
    if let Some(t) = n.movers.cpu_target(target) {
        return Ok(t);
    }
    let found = match n.lock_server(target) {
        Some(lock) => lock.lock().await.cpu_target(target),
        None => n.cluster.lock().await.cpu_target(target),
    };
    found.ok_or_else(|| format!("{target} is not running"))
}

/// Whether a cgroup of ours still holds the target's leading process (a container's is its own).
fn holds(s: &Starved, on: &CpuTarget) -> bool {
    let leader = match on {
        CpuTarget::Group(p) | CpuTarget::Tree(p) => *p,
        CpuTarget::Container { .. } => return !matches!(s, Starved::Ours { .. }),
    };
    match s {
        Starved::Ours { dir, .. } => std::fs::read_to_string(dir.join("cgroup.procs"))
            .is_ok_and(|t| t.lines().any(|l| l == leader.to_string())),
        _ => false,
    }
}

/// As the clock starts: every box or node a cpu fault names (every box for a role) placed
/// in a cgroup of its own with no limit, so a fault, a triggered one too, is one write.
pub(super) async fn place_ahead(n: &Nemesis) {
    let boxes = n.movers.boxes();
    let mut targets = std::collections::BTreeSet::new();
    for f in &n.scenario.faults {
        if let FaultKind::Cpu { target, .. } = &f.kind {
            match f.kind.role() {
                Some(_) => targets.extend(boxes.iter().cloned()),
                // The member that leads is known when the fault lands: placed then.
                None if target == crate::lock::LOCK_LEADER => {}
                None => {
                    targets.insert(target.clone());
                }
            }
        }
    }
    for t in targets {
        let _one = n.placing.lock().await;
        match placed(n, &t).await {
            Ok(s) => {
                n.cgroups.lock().unwrap().insert(t, s);
            }
            Err(e) => eprintln!("chaos: {t}: not placed ahead of its cpu fault: {e}"),
        }
    }
}

/// Ready to set a share with one write: our cgroup made and the processes moved in, or the
/// container's cgroup found on this host.
async fn prepare(name: &str, on: CpuTarget) -> Result<Starved, String> {
    match on {
        CpuTarget::Group(pgid) => enter(name, &group(pgid)),
        CpuTarget::Tree(pid) => enter(name, &tree(pid)),
        CpuTarget::Container { docker, id } => {
            let found = match crate::backend::docker::host_pid(&docker, &id).await {
                Some(pid) => hierarchy()
                    .ok()
                    .map(|(root, v2)| (cgroup_of(pid, &root, v2), v2))
                    .filter(|(dir, v2)| dir.join(limit_file(*v2)).is_file()),
                None => None,
            };
            Ok(match found {
                Some((dir, v2)) => Starved::Host { dir, v2 },
                None => Starved::Engine { docker, id },
            })
        }
    }
}

/// The file a share is written to.
fn limit_file(v2: bool) -> &'static str {
    match v2 {
        true => "cpu.max",
        false => "cpu.cfs_quota_us",
    }
}

/// The share written to a cgroup (`None`: no limit): one write (v1: the period first).
fn write_limit(dir: &Path, v2: bool, share: Option<(i64, i64)>) -> Result<(), String> {
    let w = |file: &str, text: String| {
        std::fs::write(dir.join(file), &text)
            .map_err(|e| format!("write {text} to {}: {e}", dir.join(file).display()))
    };
    match (v2, share) {
        (true, Some((q, p))) => w("cpu.max", format!("{q} {p}")),
        (true, None) => w("cpu.max", format!("max {PERIOD_US}")),
        (false, Some((q, p))) => {
            w("cpu.cfs_period_us", p.to_string()).and_then(|_| w("cpu.cfs_quota_us", q.to_string()))
        }
        (false, None) => w("cpu.cfs_quota_us", "-1".into()),
    }
}

/// Set the share (`None`: no limit) at `at`: a cgroup's file at the instant, or the engine's
/// update. Returns when it took.
async fn set(
    s: &Starved,
    share: Option<(i64, i64)>,
    at: Instant,
    invoke: &Invoke,
) -> Result<Instant, String> {
    let (dir, v2) = match s {
        Starved::Ours { dir, v2, .. } | Starved::Host { dir, v2 } => (dir.clone(), *v2),
        Starved::Engine { docker, id } => {
            tokio::time::sleep_until(at.into()).await;
            invoke.fire();
            let (q, p) = share.unwrap_or((-1, PERIOD_US));
            let body = ContainerUpdateBody {
                cpu_period: Some(p),
                cpu_quota: Some(q),
                ..Default::default()
            };
            tokio::time::timeout(
                crate::backend::docker::engine::CALL_TIMEOUT,
                docker.update_container(id, body),
            )
            .await
            .map_err(|_| "the engine did not answer the CPU quota's update".to_string())?
            .map_err(|e| format!("update the container's CPU quota: {e}"))?;
            return Ok(Instant::now());
        }
    };
    // A container that exited took its cgroup with it: nothing to set or lift.
    let gone = matches!(s, Starved::Host { .. }) && !dir.is_dir();
    at_instant(at, invoke, move || match gone {
        true => Ok(Instant::now()),
        false => write_limit(&dir, v2, share).map(|_| Instant::now()),
    })
    .await
}

/// After the share is lifted: the processes out of our cgroup (those forked meanwhile too) and
/// the cgroup removed. A container's cgroup is its own.
pub(super) async fn give_back(s: Starved) -> Result<(), String> {
    if let Starved::Ours { dir, back, .. } = s {
        for _ in 0..50 {
            if empty(&dir, &back) {
                return Ok(());
            }
            tokio::time::sleep(Duration::from_millis(2)).await;
        }
        return Err(format!("{} would not empty", dir.display()));
    }
    Ok(())
}

/// One try at moving every process of `dir` back to `back` and removing `dir`.
fn empty(dir: &Path, back: &Path) -> bool {
    let pids = std::fs::read_to_string(dir.join("cgroup.procs")).unwrap_or_default();
    for pid in pids.lines() {
        // A process that exited meanwhile is gone from the list by the next read.
        let _ = std::fs::write(back.join("cgroup.procs"), pid);
    }
    std::fs::remove_dir(dir).is_ok()
}

/// On a path out without a heal (an error, a Ctrl-C): our cgroups given back at once (a
/// container's share goes with its container).
pub(super) fn give_back_now(s: Starved) {
    if let Starved::Ours { dir, back, .. } = s {
        for _ in 0..50 {
            if empty(&dir, &back) {
                return;
            }
            std::thread::sleep(Duration::from_millis(2));
        }
    }
}

/// Where the kernel's CPU controller is: v1's own hierarchy, or v2's unified one (with its cpu
/// controller available).
fn hierarchy() -> Result<(PathBuf, bool), String> {
    for d in ["/sys/fs/cgroup/cpu", "/sys/fs/cgroup/cpu,cpuacct"] {
        if Path::new(d).join("cpu.cfs_quota_us").is_file() {
            return Ok((PathBuf::from(d), false));
        }
    }
    let root = Path::new("/sys/fs/cgroup");
    let controllers = std::fs::read_to_string(root.join("cgroup.controllers")).unwrap_or_default();
    if controllers.split_whitespace().any(|c| c == "cpu") {
        return Ok((root.to_path_buf(), true));
    }
    Err("a cpu fault on the process backend needs a cgroup CPU controller (v1 /sys/fs/cgroup/cpu, or v2 with cpu in /sys/fs/cgroup/cgroup.controllers); use --backend docker".into())
}

/// The cgroup `pid` is in now, in the CPU hierarchy at `root`.
fn cgroup_of(pid: i32, root: &Path, v2: bool) -> PathBuf {
    let text = std::fs::read_to_string(format!("/proc/{pid}/cgroup")).unwrap_or_default();
    let rel = text.lines().find_map(|l| {
        let mut parts = l.splitn(3, ':');
        let (_, controllers, path) = (parts.next()?, parts.next()?, parts.next()?);
        let ours = match v2 {
            true => controllers.is_empty(),
            false => controllers.split(',').any(|c| c == "cpu"),
        };
        ours.then(|| path.trim_start_matches('/').to_string())
    });
    root.join(rel.unwrap_or_default())
}

/// Every process in group `pgid`.
fn group(pgid: i32) -> Vec<i32> {
    processes()
        .filter(|(_, _, g)| *g == pgid)
        .map(|(p, _, _)| p)
        .collect()
}

/// `pid` and its children.
fn tree(pid: i32) -> Vec<i32> {
    let mut out = vec![pid];
    out.extend(
        processes()
            .filter(|(_, pp, _)| *pp == pid)
            .map(|(p, _, _)| p),
    );
    out
}

/// (pid, parent, process group) of every process, from /proc.
fn processes() -> impl Iterator<Item = (i32, i32, i32)> {
    std::fs::read_dir("/proc")
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|e| {
            let pid: i32 = e.file_name().to_str()?.parse().ok()?;
            let stat = std::fs::read_to_string(e.path().join("stat")).ok()?;
            // After the command's ")": state, ppid, pgrp.
            let rest = &stat[stat.rfind(')')? + 2..];
            let mut f = rest.split_whitespace().skip(1);
            Some((pid, f.next()?.parse().ok()?, f.next()?.parse().ok()?))
        })
}

/// A cgroup of our own, with no limit yet, and `pids` moved into it.
fn enter(name: &str, pids: &[i32]) -> Result<Starved, String> {
    let leader = *pids.first().ok_or("no process to starve")?;
    let (root, v2) = hierarchy()?;
    let back = cgroup_of(leader, &root, v2);
    let dir = root.join(name);
    if v2 {
        // The root may hand its cpu controller down (the no-internal-processes rule spares it).
        let _ = std::fs::write(root.join("cgroup.subtree_control"), "+cpu");
    }
    std::fs::create_dir(&dir).map_err(|e| {
        format!(
            "create the cgroup {}: {e} (a cpu fault needs root on the process backend)",
            dir.display()
        )
    })?;
    let procs = dir.join("cgroup.procs");
    let moved = pids
        .iter()
        .try_for_each(|p| match std::fs::write(&procs, p.to_string()) {
            // One that exited since the list was read.
            Err(_) if !Path::new(&format!("/proc/{p}")).exists() => Ok(()),
            r => r.map_err(|e| format!("move {p} into {}: {e}", dir.display())),
        });
    let s = Starved::Ours { dir, back, v2 };
    if let Err(e) = moved {
        give_back_now(s);
        return Err(e);
    }
    Ok(s)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_share_is_a_quota_of_the_period_never_under_the_kernel_s_floor() {
        assert_eq!(quota(0.05), (5_000, 100_000));
        assert_eq!(quota(0.5), (50_000, 100_000));
        assert_eq!(quota(2.0), (200_000, 100_000));
        // 0.5% of 100 ms is under 1 ms: the period grows to 200 ms.
        assert_eq!(quota(0.005), (1_000, 200_000));
    }

    #[test]
    fn a_process_s_group_and_its_children_are_read_from_proc() {
        let me = std::process::id() as i32;
        let mut child = std::process::Command::new("sleep")
            .arg("5")
            .spawn()
            .unwrap();
        let kids = tree(me);
        let _ = child.kill();
        let _ = child.wait();
        assert_eq!(kids[0], me);
        assert!(kids.contains(&(child.id() as i32)), "{kids:?}");
    }
}
