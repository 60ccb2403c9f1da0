//! The byte tap on real TCP: an echo upstream, the server in-process, listeners subscribed by proxy name.

mod common;

use chaos_proxy::{Stream, TapData, TapVerdict, ToxicKind, ToxicSpec, ToxiproxyClient};
use common::*;
use std::sync::{Arc, Mutex};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// What a listener saw: (connection, stream, bytes), and the connections it saw end.
#[derive(Default)]
struct Seen {
    bytes: Vec<(u64, Stream, Vec<u8>)>,
    ended: Vec<(u64, Stream)>,
}

impl Seen {
    /// Every byte of one stream, in order.
    fn stream(&self, stream: Stream) -> Vec<u8> {
        self.bytes
            .iter()
            .filter(|(_, s, _)| *s == stream)
            .flat_map(|(_, _, b)| b.clone())
            .collect()
    }
}

fn recorder(seen: &Arc<Mutex<Seen>>) -> impl Fn(&chaos_proxy::TapEvent<'_>) -> TapVerdict {
    let seen = seen.clone();
    move |e| {
        assert!(e.at <= std::time::Instant::now());
        let mut s = seen.lock().unwrap();
        match e.data {
            TapData::Bytes(b) => s.bytes.push((e.connection, e.stream, b.to_vec())),
            TapData::End => s.ended.push((e.connection, e.stream)),
        }
        TapVerdict::Forward
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_listener_sees_both_directions_before_the_peer_does() {
    let echo = echo().await;
    // As the harness runs it: on the server's own threads.
    let server = chaos_proxy::start_on_own_threads(localhost0(), 2).unwrap();
    let client = ToxiproxyClient::new(server.api_addr());
    let p = client
        .create_proxy("box-1_to_shard1", "127.0.0.1:0", &echo.addr.to_string())
        .await
        .unwrap();
    let other = client
        .create_proxy("box-2_to_shard1", "127.0.0.1:0", &echo.addr.to_string())
        .await
        .unwrap();
    let mut s = connect(&p.listen).await;
    // Before anyone listens: nothing is recorded, and the connection keeps working after.
    round_trip(&mut s, b"unseen").await;

    let seen = Arc::new(Mutex::new(Seen::default()));
    let tap = server.taps().subscribe("box-1_to_shard1", recorder(&seen));
    // A connection open before the subscription is tapped too.
    round_trip(&mut s, b"hello").await;
    {
        // The echo is back, so both chunks were shown (they are shown before they go on).
        let seen = seen.lock().unwrap();
        assert_eq!(seen.stream(Stream::Upstream), b"hello");
        assert_eq!(seen.stream(Stream::Downstream), b"hello");
        let conns: Vec<u64> = seen.bytes.iter().map(|(c, _, _)| *c).collect();
        assert!(conns.windows(2).all(|w| w[0] == w[1]), "{conns:?}");
    }
    // Another proxy's bytes are not shown to this listener.
    let mut o = connect(&other.listen).await;
    round_trip(&mut o, b"elsewhere").await;
    assert!(!seen
        .lock()
        .unwrap()
        .stream(Stream::Upstream)
        .ends_with(b"elsewhere"));

    // A second connection is told apart from the first, and its end is told.
    let mut s2 = connect(&p.listen).await;
    round_trip(&mut s2, b"second").await;
    let (first, second) = {
        let seen = seen.lock().unwrap();
        (seen.bytes[0].0, seen.bytes.last().unwrap().0)
    };
    assert_ne!(first, second);
    drop(s2);
    let ended = tokio::time::timeout(IO_TIMEOUT, async {
        loop {
            if seen.lock().unwrap().ended.len() == 2 {
                break;
            }
            tokio::time::sleep(std::time::Duration::from_millis(5)).await;
        }
    })
    .await;
    assert!(ended.is_ok(), "the closed connection's end was told");
    let mut ended_streams: Vec<_> = seen.lock().unwrap().ended.clone();
    ended_streams.sort_by_key(|(_, s)| s.as_str());
    assert_eq!(
        ended_streams,
        [(second, Stream::Downstream), (second, Stream::Upstream)]
    );

    // Unsubscribed: nothing more, and the bytes still flow.
    drop(tap);
    round_trip(&mut s, b"after").await;
    {
        let seen = seen.lock().unwrap();
        assert!(!seen.stream(Stream::Upstream).ends_with(b"after"));
        assert_eq!(seen.stream(Stream::Downstream), b"hellosecond");
    }
    server.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_held_answer_meets_the_toxic_added_while_it_was_held() {
    let echo = echo().await;
    let server = chaos_proxy::start(localhost0()).await.unwrap();
    let client = ToxiproxyClient::new(server.api_addr());
    let p = client
        .create_proxy("pg", "127.0.0.1:0", &echo.addr.to_string())
        .await
        .unwrap();
    let (held_tx, held_rx) = tokio::sync::oneshot::channel::<()>();
    let (release_tx, release_rx) = tokio::sync::oneshot::channel::<()>();
    let hold = Mutex::new(Some((held_tx, release_rx)));
    // Hold the first answer (downstream) until told; forward everything else.
    let _tap = server.taps().subscribe("pg", move |e| {
        if e.stream != Stream::Downstream || !matches!(e.data, TapData::Bytes(_)) {
            return TapVerdict::Forward;
        }
        match hold.lock().unwrap().take() {
            Some((held, release)) => {
                let _ = held.send(());
                TapVerdict::Hold(Box::pin(async move {
                    let _ = release.await;
                }))
            }
            None => TapVerdict::Forward,
        }
    });
    let mut s = connect(&p.listen).await;
    s.write_all(b"hello").await.unwrap();
    tokio::time::timeout(IO_TIMEOUT, held_rx)
        .await
        .expect("the answer reached the listener")
        .unwrap();
    // While the answer is held, a toxic arrives: only 2 bytes may pass, then the close.
    client
        .add_toxic(
            "pg",
            ToxicSpec::new(Stream::Downstream, ToxicKind::LimitData { bytes: 2 }),
        )
        .await
        .unwrap();
    release_tx.send(()).unwrap();
    let mut got = Vec::new();
    tokio::time::timeout(IO_TIMEOUT, s.read_to_end(&mut got))
        .await
        .expect("the connection closes")
        .unwrap();
    assert_eq!(got, b"he", "the held bytes went through the new toxic");
    server.shutdown().await;
}
