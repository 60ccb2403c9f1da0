//! The byte tap: an in-process listener sees the bytes of a named proxy, each direction, as
//! they arrive and before they are forwarded.
//!
//! The proxy knows nothing of what flows through it; a listener that does (the harness's
//! Postgres decoder, which fires a fault at a mover's Nth write) subscribes here. A listener
//! is called on the proxy's own thread, before the bytes go on (and before any toxic sees
//! them), so what it does - stop a process, or hold the bytes while it changes the toxics -
//! happens before the peer sees them. It must be quick: the link waits for it.
//!
//! Nobody listening must cost nothing: a connection asks one relaxed atomic load per chunk,
//! and takes the subscriber lock only when someone listens to its proxy.

use super::priority::Tuning;
use crate::model::Stream;
use std::collections::HashMap;
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, RwLock};
use std::time::Instant;

/// What a listener is shown.
#[derive(Debug, Clone, Copy)]
pub struct TapEvent<'a> {
    /// The proxy's name.
    pub proxy: &'a str,
    /// The proxied connection, unique for the life of the process: a decoder keeps its state
    /// per connection and stream.
    pub connection: u64,
    /// Upstream: client to server; downstream: server to client.
    pub stream: Stream,
    /// When the bytes were read from their source (or when the stream ended).
    pub at: Instant,
    pub data: TapData<'a>,
}

/// Bytes as read (one read's worth; message boundaries are the listener's business), or the
/// end of the connection.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TapData<'a> {
    Bytes(&'a [u8]),
    /// The connection is gone (told once per stream); no bytes follow.
    End,
}

/// A listener's answer for bytes: forward them now, or hold the stream until the future
/// completes (the bytes then meet the toxics as they are at that moment, so a toxic added
/// while holding applies to them). Ignored for [`TapData::End`].
pub enum TapVerdict {
    Forward,
    Hold(Pin<Box<dyn Future<Output = ()> + Send>>),
}

type Listener = dyn Fn(&TapEvent<'_>) -> TapVerdict + Send + Sync;

/// The taps of one server, by proxy name; cheap to clone, usable from any thread.
#[derive(Clone, Default)]
pub struct Taps {
    inner: Arc<TapsInner>,
}

#[derive(Default)]
struct TapsInner {
    points: Mutex<HashMap<String, Arc<TapPoint>>>,
    next_id: AtomicU64,
    /// A listener makes the server's links timed (see `priority`).
    tuning: Arc<Tuning>,
}

/// The listeners of one proxy name. Its connections hold it for their lifetime, so a
/// subscription made while they are open reaches them too.
#[derive(Default)]
pub(crate) struct TapPoint {
    listening: AtomicUsize,
    listeners: RwLock<Vec<(u64, Arc<Listener>)>>,
}

/// A subscription; dropping it stops the calls (a call under way finishes).
#[must_use = "dropping a Tap unsubscribes it"]
pub struct Tap {
    point: Arc<TapPoint>,
    id: u64,
    tuning: Arc<Tuning>,
}

impl Taps {
    pub(crate) fn with_tuning(tuning: Arc<Tuning>) -> Taps {
        Taps {
            inner: Arc::new(TapsInner {
                tuning,
                ..Default::default()
            }),
        }
    }

    /// Call `listener` with the bytes of every connection of proxy `proxy` (open now or
    /// opened later, also across a disable or a delete and create of that name), in each
    /// direction, before they are forwarded.
    pub fn subscribe<F>(&self, proxy: &str, listener: F) -> Tap
    where
        F: Fn(&TapEvent<'_>) -> TapVerdict + Send + Sync + 'static,
    {
        let point = self.point(proxy);
        let id = self.inner.next_id.fetch_add(1, Ordering::Relaxed);
        // The forwarding threads are raised before the first bytes reach the listener.
        self.inner.tuning.listener(true);
        let mut listeners = point.listeners.write().unwrap_or_else(|p| p.into_inner());
        listeners.push((id, Arc::new(listener)));
        point.listening.store(listeners.len(), Ordering::Release);
        drop(listeners);
        Tap {
            point,
            id,
            tuning: self.inner.tuning.clone(),
        }
    }

    pub(crate) fn point(&self, proxy: &str) -> Arc<TapPoint> {
        let mut points = self.inner.points.lock().unwrap_or_else(|p| p.into_inner());
        points.entry(proxy.to_string()).or_default().clone()
    }
}

impl Drop for Tap {
    fn drop(&mut self) {
        let mut listeners = self
            .point
            .listeners
            .write()
            .unwrap_or_else(|p| p.into_inner());
        listeners.retain(|(id, _)| *id != self.id);
        self.point
            .listening
            .store(listeners.len(), Ordering::Release);
        drop(listeners);
        self.tuning.listener(false);
    }
}

impl TapPoint {
    /// The one check a chunk pays when nobody listens.
    #[inline]
    pub(crate) fn is_listened(&self) -> bool {
        self.listening.load(Ordering::Relaxed) != 0
    }

    /// Show `event` to every listener; the holds they ask for, as one future (None: forward now).
    pub(crate) fn deliver(
        &self,
        event: &TapEvent<'_>,
    ) -> Option<Pin<Box<dyn Future<Output = ()> + Send>>> {
        // Called outside the lock, so a listener may subscribe or unsubscribe from its call.
        let listeners: Vec<Arc<Listener>> = self
            .listeners
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .iter()
            .map(|(_, l)| l.clone())
            .collect();
        let mut holds = Vec::new();
        for l in listeners {
            if let TapVerdict::Hold(h) = l(event) {
                holds.push(h);
            }
        }
        match holds.len() {
            0 => None,
            1 => holds.pop(),
            _ => Some(Box::pin(async move {
                for h in holds {
                    h.await;
                }
            })),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn event(data: TapData<'_>) -> TapEvent<'_> {
        TapEvent {
            proxy: "p",
            connection: 1,
            stream: Stream::Upstream,
            at: Instant::now(),
            data,
        }
    }

    #[test]
    fn listened_only_while_subscribed() {
        let taps = Taps::default();
        let point = taps.point("p");
        assert!(!point.is_listened());
        let seen = Arc::new(Mutex::new(Vec::new()));
        let s = seen.clone();
        let tap = taps.subscribe("p", move |e| {
            if let TapData::Bytes(b) = e.data {
                s.lock().unwrap().extend_from_slice(b);
            }
            TapVerdict::Forward
        });
        assert!(point.is_listened(), "the point a connection holds sees it");
        assert!(!taps.point("q").is_listened(), "other proxies do not");
        assert!(point.deliver(&event(TapData::Bytes(b"ab"))).is_none());
        drop(tap);
        assert!(!point.is_listened());
        assert!(point.deliver(&event(TapData::Bytes(b"cd"))).is_none());
        assert_eq!(*seen.lock().unwrap(), b"ab");
    }

    #[test]
    fn holds_are_returned() {
        let taps = Taps::default();
        let _a = taps.subscribe("p", |_| TapVerdict::Hold(Box::pin(async {})));
        let _b = taps.subscribe("p", |_| TapVerdict::Forward);
        assert!(taps
            .point("p")
            .deliver(&event(TapData::Bytes(b"x")))
            .is_some());
    }
}
