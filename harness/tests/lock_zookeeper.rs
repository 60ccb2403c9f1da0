//! ZooKeeper 3.8 as the lock service (issue 35): the GC-pause seed with the lease held by a
//! ZooKeeper session, by the reference mover (the lock recipe on the `zookeeper-client` crate)
//! and by a mover built on python3-kazoo's stock `Lock`; grants read from the server itself (a
//! watch on the lock path). Lease only loses data, or a shard accepts a stale write; fenced by
//! the owner node's `czxid` refuses it. Each stored run is re-judged by `chaos check`.

mod common;
#[path = "support/figures.rs"]
mod figures;

use common::*;
use figures::Outcome;
use serde_json::Value;
use std::path::PathBuf;

/// A finished run: its outcome and where it is stored.
struct Ran {
    outcome: Outcome,
    dir: PathBuf,
}

fn run(scenario: &str, extra: &[&str], expect: &str) -> Ran {
    require_mover();
    let name = format!(
        "zk-{scenario}{}",
        extra.join("").replace(['/', ' ', '='], "_")
    );
    let (code, dir) = run_scenario(&name, scenario, extra, expect);
    Ran {
        outcome: Outcome::read(code, &dir),
        dir,
    }
}

/// `chaos check DIR` gives the stored run's verdict again, with no server running.
fn rejudged_the_same(r: &Ran) {
    let out = std::process::Command::new(chaos())
        .args(["check", &r.dir.display().to_string()])
        .output()
        .expect("run chaos check");
    let again = read_json(&r.dir.join("verdict.json"));
    assert_eq!(
        again["valid"],
        r.outcome.verdict["valid"],
        "chaos check re-judged differently: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let expected = match r.outcome.verdict["valid"].as_str() {
        Some("valid") => 0,
        Some("invalid") => 1,
        _ => 2,
    };
    assert_eq!(out.status.code(), Some(expected));
}

/// The record's grants came from the ensemble: at least two (a new owner after the pause), each
/// named by its box from the node's data, their tokens (czxids) rising.
fn grants_from_the_service(o: &Outcome) -> Vec<Value> {
    let grants = o.stats["grants"].as_array().cloned().unwrap_or_default();
    assert!(
        grants.len() >= 2,
        "a new holder after the pause: {grants:?}"
    );
    for g in &grants {
        let holder = g["holder"].as_str().unwrap_or("");
        assert!(holder.starts_with("box-"), "holder named by its box: {g}");
    }
    let tokens: Vec<i64> = grants.iter().filter_map(|g| g["token"].as_i64()).collect();
    assert!(
        tokens.windows(2).all(|w| w[0] < w[1]),
        "czxids rise: {tokens:?}"
    );
    grants
}

/// Lease only: a shard accepts the paused holder's write after the newer holder's.
fn lease_only_accepts_a_stale_write(r: &Ran) {
    let o = &r.outcome;
    println!("{}", o.summary());
    assert_eq!(o.code, Some(0), "verdict: {}", o.verdict);
    assert_eq!(o.verdict["valid"], "invalid");
    grants_from_the_service(o);
    let classes = o.classes();
    assert!(
        classes.iter().any(|c| c == "stale-token-write"),
        "a shard accepted the older grant's write after the newer one's: {classes:?}"
    );
    rejudged_the_same(r);
}

/// Fenced with the owner node's czxid: the paused holder's write is refused, nothing lost.
fn fenced_refuses_the_stale_write(r: &Ran) {
    let o = &r.outcome;
    println!("{}", o.summary());
    assert_eq!(o.code, Some(0), "verdict: {}", o.verdict);
    assert_eq!(o.stats["rows_lost"].as_u64(), Some(0));
    let grants = grants_from_the_service(o);
    let (holder, token) = (
        grants[0]["holder"].as_str().unwrap_or("").to_string(),
        grants[0]["token"].as_i64().unwrap_or(-1),
    );
    let refused: Value = serde_json::from_str(o.refusal_by(&holder)).expect("a history line");
    assert_eq!(
        refused["value"]["token"].as_i64(),
        Some(token),
        "the first grant's token was refused: {refused}"
    );
    assert!(
        refused["value"]["shard_token"].as_i64().unwrap_or(0) > token,
        "after a newer grant's token was served: {refused}"
    );
    rejudged_the_same(r);
}

#[test]
fn gc_pause_on_zookeeper_lease_only_loses_data() {
    let r = run("gc-pause", &["--lock", "zookeeper"], "invalid");
    lease_only_accepts_a_stale_write(&r);
    assert!(
        r.outcome.stats["rows_lost"].as_u64().unwrap_or(0) > 0,
        "the paused holder's tidy-up destroys data: {}",
        r.outcome.summary()
    );
}

#[test]
fn gc_pause_on_zookeeper_fenced_by_the_czxid_refuses_the_stale_write() {
    let r = run(
        "gc-pause",
        &["--lock", "zookeeper", "--fencing", "on"],
        "valid",
    );
    fenced_refuses_the_stale_write(&r);
}

/// The recipe's mover stops when a look says the lock is gone (it never tidies up), so nothing
/// is deleted; its batches after the pause land on a shard the new holder wrote.
#[test]
fn python3_kazoo_lock_recipe_lease_only_accepts_a_stale_write() {
    let mover = repo().join("workloads/examples/kazoo-mover.py");
    let cmd = format!("{}", mover.display());
    let r = run(
        "gc-pause",
        &[
            "--lock",
            "zookeeper",
            "--mover-cmd",
            &cmd,
            "--mover-ready",
            "gate",
        ],
        "invalid",
    );
    lease_only_accepts_a_stale_write(&r);
}

#[test]
fn python3_kazoo_lock_recipe_fenced_by_the_czxid_is_valid() {
    let mover = repo().join("workloads/examples/kazoo-mover.py");
    let cmd = format!("KAZOO_MOVER_FENCING=on {}", mover.display());
    let r = run(
        "gc-pause",
        &[
            "--lock",
            "zookeeper",
            "--mover-cmd",
            &cmd,
            "--mover-ready",
            "gate",
        ],
        "valid",
    );
    fenced_refuses_the_stale_write(&r);
}

/// The shipped scenario `zk-session`: the holder's session expires under its pause, the
/// ensemble deletes its node and the next in line owns the lock. Lease only loses data; the
/// story names the pause and the new holder.
#[test]
fn zk_session_lease_only_loses_data_and_fenced_is_valid() {
    let r = run("zk-session", &[], "invalid");
    lease_only_accepts_a_stale_write(&r);
    assert!(
        r.outcome.stats["rows_lost"].as_u64().unwrap_or(0) > 0,
        "{}",
        r.outcome.summary()
    );
    let fenced = run("zk-session", &["--fencing", "on"], "valid");
    fenced_refuses_the_stale_write(&fenced);
}
