//! Triggered faults (DESIGN section 10): a fault that lands at a moment of the system, the n-th
//! grant or renewal by a box or a role, rather than at a clock instant. Any mover at any pace
//! then meets the fault at the same point of its work.
//!
//! `Triggers` is the counting (pure, tested beside); `watch_claims` feeds it the routing db's
//! claim changes as they commit (LISTEN/NOTIFY from the claim audit trigger, never polled) and
//! hands each firing to the nemesis.

use crate::faults::Nemesis;
use crate::link_events::{OnEvents, HOLD_LIMIT};
use crate::scenario::Scenario;
use crate::wire::{ServerStreams, WireEvent};
use chaos_history::verb;
use chaos_history::{OpType, ScenarioClock};
use chaos_nemesis::{Event, Fault, FaultKind, Inside, Trigger};
use serde_json::json;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// The channel the routing db's claim audit trigger notifies (workloads/sql/routing.sql).
pub const CLAIMS_CHANNEL: &str = "chaos_claims";

/// A fault waiting for its trigger.
#[derive(Debug, Clone)]
struct Armed {
    index: usize,
    fault: Fault,
    when: Trigger,
    /// Matching events seen since it was armed.
    seen: u32,
    fired: bool,
}

/// A trigger that fired: the fault, with its role resolved to a box.
#[derive(Debug, Clone, PartialEq)]
pub struct Firing {
    pub index: usize,
    pub kind: FaultKind,
    pub duration_ms: Option<i64>,
    pub delay_ms: i64,
    /// `the 3rd renew by holder`, and the box whose event it was.
    pub describe: String,
    pub by: String,
    /// The fault's target was a role nobody held when it fired.
    pub no_target: Option<String>,
}

/// The claim as the harness has seen it change, and the faults still waiting.
#[derive(Debug, Default)]
pub struct Triggers {
    armed: Vec<Armed>,
    holder: Option<String>,
    /// The last box to hold the claim before the latest grant to a different box.
    previous: Option<String>,
    /// The latest grantee, still holding or released.
    last: Option<String>,
    token: Option<i64>,
    /// Faults whose write came (`inside = "between"`), waiting for that link's commit.
    after_commit: Vec<(usize, String)>,
    /// Link events of a box that neither held nor had held the claim as last heard, kept
    /// [`Triggers::early_window_ms`] in case its grant is heard next (below).
    early: Vec<Early>,
    /// How long (scenario ms) a link event may precede the hearing of its box's grant.
    early_window_ms: i64,
}

/// The grant and a box's first writes reach the harness by two roads: the grant by the lock's
/// own record (the routing db's NOTIFY, or a lock service's watch), the writes through the
/// proxy's tap. A box that writes 1 ms after its grant can be heard writing first; its write
/// was the holder's all the same. So a link event of a box that neither holds nor held the
/// claim counts at once as what it then seemed, and again, for the triggers that count a
/// holder's events and did not count it, once that box's grant is heard within the window.
#[derive(Debug, Clone)]
struct Early {
    on: Event,
    who: String,
    shard: String,
    link: String,
    now_ms: i64,
}

/// The window in real ms: a NOTIFY or a watch event is heard within a few ms of its commit
/// on a busy 2-core machine; a box granted again within it after a stale write is rarer.
const EARLY_WINDOW_REAL_MS: f64 = 100.0;

impl Triggers {
    /// The scenario's triggered faults (none: nothing to watch).
    pub fn new(scenario: &Scenario) -> Triggers {
        let armed = scenario
            .schedule
            .triggered
            .iter()
            .filter_map(|&i| {
                let fault = scenario.faults.get(i)?.clone();
                let when = fault.when.clone()?;
                Some(Armed {
                    index: i,
                    fault,
                    when,
                    seen: 0,
                    fired: false,
                })
            })
            .collect();
        Triggers {
            armed,
            early_window_ms: (EARLY_WINDOW_REAL_MS * 1000.0 / scenario.file.time_scale_ms).round()
                as i64,
            ..Default::default()
        }
    }

    pub fn is_empty(&self) -> bool {
        self.armed.is_empty()
    }

    /// Whether any trigger waits for `event`.
    pub fn waits_for(&self, f: impl Fn(Event) -> bool) -> bool {
        self.armed.iter().any(|a| f(a.when.on))
    }

    /// A claim change committed at `now_ms`: a new token is a grant, the same token a renewal,
    /// no holder a release. Returns the faults it fires.
    pub fn claim_changed(&mut self, holder: Option<&str>, token: i64, now_ms: i64) -> Vec<Firing> {
        let event = match holder {
            Some(h) if self.token != Some(token) => {
                if let Some(last) = self.last.take().filter(|l| l != h) {
                    self.previous = Some(last);
                }
                self.last = Some(h.to_string());
                self.holder = Some(h.to_string());
                self.token = Some(token);
                let mut out = self.event(Event::Grant, h, now_ms);
                out.extend(self.recount_early(h, now_ms));
                return out;
            }
            Some(_) => Event::Renew,
            None => {
                self.holder = None;
                self.token = Some(token);
                return vec![];
            }
        };
        self.event(event, holder.unwrap_or_default(), now_ms)
    }

    /// One claim event (grant, renew) by box `who` at `now_ms`.
    pub fn event(&mut self, on: Event, who: &str, now_ms: i64) -> Vec<Firing> {
        self.count(on, who, None, now_ms, |_| true)
    }

    /// What a box-to-shard link's server said (`link` is `box-2->shard1`).
    pub fn link_event(&mut self, link: &str, ev: &WireEvent, now_ms: i64) -> Vec<Firing> {
        let Some(chaos_nemesis::Link {
            client: who,
            node: shard,
        }) = chaos_nemesis::Link::parse(link)
        else {
            return vec![];
        };
        let on = match ev {
            WireEvent::Txn => Event::Txn,
            WireEvent::Write { .. } => Event::Write,
            WireEvent::Commit => Event::Commit,
        };
        let mut out = Vec::new();
        if on == Event::Commit {
            let due: Vec<usize> = self
                .after_commit
                .iter()
                .filter(|(_, l)| l == link)
                .map(|(i, _)| *i)
                .collect();
            self.after_commit.retain(|(_, l)| l != link);
            for i in due {
                out.push(self.firing(i, who));
            }
        }
        let (holder, previous) = (self.holder.as_deref(), self.previous.as_deref());
        if holder != Some(who) && previous != Some(who) && self.early_window_ms > 0 {
            self.early
                .retain(|e| now_ms - e.now_ms <= self.early_window_ms);
            self.early.push(Early {
                on,
                who: who.to_string(),
                shard: shard.to_string(),
                link: link.to_string(),
                now_ms,
            });
        }
        out.extend(self.count(on, who, Some((shard, link)), now_ms, |_| true));
        out
    }

    /// `who`'s grant is heard at `now_ms`: its link events heard within the window before it
    /// count now for the triggers `by = "holder"`, the only ones that did not count them
    /// when they came (`any` and the box's name did; `previous-holder` is another box).
    fn recount_early(&mut self, who: &str, now_ms: i64) -> Vec<Firing> {
        let window = self.early_window_ms;
        let (mine, rest): (Vec<Early>, Vec<Early>) = std::mem::take(&mut self.early)
            .into_iter()
            .partition(|e| e.who == who);
        self.early = rest;
        let mut out = Vec::new();
        for e in mine.into_iter().filter(|e| now_ms - e.now_ms <= window) {
            let link = Some((e.shard.as_str(), e.link.as_str()));
            let holders_only = |t: &Trigger| t.by == chaos_nemesis::Who::Holder;
            out.extend(self.count(e.on, &e.who, link, e.now_ms, holders_only));
        }
        out
    }

    /// Count one event for the armed triggers that `only` keeps.
    fn count(
        &mut self,
        on: Event,
        who: &str,
        link: Option<(&str, &str)>,
        now_ms: i64,
        only: impl Fn(&Trigger) -> bool,
    ) -> Vec<Firing> {
        let (holder, previous) = (self.holder.clone(), self.previous.clone());
        let mut due = Vec::new();
        for (i, a) in self.armed.iter_mut().enumerate().filter(|(_, a)| !a.fired) {
            if a.when.on != on
                || !only(&a.when)
                || now_ms < a.fault.at_ms
                || !a.when.counts(who, holder.as_deref(), previous.as_deref())
                || a.when
                    .shard
                    .as_deref()
                    .is_some_and(|s| Some(s) != link.map(|l| l.0))
            {
                continue;
            }
            a.seen += 1;
            if a.seen < a.when.nth {
                continue;
            }
            a.fired = true;
            match (a.when.inside, link) {
                (Some(Inside::Between), Some((_, l))) => self.after_commit.push((i, l.to_string())),
                _ => due.push(i),
            }
        }
        due.into_iter().map(|i| self.firing(i, who)).collect()
    }

    /// Armed fault `i` fires now for an event of `who`: its role resolved to a box.
    fn firing(&self, i: usize, who: &str) -> Firing {
        let a = &self.armed[i];
        let mut kind = a.fault.kind.clone();
        let mut no_target = None;
        if let Some(role) = kind.role() {
            let resolved = match role {
                "holder" => self.holder.as_deref(),
                _ => self.previous.as_deref(),
            };
            match resolved {
                Some(b) => kind = kind.for_box(b),
                None => no_target = Some(role.to_string()),
            }
        }
        Firing {
            index: a.index,
            kind,
            duration_ms: a.fault.duration_ms,
            delay_ms: (a.when.delay_s * 1000.0).round() as i64,
            describe: a.when.describe(),
            by: who.to_string(),
            no_target,
        }
    }

    /// The triggers that never fired: (fault index, what it waited for, optional).
    pub fn unfired(&self) -> Vec<(usize, String, bool)> {
        self.armed
            .iter()
            .filter(|a| !a.fired)
            .map(|a| (a.index, a.when.describe(), a.fault.optional))
            .collect()
    }
}

/// A run's triggers at work: armed before the movers connect (a link is read from its first
/// byte, the routing db's claim changes from before the clock starts), started with the
/// nemesis, and disarmed before the final reads, saying which never fired.
pub struct Watch {
    triggers: Arc<Mutex<Triggers>>,
    clock: Arc<std::sync::OnceLock<chaos_history::HistoryWriter>>,
    fired_tx: Option<tokio::sync::mpsc::UnboundedSender<Fired>>,
    fired_rx: Option<tokio::sync::mpsc::UnboundedReceiver<Fired>>,
    link_taps: Vec<chaos_proxy::Tap>,
    /// The links as the proxy container reads them (docker backend).
    link_remote: Option<crate::link_events::Remote>,
    claims: Option<Listener>,
    /// A lock service other than the claim row: its observer's changes (`hear_lock`).
    lock_feed: Option<tokio::sync::mpsc::UnboundedReceiver<crate::lock::Seen>>,
    routing_url: String,
    tasks: Vec<tokio::task::JoinHandle<()>>,
}

impl Watch {
    /// Arm the scenario's triggers: tap the box-to-shard links when a trigger waits for a link
    /// event, LISTEN on the routing db when any trigger waits at all.
    pub async fn arm(
        scenario: &Scenario,
        links: &crate::links::Links,
        routing_url: &str,
    ) -> anyhow::Result<Watch> {
        let triggers = Arc::new(Mutex::new(Triggers::new(scenario)));
        let clock: Arc<std::sync::OnceLock<chaos_history::HistoryWriter>> = Default::default();
        let (fired_tx, fired_rx) = tokio::sync::mpsc::unbounded_channel();
        let (mut link_taps, mut link_remote) = (Vec::new(), None);
        if triggers.lock().unwrap().waits_for(|e| e.on_link()) {
            let box_shard: Vec<String> = scenario
                .topology()
                .links()
                .into_iter()
                .filter(|l| l.starts_with("box-") && !l.ends_with("->routing"))
                .collect();
            let counter = link_events_counter(triggers.clone(), clock.clone(), fired_tx.clone());
            match links.reader() {
                crate::links::LinkReader::Taps(taps) => {
                    link_taps = tap_links(&taps, &box_shard, counter)
                }
                crate::links::LinkReader::Events(addr) => {
                    link_remote =
                        Some(crate::link_events::subscribe(&addr, &box_shard, counter).await?)
                }
                crate::links::LinkReader::None => anyhow::bail!(
                    "a trigger on a link event reads the links through the harness's own proxy (embedded, or `chaos proxy --events` in the docker backend's container): not through another Toxiproxy"
                ),
            }
        }
        let claims = if triggers.lock().unwrap().is_empty() {
            None
        } else {
            Some(listen(routing_url).await?)
        };
        Ok(Watch {
            triggers,
            clock,
            fired_tx: Some(fired_tx),
            fired_rx: Some(fired_rx),
            link_taps,
            link_remote,
            claims,
            lock_feed: None,
            routing_url: routing_url.to_string(),
            tasks: vec![],
        })
    }

    /// Hear grants and renewals from a lock service's observer instead of the routing db.
    pub fn hear_lock(&mut self, feed: tokio::sync::mpsc::UnboundedReceiver<crate::lock::Seen>) {
        self.claims = None;
        self.lock_feed = Some(feed);
    }

    /// The clock has started: events count from now, and what fires goes to `nemesis`.
    pub fn start(&mut self, nemesis: Arc<Nemesis>) {
        let history = nemesis.history.clone();
        let _ = self.clock.set(history.clone());
        if let Some(rx) = self.fired_rx.take() {
            self.tasks.push(tokio::spawn(land_fired(rx, nemesis)));
        }
        let fired = self.fired_tx.take();
        if let (Some(feed), Some(fired)) = (self.lock_feed.take(), fired.clone()) {
            if !self.triggers.lock().unwrap().is_empty() {
                self.tasks.push(tokio::spawn(hear_changes(
                    feed,
                    self.triggers.clone(),
                    history.clone(),
                    fired,
                )));
            }
        }
        if let (Some(first), Some(fired)) = (self.claims.take(), fired) {
            self.tasks.push(tokio::spawn(watch_claims(
                self.routing_url.clone(),
                first,
                self.triggers.clone(),
                history,
                fired,
            )));
        }
    }

    /// Stop watching, and record each trigger that never fired in the history. Returns the
    /// reasons the run cannot judge (the unfired triggers that were not optional).
    pub async fn disarm(mut self, history: &chaos_history::HistoryWriter) -> Vec<String> {
        self.link_taps.clear();
        self.link_remote = None;
        for t in self.tasks.drain(..) {
            t.abort();
            let _ = t.await;
        }
        let unfired = self.triggers.lock().unwrap().unfired();
        for (index, when, optional) in &unfired {
            history.record(
                "nemesis",
                OpType::Info,
                verb::TRIGGER_UNFIRED,
                json!({ "fault": index, "when": when, "optional": optional }),
            );
        }
        unfired
            .iter()
            .filter(|u| !u.2)
            .map(|(i, when, _)| format!("fault {i}'s trigger ({when}) never fired"))
            .collect()
    }
}

/// A LISTEN on the routing db's claim changes: notifications with the instant each arrived.
pub struct Listener {
    _client: tokio_postgres::Client,
    rx: tokio::sync::mpsc::UnboundedReceiver<(Instant, String)>,
    pump: tokio::task::JoinHandle<()>,
}

impl Drop for Listener {
    fn drop(&mut self) {
        self.pump.abort();
    }
}

/// A claim change's notification (routing.sql's audit trigger): who holds the claim now
/// (`None` when nobody does: released, or written already expired) and its token. A payload
/// without `held` (the unique-constraint election's job_runs) is held.
pub fn claim_change(payload: &str) -> (Option<String>, i64) {
    let v: serde_json::Value = serde_json::from_str(payload).unwrap_or_default();
    let held = v["held"].as_bool().unwrap_or(true);
    let holder = v["holder"].as_str().filter(|_| held).map(str::to_string);
    (holder, v["token"].as_i64().unwrap_or(0))
}

impl Listener {
    /// The next claim change as [`claim_change`] reads it (`None`: the connection ended).
    pub async fn next_change(&mut self) -> Option<(Option<String>, i64)> {
        self.rx.recv().await.map(|(_, p)| claim_change(&p))
    }
}

/// Connect to the routing db and LISTEN (before the clock starts, so the first grant is seen).
pub async fn listen(routing_url: &str) -> anyhow::Result<Listener> {
    use futures_util::StreamExt;
    let config: tokio_postgres::Config = routing_url.parse()?;
    let (client, mut conn) = tokio::time::timeout(
        Duration::from_secs(5),
        config.connect(tokio_postgres::NoTls),
    )
    .await
    .map_err(|_| anyhow::anyhow!("routing db: no connection for the triggers within 5 s"))??;
    let (tx, rx) = tokio::sync::mpsc::unbounded_channel();
    let pump = tokio::spawn(async move {
        let mut messages = futures_util::stream::poll_fn(move |cx| conn.poll_message(cx));
        while let Some(Ok(m)) = messages.next().await {
            if let tokio_postgres::AsyncMessage::Notification(n) = m {
                if tx.send((Instant::now(), n.payload().to_string())).is_err() {
                    return;
                }
            }
        }
    });
    client
        .batch_execute(&format!("listen {CLAIMS_CHANNEL}"))
        .await
        .map_err(|e| anyhow::anyhow!("routing db: listen {CLAIMS_CHANNEL}: {e}"))?;
    Ok(Listener {
        _client: client,
        rx,
        pump,
    })
}

/// Count each claim change, and send what it fires to `fired`, until the task is aborted. A
/// lost connection (the routing db stopped by the nemesis) is made again; nothing commits on
/// a stopped server meanwhile.
pub async fn watch_claims(
    routing_url: String,
    first: Listener,
    triggers: Arc<Mutex<Triggers>>,
    history: chaos_history::HistoryWriter,
    fired: tokio::sync::mpsc::UnboundedSender<Fired>,
) {
    let mut listener = Some(first);
    loop {
        let mut l = match listener.take() {
            Some(l) => l,
            None => match listen(&routing_url).await {
                Ok(l) => l,
                Err(_) => {
                    tokio::time::sleep(Duration::from_millis(20)).await;
                    continue;
                }
            },
        };
        while let Some((seen, payload)) = l.rx.recv().await {
            let (holder, token) = claim_change(&payload);
            let now_ms = history.now_scenario_ms();
            let firings = triggers
                .lock()
                .unwrap()
                .claim_changed(holder.as_deref(), token, now_ms);
            for f in firings {
                let _ = fired.send((f, seen, None));
            }
        }
    }
}

/// Count each change a lock service's observer saw, as `watch_claims` does the routing db's.
async fn hear_changes(
    mut feed: tokio::sync::mpsc::UnboundedReceiver<crate::lock::Seen>,
    triggers: Arc<Mutex<Triggers>>,
    history: chaos_history::HistoryWriter,
    fired: tokio::sync::mpsc::UnboundedSender<Fired>,
) {
    while let Some(seen) = feed.recv().await {
        let now_ms = history.now_scenario_ms();
        let firings =
            triggers
                .lock()
                .unwrap()
                .claim_changed(seen.holder.as_deref(), seen.token, now_ms);
        for f in firings {
            let _ = fired.send((f, seen.at, None));
        }
    }
}

/// A fired fault on its way to the nemesis, with the instant its event was seen and, when the
/// link holds its bytes until it lands, the word to let them go.
pub type Fired = (Firing, Instant, Option<tokio::sync::oneshot::Sender<()>>);

/// Read the server side of every box-to-shard link for the link triggers (`clock` is set when
/// the scenario clock starts). A firing holds the
/// bytes that told of its event until its fault has landed (`inside = "transaction"`: the
/// writer has not yet heard its write complete, its transaction and locks still open).
pub fn tap_links(
    taps: &chaos_proxy::Taps,
    links: &[String],
    on_events: Arc<OnEvents>,
) -> Vec<chaos_proxy::Tap> {
    use chaos_proxy::TapVerdict;
    links
        .iter()
        .map(|link| {
            let streams = ServerStreams::default();
            let (link_name, on_events) = (link.clone(), on_events.clone());
            taps.subscribe(&crate::links::proxy_name(link), move |e| {
                let events = streams.feed(e);
                if events.is_empty() {
                    return TapVerdict::Forward;
                }
                let waits = on_events(&link_name, &events, e.at);
                if waits.is_empty() {
                    return TapVerdict::Forward;
                }
                TapVerdict::Hold(Box::pin(async move {
                    for rx in waits {
                        let _ = tokio::time::timeout(HOLD_LIMIT, rx).await;
                    }
                }))
            })
        })
        .collect()
}

/// What the triggers do with a link's events (seen at `at`), wherever the link is read: count
/// them, send what they fire to the nemesis, and return the words each firing sends once its
/// fault has landed (the link holds the bytes until then).
fn link_events_counter(
    triggers: Arc<Mutex<Triggers>>,
    clock: Arc<std::sync::OnceLock<chaos_history::HistoryWriter>>,
    fired: tokio::sync::mpsc::UnboundedSender<Fired>,
) -> Arc<OnEvents> {
    Arc::new(move |link: &str, events: &[WireEvent], at: Instant| {
        // Before the clock starts (the movers connecting) nothing counts.
        let Some(history) = clock.get() else {
            return vec![];
        };
        let now_ms = history.now_scenario_ms();
        let firings: Vec<Firing> = {
            let mut t = triggers.lock().unwrap();
            events
                .iter()
                .flat_map(|ev| t.link_event(link, ev, now_ms))
                .collect()
        };
        let mut waits = Vec::new();
        for f in firings {
            let (tx, rx) = tokio::sync::oneshot::channel();
            if fired.send((f, at, Some(tx))).is_ok() {
                waits.push(rx);
            }
        }
        waits
    })
}

/// Hand every fired fault (from the claims and the links) to the nemesis, each landing and
/// heal in a task of its own. Aborting this task aborts them all (`heal_all` heals what they
/// left on).
pub async fn land_fired(
    mut fired: tokio::sync::mpsc::UnboundedReceiver<Fired>,
    nemesis: Arc<Nemesis>,
) {
    let mut landing = tokio::task::JoinSet::new();
    while let Some((f, seen, done)) = fired.recv().await {
        landing.spawn(fire(nemesis.clone(), f, seen, done));
        while landing.try_join_next().is_some() {}
    }
    while landing.join_next().await.is_some() {}
}

/// Land one fired fault: said in the history (`trigger`), applied `delay` after its event, and
/// healed after its duration.
pub async fn fire(
    nemesis: Arc<Nemesis>,
    f: Firing,
    event_seen: Instant,
    landed: Option<tokio::sync::oneshot::Sender<()>>,
) {
    let clock: ScenarioClock = nemesis.history.clock();
    let real = |ms: i64| Duration::from_nanos(clock.real_ns_for_scenario_ms(ms).max(0) as u64);
    nemesis.history.record(
        "nemesis",
        OpType::Info,
        verb::TRIGGER,
        json!({
            "fault": f.index,
            "when": f.describe,
            "by": f.by,
            "target": f.kind.target(),
            "no_target": f.no_target,
        }),
    );
    if f.no_target.is_some() {
        return;
    }
    // A delayed fault does not hold the link meanwhile: the writer goes on, as it would.
    let mut landed = landed;
    if f.delay_ms > 0 {
        landed.take().map(|tx| tx.send(()));
    }
    let at = event_seen + real(f.delay_ms);
    nemesis.apply_now(f.index, f.kind.clone(), false, at).await;
    landed.take().map(|tx| tx.send(()));
    if let Some(d) = f.duration_ms {
        nemesis.apply_now(f.index, f.kind, true, at + real(d)).await;
    }
}

#[cfg(test)]
mod tests;
