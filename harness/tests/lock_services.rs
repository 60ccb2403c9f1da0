//! The lock service as a part of the testbed (DESIGN section 11): the GC-pause seed with the
//! lease held in a real etcd 3.4 member and in a Postgres advisory lock, by the reference mover
//! and by a mover built on python3-etcd3's stock `Lock` recipe; grants read from the service
//! itself. Lease only loses data; fenced by the service's own token (etcd's revision, or a
//! token drawn under the advisory lock) refuses the stale write. Each stored run is re-judged
//! by `chaos check` from its directory alone.

use crate::common::*;
use crate::support::figures;
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
    let name = format!("lock-{scenario}{}", extra.join("").replace('/', "_"));
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

/// The record's grants came from the service: every grant ends (an etcd DELETE at the
/// lease's expiry, or the advisory session's end) and the holders are boxes.
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
    grants
}

/// Lease only: the paused holder's writes after its grant ended destroy data.
fn lease_only_loses_data(r: &Ran) {
    lease_only_accepts_a_stale_write(r);
    let o = &r.outcome;
    assert!(
        o.stats["rows_lost"].as_u64().unwrap_or(0) > 0,
        "the paused holder's tidy-up destroys data: {}",
        o.summary()
    );
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

/// Fenced with the service's token: the paused holder's write is refused, nothing lost.
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
fn gc_pause_on_etcd_lease_only_loses_data() {
    lease_only_loses_data(&run("gc-pause", &["--lock", "etcd"], "invalid"));
}

#[test]
fn gc_pause_on_etcd_fenced_by_the_revision_refuses_the_stale_write() {
    let r = run("gc-pause", &["--lock", "etcd", "--fencing", "on"], "valid");
    fenced_refuses_the_stale_write(&r);
    // etcd's token is the owner key's revision: every grant's token is a revision of one
    // member's store, so they rise with every write to etcd, not one by one.
    let grants = grants_from_the_service(&r.outcome);
    let tokens: Vec<i64> = grants.iter().filter_map(|g| g["token"].as_i64()).collect();
    assert!(tokens.windows(2).all(|w| w[0] < w[1]), "{tokens:?}");
}

/// The April night with the lease in etcd: the member's 80 s of downtime expires no lease (its
/// return renews them all), so box 2 is held away from it past the renewed lease
/// (april.toml's etcd-only fault); box 3 or another then takes the lock, and box 2's tidy-up
/// loses a turbine as on the claim row.
#[test]
fn april_on_etcd_lease_only_loses_a_turbine() {
    lease_only_loses_data(&run("april", &["--lock", "etcd"], "invalid"));
}

/// The same night fenced by the owner key's revision: box 2's stale write is refused (the
/// danger was met, not missed) and nothing is lost.
#[test]
fn april_on_etcd_fenced_by_the_revision_loses_nothing() {
    fenced_refuses_the_stale_write(&run(
        "april",
        &["--lock", "etcd", "--fencing", "on"],
        "valid",
    ));
}

#[test]
fn gc_pause_on_an_advisory_lock_lease_only_loses_data() {
    let r = run("gc-pause", &["--lock", "advisory"], "invalid");
    lease_only_loses_data(&r);
}

#[test]
fn gc_pause_on_an_advisory_lock_fenced_by_a_token_drawn_under_it() {
    fenced_refuses_the_stale_write(&run(
        "gc-pause",
        &["--lock", "advisory", "--fencing", "on"],
        "valid",
    ));
}

/// The recipe's mover stops when a renewal says the lock is gone (it never tidies up), so
/// nothing is deleted; its batches after the pause land on a shard the new holder wrote.
#[test]
fn python3_etcd3_lock_recipe_lease_only_accepts_a_stale_write() {
    let mover = repo().join("workloads/examples/etcd3-mover.py");
    let cmd = format!("{}", mover.display());
    let r = run(
        "gc-pause",
        &[
            "--lock",
            "etcd",
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
fn python3_etcd3_lock_recipe_fenced_by_the_revision_is_valid() {
    let mover = repo().join("workloads/examples/etcd3-mover.py");
    let cmd = format!("ETCD3_MOVER_FENCING=on {}", mover.display());
    let r = run(
        "gc-pause",
        &[
            "--lock",
            "etcd",
            "--mover-cmd",
            &cmd,
            "--mover-ready",
            "gate",
        ],
        "valid",
    );
    fenced_refuses_the_stale_write(&r);
}

/// The nemesis's `pause` on the role `lock-leader`: resolved to a member when it landed, and
/// the members named (the story names who led).
fn leader_pause_named(o: &Outcome) -> String {
    let pause: Value = o
        .history
        .lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .find(|op| {
            op["process"] == "nemesis"
                && op["f"] == "pause"
                && op["type"] == "ok"
                && op["value"]["role"] == "lock-leader"
        })
        .unwrap_or_else(|| panic!("no pause of lock-leader landed\n{}", o.summary()));
    let target = pause["value"]["target"].as_str().unwrap_or("").to_string();
    assert!(
        ["lock-1", "lock-2", "lock-3"].contains(&target.as_str()),
        "lock-leader resolved to a member: {pause}"
    );
    assert_eq!(
        pause["value"]["leader"].as_str(),
        Some(target.as_str()),
        "{pause}"
    );
    assert_eq!(
        pause["value"]["members"], "lock-1, lock-2, lock-3",
        "{pause}"
    );
    let resume = o
        .history
        .lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .find(|op| {
            op["process"] == "nemesis"
                && op["f"] == "resume"
                && op["type"] == "ok"
                && op["value"]["role"] == "lock-leader"
        })
        .unwrap_or_else(|| panic!("the paused leader was never resumed\n{}", o.summary()));
    assert_eq!(
        resume["value"]["target"].as_str(),
        Some(target.as_str()),
        "the same member resumed: {resume}"
    );
    target
}

/// The seed's sharp edge on a three-member etcd: the leader paused with the holder; lease
/// only loses data.
#[test]
fn etcd_leader_three_members_lease_only_loses_data() {
    let r = run("etcd-leader", &[], "invalid");
    lease_only_loses_data(&r);
    let led = leader_pause_named(&r.outcome);
    let figures = read_json(&r.dir.join("figures.json"));
    println!(
        "lock-leader was {led}; three members up in {} s",
        figures["wall_s"]["lock_started"]
    );
    assert!(figures["wall_s"]["lock_started"].as_f64().unwrap_or(0.0) > 0.0);
}

/// The same, fenced by the owner key's revision: the stale write is refused.
#[test]
fn etcd_leader_three_members_fenced_by_the_revision_is_valid() {
    let r = run("etcd-leader", &["--fencing", "on"], "valid");
    fenced_refuses_the_stale_write(&r);
    leader_pause_named(&r.outcome);
}

/// A put through `addr` within a second: whether the member could commit it.
async fn commits(addr: &str) -> bool {
    let options = etcd_client::ConnectOptions::new()
        .with_connect_timeout(std::time::Duration::from_millis(500))
        .with_timeout(std::time::Duration::from_secs(1));
    let Ok(mut c) = etcd_client::Client::connect([format!("http://{addr}")], Some(options)).await
    else {
        return false;
    };
    c.put("/peer-test", "x", None).await.is_ok()
}

/// Peer traffic goes through the proxy, one link per direction: with lock-1's four peer links
/// down it is cut off from the others. It names no leader and cannot commit, while lock-2 and
/// lock-3 agree on a leader that is not lock-1 and commit; healed, lock-1 commits again.
#[test]
fn a_member_whose_peer_links_are_down_is_cut_off_from_the_others() {
    use chaos_harness::links::Links;
    use chaos_harness::lock::{LockKind, LockSection, LockServer};
    let _one = one_at_a_time();
    let logs = temp_dir("etcd-peers");
    let run_id = format!("test-etcd-peers-{}", std::process::id());
    let rt = tokio::runtime::Runtime::new().unwrap();
    rt.block_on(async {
        let section = LockSection {
            service: LockKind::Etcd,
            members: 3,
            ..Default::default()
        };
        let backend = chaos_harness::backend::BackendKind::Process;
        let mut lock = LockServer::plan(&section, backend, &run_id, &logs)
            .await
            .unwrap();
        let links = Links::start(None).await.unwrap();
        let peers = lock.peer_links();
        assert_eq!(peers.len(), 6, "{peers:?}");
        for (link, listen, upstream) in &peers {
            links.add(link, listen, upstream).await.unwrap();
        }
        lock.launch().await.unwrap();
        println!("{}", lock.describe().unwrap());
        let addr = |n: &str| lock.upstream(n).unwrap();
        assert!(
            commits(&addr("lock-1")).await,
            "the cluster commits before the cut"
        );
        let cut = [
            "lock-1->lock-2",
            "lock-1->lock-3",
            "lock-2->lock-1",
            "lock-3->lock-1",
        ];
        for l in cut {
            links.down_with(links.client(), l).await.unwrap();
        }
        // The design's promise, whatever the timing: once cut off, lock-1 can name no leader
        // (etcd's leader steps down without a quorum) and the other two elect one of them.
        let began = std::time::Instant::now();
        let views = loop {
            let views = lock.views().await;
            let one = &views[0];
            let others_agree = views[1].1.is_some()
                && views[1].1 == views[2].1
                && views[1].1.as_deref() != Some("lock-1");
            if one.1.is_none() && others_agree {
                break views;
            }
            assert!(
                began.elapsed().as_secs() < 30,
                "lock-1 still in the cluster 30 s after its peer links went down: {views:?}"
            );
            tokio::time::sleep(std::time::Duration::from_millis(50)).await;
        };
        println!("cut off: {views:?}");
        assert!(
            !commits(&addr("lock-1")).await,
            "lock-1 commits nothing on its own"
        );
        assert!(
            commits(&addr("lock-2")).await,
            "lock-2 and lock-3 are a majority"
        );
        let log = std::fs::read_to_string(logs.join("lock-1.log")).unwrap();
        assert!(
            log.contains("lost TCP streaming connection with remote peer")
                || log.contains("peer became inactive"),
            "lock-1's log says it lost its peers"
        );
        for l in cut {
            links.heal(l).await.unwrap();
        }
        let began = std::time::Instant::now();
        while !commits(&addr("lock-1")).await {
            assert!(
                began.elapsed().as_secs() < 30,
                "lock-1 never rejoined: {:?}",
                lock.views().await
            );
        }
        lock.stop().await;
        links.shutdown().await;
    });
    let data = chaos_harness::backend::process::data_root().join(&run_id);
    assert_none_left(&data.display().to_string(), 10);
    let _ = std::fs::remove_dir_all(&data);
}

/// `chaos up --lock etcd` starts the member beside the databases and prints where it answers
/// (and each box's link to it, as an etcd endpoint); `chaos down` stops it: no etcd left.
#[test]
fn up_with_etcd_prints_the_member_and_down_stops_it() {
    use std::io::{BufRead, BufReader};
    use std::process::{Command, Stdio};
    let dir = temp_dir("up-etcd");
    let data = dir.join("data");
    let state = dir.join("up.json");
    let mut up = Command::new(chaos())
        .args(["up", "--lock", "etcd", "--no-seed", "--results"])
        .arg(dir.join("results"))
        .current_dir(repo())
        .env("CHAOS_DATA_DIR", &data)
        .env("CHAOS_STATE_FILE", &state)
        .stdout(Stdio::piped())
        .spawn()
        .expect("start chaos up");
    let mut lines = BufReader::new(up.stdout.take().expect("stdout")).lines();
    let mut printed = Vec::new();
    while let Some(Ok(line)) = lines.next() {
        printed.push(line.clone());
        if line.contains("running until") {
            break;
        }
    }
    let down = Command::new(chaos())
        .arg("down")
        .env("CHAOS_STATE_FILE", &state)
        .output()
        .expect("run chaos down");
    let _ = up.wait();
    assert!(down.status.success());
    assert!(
        printed.iter().any(|l| l.starts_with("lock ")
            && l.contains("http://127.0.0.1:")
            && l.contains("etcd")),
        "{printed:?}"
    );
    assert!(
        printed
            .iter()
            .any(|l| l.starts_with("box-2->lock") && l.contains("http://127.0.0.1:")),
        "{printed:?}"
    );
    // The member's data lives under the data dir: nothing mentions it once down returned.
    assert_none_left(&data.display().to_string(), 10);
}

/// `chaos sweep --lock` checks every lease against the service before any run: etcd's leases
/// are whole seconds, so a fixed scale that makes one a fraction is refused in one line.
#[test]
fn sweep_with_etcd_refuses_a_lease_it_cannot_hold() {
    let out = std::process::Command::new(chaos())
        .args([
            "sweep",
            "--scenario",
            "sweep",
            "--lock",
            "etcd",
            "--lease",
            "2s,5s",
            "--time-scale-ms",
            "10",
        ])
        .current_dir(repo())
        .output()
        .expect("run chaos sweep");
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(3), "{err}");
    assert!(err.contains("whole seconds"), "{err}");
}
