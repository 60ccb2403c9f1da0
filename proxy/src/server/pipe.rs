//! One proxied TCP connection: a pump per direction applying that direction's live toxic chain.
//!
//! Each pump is a single loop that both reads and writes, so with no toxic a chunk goes from
//! `read` to `write_all` with no task hop (the fast path), and with a latency toxic the read
//! side keeps stamping arrival times while the head chunk waits for `arrival + latency`:
//! delays never accumulate behind one another.

use super::toxic::{Toxic, ToxicKind};
use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicU64, AtomicU8, Ordering};
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::tcp::{ReadHalf, WriteHalf};
use tokio::net::TcpStream;
use tokio::sync::{watch, Notify};
use tokio::time::Instant;

/// The toxics of one direction of one proxy, in the order they were added (Toxiproxy's chain order).
pub(crate) type Chain = Arc<Vec<Toxic>>;

/// Largest single read; Toxiproxy's io.Copy uses 32 KiB too.
const READ_BUF_BYTES: usize = 32 * 1024;
/// Bytes a pump will hold while toxics delay them; past this it stops reading so TCP pushes back.
const MAX_QUEUED_BYTES: usize = 4 * 1024 * 1024;
/// Dialing the upstream must not hang a client forever.
const UPSTREAM_CONNECT_TIMEOUT: Duration = Duration::from_secs(5);
/// After the other side closed, queued (delayed) data is still delivered, but not for longer than this.
const DRAIN_LIMIT: Duration = Duration::from_secs(60);

const END_NONE: u8 = 0;
/// A source reached EOF and its queue drained: the other direction drains, then all closes.
const END_GRACEFUL: u8 = 1;
/// A toxic, a write error, or the data limit closed the connection: stop now.
const END_CLOSE: u8 = 2;
/// As END_CLOSE, but with SO_LINGER 0 so the peers see a TCP RST.
const END_RESET: u8 = 3;

/// How the connection ends; shared by the two pumps of one connection.
struct ConnEnd {
    state: AtomicU8,
    notify: Notify,
}

impl ConnEnd {
    fn get(&self) -> u8 {
        self.state.load(Ordering::Acquire)
    }

    /// Escalate only (graceful can become a reset, never the reverse).
    fn set(&self, kind: u8) {
        self.state.fetch_max(kind, Ordering::AcqRel);
        self.notify.notify_waiters();
    }

    async fn wait_hard(&self) {
        loop {
            let notified = self.notify.notified();
            tokio::pin!(notified);
            // Register before checking so a set() between check and await is not lost.
            notified.as_mut().enable();
            if self.get() >= END_CLOSE {
                return;
            }
            notified.await;
        }
    }
}

/// Proxy one accepted client to `upstream` until either side ends or the task is aborted
/// (aborting drops both sockets, which is how `enabled: false` cuts connections).
pub(crate) async fn run_connection(
    mut client: TcpStream,
    sockets: std::sync::Arc<super::state::Sockets>,
    upstream: String,
    up_chain: watch::Receiver<Chain>,
    down_chain: watch::Receiver<Chain>,
) {
    let mut server =
        match tokio::time::timeout(UPSTREAM_CONNECT_TIMEOUT, TcpStream::connect(&upstream)).await {
            Ok(Ok(s)) => s,
            // Toxiproxy closes the client when the upstream dial fails.
            _ => return,
        };
    // Go sets TCP_NODELAY on every TCP connection; without it Nagle would add latency to small writes.
    let _ = client.set_nodelay(true);
    let _ = server.set_nodelay(true);
    // A disable shuts both sockets down from the API call (state::Sockets); dropped at the end.
    let _registered = {
        use std::os::fd::AsFd;
        sockets.register(&[client.as_fd(), server.as_fd()])
    };
    let end = ConnEnd {
        state: AtomicU8::new(END_NONE),
        notify: Notify::new(),
    };
    {
        let (cr, cw) = client.split();
        let (sr, sw) = server.split();
        let up = Pump::new(up_chain, &end).run(cr, sw);
        let down = Pump::new(down_chain, &end).run(sr, cw);
        let both = async { tokio::join!(up, down) };
        // A hard end must not wait for a pump stuck writing to a peer that does not read.
        tokio::select! {
            _ = both => {}
            _ = end.wait_hard() => {}
        }
    }
    if end.get() == END_RESET {
        // SO_LINGER 0 turns close() into a RST, as Toxiproxy's reset_peer does with SetLinger(0).
        let _ = client.set_zero_linger();
        let _ = server.set_zero_linger();
    }
}

/// Per-connection, per-toxic state (Toxiproxy keeps the equivalent on each ToxicStub).
struct LinkToxic {
    version: u64,
    /// Outcome of the toxicity roll for this link; false runs a noop instead.
    active: bool,
    /// When the toxic (re)started on this link, or the last data a timeout toxic swallowed.
    since: Instant,
    /// limit_data: bytes passed so far.
    sent_bytes: i64,
    /// bandwidth: when the link is free to send again.
    busy_until: Option<Instant>,
    /// reset_peer: when the RST fires, once data has arrived.
    reset_at: Option<Instant>,
    is_timeout: bool,
}

struct Chunk {
    data: Vec<u8>,
    /// Arrival time, moved forward by each latency toxic applied (as Toxiproxy's StreamChunk.Timestamp).
    ts: Instant,
    /// Ids of toxics this chunk has been through.
    applied: Vec<u64>,
    /// A wait computed by toxic (id, version), kept so a re-evaluation does not re-roll jitter.
    pending: Option<(u64, u64, Instant)>,
    /// limit_data reached: close after writing this chunk.
    close_after: bool,
}

enum Head {
    Empty,
    Write(Chunk),
    Dropped,
    Wait(Instant),
    Close(u8),
}

struct Pump<'a> {
    chain_rx: watch::Receiver<Chain>,
    chain: Chain,
    chain_live: bool,
    end: &'a ConnEnd,
    queue: VecDeque<Chunk>,
    queued_bytes: usize,
    states: HashMap<u64, LinkToxic>,
    rng: u64,
}

static RNG_SEQ: AtomicU64 = AtomicU64::new(0x9E37_79B9_7F4A_7C15);

impl<'a> Pump<'a> {
    fn new(mut chain_rx: watch::Receiver<Chain>, end: &'a ConnEnd) -> Self {
        let chain = chain_rx.borrow_and_update().clone();
        let nanos = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map(|d| d.as_nanos() as u64)
            .unwrap_or(1);
        let seed = nanos ^ RNG_SEQ.fetch_add(0x9E37_79B9_7F4A_7C15, Ordering::Relaxed);
        let mut p = Pump {
            chain_rx,
            chain,
            chain_live: true,
            end,
            queue: VecDeque::new(),
            queued_bytes: 0,
            states: HashMap::new(),
            rng: seed | 1,
        };
        let _ = p.refresh(Instant::now());
        p
    }

    /// xorshift64*: toxicity rolls and jitter need no cryptographic quality.
    fn next_u64(&mut self) -> u64 {
        let mut x = self.rng;
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        self.rng = x;
        x.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }

    fn next_f32(&mut self) -> f32 {
        (self.next_u64() >> 40) as f32 / (1u64 << 24) as f32
    }

    /// Sync per-link state with the chain. Returns an end kind if a removed toxic closes the link:
    /// Toxiproxy's timeout toxic closes its stub on removal (TimeoutToxic.Cleanup).
    fn refresh(&mut self, now: Instant) -> Option<u8> {
        let chain = self.chain.clone();
        for t in chain.iter() {
            let fresh = match self.states.get(&t.id) {
                Some(s) => s.version != t.version,
                None => true,
            };
            if fresh {
                let sent = self.states.get(&t.id).map(|s| s.sent_bytes).unwrap_or(0);
                // rand in [0,1) < toxicity, as ToxicStub.Run.
                let active = self.next_f32() < t.toxicity;
                self.states.insert(
                    t.id,
                    LinkToxic {
                        version: t.version,
                        active,
                        since: now,
                        sent_bytes: sent,
                        busy_until: None,
                        reset_at: None,
                        is_timeout: matches!(t.kind, ToxicKind::Timeout { .. }),
                    },
                );
            }
        }
        let mut close = None;
        self.states.retain(|id, st| {
            let keep = chain.iter().any(|t| t.id == *id);
            if !keep && st.is_timeout {
                close = Some(END_CLOSE);
            }
            keep
        });
        // Waits computed under an old version of a toxic are recomputed under the new one.
        for c in self.queue.iter_mut() {
            if let Some((id, ver, _)) = c.pending {
                if !chain.iter().any(|t| t.id == id && t.version == ver) {
                    c.pending = None;
                }
            }
        }
        close
    }

    fn pop(&mut self) -> Option<Chunk> {
        let c = self.queue.pop_front()?;
        self.queued_bytes -= c.data.len();
        Some(c)
    }

    fn push_front(&mut self, c: Chunk) {
        self.queued_bytes += c.data.len();
        self.queue.push_front(c);
    }

    /// Run the head chunk through every toxic it has not been through yet.
    fn process_head(&mut self, now: Instant) -> Head {
        let Some(mut chunk) = self.pop() else {
            return Head::Empty;
        };
        let chain = self.chain.clone();
        for t in chain.iter() {
            if chunk.applied.contains(&t.id) {
                continue;
            }
            let active = self.states.get(&t.id).map(|s| s.active).unwrap_or(false);
            if !active {
                chunk.applied.push(t.id);
                continue;
            }
            match t.kind {
                ToxicKind::Latency { latency, jitter } => {
                    let target = match chunk.pending {
                        Some((id, ver, at)) if id == t.id && ver == t.version => at,
                        _ => {
                            let mut delay_ms = latency;
                            if jitter > 0 {
                                delay_ms += (self.next_u64() % (jitter as u64 * 2)) as i64 - jitter;
                            }
                            let at = chunk.ts + Duration::from_millis(delay_ms.max(0) as u64);
                            chunk.pending = Some((t.id, t.version, at));
                            at
                        }
                    };
                    if now < target {
                        self.push_front(chunk);
                        return Head::Wait(target);
                    }
                    chunk.ts = target;
                    chunk.pending = None;
                }
                ToxicKind::Bandwidth { rate } => {
                    if rate > 0 {
                        // Toxiproxy sends at most rate*100 bytes (100 ms worth) at a time.
                        let max_piece = (rate as usize).saturating_mul(100).max(1);
                        if chunk.data.len() > max_piece && chunk.pending.is_none() {
                            let rest = chunk.data.split_off(max_piece);
                            self.push_front(Chunk {
                                data: rest,
                                ts: chunk.ts,
                                applied: chunk.applied.clone(),
                                pending: None,
                                close_after: chunk.close_after,
                            });
                            chunk.close_after = false;
                        }
                        let target = match chunk.pending {
                            Some((id, ver, at)) if id == t.id && ver == t.version => at,
                            _ => {
                                let st = self.states.get_mut(&t.id).expect("state synced");
                                let start = st.busy_until.map_or(now, |b| b.max(now));
                                let cost = Duration::from_nanos(
                                    (chunk.data.len() as u64).saturating_mul(1_000_000)
                                        / rate as u64,
                                );
                                let at = start + cost;
                                st.busy_until = Some(at);
                                chunk.pending = Some((t.id, t.version, at));
                                at
                            }
                        };
                        if now < target {
                            self.push_front(chunk);
                            return Head::Wait(target);
                        }
                        chunk.pending = None;
                    }
                }
                ToxicKind::Slicer {
                    average_size,
                    size_variation,
                    delay,
                } => {
                    if let Some((id, ver, at)) = chunk.pending {
                        if id == t.id && ver == t.version {
                            if now < at {
                                self.push_front(chunk);
                                return Head::Wait(at);
                            }
                            chunk.pending = None;
                        }
                    }
                    let len = chunk.data.len() as i64;
                    // Same stop rule as Toxiproxy's SlicerToxic.chunk; average_size <= 0 would
                    // recurse forever there, so it passes data unsliced here.
                    if average_size > 0 && len - average_size > size_variation {
                        let mut size = average_size;
                        if size_variation > 0 {
                            size += (self.next_u64() % (size_variation as u64 * 2)) as i64
                                - size_variation;
                        }
                        let size = size.clamp(1, len - 1) as usize;
                        let rest = chunk.data.split_off(size);
                        let at = now + Duration::from_micros(delay.max(0) as u64);
                        self.push_front(Chunk {
                            data: rest,
                            ts: chunk.ts,
                            applied: chunk.applied.clone(),
                            pending: Some((t.id, t.version, at)),
                            close_after: chunk.close_after,
                        });
                        chunk.close_after = false;
                    }
                }
                ToxicKind::LimitData { bytes } => {
                    let st = self.states.get_mut(&t.id).expect("state synced");
                    let remaining = bytes - st.sent_bytes;
                    if remaining <= 0 {
                        return Head::Close(END_CLOSE);
                    }
                    if (chunk.data.len() as i64) > remaining {
                        chunk.data.truncate(remaining as usize);
                    }
                    let st = self.states.get_mut(&t.id).expect("state synced");
                    st.sent_bytes += chunk.data.len() as i64;
                    if st.sent_bytes >= bytes {
                        chunk.close_after = true;
                    }
                }
                ToxicKind::Timeout { .. } => {
                    // Data is swallowed; Toxiproxy restarts its close timer on every chunk.
                    if let Some(st) = self.states.get_mut(&t.id) {
                        st.since = now;
                    }
                    return Head::Dropped;
                }
                ToxicKind::ResetPeer { timeout } => {
                    let st = self.states.get_mut(&t.id).expect("state synced");
                    if st.reset_at.is_none() {
                        st.reset_at = Some(now + Duration::from_millis(timeout.max(0) as u64));
                    }
                    return Head::Dropped;
                }
                ToxicKind::SlowClose { .. } => {}
            }
            chunk.applied.push(t.id);
        }
        Head::Write(chunk)
    }

    /// Deadlines that end the link without data: timeout toxics and a triggered reset_peer.
    fn link_deadline(&self) -> Option<(Instant, u8)> {
        let mut best: Option<(Instant, u8)> = None;
        for t in self.chain.iter() {
            let Some(st) = self.states.get(&t.id) else {
                continue;
            };
            if !st.active {
                continue;
            }
            let cand = match t.kind {
                ToxicKind::Timeout { timeout } if timeout > 0 => {
                    Some((st.since + Duration::from_millis(timeout as u64), END_CLOSE))
                }
                ToxicKind::ResetPeer { .. } => st.reset_at.map(|at| (at, END_RESET)),
                _ => None,
            };
            if let Some(c) = cand {
                if !matches!(best, Some(b) if b.0 <= c.0) {
                    best = Some(c);
                }
            }
        }
        best
    }

    /// What EOF on the source turns into after the queue drained: Toxiproxy passes the close
    /// down the chain, where slow_close and reset_peer each hold it for their delay.
    fn eof_plan(&self, eof_at: Instant) -> (Instant, u8) {
        let mut at = eof_at;
        let mut kind = END_GRACEFUL;
        for t in self.chain.iter() {
            if !self.states.get(&t.id).is_some_and(|s| s.active) {
                continue;
            }
            match t.kind {
                ToxicKind::SlowClose { delay } => at += Duration::from_millis(delay.max(0) as u64),
                ToxicKind::ResetPeer { timeout } => {
                    at += Duration::from_millis(timeout.max(0) as u64);
                    kind = END_RESET;
                }
                _ => {}
            }
        }
        (at, kind)
    }

    async fn run(mut self, mut src: ReadHalf<'_>, mut dst: WriteHalf<'_>) {
        let mut buf = vec![0u8; READ_BUF_BYTES];
        let mut eof_at: Option<Instant> = None;
        let mut drain_deadline: Option<Instant> = None;
        loop {
            let now = Instant::now();
            match self.end.get() {
                END_NONE => {}
                END_GRACEFUL => {
                    // The other direction closed: stop reading, deliver what is queued, then end.
                    if eof_at.is_none() {
                        eof_at = Some(now);
                    }
                    if drain_deadline.is_none() {
                        drain_deadline = Some(now + DRAIN_LIMIT);
                    }
                }
                _ => return,
            }
            if drain_deadline.is_some_and(|d| now >= d) {
                self.end.set(END_CLOSE);
                return;
            }
            let mut wait_until: Option<Instant> = None;
            match self.process_head(now) {
                Head::Write(chunk) => {
                    if dst.write_all(&chunk.data).await.is_err() {
                        self.end.set(END_CLOSE);
                        return;
                    }
                    if chunk.close_after {
                        self.end.set(END_CLOSE);
                        return;
                    }
                    continue;
                }
                Head::Dropped => continue,
                Head::Close(kind) => {
                    self.end.set(kind);
                    return;
                }
                Head::Wait(at) => wait_until = Some(at),
                Head::Empty => {
                    if let Some(eof) = eof_at {
                        let (at, kind) = self.eof_plan(eof);
                        if now >= at {
                            if kind == END_GRACEFUL {
                                // FIN to the destination, like Toxiproxy closing it.
                                let _ = dst.shutdown().await;
                            }
                            self.end.set(kind);
                            return;
                        }
                        wait_until = Some(at);
                    }
                }
            }
            if let Some((at, kind)) = self.link_deadline() {
                if at <= now {
                    self.end.set(kind);
                    return;
                }
                wait_until = Some(wait_until.map_or(at, |w| w.min(at)));
            }
            let can_read = eof_at.is_none() && self.queued_bytes < MAX_QUEUED_BYTES;
            let sleep_at = wait_until.unwrap_or(now);
            tokio::select! {
                // Toxic changes first, so data that arrives after an API call answered sees the new chain.
                biased;
                r = self.chain_rx.changed(), if self.chain_live => match r {
                    Ok(()) => {
                        self.chain = self.chain_rx.borrow_and_update().clone();
                        if let Some(kind) = self.refresh(Instant::now()) {
                            self.end.set(kind);
                            return;
                        }
                    }
                    // Proxy deleted; its accept task is about to abort this connection anyway.
                    Err(_) => self.chain_live = false,
                },
                _ = self.end.notify.notified() => {}
                r = src.read(&mut buf), if can_read => match r {
                    Ok(0) | Err(_) => eof_at = Some(Instant::now()),
                    Ok(n) => {
                        let arrived = Instant::now();
                        self.queued_bytes += n;
                        self.queue.push_back(Chunk {
                            data: buf[..n].to_vec(),
                            ts: arrived,
                            applied: Vec::new(),
                            pending: None,
                            close_after: false,
                        });
                    }
                },
                _ = super::precise::sleep_until(sleep_at.into_std()), if wait_until.is_some() => {}
            }
        }
    }
}
