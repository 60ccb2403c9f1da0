//! A server on threads of its own, as the harness runs it: the forwarding threads are normal
//! threads unless a tap listens, real-time while one does (where the process may ask), and
//! toxics act on open connections as on the caller's runtime.

mod common;

use chaos_proxy::{Stream, TapVerdict, ToxicKind, ToxicSpec, ToxiproxyClient};
use common::*;
use std::time::Duration;

/// The scheduling policy of each of this process's threads named `name`.
fn policies(name: &str) -> Vec<i32> {
    let mut out = Vec::new();
    for entry in std::fs::read_dir("/proc/self/task").unwrap().flatten() {
        let comm = std::fs::read_to_string(entry.path().join("comm")).unwrap_or_default();
        if comm.trim_end() != name {
            continue;
        }
        let tid: i32 = entry.file_name().to_str().unwrap().parse().unwrap();
        // SAFETY: plain syscall on a thread id of this process.
        out.push(unsafe { libc::sched_getscheduler(tid) });
    }
    out
}

/// Whether this process may ask for real-time priority at all.
fn may_raise() -> bool {
    let ok = std::thread::spawn(|| {
        let ok = chaos_proxy::realtime::raise_current_thread();
        chaos_proxy::realtime::lower_current_thread();
        ok
    });
    ok.join().unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn forwarding_threads_are_real_time_only_while_a_tap_listens() {
    let echo = echo().await;
    let server = chaos_proxy::start_on_own_threads(localhost0(), 2).unwrap();
    let client = ToxiproxyClient::new(server.api_addr());
    let p = client
        .create_proxy("timed", "127.0.0.1:0", &echo.addr.to_string())
        .await
        .unwrap();
    let mut s = connect(&p.listen).await;
    let name = chaos_proxy::server::REALTIME_THREAD_NAME;
    let fifo = if may_raise() {
        libc::SCHED_FIFO
    } else {
        libc::SCHED_OTHER
    };
    assert!(policies(name).len() >= 2, "the forwarding threads");
    assert!(policies(name).iter().all(|&p| p == libc::SCHED_OTHER));
    round_trip(&mut s, b"plain").await;

    // A toxic: the threads stay normal (a delayed chunk leaves on its own timer), and it acts
    // on the open connection.
    let toxic = ToxicSpec::new(
        Stream::Downstream,
        ToxicKind::Latency {
            latency_ms: 50,
            jitter_ms: 0,
        },
    );
    client.add_toxic("timed", toxic).await.unwrap();
    assert!(policies(name).iter().all(|&p| p == libc::SCHED_OTHER));
    assert!(round_trip(&mut s, b"slow").await >= Duration::from_millis(50));
    client.remove_toxic("timed", &toxic.name()).await.unwrap();
    assert!(policies(name).iter().all(|&p| p == libc::SCHED_OTHER));
    assert!(round_trip(&mut s, b"fast again").await < Duration::from_millis(50));

    // A listener: raised while it listens.
    let tap = server.taps().subscribe("timed", |_| TapVerdict::Forward);
    assert!(policies(name).iter().all(|&p| p == fifo));
    round_trip(&mut s, b"seen").await;
    drop(tap);
    assert!(policies(name).iter().all(|&p| p == libc::SCHED_OTHER));

    // A proxy deleted with its toxic takes its count with it.
    client.add_toxic("timed", toxic).await.unwrap();
    client.delete_proxy("timed").await.unwrap();
    assert!(policies(name).iter().all(|&p| p == libc::SCHED_OTHER));
    // The API's own thread is real-time throughout.
    let api = policies(chaos_proxy::server::API_THREAD_NAME);
    assert_eq!(api, vec![fifo]);
    server.shutdown().await;
}
