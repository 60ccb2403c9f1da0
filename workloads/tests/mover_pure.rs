//! Tests of the mover's pure parts: flags and env parsing, the pacing arithmetic, keyset pages and history line formats.

use chaos_workloads::mover::config::{parse_shard_urls, Election, Fencing, OnLost, OnRenewFailure};
use chaos_workloads::mover::history::{fenced_message, fenced_value, line};
use chaos_workloads::mover::pacing::{batch_rows, split_page, Pace, Page};
use chaos_workloads::mover::{Args, Env, Settings};
use clap::Parser;
use std::collections::HashMap;
use std::time::Duration;

fn vars(extra: &[(&str, &str)]) -> HashMap<String, String> {
    let mut m: HashMap<String, String> = [
        ("CHAOS_BOX", "box-2"),
        ("CHAOS_JOB", "rebalance"),
        ("CHAOS_ROUTING_URL", "postgres://postgres@127.0.0.1:5432/routing"),
        (
            "CHAOS_SHARD_URLS",
            "shard1=postgres://postgres@127.0.0.1:5433/shard1,shard2=postgres://postgres@127.0.0.1:5434/shard2,shard3=postgres://postgres@127.0.0.1:5435/shard3",
        ),
        ("CHAOS_LEASE_MS", "600"),
        ("CHAOS_POLL_MS", "40"),
        ("CHAOS_COPY_MS", "250"),
    ]
    .iter()
    .map(|(k, v)| (k.to_string(), v.to_string()))
    .collect();
    for (k, v) in extra {
        if v.is_empty() {
            m.remove(*k);
        } else {
            m.insert(k.to_string(), v.to_string());
        }
    }
    m
}

fn env(extra: &[(&str, &str)]) -> Result<Env, String> {
    let m = vars(extra);
    Env::from_vars(|k| m.get(k).cloned()).map_err(|e| e.0)
}

#[test]
fn env_parses_the_protocol_variables() {
    let e = env(&[]).unwrap();
    assert_eq!(e.box_name, "box-2");
    assert_eq!(e.job, "rebalance");
    assert_eq!(
        (e.lease_ms, e.poll_ms, e.copy_ms, e.batches),
        (600, 40, 250, 10)
    );
    let names: Vec<&str> = e.shards.iter().map(|s| s.name.as_str()).collect();
    assert_eq!(names, ["shard1", "shard2", "shard3"]);
    assert_eq!(e.shard("shard2").unwrap().display, "127.0.0.1:5434/shard2");
    assert_eq!(e.routing_display, "127.0.0.1:5432/routing");
    assert_eq!(env(&[("CHAOS_BATCHES", "4")]).unwrap().batches, 4);
    let redis = env(&[
        ("CHAOS_LOCK", "redis"),
        ("CHAOS_LOCK_URLS", "redis://127.0.0.1:7"),
    ])
    .unwrap();
    assert_eq!(
        redis.lock_key, "lock:rebalance",
        "redis-py's Lock(name) key"
    );
}

#[test]
fn bad_env_names_the_variable_in_one_line() {
    for (extra, needle) in [
        (vec![("CHAOS_BOX", "")], "CHAOS_BOX is not set"),
        (vec![("CHAOS_LEASE_MS", "60s")], "CHAOS_LEASE_MS is \"60s\""),
        (vec![("CHAOS_POLL_MS", "0")], "CHAOS_POLL_MS is 0"),
        (vec![("CHAOS_COPY_MS", "")], "CHAOS_COPY_MS is not set"),
        (vec![("CHAOS_BATCHES", "-1")], "CHAOS_BATCHES"),
        (
            vec![("CHAOS_ROUTING_URL", "mysql://u:secret@h/db")],
            "CHAOS_ROUTING_URL",
        ),
        (vec![("CHAOS_SHARD_URLS", "postgres://h/db")], "has no '='"),
        (
            vec![("CHAOS_SHARD_URLS", "s1=localhost:5432")],
            "CHAOS_SHARD_URLS (s1)",
        ),
        (
            vec![("CHAOS_SHARD_URLS", "s1=postgres://h/a,s1=postgres://h/b")],
            "named twice",
        ),
        (vec![("CHAOS_LOCK", "redis")], "CHAOS_LOCK_URLS is not set"),
        (
            vec![
                ("CHAOS_LOCK", "redis"),
                ("CHAOS_LOCK_URLS", "127.0.0.1:6379"),
            ],
            "redis://host:port",
        ),
        (
            vec![("CHAOS_LOCK", "memcached")],
            "etcd, redis or zookeeper",
        ),
    ] {
        let err = env(&extra).unwrap_err();
        assert!(err.contains(needle), "{err:?} should contain {needle:?}");
        assert!(!err.contains('\n'), "one line: {err:?}");
        assert!(!err.contains("secret"), "no password echoed: {err:?}");
    }
}

#[test]
fn shard_urls_keep_multi_host_urls_and_query_strings() {
    let shards =
        parse_shard_urls("a=postgres://u@h1:1,h2:2/db, b=postgres://h/x?sslmode=disable").unwrap();
    assert_eq!(shards.len(), 2);
    assert_eq!(shards[0].name, "a");
    assert_eq!(shards[0].config.get_hosts().len(), 2);
    assert_eq!(shards[1].name, "b");
    assert_eq!(shards[1].config.get_dbname(), Some("x"));
}

#[test]
fn flags_default_to_the_safe_choices_and_parse_every_switch() {
    let a = Args::try_parse_from(["mover"]).unwrap();
    assert_eq!(a.fencing, Fencing::Off);
    assert_eq!(a.on_renew_failure, OnRenewFailure::Stop);
    assert_eq!(a.on_lost, OnLost::Stop);
    assert_eq!(a.election, Election::Lease);
    assert!(!a.check_expiry_before_write);
    let s = Settings::new(&a, env(&[]).unwrap());
    assert_eq!(s.renew_retry, Duration::from_millis(600));
    assert_eq!(s.routing_timeout, Duration::from_millis(600));
    assert_eq!(s.shard_timeout, Duration::from_millis(1000));
    assert_eq!(s.start_timeout, Duration::from_millis(5000));

    let a = Args::try_parse_from([
        "mover",
        "--fencing",
        "on",
        "--on-renew-failure",
        "carry-on",
        "--on-lost",
        "tidy-up",
        "--check-expiry-before-write",
        "--election",
        "unique",
        "--renew-retry-ms",
        "1440",
    ])
    .unwrap();
    assert_eq!(
        (a.fencing, a.on_renew_failure, a.on_lost, a.election),
        (
            Fencing::On,
            OnRenewFailure::CarryOn,
            OnLost::TidyUp,
            Election::Unique
        )
    );
    assert!(a.check_expiry_before_write);
    let s = Settings::new(&a, env(&[("CHAOS_COPY_MS", "2500")]).unwrap());
    assert_eq!(s.renew_retry, Duration::from_millis(1440));
    assert_eq!(s.shard_timeout, Duration::from_millis(10_000));
    assert!(Args::try_parse_from(["mover", "--fencing", "maybe"]).is_err());
}

const MS: Duration = Duration::from_millis(1);

fn april() -> Pace {
    Pace {
        copy: 250 * MS,
        batches: 10,
    }
}

#[test]
fn a_turbine_follows_on_from_the_cursor_within_one_copy() {
    let p = april();
    assert_eq!(p.slot(), 25 * MS);
    assert_eq!(p.follow_on(), 250 * MS);
    assert_eq!(p.turbine_start(None, 7 * MS), 7 * MS);
    assert_eq!(p.turbine_start(Some(250 * MS), 260 * MS), 250 * MS);
    assert_eq!(p.turbine_start(Some(250 * MS), 300 * MS), 250 * MS);
    assert_eq!(p.turbine_start(Some(250 * MS), 490 * MS), 250 * MS);
    assert_eq!(p.turbine_start(Some(250 * MS), 501 * MS), 501 * MS);
    assert_eq!(p.turbine_start(Some(250 * MS), 240 * MS), 250 * MS);
}

/// Simulate a run: every batch takes `work`, renew + delete take `gap`; the copies sleep to their deadlines.
fn finish_times(
    p: Pace,
    turbines: usize,
    work: impl Fn(usize, u32) -> Duration,
    gap: Duration,
) -> Vec<Duration> {
    let mut now = Duration::ZERO;
    let mut cursor = Some(now);
    let mut ends = Vec::new();
    for t in 0..turbines {
        let start = p.turbine_start(cursor, now);
        for i in 0..p.batches {
            now += work(t, i);
            now = now.max(p.batch_deadline(start, i));
        }
        now = now.max(p.cursor_after(start));
        cursor = Some(p.cursor_after(start));
        ends.push(now);
        now += gap;
    }
    ends
}

#[test]
fn turbine_107_finishes_at_exactly_107_copy_times() {
    let p = april();
    let ends = finish_times(p, 133, |_, _| 2 * MS, 3 * MS);
    assert_eq!(ends[106], 107 * 250 * MS);
    assert_eq!(ends[132], 133 * 250 * MS);
}

#[test]
fn the_work_between_copies_is_absorbed_even_when_longer_than_a_slot() {
    // Measured on a quiet 2-core machine: renew + source delete + the next existence
    // check took about 26 ms real, one slot and a bit; April must still keep its schedule.
    let p = april();
    let ends = finish_times(p, 133, |_, _| 8 * MS, 26 * MS);
    assert_eq!(ends[106], 107 * 250 * MS);
    // A source delete slowed to 104 ms real (10 scenario s, measured on a 2-core
    // machine with the ingest running) is still caught up...
    let ends = finish_times(p, 133, |_, _| 8 * MS, 104 * MS);
    assert_eq!(ends[106], 107 * 250 * MS);
    // ...and so is a copy whose batches stalled for 14 scenario s...
    let ends = finish_times(
        p,
        133,
        |t, i| if t == 40 && i == 3 { 140 * MS } else { 8 * MS },
        26 * MS,
    );
    // (the stall ends at 215 ms into the copy and six 8 ms batches follow: 13 ms over)
    assert_eq!(ends[40], 41 * 250 * MS + 13 * MS);
    assert_eq!(ends[106], 107 * 250 * MS);
    // ...but a gap longer than a copy (a minute of renewal retries) is not: every turbine drifts by it.
    let ends = finish_times(p, 3, |_, _| 8 * MS, 550 * MS);
    assert_eq!(ends[2], 3 * 250 * MS + 2 * 550 * MS);
}

#[test]
fn uneven_slots_do_not_accumulate_rounding() {
    let p = Pace {
        copy: Duration::from_nanos(1_000_000_007),
        batches: 7,
    };
    for i in 0..7 {
        assert!(p.batch_deadline(Duration::ZERO, i) <= p.copy);
    }
    assert_eq!(p.batch_deadline(Duration::ZERO, 6), p.copy);
    // Extra batches (a keyset split made more) end with the copy.
    assert_eq!(p.batch_deadline(Duration::ZERO, 20), p.copy);
}

#[test]
fn a_stall_is_caught_up_but_a_slow_link_is_not() {
    let p = april();
    // Batch 3 of the first turbine stalls for 60 ms (a busy machine): later batches sleep less.
    let ends = finish_times(
        p,
        3,
        |t, i| if t == 0 && i == 3 { 60 * MS } else { 2 * MS },
        MS,
    );
    assert_eq!(ends[0], 250 * MS);
    assert_eq!(ends[2], 750 * MS);
    // A stall at the very end makes that copy late, and the next one catches up.
    let ends = finish_times(
        p,
        2,
        |t, i| if t == 0 && i == 9 { 40 * MS } else { 2 * MS },
        MS,
    );
    assert_eq!(ends[0], 225 * MS + 40 * MS);
    assert_eq!(ends[1], 500 * MS);
    // A slow link slows every batch: 46 s of copy instead of 25 s at 4.6 s per batch (scenario ms here).
    let slow = Pace {
        copy: 25_000 * MS,
        batches: 10,
    };
    let ends = finish_times(slow, 1, |_, _| 4_600 * MS, MS);
    assert_eq!(ends[0], 46_000 * MS);
}

#[test]
fn a_late_gap_restarts_the_cursor_at_now() {
    let p = april();
    // A 60 s carry-on (scaled: 600 ms) between turbines: the next copy starts when it ends, not at the old cursor.
    let ends = finish_times(p, 2, |_, _| MS, 600 * MS);
    assert_eq!(ends[1], 250 * MS + 600 * MS + 250 * MS);
}

#[test]
fn batch_rows_splits_the_count() {
    assert_eq!(batch_rows(300, 10), 30);
    assert_eq!(batch_rows(303, 10), 31);
    assert_eq!(batch_rows(5, 10), 1);
    assert_eq!(batch_rows(0, 10), 1);
    assert_eq!(batch_rows(15_770_000, 10), 1_577_000);
}

#[test]
fn keyset_pages_never_split_a_timestamp() {
    // n = 3, fetched with limit 4.
    assert_eq!(
        split_page(&[1, 2], 3),
        Page::Take {
            keep: 2,
            exhausted: true
        }
    );
    assert_eq!(
        split_page(&[1, 2, 3], 3),
        Page::Take {
            keep: 3,
            exhausted: true
        }
    );
    assert_eq!(
        split_page(&[1, 2, 3, 4], 3),
        Page::Take {
            keep: 3,
            exhausted: false
        }
    );
    // The 3rd and 4th rows share ts 3: stop before ts 3 so the next page gets all of them.
    assert_eq!(
        split_page(&[1, 2, 3, 3], 3),
        Page::Take {
            keep: 2,
            exhausted: false
        }
    );
    assert_eq!(
        split_page(&[1, 3, 3, 3], 3),
        Page::Take {
            keep: 1,
            exhausted: false
        }
    );
    // Every row has one ts: read that ts whole.
    assert_eq!(split_page(&[5, 5, 5, 5], 3), Page::AllOneTs);
    assert_eq!(
        split_page::<i32>(&[], 3),
        Page::Take {
            keep: 0,
            exhausted: true
        }
    );
}

#[test]
fn history_lines_hold_type_f_and_value_only() {
    let l = line(
        "ok",
        "acquire",
        serde_json::json!({ "token": 17, "lease_ms": 600 }),
    );
    let v: serde_json::Value = serde_json::from_str(&l).unwrap();
    assert_eq!(v["type"], "ok");
    assert_eq!(v["f"], "acquire");
    assert_eq!(v["value"]["token"], 17);
    assert_eq!(v.as_object().unwrap().len(), 3);
    assert!(!l.contains('\n'));
}

#[test]
fn a_refused_write_names_both_tokens() {
    let v = fenced_value(17, Some(18), "shard3", Some("AP-0163"));
    assert_eq!(
        v,
        serde_json::json!({ "reason": "fenced", "token": 17, "shard_token": 18, "shard": "shard3", "turbine": "AP-0163" })
    );
    assert_eq!(
        fenced_message("box-2", "shard3", 17, Some(18)),
        "box-2: shard3 refused token 17 (shard has 18): stopping"
    );
    assert!(fenced_value(17, Some(18), "shard3", None)
        .get("turbine")
        .is_none());
}
