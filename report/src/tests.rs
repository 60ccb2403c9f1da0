//! Tests of the whole page: lanes, shading, escaping, the April miniature, and a million events.

use super::*;
use crate::demo::demo_input;
use chaos_checkers::{Anomaly, AnomalyClass};
use chaos_history::{ClaimChange, Op, OpType, ScenarioClock};
use serde_json::{json, Value};
use std::collections::BTreeMap;
use std::time::Instant;

const START_MS: i64 = 78_000_000; // 21:40:00

fn clock() -> ScenarioClock {
    ScenarioClock {
        start_unix_ns: 1_000_000_000_000_000_000,
        start_scenario_ms: START_MS,
        real_ns_per_scenario_s: 10_000_000,
        scenario_day_unix_ms: 1_776_038_400_000,
        wall_check_run_ns: 0,
        wall_check_unix_ns: 0,
    }
}

fn meta(end_s: i64) -> RunMeta {
    RunMeta {
        system: Default::default(),
        payout: None,
        objects: None,
        scenario: "synthetic".into(),
        seed: 7,
        clock: clock(),
        job: "move".into(),
        shards: vec!["shard1".into(), "shard2".into()],
        owners: BTreeMap::new(),
        plan: Vec::new(),
        seeded: Vec::new(),
        lease_ms: 10_000,
        copy_ms: 5_000,
        strict_duplicates: false,
        mover: [("fencing".to_string(), "off".to_string())]
            .into_iter()
            .collect(),
        end_scenario_ms: START_MS + end_s * 1000,
        completed: true,
        incomplete_reason: None,
        expect_reach: Vec::new(),
    }
}

/// Appends history events at scenario seconds after the start.
struct H(Vec<Op>);

impl H {
    fn at(&mut self, s: f64, process: &str, kind: OpType, f: &str, value: Value) -> &mut Self {
        let time_ns = (s * 10_000_000.0) as i64;
        let index = self.0.len() as u64;
        self.0.push(Op {
            index,
            time_ns,
            scenario_time: ScenarioClock::format(START_MS + (s * 1000.0) as i64),
            process: process.into(),
            kind,
            f: f.into(),
            value,
        });
        self
    }
}

fn claim(s: f64, holder: &str, token: i64, lease_s: f64) -> ClaimChange {
    let c = clock();
    let t = START_MS + (s * 1000.0) as i64;
    ClaimChange {
        job: "move".into(),
        holder: Some(holder.into()),
        token,
        expires_unix_ns: c.unix_ns_at_scenario_ms(t + (lease_s * 1000.0) as i64),
        commit_unix_ns: c.unix_ns_at_scenario_ms(t),
        app: holder.into(),
        xid: (s * 10.0) as i64,
        not_before_unix_ns: None,
    }
}

fn anomaly(
    class: AnomalyClass,
    severity: Severity,
    at_s: i64,
    summary: &str,
    evidence: Value,
) -> Anomaly {
    Anomaly {
        class,
        severity,
        count: 3,
        first_scenario_ms: Some(START_MS + at_s * 1000),
        first_scenario_time: Some(ScenarioClock::format(START_MS + at_s * 1000)),
        summary: summary.into(),
        evidence,
    }
}

/// A two-minute run: box-1 holds (token 5) from 0 s, box-1 is paused 30-50 s,
/// its lease lapses at 40 s, box-2 takes over at 52 s (token 6); box-1
/// resumes, copies t-9 and tidies up; box-10 only polls.
fn synthetic() -> (RunMeta, Vec<Op>, Audit, Verdict) {
    let mut h = H(Vec::new());
    h.at(0.0, "box-1", OpType::Invoke, "acquire", json!({}))
        .at(0.1, "box-1", OpType::Ok, "acquire", json!({"token": 5}))
        .at(0.0, "box-2", OpType::Invoke, "acquire", json!({}))
        .at(
            0.2,
            "box-2",
            OpType::Fail,
            "acquire",
            json!({"reason": "held"}),
        )
        .at(0.0, "box-10", OpType::Invoke, "acquire", json!({}))
        .at(
            0.3,
            "box-10",
            OpType::Fail,
            "acquire",
            json!({"reason": "held"}),
        );
    h.at(
        1.0,
        "box-1",
        OpType::Invoke,
        "copy",
        json!({"turbine": "t-1", "from": "shard1", "to": "shard2", "token": 5}),
    )
    .at(
        20.0,
        "box-1",
        OpType::Ok,
        "copy",
        json!({"rows_read": 10, "rows_written": 10}),
    )
    .at(20.0, "box-1", OpType::Invoke, "renew", json!({"token": 5}))
    .at(20.1, "box-1", OpType::Ok, "renew", json!({"token": 5}))
    .at(
        20.2,
        "box-1",
        OpType::Invoke,
        "delete",
        json!({"turbine": "t-1", "shard": "shard1", "token": 5, "why": "source"}),
    )
    .at(20.5, "box-1", OpType::Ok, "delete", json!({"rows": 10}))
    .at(
        21.0,
        "box-1",
        OpType::Invoke,
        "copy",
        json!({"turbine": "t-9", "from": "shard1", "to": "shard2", "token": 5}),
    );
    h.at(
        30.0,
        "nemesis",
        OpType::Invoke,
        "pause",
        json!({"target": "box-1"}),
    )
    .at(30.0, "nemesis", OpType::Ok, "pause", json!({}))
    .at(
        50.0,
        "nemesis",
        OpType::Invoke,
        "resume",
        json!({"target": "box-1"}),
    )
    .at(50.0, "nemesis", OpType::Ok, "resume", json!({}));
    h.at(52.0, "box-2", OpType::Invoke, "acquire", json!({}))
        .at(52.1, "box-2", OpType::Ok, "acquire", json!({"token": 6}))
        .at(
            53.0,
            "box-2",
            OpType::Invoke,
            "skip",
            json!({"turbine": "t-1"}),
        )
        .at(53.1, "box-2", OpType::Ok, "skip", json!({}))
        .at(
            53.2,
            "box-2",
            OpType::Invoke,
            "copy",
            json!({"turbine": "t-9", "from": "shard1", "to": "shard2", "token": 6}),
        )
        .at(
            60.0,
            "box-1",
            OpType::Ok,
            "copy",
            json!({"rows_read": 10, "rows_written": 10}),
        )
        .at(60.0, "box-1", OpType::Invoke, "renew", json!({"token": 5}))
        .at(
            60.1,
            "box-1",
            OpType::Fail,
            "renew",
            json!({"token": 5, "reason": "lost"}),
        )
        .at(
            60.2,
            "box-1",
            OpType::Invoke,
            "delete",
            json!({"turbine": "t-9", "shard": "shard2", "token": 5, "why": "tidy-up"}),
        )
        .at(60.4, "box-1", OpType::Ok, "delete", json!({"rows": 20}))
        .at(
            70.0,
            "box-2",
            OpType::Ok,
            "copy",
            json!({"rows_read": 10, "rows_written": 10}),
        )
        .at(71.0, "box-2", OpType::Ok, "done", json!({}));
    for s in (5..120).step_by(10) {
        h.at(s as f64, "box-10", OpType::Invoke, "acquire", json!({}))
            .at(
                s as f64 + 0.1,
                "box-10",
                OpType::Fail,
                "acquire",
                json!({"reason": "held"}),
            );
    }
    h.0.sort_by_key(|op| op.time_ns);
    let audit = Audit {
        object_writes: Vec::new(),
        shard_writes: Vec::new(),
        claim_changes: vec![
            claim(0.05, "box-1", 5, 10.0),
            claim(20.05, "box-1", 5, 20.0),
            claim(52.05, "box-2", 6, 30.0),
        ],
        complete: true,
        missing: Vec::new(),
    };
    let verdict = Verdict {
        valid: Validity::Invalid,
        reasons: Vec::new(),
        anomalies: vec![
            anomaly(
                AnomalyClass::LostRows,
                Severity::Error,
                60,
                "t-9 lost",
                json!({"turbine": "t-9", "rows": 10}),
            ),
            anomaly(
                AnomalyClass::VacancyWindow,
                Severity::Info,
                40,
                "12 s without a claim",
                json!({"seconds": 12}),
            ),
            anomaly(
                AnomalyClass::DuplicatedRows,
                Severity::Cleanup,
                60,
                "half copy",
                json!(null),
            ),
        ],
        stats: chaos_checkers::Stats {
            turbines_planned: 2,
            ..Default::default()
        },
        reached: Vec::new(),
    };
    (meta(120), h.0, audit, verdict)
}

/// The `<svg>` of the whole-run timeline.
fn full_timeline(page: &str) -> &str {
    let start = page.find("id=\"tl-full\"").expect("whole-run timeline");
    let end = page[start..].find("</svg>").expect("closed svg") + start;
    &page[start..end]
}

#[test]
fn synthetic_run_shows_lanes_vacancy_fault_and_anomalies() {
    let (meta, history, audit, verdict) = synthetic();
    let page = render(&ReportInput {
        meta: &meta,
        history: &HistoryDigest::of(&meta, &history),
        events: &history,
        audit: Some(&audit),
        verdict: &verdict,
        extra: None,
    });
    let full = full_timeline(&page);

    // One lane per box, in numeric order (box-10 last).
    for name in ["box-1", "box-2", "box-10"] {
        let label = format!(">{name}</text>");
        assert_eq!(full.matches(&label).count(), 1, "lane for {name}");
    }
    let (p1, p2, p10) = (
        full.find(">box-1</text>"),
        full.find(">box-2</text>"),
        full.find(">box-10</text>"),
    );
    assert!(p1 < p2 && p2 < p10, "boxes sort by number");

    // The claim lapsed at 40 s (renewed at 20 s for 20 s) and box-2 took it at 52 s.
    assert!(full.contains("class=\"sp vac\""), "vacancy shaded");
    assert!(
        full.contains("vacancy: no valid claim\n21:40:40.0 → 21:40:52.0 (12.0 s)"),
        "vacancy window and times"
    );
    // Box-1 believed until it heard "lost" at 60.1 s: 20.1 s without a valid lease.
    assert!(full.contains("class=\"sp stale\""));
    assert!(
        full.contains("21:40:40.0 → 21:41:00.1 (20.1 s)"),
        "stale belief from expiry to lost"
    );

    // The pause window, in its own lane, with a label.
    assert!(full.contains(">fault: box-1</text>"));
    assert!(full.contains("pause on box-1"), "fault window title");
    assert!(
        full.contains("21:40:30.0, resume at 21:40:50.0"),
        "paired with its resume"
    );

    // The tidy-up and the lost turbine are marked.
    assert!(full.contains("class=\"tidy\""));
    assert!(full.contains("tidy-up t-9"));
    assert!(full.contains("✖ t-9 lost"));
    assert!(
        full.contains("lostcopy"),
        "copies of the lost turbine outlined"
    );

    // Anomaly table: one row per anomaly, errors first.
    let table = &page[page.find("<table class=\"anomalies\">").unwrap()..];
    let table = &table[..table.find("</section>").unwrap()];
    assert_eq!(table.matches("<tr class=\"sev-").count(), 3);
    let (lost, dup, vac) = (
        table.find(">lost-rows<").unwrap(),
        table.find(">duplicated-rows<").unwrap(),
        table.find(">vacancy-window<").unwrap(),
    );
    assert!(lost < dup && dup < vac, "sorted by severity");
    assert!(
        table.contains("<td>t-9</td>") && !table.contains("&quot;turbine&quot;"),
        "evidence rendered as a table, not raw JSON"
    );

    // Header, latency table, settings.
    assert!(page.contains("<div class=\"verdict v-invalid\">invalid</div>"));
    assert!(page.contains("<td>box</td><td>copy</td>"));
    assert!(page.contains("<th>fencing</th><td><code>off</code></td>"));
    // Few events: nothing aggregated.
    assert!(!page.contains("aggregated: "));
}

#[test]
fn latency_table_is_public_and_per_class() {
    let (meta, history, _, _) = synthetic();
    let rows = latency_table(&history, &meta.clock);
    let copy = rows
        .iter()
        .find(|r| r.class == "box" && r.f == "copy")
        .unwrap();
    // Copies of 19 s, 39 s and 16.8 s.
    assert_eq!(copy.count, 3);
    assert_eq!(copy.max_ms, 39_000.0);
    let poll = rows.iter().find(|r| r.f == "acquire").unwrap();
    assert_eq!(poll.fail, 14);
}

#[test]
fn hostile_names_are_escaped() {
    let (mut meta, mut history, audit, mut verdict) = synthetic();
    let evil = "<script>alert(\"owned\")</script>&<img src=x onerror=alert(1)>";
    for op in &mut history {
        if op.value.get("turbine").is_some() {
            op.value["turbine"] = json!(evil);
        }
    }
    history.push(Op {
        index: 999,
        time_ns: 1_000_000_000,
        scenario_time: String::new(),
        process: format!("box-3{evil}"),
        kind: OpType::Info,
        f: evil.into(),
        value: json!({"reason": evil}),
    });
    meta.scenario = evil.into();
    meta.mover.insert(evil.into(), evil.into());
    verdict.reasons.push(evil.into());
    verdict.anomalies[0].summary = evil.into();
    verdict.anomalies[0].evidence = json!({"turbine": evil});
    let extra = json!({ evil: evil });
    let page = render(&ReportInput {
        meta: &meta,
        history: &HistoryDigest::of(&meta, &history),
        events: &history,
        audit: Some(&audit),
        verdict: &verdict,
        extra: Some(&extra),
    });
    assert!(
        !page.contains("<script"),
        "no script element may come from run data"
    );
    assert!(!page.contains("<img"), "no element may come from run data");
    assert!(page.contains("&lt;script&gt;alert(&quot;owned&quot;)&lt;/script&gt;&amp;&lt;img"));
    assert!(
        page.contains("✖ &lt;script&gt;"),
        "lost-turbine label escaped"
    );
}

#[test]
fn no_audit_and_empty_history_still_render() {
    let (meta, _, _, _) = synthetic();
    let verdict = Verdict {
        valid: Validity::Unknown,
        reasons: vec!["shard2 unreadable".into()],
        anomalies: Vec::new(),
        stats: Default::default(),
        reached: Vec::new(),
    };
    let page = render(&ReportInput {
        meta: &meta,
        history: &HistoryDigest::of(&meta, &[]),
        events: &Vec::<Op>::new(),
        audit: None,
        verdict: &verdict,
        extra: None,
    });
    assert!(page.contains("<div class=\"verdict v-unknown\">unknown</div>"));
    assert!(page.contains("shard2 unreadable"));
    assert!(page.contains("no audit: not known"));
    assert!(page.contains("No anomalies."));
    assert!(page.ends_with("</html>\n"));
}

#[test]
fn april_miniature_tells_the_story() {
    let run = demo_input();
    let page = render(&run.input());
    std::fs::write(std::env::temp_dir().join("chaos-report-demo.html"), &page).unwrap();
    let full = full_timeline(&page);
    for name in ["box-1", "box-2", "box-3", "box-4"] {
        assert_eq!(
            full.matches(&format!(">{name}</text>")).count(),
            1,
            "lane for {name}"
        );
    }
    // The routing db's view: box-2 #17 until 22:25:10, vacant, box-3 #18 from 22:25:44.
    assert!(page.contains("routing db: box-2 holds token 17\nfrom 21:40:00.0"));
    assert!(page.contains("expired at 22:25:10.0 (not renewed)"));
    assert!(page.contains("vacancy: no valid claim\n22:25:10.0 → 22:25:44.0"));
    assert!(page.contains("routing db: box-3 holds token 18"));
    // Box 2 acted without a valid lease from the expiry until it heard it lost.
    assert!(page.contains("22:25:10.0 → 22:26:21.1 (71.1 s)"));
    // The 107 skips are one bar, the tidy-up is named, the lost turbine is marked.
    assert!(page.contains("107 skips (source already empty): AP-0001 … AP-0160"));
    assert!(page.contains("tidy-up AP-0161"));
    assert!(page.contains("✖ AP-0161 lost"));
    assert!(page.contains("stop on routing"));
    assert!(page.contains("latency on box-2-&gt;shard1"));
    // The close-up frames the crux: the outage through the loss.
    let focus = page.find("<h3>Close-up: ").expect("a close-up of the crux");
    assert!(
        page[focus..].starts_with("<h3>Close-up: 22:23:10.0 – 22:27:06.5"),
        "{}",
        &page[focus..focus + 60]
    );
    assert!(
        page.len() < 1_000_000,
        "the April report is {} bytes",
        page.len()
    );
}

/// A nightly-sized history: 1 M events over eight hours, four boxes moving
/// turbines, polls, skips, deletes, and the ingest.
fn million_events() -> Vec<Op> {
    let mut ops = Vec::with_capacity(1_000_100);
    fn push(ops: &mut Vec<Op>, t_ms: i64, process: &str, kind: OpType, f: &str, value: Value) {
        ops.push(Op {
            index: ops.len() as u64,
            time_ns: t_ms * 10_000,
            scenario_time: String::new(),
            process: process.to_string(),
            kind,
            f: f.to_string(),
            value,
        })
    }
    let hours_ms = 8 * 3_600_000;
    // 4 boxes x 25 000 operations of 4 events per cycle of ~1.15 s = 400 k events.
    for b in 1..=4 {
        let name = format!("box-{b}");
        push(&mut ops, 0, &name, OpType::Invoke, "acquire", json!({}));
        push(
            &mut ops,
            10,
            &name,
            OpType::Ok,
            "acquire",
            json!({"token": b}),
        );
        let mut t = 100 + b * 7;
        let mut k = 0;
        while t < hours_ms - 2_000 {
            let turbine = format!("AP-{:04}", k % 300);
            push(
                &mut ops,
                t,
                &name,
                OpType::Invoke,
                "copy",
                json!({"turbine": turbine, "token": b}),
            );
            push(
                &mut ops,
                t + 800,
                &name,
                OpType::Ok,
                "copy",
                json!({"rows_read": 1, "rows_written": 1}),
            );
            let why = if k % 997 == 0 { "tidy-up" } else { "source" };
            push(
                &mut ops,
                t + 810,
                &name,
                OpType::Invoke,
                "delete",
                json!({"turbine": turbine, "shard": "shard1", "why": why}),
            );
            if k % 101 == 0 {
                push(
                    &mut ops,
                    t + 900,
                    &name,
                    OpType::Fail,
                    "delete",
                    json!({"reason": "fenced", "token": b, "shard_token": 9}),
                );
            } else {
                push(
                    &mut ops,
                    t + 900,
                    &name,
                    OpType::Ok,
                    "delete",
                    json!({"rows": 1}),
                );
            }
            push(
                &mut ops,
                t + 910,
                &name,
                OpType::Invoke,
                "skip",
                json!({"turbine": turbine}),
            );
            push(&mut ops, t + 920, &name, OpType::Ok, "skip", json!({}));
            t += 1_150;
            k += 1;
        }
    }
    let box_events = ops.len();
    // The ingest fills the rest: pairs every few ms, a fail now and then.
    let n = (1_000_000 - box_events) / 2;
    for i in 0..n as i64 {
        let t = i * hours_ms / n as i64;
        push(
            &mut ops,
            t,
            "ingest",
            OpType::Invoke,
            "ingest",
            json!({"shard": "shard1"}),
        );
        let kind = if i % 1000 == 0 {
            OpType::Fail
        } else {
            OpType::Ok
        };
        push(&mut ops, t + 3, "ingest", kind, "ingest", Value::Null);
    }
    // Faults every 20 minutes.
    for i in 0..24 {
        push(
            &mut ops,
            i * 1_200_000,
            "nemesis",
            OpType::Ok,
            "pause",
            json!({"target": "box-2"}),
        );
        push(
            &mut ops,
            i * 1_200_000 + 30_000,
            "nemesis",
            OpType::Ok,
            "resume",
            json!({"target": "box-2"}),
        );
    }
    ops.sort_by_key(|op| op.time_ns);
    ops
}

#[test]
fn a_million_events_render_bounded_and_say_aggregated() {
    let history = million_events();
    assert!(history.len() >= 1_000_000);
    let mut meta = meta(8 * 3600);
    meta.clock.start_unix_ns = 0;
    meta.clock.start_scenario_ms = START_MS;
    let verdict = Verdict {
        valid: Validity::Invalid,
        reasons: Vec::new(),
        anomalies: vec![anomaly(
            AnomalyClass::LostRows,
            Severity::Error,
            3600,
            "AP-0003 lost",
            json!({"turbines": ["AP-0003"]}),
        )],
        stats: Default::default(),
        reached: Vec::new(),
    };
    let began = Instant::now();
    let page = render(&ReportInput {
        meta: &meta,
        history: &HistoryDigest::of(&meta, &history),
        events: &history,
        audit: None,
        verdict: &verdict,
        extra: None,
    });
    let took = began.elapsed();
    eprintln!("1 M events: {} bytes in {:?}", page.len(), took);
    std::fs::write(std::env::temp_dir().join("chaos-report-1m.html"), &page).unwrap();
    assert!(page.len() < 5_000_000, "report is {} bytes", page.len());
    assert!(took.as_secs() < 60, "render took {took:?}");
    assert!(page.contains("aggregated: "));
    // Every event is accounted for: the ingest's ok completions are all in the bins.
    let ingest_ok = history
        .iter()
        .filter(|o| o.process == "ingest" && o.kind == OpType::Ok)
        .count();
    assert!(
        page.contains(&format!(
            "aggregated: {} ok in",
            html::count(ingest_ok as u64)
        )),
        "ingest ok count in the notes"
    );
    assert!(page.contains(">ingest</text>"));
    let full = full_timeline(&page);
    for b in 1..=4 {
        assert_eq!(full.matches(&format!(">box-{b}</text>")).count(), 1);
    }
}

/// The page of a history, with the digest built as `chaos check` builds it.
fn page_of(meta: &RunMeta, history: &Vec<Op>, audit: Option<&Audit>, verdict: &Verdict) -> String {
    render(&ReportInput {
        meta,
        history: &HistoryDigest::of(meta, history),
        events: history,
        audit,
        verdict,
        extra: None,
    })
}

fn valid() -> Verdict {
    Verdict {
        valid: Validity::Valid,
        reasons: Vec::new(),
        anomalies: Vec::new(),
        stats: Default::default(),
        reached: Vec::new(),
    }
}

#[test]
fn the_digest_keeps_marks_one_by_one_then_bins_them_and_counts_every_one() {
    // Few marks in every segment of the span: kept one by one; more: binned, every one counted.
    let meta = meta(3600);
    for n in [2_000, 50_000] {
        let mut h = H(Vec::new());
        for i in 0..n {
            let s = i as f64 * 3600.0 / n as f64;
            h.at(
                s,
                "ingest",
                OpType::Invoke,
                "ingest",
                json!({"shard": "shard1"}),
            )
            .at(s + 0.001, "ingest", OpType::Ok, "ingest", Value::Null);
        }
        let digest = HistoryDigest::of(&meta, &h.0);
        let lane = &digest.others[0];
        assert_eq!(lane.ok.len(), n as u64);
        // An hour is about 8 of the span's 64 segments: 50 000 marks fill them.
        assert_eq!(lane.ok.fine.is_some(), n > 20_000, "{n} marks");
        assert_eq!(lane.ok.segments.full != 0, n > 20_000, "{n} marks");
        if n < 20_000 {
            assert_eq!(lane.ok.exact.len(), n);
        }
        assert!(lane.ok.exact.len() <= 64 * digest::PER_SEGMENT as usize);
        let row = &digest.latency()[0];
        assert_eq!((row.count, row.ok, row.open), (n as u64, n as u64, 0));
        // Drawn binned either way, every event counted in the note.
        let page = page_of(&meta, &h.0, None, &valid());
        assert!(
            page.contains(&format!("aggregated: {} ok in", html::count(n as u64))),
            "{n}"
        );
        assert!(page.len() < 300_000, "{n} marks: {} bytes", page.len());
    }
}

#[test]
fn binned_marks_land_where_exact_ones_do() {
    // The same 4 000 renewals over an hour, once kept one by one (bars from
    // exact times) and once forced into fine bins: the same bars, give or take
    // a fine bin's width at a bar's edge.
    let meta = meta(3600);
    let mut h = H(Vec::new());
    for i in 0..4_000 {
        let s = i as f64 * 0.9 * (1.0 + (i % 7) as f64 / 10.0);
        h.at(s, "box-1", OpType::Invoke, "renew", json!({"token": 1}))
            .at(s + 0.01, "box-1", OpType::Ok, "renew", json!({"token": 1}));
    }
    let exact = HistoryDigest::of(&meta, &h.0);
    let mut binned = exact.clone();
    let grid = binned.grid;
    let lane = &mut binned.boxes[0];
    let mut fine = vec![0u32; digest::FINE_BINS];
    for p in std::mem::take(&mut lane.renew_ok.exact) {
        fine[grid.bin(p.t)] += 1;
    }
    lane.renew_ok.fine = Some(fine);
    lane.renew_ok.segments.full = u64::MAX;
    let bars = |d: &HistoryDigest| {
        let page = render(&ReportInput {
            meta: &meta,
            history: d,
            events: &h.0,
            audit: None,
            verdict: &valid(),
            extra: None,
        });
        let full = full_timeline(&page).to_string();
        let at = full
            .find("<g class=\"bin renew\">")
            .expect("renewals binned");
        let group = &full[at..at + full[at..].find("</g>").unwrap()];
        group
            .split("<rect x=\"")
            .skip(1)
            .map(|r| {
                let x: f64 = r[..r.find('"').unwrap()].parse().unwrap();
                let n: u64 = r[r.find("<title>").unwrap() + 7..]
                    .split(' ')
                    .next()
                    .unwrap()
                    .parse()
                    .unwrap();
                (x, n)
            })
            .collect::<Vec<_>>()
    };
    assert!(exact.boxes[0].renew_ok.fine.is_none());
    let (a, b) = (bars(&exact), bars(&binned));
    let n = 4_000;
    assert_eq!(a.iter().map(|x| x.1).sum::<u64>(), n);
    assert_eq!(b.iter().map(|x| x.1).sum::<u64>(), n);
    assert!(
        a.len().abs_diff(b.len()) <= 2,
        "{} bars and {} bars",
        a.len(),
        b.len()
    );
    for (x, n) in &b {
        let near: u64 = a
            .iter()
            .filter(|(ax, _)| (ax - x).abs() <= svg::BIN_PX)
            .map(|(_, n)| n)
            .sum();
        assert!(
            near >= *n,
            "a binned bar at {x} ({n}) has no exact bar near it"
        );
    }
}

#[test]
fn events_outside_the_run_are_counted_not_drawn_and_the_axis_stays_the_runs() {
    let (meta, mut history, audit, verdict) = synthetic();
    let normal = page_of(&meta, &history, Some(&audit), &verdict);
    for (index, time_ns, process) in [
        (900, i64::MAX, "box-1"),
        (901, i64::MIN, "nemesis"),
        (902, -1_000_000_000_000_000, "ingest"),
    ] {
        history.push(Op {
            index,
            time_ns,
            scenario_time: String::new(),
            process: process.into(),
            kind: OpType::Ok,
            f: "copy".into(),
            value: json!({"turbine": "t-1"}),
        });
    }
    let digest = HistoryDigest::of(&meta, &history);
    assert_eq!((digest.outside_before, digest.outside_after), (2, 1));
    assert_eq!(digest.events(), history.len() as u64);
    let page = page_of(&meta, &history, Some(&audit), &verdict);
    assert!(
        page.contains("3 history events outside the run's span"),
        "the banner"
    );
    assert!(page.contains("2 before it, 1 after it"));
    // The timeline is the one without them.
    assert_eq!(full_timeline(&page), full_timeline(&normal));
    assert!(page.len() < normal.len() + 2_000);
}

#[test]
fn lanes_and_open_invokes_stay_bounded_whatever_the_history() {
    let meta = meta(600);
    let mut h = H(Vec::new());
    // 500 boxes, 100 other processes, 100 fault targets, and one process that only invokes.
    for i in 0..500 {
        h.at(
            1.0 + i as f64 * 0.1,
            &format!("box-{i}"),
            OpType::Ok,
            "acquire",
            json!({"token": i}),
        );
    }
    for i in 0..100 {
        h.at(
            2.0,
            &format!("client-{i}"),
            OpType::Ok,
            "write",
            Value::Null,
        );
        h.at(
            3.0,
            "nemesis",
            OpType::Ok,
            "pause",
            json!({"target": format!("box-{i}")}),
        );
    }
    for i in 0..20_000 {
        h.at(
            4.0 + i as f64 * 0.01,
            "ingest",
            OpType::Invoke,
            "ingest",
            Value::Null,
        );
    }
    let digest = HistoryDigest::of(&meta, &h.0);
    assert_eq!(digest.boxes.len(), 64);
    assert!(digest.others.len() <= 24);
    assert!(digest.faults.len() <= 48);
    assert!(digest
        .others
        .last()
        .unwrap()
        .name
        .contains("more processes"));
    // Every invoke is accounted for: open, in the latency table.
    let ingest = digest.latency().iter().find(|r| r.f == "ingest").unwrap();
    assert_eq!(ingest.open, 20_000);
    let page = page_of(&meta, &h.0, None, &valid());
    assert!(page.len() < 3_000_000, "{} bytes", page.len());
}

#[test]
fn the_streamed_latency_is_the_latency_table() {
    let (meta, history, _, _) = synthetic();
    assert_eq!(
        HistoryDigest::of(&meta, &history).latency(),
        latency_table(&history, &meta.clock)
    );
    let history = million_events();
    let mut meta = meta;
    meta.end_scenario_ms = START_MS + 8 * 3_600_000;
    meta.clock.start_unix_ns = 0;
    assert_eq!(
        HistoryDigest::of(&meta, &history).latency(),
        latency_table(&history, &meta.clock)
    );
}

/// Issue 33: "an x over '74.1 s'": a span's label was drawn inside its bar, before the marks
/// of the same lane, so a failed renewal's cross covered it. Labels are a layer above every
/// mark; the belief that the routing db did not back is named "unbacked", as the key figure
/// names it apart from the verdict's writes after expiry.
#[test]
fn span_labels_are_drawn_above_every_mark() {
    let run = demo_input();
    let page = render(&run.input());
    let focus = &page[page.find("<h3>Close-up: ").unwrap()..];
    let svg = &focus[..focus.find("</svg>").unwrap()];
    let label = svg
        .find("<g class=\"sp stale\"><text")
        .expect("the unbacked span is labelled");
    assert!(svg[label..].contains(">unbacked "), "named apart");
    let last_mark = svg
        .rfind("class=\"renewfail\"")
        .or_else(|| svg.rfind("class=\"failed\""))
        .expect("failed renewals or operations drawn");
    assert!(last_mark < label, "the label comes after (above) the marks");
    assert!(!page.contains("no valid lease"));
}
