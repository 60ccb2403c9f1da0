//! Toxics on live connections, driven through the toxiproxy_rust wrapper against the in-process server.

mod common;

use chaos_proxy::{ClientError, ProxySpec, Stream, ToxicKind, ToxicSpec, ToxiproxyClient};
use common::*;
use std::time::{Duration, Instant};
use tokio::io::AsyncWriteExt;

struct Fixture {
    _echo: Echo,
    server: chaos_proxy::ProxyServer,
    client: ToxiproxyClient,
    listen: String,
}

async fn fixture() -> Fixture {
    let echo = echo().await;
    let server = chaos_proxy::start(localhost0()).await.unwrap();
    let client = ToxiproxyClient::new(server.api_addr());
    let p = client
        .create_proxy("pg", "127.0.0.1:0", &echo.addr.to_string())
        .await
        .unwrap();
    Fixture {
        _echo: echo,
        server,
        client,
        listen: p.listen,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn latency_applies_to_open_connection_and_heal_restores() {
    let f = fixture().await;
    let mut s = connect(&f.listen).await;
    let fast = round_trip(&mut s, b"ping").await;
    assert!(fast < Duration::from_millis(100), "no toxic: {fast:?}");

    let t = f
        .client
        .add_toxic(
            "pg",
            ToxicSpec::new(
                Stream::Downstream,
                ToxicKind::Latency {
                    latency_ms: 200,
                    jitter_ms: 0,
                },
            ),
        )
        .await
        .unwrap();
    assert_eq!(
        (t.name.as_str(), t.attr_i64("latency")),
        ("latency_downstream", Some(200))
    );
    let slow = round_trip(&mut s, b"ping").await;
    assert!(
        slow >= Duration::from_millis(200),
        "latency on the already-open connection: {slow:?}"
    );
    assert!(
        slow < Duration::from_millis(600),
        "latency applied once, not twice: {slow:?}"
    );

    // Both directions add up.
    f.client
        .add_toxic(
            "pg",
            ToxicSpec::new(
                Stream::Upstream,
                ToxicKind::Latency {
                    latency_ms: 100,
                    jitter_ms: 0,
                },
            ),
        )
        .await
        .unwrap();
    let both = round_trip(&mut s, b"ping").await;
    assert!(both >= Duration::from_millis(300), "{both:?}");

    let healed = f.client.heal("pg").await.unwrap();
    assert!(healed.toxics.is_empty() && healed.enabled);
    let fast = round_trip(&mut s, b"ping").await;
    assert!(fast < Duration::from_millis(100), "after heal: {fast:?}");
    f.server.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn second_latency_replaces_instead_of_silent_409() {
    let f = fixture().await;
    f.client
        .add_toxic(
            "pg",
            ToxicSpec::new(
                Stream::Downstream,
                ToxicKind::Latency {
                    latency_ms: 300,
                    jitter_ms: 0,
                },
            ),
        )
        .await
        .unwrap();
    let t = f
        .client
        .add_toxic(
            "pg",
            ToxicSpec::new(
                Stream::Downstream,
                ToxicKind::Latency {
                    latency_ms: 20,
                    jitter_ms: 3,
                },
            ),
        )
        .await
        .unwrap();
    assert_eq!(
        (t.attr_i64("latency"), t.attr_i64("jitter")),
        (Some(20), Some(3))
    );
    let all = f.client.list().await.unwrap();
    assert_eq!(all["pg"].toxics.len(), 1);
    let mut s = connect(&f.listen).await;
    let rt = round_trip(&mut s, b"x").await;
    assert!(
        rt >= Duration::from_millis(17) && rt < Duration::from_millis(200),
        "{rt:?}"
    );
    f.server.shutdown().await;
}

/// Two faults of one kind landing on one link at one instant (a generated schedule's timed
/// latency and a triggered one): both read "no toxic yet", both create; the second must
/// update the first in place, not fail with 409.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_held_latencies_landing_at_once_both_take() {
    let f = fixture().await;
    let at = Instant::now() + Duration::from_millis(100);
    let add = |ms: u32| {
        let held = f.client.held_until(at, None, None);
        tokio::spawn(async move {
            held.add_toxic(
                "pg",
                ToxicSpec::new(
                    Stream::Downstream,
                    ToxicKind::Latency {
                        latency_ms: ms,
                        jitter_ms: 0,
                    },
                ),
            )
            .await
        })
    };
    let (a, b) = (add(40), add(50));
    let (a, b) = (a.await.unwrap(), b.await.unwrap());
    assert!(a.is_ok() && b.is_ok(), "both take: {a:?} {b:?}");
    let all = f.client.list().await.unwrap();
    assert_eq!(all["pg"].toxics.len(), 1, "one toxic, the later write wins");
    f.server.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn down_cuts_open_connections_and_refuses_until_up() {
    let f = fixture().await;
    let mut s = connect(&f.listen).await;
    round_trip(&mut s, b"before").await;
    let p = f.client.down("pg").await.unwrap();
    assert!(!p.enabled);
    let out = read_outcome(&mut s, Duration::from_secs(2)).await;
    assert!(
        matches!(out, ReadOutcome::Eof | ReadOutcome::Error(_)),
        "open connection must be cut, got {out:?}"
    );
    assert!(
        tokio::net::TcpStream::connect(&f.listen).await.is_err(),
        "new connections refused"
    );
    let p = f.client.up("pg").await.unwrap();
    assert_eq!(p.listen, f.listen, "same port after up");
    let mut s = connect(&f.listen).await;
    round_trip(&mut s, b"after").await;
    f.server.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn timeout_zero_black_holes_and_removal_closes() {
    let f = fixture().await;
    let mut s = connect(&f.listen).await;
    round_trip(&mut s, b"a").await;
    f.client
        .add_toxic(
            "pg",
            ToxicSpec::new(Stream::Upstream, ToxicKind::Timeout { timeout_ms: 0 }),
        )
        .await
        .unwrap();
    s.write_all(b"into the void").await.unwrap();
    assert_eq!(
        read_outcome(&mut s, Duration::from_millis(400)).await,
        ReadOutcome::Nothing
    );
    // Toxiproxy's TimeoutToxic.Cleanup closes the link when the toxic is removed.
    f.client.heal("pg").await.unwrap();
    let out = read_outcome(&mut s, Duration::from_secs(2)).await;
    assert!(
        matches!(out, ReadOutcome::Eof | ReadOutcome::Error(_)),
        "{out:?}"
    );
    // New connections after the heal are clean.
    let mut s = connect(&f.listen).await;
    round_trip(&mut s, b"b").await;
    f.server.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn timeout_positive_closes_after_delay() {
    let f = fixture().await;
    let mut s = connect(&f.listen).await;
    round_trip(&mut s, b"a").await;
    let t0 = Instant::now();
    f.client
        .add_toxic(
            "pg",
            ToxicSpec::new(Stream::Downstream, ToxicKind::Timeout { timeout_ms: 300 }),
        )
        .await
        .unwrap();
    s.write_all(b"swallowed").await.unwrap();
    let out = read_outcome(&mut s, Duration::from_secs(3)).await;
    let took = t0.elapsed();
    assert!(
        matches!(out, ReadOutcome::Eof | ReadOutcome::Error(_)),
        "{out:?}"
    );
    assert!(
        took >= Duration::from_millis(280) && took < Duration::from_secs(2),
        "{took:?}"
    );
    f.server.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reset_peer_sends_rst() {
    let f = fixture().await;
    let mut s = connect(&f.listen).await;
    round_trip(&mut s, b"a").await;
    f.client
        .add_toxic(
            "pg",
            ToxicSpec::new(Stream::Upstream, ToxicKind::ResetPeer { timeout_ms: 0 }),
        )
        .await
        .unwrap();
    s.write_all(b"trigger").await.unwrap();
    let out = read_outcome(&mut s, Duration::from_secs(2)).await;
    assert_eq!(out, ReadOutcome::Error(std::io::ErrorKind::ConnectionReset));
    f.server.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bandwidth_and_limit_data() {
    let f = fixture().await;
    let mut s = connect(&f.listen).await;
    f.client
        .add_toxic(
            "pg",
            ToxicSpec::new(Stream::Downstream, ToxicKind::Bandwidth { rate_kb: 10 }),
        )
        .await
        .unwrap();
    // 3000 bytes at 10 KB/s = 300 ms.
    let rt = round_trip(&mut s, &[7u8; 3000]).await;
    assert!(
        rt >= Duration::from_millis(280) && rt < Duration::from_secs(2),
        "{rt:?}"
    );
    f.client.heal("pg").await.unwrap();

    f.client
        .add_toxic(
            "pg",
            ToxicSpec::new(Stream::Downstream, ToxicKind::LimitData { bytes: 10 }),
        )
        .await
        .unwrap();
    let mut s = connect(&f.listen).await;
    s.write_all(b"0123456789abcdef").await.unwrap();
    let mut got = Vec::new();
    let r = tokio::time::timeout(
        IO_TIMEOUT,
        tokio::io::AsyncReadExt::read_to_end(&mut s, &mut got),
    )
    .await
    .unwrap();
    assert!(r.is_ok() || !got.is_empty());
    assert_eq!(
        got, b"0123456789",
        "exactly the limit passes, then the connection closes"
    );
    f.server.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn wrapper_populate_reset_errors_and_version() {
    let echo = echo().await;
    let server = chaos_proxy::start(localhost0()).await.unwrap();
    let client = ToxiproxyClient::new(server.api_addr().to_string());
    let up = echo.addr.to_string();
    let mut off = ProxySpec::new("b", "127.0.0.1:0", up.clone());
    off.enabled = false;
    let got = client
        .populate(&[ProxySpec::new("a", "127.0.0.1:0", up.clone()), off])
        .await
        .unwrap();
    assert_eq!((got[0].enabled, got[1].enabled), (true, false));
    client
        .add_toxic(
            "a",
            ToxicSpec::new(
                Stream::Upstream,
                ToxicKind::Latency {
                    latency_ms: 5,
                    jitter_ms: 0,
                },
            ),
        )
        .await
        .unwrap();
    client.reset().await.unwrap();
    let all = client.list().await.unwrap();
    assert!(
        all.values().all(|p| p.enabled && p.toxics.is_empty()),
        "{all:?}"
    );

    match client.create_proxy("a", "127.0.0.1:0", &up).await {
        Err(ClientError::Api { status: 409, .. }) => {}
        other => panic!("duplicate create: {other:?}"),
    }
    match client.down("ghost").await {
        Err(ClientError::Api { status: 404, .. }) => {}
        other => panic!("unknown proxy: {other:?}"),
    }
    match client
        .add_toxic(
            "ghost",
            ToxicSpec::new(
                Stream::Downstream,
                ToxicKind::Latency {
                    latency_ms: 1,
                    jitter_ms: 0,
                },
            ),
        )
        .await
    {
        Err(ClientError::Api { status: 404, .. }) => {}
        other => panic!("unknown proxy: {other:?}"),
    }
    assert!(matches!(
        ToxiproxyClient::new("not an address").reset().await,
        Err(ClientError::BadAddress { .. })
    ));
    assert_eq!(client.version().await.unwrap(), chaos_proxy::version());
    client.delete_proxy("b").await.unwrap();
    assert!(matches!(
        client.get("b").await,
        Err(ClientError::Api { status: 404, .. })
    ));
    server.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dropping_server_closes_everything() {
    let f = fixture().await;
    let mut s = connect(&f.listen).await;
    round_trip(&mut s, b"a").await;
    let api = f.server.api_addr();
    drop(f.server);
    let out = read_outcome(&mut s, Duration::from_secs(2)).await;
    assert!(
        matches!(out, ReadOutcome::Eof | ReadOutcome::Error(_)),
        "{out:?}"
    );
    // Ports are free again once the aborted tasks are dropped.
    let mut freed = false;
    for _ in 0..50 {
        if tokio::net::TcpListener::bind(&f.listen).await.is_ok()
            && tokio::net::TcpListener::bind(api).await.is_ok()
        {
            freed = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert!(freed, "proxy and API ports still held after drop");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn toxicity_zero_is_a_noop_and_slow_close_delays_close() {
    let f = fixture().await;
    let api = f.server.api_addr();
    let body = r#"{"type":"latency","toxicity":0,"attributes":{"latency":500}}"#;
    assert_eq!(
        http(api, "POST", "/proxies/pg/toxics", Some(body))
            .await
            .status,
        200
    );
    let mut s = connect(&f.listen).await;
    let rt = round_trip(&mut s, b"x").await;
    assert!(
        rt < Duration::from_millis(200),
        "toxicity 0 must not delay: {rt:?}"
    );
    f.client.heal("pg").await.unwrap();

    // Upstream EOF is held by slow_close before the server side sees it; the echo server then
    // closes, so the client sees EOF no earlier than the delay.
    f.client
        .add_toxic(
            "pg",
            ToxicSpec::new(Stream::Upstream, ToxicKind::SlowClose { delay_ms: 300 }),
        )
        .await
        .unwrap();
    let mut s = connect(&f.listen).await;
    round_trip(&mut s, b"y").await;
    let t0 = Instant::now();
    s.shutdown().await.unwrap();
    let out = read_outcome(&mut s, Duration::from_secs(3)).await;
    let took = t0.elapsed();
    assert!(
        matches!(out, ReadOutcome::Eof | ReadOutcome::Error(_)),
        "{out:?}"
    );
    assert!(took >= Duration::from_millis(280), "closed after {took:?}");
    f.server.shutdown().await;
}

/// A held change lands at its instant, not before: the request is connected and written but
/// for its last byte ahead of time. Down cuts an open connection; a held heal removes the
/// toxic and enables the proxy together; a held change to an unknown proxy fails as the API said.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn held_changes_land_at_their_instant() {
    let f = fixture().await;
    let mut s = connect(&f.listen).await;
    round_trip(&mut s, b"ping").await;
    f.client
        .add_toxic(
            "pg",
            ToxicSpec::new(
                Stream::Downstream,
                ToxicKind::Latency {
                    latency_ms: 30,
                    jitter_ms: 0,
                },
            ),
        )
        .await
        .unwrap();
    let at = Instant::now() + Duration::from_millis(150);
    let held = f.client.held_until(at, None, None);
    let down = tokio::spawn({
        let held = held.clone();
        async move { held.down("pg").await }
    });
    tokio::time::sleep(Duration::from_millis(60)).await;
    assert!(
        f.client.get("pg").await.unwrap().enabled,
        "a change held until later is not applied early"
    );
    let p = down.await.unwrap().unwrap();
    assert!(!p.enabled);
    let landed = held.landed().expect("the change was answered");
    assert!(landed >= at, "landed {:?} before its instant", at - landed);
    println!(
        "held down landed {} µs after its instant",
        landed.duration_since(at).as_micros()
    );
    assert!(
        matches!(
            read_outcome(&mut s, Duration::from_secs(2)).await,
            ReadOutcome::Eof | ReadOutcome::Error(_)
        ),
        "down cut the open connection"
    );
    let at = Instant::now() + Duration::from_millis(50);
    let healed = f
        .client
        .held_until(at, None, None)
        .heal("pg")
        .await
        .unwrap();
    assert!(Instant::now() >= at);
    assert!(healed.enabled && healed.toxics.is_empty(), "{healed:?}");
    let mut s = connect(&f.listen).await;
    round_trip(&mut s, b"back").await;
    let err = f
        .client
        .held_until(Instant::now(), None, None)
        .down("ghost")
        .await
        .unwrap_err();
    assert!(
        matches!(err, ClientError::Api { status: 404, .. }),
        "unknown proxy: {err:?}"
    );
    f.server.shutdown().await;
}

/// `noop` through the client (raw HTTP: toxiproxy_rust has no creator for it) with a
/// toxicity below 1, then removed by name: data passes unchanged throughout.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn noop_with_toxicity_passes_data_and_remove_toxic_removes_it() {
    let f = fixture().await;
    let mut s = connect(&f.listen).await;
    let t = f
        .client
        .add_toxic(
            "pg",
            ToxicSpec::new(Stream::Upstream, ToxicKind::Noop).with_toxicity(0.5),
        )
        .await
        .unwrap();
    assert_eq!(
        (t.name.as_str(), t.kind.as_str(), t.toxicity),
        ("noop_upstream", "noop", 0.5)
    );
    assert!(t.attributes.is_empty(), "{t:?}");
    round_trip(&mut s, b"unchanged").await;
    f.client.remove_toxic("pg", "noop_upstream").await.unwrap();
    assert!(f.client.get("pg").await.unwrap().toxics.is_empty());
    round_trip(&mut s, b"still unchanged").await;
    f.server.shutdown().await;
}

/// A slicer cuts data into small slices with a pause between them; every byte still arrives,
/// in order.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn slicer_delivers_every_byte_in_order() {
    let f = fixture().await;
    let mut s = connect(&f.listen).await;
    let slicer = ToxicKind::Slicer {
        average_size_bytes: 64,
        size_variation_bytes: 16,
        delay_us: 200,
    };
    let t = f
        .client
        .add_toxic("pg", ToxicSpec::new(Stream::Downstream, slicer))
        .await
        .unwrap();
    assert_eq!(t.attr_i64("average_size"), Some(64));
    let payload: Vec<u8> = (0..2000u32).map(|i| (i % 251) as u8).collect();
    round_trip(&mut s, &payload).await;
    f.server.shutdown().await;
}

/// Several held changes go in one burst: a node's links cut together all land at or after
/// their instant, and our API says when each change took effect (`x-chaos-applied-mono-ns`,
/// on this host's monotonic clock, between the request's last byte and the answer).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn held_changes_together_and_the_api_says_when_each_took_effect() {
    let f = fixture().await;
    let upstream = f.client.get("pg").await.unwrap().upstream;
    for name in ["pg-2", "pg-3"] {
        f.client
            .create_proxy(name, "127.0.0.1:0", &upstream)
            .await
            .unwrap();
    }
    let names: Vec<String> = ["pg", "pg-2", "pg-3"].map(String::from).to_vec();
    let at = Instant::now() + Duration::from_millis(80);
    let held = f.client.held_until(at, None, None);
    let downed = held.down_all(&names).await.unwrap();
    let returned = Instant::now();
    assert!(downed.iter().all(|p| !p.enabled), "{downed:?}");
    let landed = held.landed().expect("the changes were made");
    assert!(
        landed >= at && landed <= returned,
        "landed outside its call"
    );
    for name in &names {
        assert!(
            !f.client.get(name).await.unwrap().enabled,
            "{name} still enabled"
        );
    }

    // The stamp itself, on a raw answer to a change.
    use std::io::{Read, Write};
    let before = chaos_proxy::applied::now_ns();
    let mut raw = std::net::TcpStream::connect(f.server.api_addr()).unwrap();
    let body = r#"{"enabled":true}"#;
    write!(
        raw,
        "POST /proxies/pg HTTP/1.1\r\nHost: x\r\nConnection: close\r\nContent-Length: {}\r\n\r\n{body}",
        body.len()
    )
    .unwrap();
    let mut answer = String::new();
    raw.read_to_string(&mut answer).unwrap();
    let after = chaos_proxy::applied::now_ns();
    let stamp: u64 = answer
        .lines()
        .find_map(|l| l.strip_prefix(&format!("{}: ", chaos_proxy::applied::HEADER)))
        .expect("a change's answer carries its stamp")
        .trim()
        .parse()
        .unwrap();
    assert!(
        before <= stamp && stamp <= after,
        "stamp {stamp} outside [{before}, {after}]"
    );
    f.server.shutdown().await;
}
