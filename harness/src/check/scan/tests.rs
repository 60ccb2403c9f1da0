//! The scanner against serde: whatever it accepts, serde decodes to the same
//! event; what it leaves alone is anything it does not fully understand.

use super::*;

const INGEST: &str = r#"{"index":0,"time_ns":1,"scenario_time":"21:40:00.0","process":"ingest","type":"ok","f":"ingest","value":{"shard":"shard1","ts_ms":1776116400000,"turbines":["AP-0001","AP-0004","AP-é"]}}"#;
const LIST: &str = r#"["AP-0001","AP-0004","AP-é"]"#;

/// Lines of the shapes the harness writes, all taken by the scanner.
const COMMON: &[&str] = &[
    INGEST,
    r#"{"index":1,"time_ns":2,"scenario_time":"21:40:00.0","process":"box-1","type":"fail","f":"copy","value":{"reason":"fenced","token":3,"shard_token":4,"shard":"shard2","job":"j"}}"#,
    r#"{"index":2,"time_ns":-3,"scenario_time":"x","process":"box-2","type":"invoke","f":"delete","value":{"turbine":"AP-0001","shard":"shard1","why":"tidy-up","rows":12}}"#,
    r#"{"index":3,"time_ns":4,"scenario_time":"x","process":"nemesis","type":"info","f":"pause","value":{"target":"shard1","error":"no such container","holder":null}}"#,
    r#"{"index":4,"time_ns":5,"scenario_time":"x","process":"box-1","type":"ok","f":"acquire","value":{"token":-9223372036854775808,"election":"e","ok":true,"gone":false}}"#,
    r#"{"index":18446744073709551615,"time_ns":9223372036854775807,"scenario_time":"x","process":"p","type":"ok","f":"lost"}"#,
    r#"{"index":5,"time_ns":6,"scenario_time":"x","process":"p","type":"ok","f":"x","value":null}"#,
    r#"{"index":6,"time_ns":7,"scenario_time":"x","process":"p","type":"ok","f":"x","value":{}}"#,
    // Fields in another order, extra fields at both levels, whitespace.
    r#" { "f" : "ingest" , "value" : { "turbines" : [ "AP-0001" , "AP-0004" ] , "ts_ms" : 0 , "shard" : "shard3" } , "type" : "invoke" , "process" : "ingest" , "scenario_time" : "" , "time_ns" : 0 , "index" : 9 , "extra" : [ 1 , { "a" : null } ] } "#,
    // An unknown key first; no `value` at all.
    r#"{"extra":{"value":1},"index":10,"time_ns":7,"scenario_time":"x","process":"p","type":"ok","f":"x","value":{"token":1}}"#,
    r#"{"index":11,"time_ns":7,"scenario_time":"x","process":"p","type":"fail","f":"x","extra":"value"}"#,
    // Unicode in strings; numbers with exponents and fractions where nothing is kept.
    r#"{"index":7,"time_ns":8,"scenario_time":"21:40:00.0","process":"böx-ü","type":"ok","f":"cöpy","value":{"turbine":"AP-€😀","lag":1.5e-3,"n":-0.0,"m":2E+10,"deep":[[[{"x":[]}]]]}}"#,
    // A repeated kept field: the last one counts; a list, then no list.
    r#"{"index":8,"time_ns":9,"scenario_time":"x","process":"ingest","type":"ok","f":"ingest","value":{"shard":"a","shard":"b","turbines":["AP-0001"],"turbines":null}}"#,
    r#"{"index":9,"time_ns":9,"scenario_time":"x","process":"ingest","type":"ok","f":"ingest","value":{"shard":"a","turbines":[]}}"#,
];

/// Lines the scanner leaves to serde (good or bad).
const LEFT: &[&str] = &[
    // Escapes.
    r#"{"index":0,"time_ns":1,"scenario_time":"x","process":"box-\"2\"","type":"ok","f":"copy"}"#,
    r#"{"index":0,"time_ns":1,"scenario_time":"x","process":"box","type":"ok","f":"copy","value":{"turbine":"AP-\u00e9"}}"#,
    r#"{"index":0,"time_ns":1,"scenario_time":"x","process":"box","type":"ok","f":"ingest","value":{"turbines":["AP-\u00e9"]}}"#,
    // Numbers a kept field or the header cannot take as an integer.
    r#"{"index":0,"time_ns":1,"scenario_time":"x","process":"box","type":"ok","f":"copy","value":{"token":1e3}}"#,
    r#"{"index":0,"time_ns":1,"scenario_time":"x","process":"box","type":"ok","f":"copy","value":{"token":2.0}}"#,
    r#"{"index":0,"time_ns":1,"scenario_time":"x","process":"box","type":"ok","f":"copy","value":{"token":-0}}"#,
    r#"{"index":0,"time_ns":1,"scenario_time":"x","process":"box","type":"ok","f":"copy","value":{"token":18446744073709551615}}"#,
    r#"{"index":-1,"time_ns":1,"scenario_time":"x","process":"box","type":"ok","f":"copy"}"#,
    r#"{"index":0,"time_ns":9223372036854775808,"scenario_time":"x","process":"box","type":"ok","f":"copy"}"#,
    r#"{"index":0,"time_ns":1e3,"scenario_time":"x","process":"box","type":"ok","f":"copy"}"#,
    r#"{"index":01,"time_ns":1,"scenario_time":"x","process":"box","type":"ok","f":"copy"}"#,
    // Kept fields that are objects or arrays; a value that is not an object.
    r#"{"index":0,"time_ns":1,"scenario_time":"x","process":"box","type":"ok","f":"copy","value":{"why":{"a":[1,2.5]}}}"#,
    r#"{"index":0,"time_ns":1,"scenario_time":"x","process":"box","type":"ok","f":"copy","value":[1,{"target":"x"}]}"#,
    r#"{"index":0,"time_ns":1,"scenario_time":"x","process":"box","type":"ok","f":"ingest","value":{"turbines":[1,"AP-0001"]}}"#,
    // Repeated or missing header fields, other types, other kinds.
    r#"{"index":0,"index":1,"time_ns":1,"scenario_time":"x","process":"box","type":"ok","f":"copy"}"#,
    r#"{"index":0,"time_ns":1,"process":"box","type":"ok","f":"copy"}"#,
    r#"{"index":0,"time_ns":1,"scenario_time":"x","process":"box","type":"ok","f":"copy","value":{},"value":{}}"#,
    r#"{"index":0,"time_ns":1,"scenario_time":"x","process":"box","type":"ok","value":{}}"#,
    r#"{"index":0,"time_ns":1,"scenario_time":5,"process":"box","type":"ok","f":"copy"}"#,
    r#"{"index":0,"time_ns":1,"scenario_time":"x","process":"box","type":"maybe","f":"copy"}"#,
    // Not an event at all, or torn.
    r#"[1, 2]"#,
    r#"xyz"#,
    r#"{"index":0,"time_ns":1,"scenario_time":"x","process":"box","type":"ok","f":"copy"} x"#,
    r#"{"index":0,"time_ns":1,"scenario_time":"x","process":"box","type":"ok","f":"copy","value":{"a":}}"#,
    r#"{"index":0,"time_ns":1,"scenario_time":"x","process":"box","type":"ok","f":"copy",}"#,
    r#"{"index":0,"time_ns":1,"scenario_time":"21:40:00.0","process":"ingest","type":"ok","f":"ingest","value":{"shard":"shard1","ts_ms":1776116400000,"turbines":["AP-0001","AP-0"#,
];

/// Scan `line`; when taken, check serde decodes it to the same event and
/// list. Returns whether the scanner took it.
fn agrees(line: &[u8], known: &[&str]) -> bool {
    let Some(scanned) = line_of(line, known) else {
        return false;
    };
    let text = std::str::from_utf8(line).expect("a scanned line is UTF-8");
    let mut want =
        OpView::parse(text).unwrap_or_else(|e| panic!("scanned, refused by serde ({e}): {text}"));
    let list = want.value.turbines.take();
    assert_eq!(scanned.view, want, "{text}");
    let array = match &list {
        Some(Scalar::Json(t)) if t.starts_with('[') => Some(t.clone()),
        _ => None,
    };
    let value = |t: &str| serde_json::from_str::<serde_json::Value>(t).unwrap();
    match scanned.turbines {
        None => assert_eq!(array, None, "{text}"),
        Some(Turbines::Known(k)) => {
            assert_eq!(Some(value(known[k])), array.as_deref().map(value), "{text}")
        }
        Some(Turbines::New(t, names)) => {
            assert_eq!(Some(value(t)), array.as_deref().map(value), "{text}");
            let decoded: Vec<String> = serde_json::from_str(t).unwrap();
            assert_eq!(names, decoded, "{text}");
        }
    }
    true
}

fn line_of<'a>(line: &'a [u8], known: &[&str]) -> Option<Scanned<'a>> {
    super::line(line, known)
}

#[test]
fn common_lines_are_scanned_as_serde_decodes_them() {
    for line in COMMON {
        assert!(agrees(line.as_bytes(), &[]), "not scanned: {line}");
        assert!(
            agrees(line.as_bytes(), &[LIST, r#"["AP-0001"]"#]),
            "not scanned: {line}"
        );
    }
}

#[test]
fn a_known_list_is_recognised_byte_for_byte() {
    let s = line_of(INGEST.as_bytes(), &[r#"["AP-0001"]"#, LIST]).unwrap();
    assert_eq!(s.turbines, Some(Turbines::Known(1)));
    // A known list that starts as the line's does is not it.
    let s = line_of(INGEST.as_bytes(), &[r#"["AP-0001","AP-0004"]"#]).unwrap();
    assert!(matches!(s.turbines, Some(Turbines::New(LIST, _))));
    let spaced = INGEST.replace(LIST, r#"[ "AP-0001","AP-0004","AP-é"]"#);
    let s = line_of(spaced.as_bytes(), &[LIST]).unwrap();
    assert!(matches!(s.turbines, Some(Turbines::New(_, ref n)) if n.len() == 3));
}

#[test]
fn unusual_lines_are_left_to_serde() {
    for line in LEFT {
        assert!(!agrees(line.as_bytes(), &[LIST]), "scanned: {line}");
    }
    // Invalid UTF-8 in a string, a control character, a torn character.
    let mut bad = INGEST.as_bytes().to_vec();
    let at = INGEST.find("ingest").unwrap();
    bad[at] = 0xff;
    assert!(line_of(&bad, &[]).is_none());
    bad[at] = 0x01;
    assert!(line_of(&bad, &[]).is_none());
    let cut = INGEST.find('é').unwrap() + 1;
    assert!(line_of(&INGEST.as_bytes()[..cut], &[]).is_none());
}

/// Every line a byte away from a good one (a byte dropped, changed or added,
/// or the line cut short): the scanner takes only what serde decodes alike.
#[test]
fn lines_a_byte_away_from_good_ones_are_taken_only_as_serde_takes_them() {
    const BYTES: &[u8] = b"\"\\{}[],: 0123-.eEnultrfa\xff\xc3\x01\t";
    let mut taken = 0;
    let mut tried = 0;
    for line in COMMON.iter().chain(LEFT) {
        let line = line.as_bytes();
        for known in [&[][..], &[LIST][..]] {
            for i in 0..=line.len() {
                let mut variants = vec![line[..i].to_vec()];
                if i < line.len() {
                    variants.push([&line[..i], &line[i + 1..]].concat());
                }
                for &b in BYTES {
                    variants.push([&line[..i], &[b], &line[i..]].concat());
                    if i < line.len() {
                        variants.push([&line[..i], &[b], &line[i + 1..]].concat());
                    }
                }
                for v in variants {
                    tried += 1;
                    taken += usize::from(agrees(&v, known));
                }
            }
        }
    }
    assert!(taken > 1000 && taken < tried, "{taken} of {tried} taken");
}

/// The known list's text where it is not `value.turbines` (nested, in a
/// string, under another key) is never taken for the line's list.
#[test]
fn a_known_list_elsewhere_is_not_the_lines_list() {
    let head = r#"{"index":0,"time_ns":1,"scenario_time":"x","process":"ingest","type":"ok","f":"ingest","value":"#;
    for value in [
        format!(r#"{{"x":{{"turbines":{LIST}}},"shard":"s","turbines":["AP-0007"]}}"#),
        format!(r#"{{"x":["turbines":{LIST}],"turbines":["AP-0007"]}}"#),
        format!(r#"{{"note":"\"turbines\":{LIST}","turbines":["AP-0007"]}}"#),
        format!(r#"{{"other":"x","turbines":{LIST},"turbines":["AP-0007"]}}"#),
        format!(r#"{{"turbines":["AP-0007"],"y":{{"turbines":{LIST}}}}}"#),
    ] {
        let line = format!("{head}{value}}}");
        agrees(line.as_bytes(), &[LIST]);
        if let Some(s) = line_of(line.as_bytes(), &[LIST]) {
            assert!(
                matches!(s.turbines, Some(Turbines::New(_, ref n)) if n == &["AP-0007"]),
                "{line}"
            );
        }
    }
}

/// Eight bytes at a time finds the first quote, backslash or control
/// character where one byte at a time does, wherever it is.
#[test]
fn plain_len_stops_where_a_byte_at_a_time_stops() {
    let simple = |b: &[u8]| {
        b.iter()
            .position(|&c| c == b'"' || c == b'\\' || c < 0x20)
            .unwrap_or(b.len())
    };
    let fill: Vec<u8> = (0x20..=0xffu8)
        .filter(|&c| c != b'"' && c != b'\\')
        .collect();
    for len in 0..40 {
        for stop in [b'"', b'\\', 0x00, 0x01, 0x1f, b'!', b'#', 0x7f, 0x80, 0xff] {
            for at in 0..=len {
                let mut b: Vec<u8> = (0..len).map(|i| fill[(i * 7 + at) % fill.len()]).collect();
                if at < len {
                    b[at] = stop;
                }
                assert_eq!(plain_len(&b), simple(&b), "{b:?}");
            }
        }
    }
}
