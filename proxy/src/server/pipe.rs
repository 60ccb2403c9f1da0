//! One proxied TCP connection: a pump per direction offering its data to that direction's live toxic chain.
//!
//! Each pump is a single loop that both reads and writes. With no toxic, nothing queued and
//! no tap listening, a pump passes bytes through ([`Pump::pass_through`]): each read is
//! written from the read buffer itself, with no copy, no queue, no arrival stamp and no walk
//! of the chain, so a link without toxics pays for none of what toxics need. Otherwise the
//! read side keeps stamping arrival times while the head chunk waits for `arrival + latency`:
//! delays never accumulate behind one another. What a toxic does is its own
//! (`server::toxics`); the pump keeps the queue, each toxic's per-connection state and the
//! toxicity rolls, and does what the toxics answer.

use super::deadline::Deadline;
use super::sockets::Sockets;
use super::tap::{TapData, TapEvent, TapPoint};
use super::toxic::Chain;
use super::toxics::{AnyState, Chunk, Close, End, Flow, Head, Rng};
use crate::model::Stream;
use std::collections::{HashMap, VecDeque};
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, AtomicU8, Ordering};
use std::sync::Arc;
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::tcp::{ReadHalf, WriteHalf};
use tokio::net::TcpStream;
use tokio::sync::{watch, Notify};
use tokio::time::Instant;

/// Largest single read; Toxiproxy's io.Copy uses 32 KiB too.
const READ_BUF_BYTES: usize = 32 * 1024;
/// Bytes a pump will hold while toxics delay them; past this it stops reading so TCP pushes back.
const MAX_QUEUED_BYTES: usize = 4 * 1024 * 1024;
/// Dialing the upstream must not hang a client forever.
const UPSTREAM_CONNECT_TIMEOUT: Duration = Duration::from_secs(5);
/// After the other side closed, queued (delayed) data is still delivered, but not for longer than this.
const DRAIN_LIMIT: Duration = Duration::from_secs(60);

/// How the connection ends; shared by the two pumps of one connection. Held as a number so
/// either pump can escalate it without a lock.
struct ConnEnd {
    state: AtomicU8,
    notify: Notify,
}

/// `ConnEnd::state` before the connection has an end.
const NOT_ENDED: u8 = 0;

fn end_code(end: End) -> u8 {
    match end {
        End::Graceful => 1,
        End::Close => 2,
        End::Reset => 3,
    }
}

impl ConnEnd {
    fn new() -> Self {
        ConnEnd {
            state: AtomicU8::new(NOT_ENDED),
            notify: Notify::new(),
        }
    }

    fn get(&self) -> Option<End> {
        match self.state.load(Ordering::Acquire) {
            1 => Some(End::Graceful),
            2 => Some(End::Close),
            3 => Some(End::Reset),
            _ => None,
        }
    }

    /// Escalate only (graceful can become a reset, never the reverse).
    fn set(&self, end: End) {
        self.state.fetch_max(end_code(end), Ordering::AcqRel);
        self.notify.notify_waiters();
    }

    async fn wait_hard(&self) {
        loop {
            let notified = self.notify.notified();
            tokio::pin!(notified);
            // Register before checking so a set() between check and await is not lost.
            notified.as_mut().enable();
            if self.get() >= Some(End::Close) {
                return;
            }
            notified.await;
        }
    }
}

/// Numbers connections for tap listeners, process-wide.
static NEXT_CONNECTION: AtomicU64 = AtomicU64::new(1);

/// What a connection's pumps need to show their bytes to the proxy's tap listeners.
struct ConnTap {
    point: Arc<TapPoint>,
    proxy: Arc<str>,
    connection: u64,
}

impl ConnTap {
    fn event<'a>(&'a self, stream: Stream, at: Instant, data: TapData<'a>) -> TapEvent<'a> {
        TapEvent {
            proxy: &self.proxy,
            connection: self.connection,
            stream,
            at: at.into_std(),
            data,
        }
    }
}

/// Proxy one accepted client to `upstream` until either side ends or the task is aborted
/// (aborting drops both sockets, which is how `enabled: false` cuts connections).
#[allow(clippy::too_many_arguments)]
pub(crate) async fn run_connection(
    mut client: TcpStream,
    sockets: Arc<Sockets>,
    proxy: Arc<str>,
    tap: Arc<TapPoint>,
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
    // A disable shuts both sockets down from the API call (see `Sockets`); dropped at the end.
    let _registered = {
        use std::os::fd::AsFd;
        sockets.register(&[client.as_fd(), server.as_fd()])
    };
    let end = ConnEnd::new();
    let tap = ConnTap {
        point: tap,
        proxy,
        connection: NEXT_CONNECTION.fetch_add(1, Ordering::Relaxed),
    };
    {
        let (cr, cw) = client.split();
        let (sr, sw) = server.split();
        let up = Pump::new(up_chain, &end, &tap, Stream::Upstream).run(cr, sw);
        let down = Pump::new(down_chain, &end, &tap, Stream::Downstream).run(sr, cw);
        let both = async { tokio::join!(up, down) };
        // A hard end must not wait for a pump stuck writing to a peer that does not read.
        tokio::select! {
            _ = both => {}
            _ = end.wait_hard() => {}
        }
    }
    if end.get() == Some(End::Reset) {
        // SO_LINGER 0 turns close() into a RST, as Toxiproxy's reset_peer does with SetLinger(0).
        let _ = client.set_zero_linger();
        let _ = server.set_zero_linger();
    }
    if tap.point.is_listened() {
        let now = Instant::now();
        for stream in [Stream::Upstream, Stream::Downstream] {
            tap.point.deliver(&tap.event(stream, now, TapData::End));
        }
    }
}

/// What one connection keeps for one toxic of its chain.
struct LinkToxic {
    version: u64,
    /// Outcome of the toxicity roll for this connection; false runs a noop instead.
    active: bool,
    closes_on_removal: bool,
    state: AnyState,
}

/// What the head of the queue comes to after the chain.
enum Next {
    Empty,
    Write(Chunk),
    Dropped,
    Wait(Instant),
    End(End),
}

/// What ended a stretch of [`Pump::pass_through`]; the general loop takes over from there.
enum Passed {
    /// The chain changed (it may be empty again), or a held chunk was queued.
    Changed,
    /// The connection has an end (set by either pump, or by a toxic's removal).
    Ended,
    /// The source ended at this instant.
    Eof(Instant),
}

/// A listener's hold on a stream.
type Hold = Pin<Box<dyn Future<Output = ()> + Send>>;

struct Pump<'a> {
    chain_rx: watch::Receiver<Chain>,
    chain: Chain,
    chain_live: bool,
    end: &'a ConnEnd,
    queue: VecDeque<Chunk>,
    queued_bytes: usize,
    states: HashMap<u64, LinkToxic>,
    rng: Rng,
    tap: &'a ConnTap,
    stream: Stream,
    /// Made when a toxic first makes this link wait.
    deadline: Option<Deadline>,
}

impl<'a> Pump<'a> {
    fn new(
        mut chain_rx: watch::Receiver<Chain>,
        end: &'a ConnEnd,
        tap: &'a ConnTap,
        stream: Stream,
    ) -> Self {
        let chain = chain_rx.borrow_and_update().clone();
        let mut p = Pump {
            chain_rx,
            chain,
            chain_live: true,
            end,
            queue: VecDeque::new(),
            queued_bytes: 0,
            states: HashMap::new(),
            rng: Rng::seeded(),
            tap,
            stream,
            deadline: None,
        };
        // A new pump has no toxic to remove, so this start never ends the connection.
        p.refresh(Instant::now());
        p
    }

    /// Sync per-connection state with the chain: a new or updated toxic (re)starts here with
    /// a new toxicity roll. Returns an end if a removed toxic closes the connection
    /// (Toxiproxy's TimeoutToxic.Cleanup).
    fn refresh(&mut self, now: Instant) -> Option<End> {
        let chain = self.chain.clone();
        for t in chain.iter() {
            if matches!(self.states.get(&t.id), Some(s) if s.version == t.version) {
                continue;
            }
            let before = self.states.remove(&t.id).map(|s| s.state);
            // rand in [0,1) < toxicity, as ToxicStub.Run.
            let active = self.rng.next_f32() < t.toxicity;
            let link = LinkToxic {
                version: t.version,
                active,
                closes_on_removal: t.toxic.closes_on_removal(),
                state: t.toxic.start(now, before),
            };
            self.states.insert(t.id, link);
        }
        let mut close = None;
        self.states.retain(|id, st| {
            let keep = chain.iter().any(|t| t.id == *id);
            if !keep && st.closes_on_removal {
                close = Some(End::Close);
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

    /// Take a chain change the watch reported (`changed()`'s result). Returns an end if a
    /// removed toxic closes the connection.
    fn take_chain(&mut self, changed: Result<(), watch::error::RecvError>) -> Option<End> {
        match changed {
            Ok(()) => {
                self.chain = self.chain_rx.borrow_and_update().clone();
                self.refresh(Instant::now())
            }
            // Proxy deleted; its accept task is about to abort this connection anyway.
            Err(_) => {
                self.chain_live = false;
                None
            }
        }
    }

    /// Take a chain change made while a listener held the stream, before its bytes go on.
    fn sync_chain(&mut self) -> Option<End> {
        match self.chain_rx.has_changed() {
            Ok(true) => self.take_chain(Ok(())),
            Ok(false) => None,
            Err(e) => self.take_chain(Err(e)),
        }
    }

    /// Show bytes read at `at` to the tap's listeners; the hold they ask for, if any.
    fn tap_bytes(&self, bytes: &[u8], at: Instant) -> Option<Hold> {
        let event = self.tap.event(self.stream, at, TapData::Bytes(bytes));
        self.tap.point.deliver(&event)
    }

    /// Nothing to do for toxics: write each read straight from `buf`. Returns when a toxic
    /// arrives, the connection ends or the source does.
    async fn pass_through(
        &mut self,
        src: &mut ReadHalf<'_>,
        dst: &mut WriteHalf<'_>,
        buf: &mut [u8],
    ) -> Passed {
        let end = self.end;
        // Registered before the check, so an end set between the two is not missed.
        let ended = end.notify.notified();
        tokio::pin!(ended);
        ended.as_mut().enable();
        if end.get().is_some() {
            return Passed::Ended;
        }
        loop {
            let n = tokio::select! {
                // Toxic changes first, so data that arrives after an API call answered sees the new chain.
                biased;
                r = self.chain_rx.changed(), if self.chain_live => {
                    if let Some(e) = self.take_chain(r) {
                        self.end.set(e);
                    }
                    return Passed::Changed;
                }
                _ = ended.as_mut() => return Passed::Ended,
                r = src.read(buf) => match r {
                    Ok(0) | Err(_) => return Passed::Eof(Instant::now()),
                    Ok(n) => n,
                },
            };
            // The one check a chunk pays for the tap when nobody listens.
            if self.tap.point.is_listened() {
                let at = Instant::now();
                if let Some(hold) = self.tap_bytes(&buf[..n], at) {
                    hold.await;
                    if let Some(e) = self.sync_chain() {
                        self.end.set(e);
                        return Passed::Ended;
                    }
                    if !self.chain.is_empty() {
                        // A toxic came while the bytes were held: they meet it.
                        self.queued_bytes += n;
                        self.queue.push_back(Chunk::arrived(buf[..n].to_vec(), at));
                        return Passed::Changed;
                    }
                }
            }
            if dst.write_all(&buf[..n]).await.is_err() {
                self.end.set(End::Close);
                return Passed::Ended;
            }
        }
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

    /// Offer the head chunk to every active toxic it has not been through yet, in chain order.
    fn process_head(&mut self, now: Instant) -> Next {
        let Some(mut chunk) = self.pop() else {
            return Next::Empty;
        };
        let chain = self.chain.clone();
        for t in chain.iter() {
            if chunk.applied.contains(&t.id) {
                continue;
            }
            let Some(st) = self.states.get_mut(&t.id).filter(|s| s.active) else {
                chunk.applied.push(t.id);
                continue;
            };
            let mut head = Head::new(&mut chunk, now, &mut self.rng, (t.id, t.version));
            let flow = t.toxic.pipe(&mut st.state, &mut head);
            if let Some(rest) = head.into_rest() {
                self.push_front(rest);
            }
            match flow {
                Flow::Pass => chunk.pending = None,
                Flow::Wait(at) => {
                    chunk.pending = Some((t.id, t.version, at));
                    self.push_front(chunk);
                    return Next::Wait(at);
                }
                Flow::Drop => return Next::Dropped,
                Flow::End(end) => return Next::End(end),
            }
            chunk.applied.push(t.id);
        }
        Next::Write(chunk)
    }

    /// The earliest instant an active toxic ends the connection with no data (a timeout, a
    /// triggered reset_peer); the first in chain order on a tie.
    fn link_deadline(&self) -> Option<(Instant, End)> {
        let mut best: Option<(Instant, End)> = None;
        for t in self.chain.iter() {
            let Some(st) = self.states.get(&t.id).filter(|s| s.active) else {
                continue;
            };
            if let Some(c) = t.toxic.deadline(&st.state) {
                if !matches!(best, Some(b) if b.0 <= c.0) {
                    best = Some(c);
                }
            }
        }
        best
    }

    /// What EOF on the source turns into after the queue drained: Toxiproxy passes the close
    /// down the chain, where each active toxic may hold it back or harden it.
    fn eof_plan(&self, eof_at: Instant) -> Close {
        let mut close = Close {
            at: eof_at,
            end: End::Graceful,
        };
        for t in self.chain.iter() {
            if self.states.get(&t.id).is_some_and(|s| s.active) {
                t.toxic.on_eof(&mut close);
            }
        }
        close
    }

    async fn run(mut self, mut src: ReadHalf<'_>, mut dst: WriteHalf<'_>) {
        let mut buf = vec![0u8; READ_BUF_BYTES];
        let mut eof_at: Option<Instant> = None;
        let mut drain_deadline: Option<Instant> = None;
        loop {
            if eof_at.is_none() && self.chain.is_empty() && self.queue.is_empty() {
                match self.pass_through(&mut src, &mut dst, &mut buf).await {
                    Passed::Changed | Passed::Ended => {}
                    Passed::Eof(at) => eof_at = Some(at),
                }
            }
            let now = Instant::now();
            match self.end.get() {
                None => {}
                Some(End::Graceful) => {
                    // The other direction closed: stop reading, deliver what is queued, then end.
                    if eof_at.is_none() {
                        eof_at = Some(now);
                    }
                    if drain_deadline.is_none() {
                        drain_deadline = Some(now + DRAIN_LIMIT);
                    }
                }
                Some(_) => return,
            }
            if drain_deadline.is_some_and(|d| now >= d) {
                self.end.set(End::Close);
                return;
            }
            let mut wait_until: Option<Instant> = None;
            match self.process_head(now) {
                Next::Write(chunk) => {
                    if dst.write_all(&chunk.data).await.is_err() {
                        self.end.set(End::Close);
                        return;
                    }
                    if chunk.close_after {
                        self.end.set(End::Close);
                        return;
                    }
                    continue;
                }
                Next::Dropped => continue,
                Next::End(end) => {
                    self.end.set(end);
                    return;
                }
                Next::Wait(at) => wait_until = Some(at),
                Next::Empty => {
                    if let Some(eof) = eof_at {
                        let close = self.eof_plan(eof);
                        if now >= close.at {
                            if close.end == End::Graceful {
                                // FIN to the destination, like Toxiproxy closing it.
                                let _ = dst.shutdown().await;
                            }
                            self.end.set(close.end);
                            return;
                        }
                        wait_until = Some(close.at);
                    }
                }
            }
            if let Some((at, end)) = self.link_deadline() {
                if at <= now {
                    self.end.set(end);
                    return;
                }
                wait_until = Some(wait_until.map_or(at, |w| w.min(at)));
            }
            let can_read = eof_at.is_none() && self.queued_bytes < MAX_QUEUED_BYTES;
            let sleep_at = wait_until.unwrap_or(now).into_std();
            if wait_until.is_some() && self.deadline.is_none() {
                self.deadline = Deadline::new().ok();
            }
            tokio::select! {
                // Toxic changes first, so data that arrives after an API call answered sees the new chain.
                biased;
                r = self.chain_rx.changed(), if self.chain_live => {
                    if let Some(end) = self.take_chain(r) {
                        self.end.set(end);
                        return;
                    }
                }
                _ = self.end.notify.notified() => {}
                r = src.read(&mut buf), if can_read => match r {
                    Ok(0) | Err(_) => eof_at = Some(Instant::now()),
                    Ok(n) => {
                        let arrived = Instant::now();
                        if self.tap.point.is_listened() {
                            if let Some(hold) = self.tap_bytes(&buf[..n], arrived) {
                                hold.await;
                                if let Some(end) = self.sync_chain() {
                                    self.end.set(end);
                                    return;
                                }
                            }
                        }
                        self.queued_bytes += n;
                        self.queue.push_back(Chunk::arrived(buf[..n].to_vec(), arrived));
                    }
                },
                _ = wait_until_precise(self.deadline.as_mut(), sleep_at), if wait_until.is_some() => {}
            }
        }
    }
}

/// Complete at `at`: on the pump's timerfd, or on the shared timer thread if it has none
/// (no descriptor to spare) or it fails.
async fn wait_until_precise(deadline: Option<&mut Deadline>, at: std::time::Instant) {
    if let Some(d) = deadline {
        if d.sleep_until(at).await.is_ok() {
            return;
        }
    }
    super::precise::sleep_until(at).await
}
