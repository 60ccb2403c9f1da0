//! Link events across a container's wall, for the triggers (DESIGN section 10): the proxy
//! container the docker backend starts (`chaos proxy --events ADDR`) reads the server side of
//! the box-to-shard links itself (`wire.rs`) and tells the harness what happened, holding each
//! piece of a stream until the harness lets it go, as the embedded proxy's taps do in-process.
//!
//! One TCP connection per run, JSON lines. The harness opens with `{"links": [proxy names]}`
//! and the proxy answers `{"subscribed": n}` once it listens. Then, for each piece of a server
//! stream that completed events, the proxy sends
//! `{"seq": 7, "link": "box-1_to_shard1", "at_ns": 123, "events": [...]}` (`at_ns`: when the
//! bytes were read, on CLOCK_MONOTONIC, which a container shares with its host) and holds the
//! piece until the harness answers `{"release": 7}`, [`HOLD_LIMIT`] passes or the connection
//! ends. A piece nobody fires on is let go at once: one loopback round trip per statement.

use crate::wire::{ServerStreams, WireEvent};
use chaos_proxy::{TapVerdict, Taps};
use serde::{Deserialize, Serialize};
use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::net::TcpStream;
use tokio::sync::{mpsc, oneshot};

/// Longest a link holds a piece for the harness (a fault that cannot land in this long lets
/// the bytes go rather than wedge the link).
pub const HOLD_LIMIT: Duration = Duration::from_secs(2);

/// The container port `chaos proxy --events` listens on in the proxy container.
pub const EVENTS_PORT: u16 = 8475;

#[derive(Serialize, Deserialize)]
struct Subscribe {
    links: Vec<String>,
}

/// One piece of a link's server stream and the events it completed.
#[derive(Serialize, Deserialize)]
struct Piece {
    seq: u64,
    link: String,
    at_ns: u64,
    events: Vec<WireEvent>,
}

#[derive(Serialize, Deserialize)]
struct Release {
    release: u64,
}

/// CLOCK_MONOTONIC now, in ns (what `Instant` reads on Linux).
fn monotonic_ns() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: clock_gettime writes the timespec it is given and nothing else.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

/// `at` on CLOCK_MONOTONIC, to send across.
fn to_ns(at: Instant) -> u64 {
    monotonic_ns().saturating_sub(at.elapsed().as_nanos() as u64)
}

/// A CLOCK_MONOTONIC time from across the wall, as an `Instant` here.
fn from_ns(at_ns: u64) -> Instant {
    let ago = monotonic_ns().saturating_sub(at_ns);
    let now = Instant::now();
    now.checked_sub(Duration::from_nanos(ago)).unwrap_or(now)
}

/// The proxy's side: serve the links' events on `listener` until the process ends.
pub async fn serve(listener: tokio::net::TcpListener, taps: Taps) -> anyhow::Result<()> {
    loop {
        let (sock, _) = listener.accept().await?;
        let _ = sock.set_nodelay(true);
        let taps = taps.clone();
        tokio::spawn(async move {
            if let Err(e) = serve_one(sock, taps).await {
                eprintln!("chaos proxy: link events: {e}");
            }
        });
    }
}

/// One harness's subscription, until its connection ends (every piece it held then goes on).
async fn serve_one(sock: TcpStream, taps: Taps) -> anyhow::Result<()> {
    let (read, mut write) = sock.into_split();
    let mut lines = BufReader::new(read).lines();
    let first = lines
        .next_line()
        .await?
        .ok_or_else(|| anyhow::anyhow!("the connection ended before its subscription"))?;
    let sub: Subscribe = serde_json::from_str(&first)
        .map_err(|e| anyhow::anyhow!("a subscription is {{\"links\": [...]}}: {e}"))?;
    let (out_tx, mut out_rx) = mpsc::unbounded_channel::<String>();
    let held: Arc<Mutex<HashMap<u64, oneshot::Sender<()>>>> = Default::default();
    let seq = Arc::new(AtomicU64::new(0));
    let _subscriptions: Vec<chaos_proxy::Tap> = sub
        .links
        .iter()
        .map(|link| {
            let streams = ServerStreams::default();
            let (link, out_tx, held, seq) =
                (link.clone(), out_tx.clone(), held.clone(), seq.clone());
            taps.subscribe(&link.clone(), move |e| {
                let events = streams.feed(e);
                if events.is_empty() {
                    return TapVerdict::Forward;
                }
                let n = seq.fetch_add(1, Ordering::Relaxed);
                let (tx, rx) = oneshot::channel();
                held.lock().unwrap().insert(n, tx);
                let piece = Piece {
                    seq: n,
                    link: link.clone(),
                    at_ns: to_ns(e.at),
                    events,
                };
                let line = serde_json::to_string(&piece).unwrap_or_default();
                if out_tx.send(line).is_err() {
                    held.lock().unwrap().remove(&n);
                    return TapVerdict::Forward;
                }
                TapVerdict::Hold(Box::pin(async move {
                    let _ = tokio::time::timeout(HOLD_LIMIT, rx).await;
                }))
            })
        })
        .collect();
    write
        .write_all(format!("{{\"subscribed\":{}}}\n", sub.links.len()).as_bytes())
        .await?;
    loop {
        tokio::select! {
            line = out_rx.recv() => {
                let Some(line) = line else { break };
                write.write_all(line.as_bytes()).await?;
                write.write_all(b"\n").await?;
            }
            answer = lines.next_line() => {
                let Ok(Some(answer)) = answer else { break };
                if let Ok(r) = serde_json::from_str::<Release>(&answer) {
                    if let Some(tx) = held.lock().unwrap().remove(&r.release) {
                        let _ = tx.send(());
                    }
                }
            }
        }
    }
    // Dropping the held senders lets every held piece go.
    held.lock().unwrap().clear();
    Ok(())
}

/// What the harness does with a piece: the words to wait for before it goes on (none: at once).
pub type OnEvents =
    dyn Fn(&str, &[WireEvent], Instant) -> Vec<oneshot::Receiver<()>> + Send + Sync + 'static;

/// The harness's side of a subscription; dropping it ends the connection (and so every hold).
pub struct Remote {
    task: tokio::task::JoinHandle<()>,
}

impl Drop for Remote {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// Subscribe at `addr` (the proxy container's events port) to `links` (link names,
/// `box-1->shard1`), calling `on_events` for each piece; returns once the proxy listens, so
/// no byte of a connection made afterwards is missed.
pub async fn subscribe(
    addr: &str,
    links: &[String],
    on_events: Arc<OnEvents>,
) -> anyhow::Result<Remote> {
    let unreachable =
        |e: String| anyhow::anyhow!("the proxy container's link events at {addr}: {e}");
    let sock = tokio::time::timeout(Duration::from_secs(5), TcpStream::connect(addr))
        .await
        .map_err(|_| unreachable("no answer within 5 s".into()))?
        .map_err(|e| unreachable(e.to_string()))?;
    let _ = sock.set_nodelay(true);
    let (read, mut write) = sock.into_split();
    let by_proxy: HashMap<String, String> = links
        .iter()
        .map(|l| (crate::links::proxy_name(l), l.clone()))
        .collect();
    let sub = Subscribe {
        links: by_proxy.keys().cloned().collect(),
    };
    write
        .write_all(format!("{}\n", serde_json::to_string(&sub)?).as_bytes())
        .await
        .map_err(|e| unreachable(e.to_string()))?;
    let mut lines = BufReader::new(read).lines();
    let ack = tokio::time::timeout(Duration::from_secs(5), lines.next_line())
        .await
        .map_err(|_| unreachable("no subscription within 5 s".into()))?
        .map_err(|e| unreachable(e.to_string()))?;
    if !ack.is_some_and(|a| a.contains("subscribed")) {
        return Err(unreachable(
            "it did not subscribe (is the proxy container `chaos proxy --events`?)".into(),
        ));
    }
    let task = tokio::spawn(async move {
        let (release_tx, mut release_rx) = mpsc::unbounded_channel::<u64>();
        loop {
            tokio::select! {
                line = lines.next_line() => {
                    let Ok(Some(line)) = line else { return };
                    let Ok(piece) = serde_json::from_str::<Piece>(&line) else { continue };
                    let link = by_proxy.get(&piece.link).cloned().unwrap_or(piece.link);
                    let waits = on_events(&link, &piece.events, from_ns(piece.at_ns));
                    if waits.is_empty() {
                        let _ = release_tx.send(piece.seq);
                    } else {
                        let release_tx = release_tx.clone();
                        tokio::spawn(async move {
                            for rx in waits {
                                let _ = tokio::time::timeout(HOLD_LIMIT, rx).await;
                            }
                            let _ = release_tx.send(piece.seq);
                        });
                    }
                }
                n = release_rx.recv() => {
                    let Some(n) = n else { return };
                    let line = format!("{}\n", serde_json::json!({ "release": n }));
                    if write.write_all(line.as_bytes()).await.is_err() {
                        return;
                    }
                }
            }
        }
    });
    Ok(Remote { task })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_monotonic_time_sent_across_comes_back_as_the_same_instant() {
        let at = Instant::now() - Duration::from_millis(40);
        let back = from_ns(to_ns(at));
        let gap = if back > at { back - at } else { at - back };
        assert!(gap < Duration::from_millis(50), "{gap:?}");
    }

    /// What a Postgres server says to a client that inserts five rows outside a block.
    fn server_says() -> Vec<u8> {
        let mut b = vec![b'R', 0, 0, 0, 8, 0, 0, 0, 0];
        b.extend([b'Z', 0, 0, 0, 5, b'I']);
        let tag = b"INSERT 0 5\0";
        b.push(b'C');
        b.extend(((4 + tag.len()) as u32).to_be_bytes());
        b.extend(tag);
        b.extend([b'Z', 0, 0, 0, 5, b'I']);
        b
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_piece_the_harness_holds_reaches_the_client_only_when_it_lets_it_go() {
        use std::io::Write;
        use tokio::io::AsyncReadExt;
        let server = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let upstream = server.local_addr().unwrap().to_string();
        std::thread::spawn(move || {
            let (mut s, _) = server.accept().unwrap();
            s.write_all(&server_says()).unwrap();
            std::thread::sleep(Duration::from_secs(5));
        });
        let proxy = chaos_proxy::start_on_own_threads("127.0.0.1:0".parse().unwrap(), 1).unwrap();
        let api = chaos_proxy::ToxiproxyClient::new(proxy.api_addr());
        let info = api
            .create_proxy("box-1_to_shard1", "127.0.0.1:0", &upstream)
            .await
            .unwrap();
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let events_at = listener.local_addr().unwrap().to_string();
        let serving = tokio::spawn(serve(listener, proxy.taps()));

        let (seen_tx, seen_rx) = std::sync::mpsc::channel();
        let (let_go, held) = oneshot::channel();
        let held = Mutex::new(Some(held));
        let remote = subscribe(
            &events_at,
            &["box-1->shard1".to_string()],
            Arc::new(move |link: &str, events: &[WireEvent], at: Instant| {
                seen_tx
                    .send((link.to_string(), events.to_vec(), at))
                    .unwrap();
                held.lock().unwrap().take().into_iter().collect()
            }),
        )
        .await
        .unwrap();

        let mut client = TcpStream::connect(&info.listen).await.unwrap();
        let mut got: Vec<u8> = Vec::new();
        let mut buf = [0u8; 256];
        let deadline = Instant::now() + Duration::from_millis(400);
        while let Ok(Ok(n)) = tokio::time::timeout_at(deadline.into(), client.read(&mut buf)).await
        {
            got.extend(&buf[..n]);
            if n == 0 {
                break;
            }
        }
        assert!(
            !got.windows(6).any(|w| w == b"INSERT"),
            "the write's answer is held: {got:?}"
        );
        let (link, events, at) = seen_rx.recv_timeout(Duration::from_secs(2)).unwrap();
        assert_eq!(link, "box-1->shard1", "named as the harness names links");
        assert!(
            events.contains(&WireEvent::Commit)
                && events
                    .iter()
                    .any(|e| matches!(e, WireEvent::Write { rows: 5, .. })),
            "{events:?}"
        );
        assert!(at.elapsed() < Duration::from_secs(2), "seen when read");

        let_go.send(()).unwrap();
        let deadline = Instant::now() + Duration::from_secs(2);
        while !got.windows(6).any(|w| w == b"INSERT") {
            let n = tokio::time::timeout_at(deadline.into(), client.read(&mut buf))
                .await
                .expect("the answer goes on once let go")
                .unwrap();
            assert!(n > 0, "the connection ended before the answer");
            got.extend(&buf[..n]);
        }
        drop(remote);
        serving.abort();
        proxy.shutdown().await;
    }
}
