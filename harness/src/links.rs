//! The links: one Toxiproxy proxy per client-to-database link, on our embedded server or on a real Toxiproxy the user names. The only place the harness talks to the proxy.

use chaos_nemesis::Link;
use chaos_proxy::{ProxyThread, ToxicKind, ToxicSpec, ToxiproxyClient};
use std::collections::{BTreeMap, BTreeSet};
use std::net::SocketAddr;
use std::sync::Mutex;

/// Proxy names cannot hold `->` in a URL path: `box-2->shard1` is proxy `box-2_to_shard1`.
pub fn proxy_name(link: &str) -> String {
    Link::parse(link).map_or_else(|| link.to_string(), |l| l.proxy_name())
}

pub struct Links {
    client: ToxiproxyClient,
    embedded: Mutex<Option<ProxyThread>>,
    /// Link name -> the address clients connect to.
    listen: Mutex<BTreeMap<String, String>>,
    /// Link name -> its further proxies (a ZooKeeper member's quorum and election ports are
    /// one link, two proxies), which every fault on the link changes with its first.
    more: Mutex<BTreeMap<String, Vec<String>>>,
    /// Links a `down` fault holds down (a node's restart must not bring them up).
    downed: Mutex<BTreeSet<String>>,
    /// Node -> the links cut while it is stopped.
    cut: Mutex<BTreeMap<String, Vec<String>>>,
    /// Links re-pointed to another node than the one their name says (a floating address
    /// moved: `box-2->lock` forwarding to `lock-2`): link -> node.
    moved: Mutex<BTreeMap<String, String>>,
    pub api: String,
    /// The proxy container's link events (`chaos proxy --events`), when the proxy is one.
    events: Option<String>,
}

/// Where the triggers read the links' bytes.
pub enum LinkReader {
    /// Our embedded proxy's taps, in-process.
    Taps(chaos_proxy::Taps),
    /// The events a `chaos proxy --events` in a container sends (its host address).
    Events(String),
    /// Another Toxiproxy: the bytes cannot be read.
    None,
}

/// A link's database: `box-2->shard1` goes to `shard1`.
pub fn link_target(link: &str) -> &str {
    Link::parse(link).map_or(link, |l| l.node)
}

impl Links {
    /// Our embedded server on a free loopback port, or the Toxiproxy at `external` (host:port).
    pub async fn start(external: Option<&str>) -> anyhow::Result<Links> {
        let (embedded, api) = match external {
            Some(addr) => (None, addr.to_string()),
            None => {
                // Its own two threads: a fault's change must not wait behind the ingest.
                let server =
                    chaos_proxy::start_on_own_threads("127.0.0.1:0".parse::<SocketAddr>()?, 2)?;
                let api = server.api_addr().to_string();
                (Some(server), api)
            }
        };
        let client = ToxiproxyClient::new(&api);
        if external.is_some() {
            // A real server may hold proxies from an earlier run: start clean.
            client
                .reset()
                .await
                .map_err(|e| anyhow::anyhow!("the Toxiproxy at {api} does not answer: {e}"))?;
        }
        Ok(Links {
            client,
            embedded: Mutex::new(embedded),
            listen: Mutex::new(BTreeMap::new()),
            more: Mutex::new(BTreeMap::new()),
            downed: Mutex::new(BTreeSet::new()),
            cut: Mutex::new(BTreeMap::new()),
            moved: Mutex::new(BTreeMap::new()),
            api,
            events: None,
        })
    }

    /// The bytes of our embedded proxy's links, for triggers (None with an external Toxiproxy).
    pub fn taps(&self) -> Option<chaos_proxy::Taps> {
        self.embedded.lock().unwrap().as_ref().map(|p| p.taps())
    }

    /// The proxy is a `chaos proxy --events` answering at `addr` (the docker backend's).
    pub fn with_events(mut self, addr: Option<String>) -> Links {
        self.events = addr;
        self
    }

    /// Where the triggers read the links.
    pub fn reader(&self) -> LinkReader {
        match (self.taps(), &self.events) {
            (Some(taps), _) => LinkReader::Taps(taps),
            (None, Some(addr)) => LinkReader::Events(addr.clone()),
            (None, None) => LinkReader::None,
        }
    }

    /// Create the proxy for `link` forwarding to `upstream`; returns the address clients use.
    /// A link added again gets a further proxy (`NAME_2`) that its faults change with the first.
    pub async fn add(&self, link: &str, listen: &str, upstream: &str) -> anyhow::Result<String> {
        let first = !self.listen.lock().unwrap().contains_key(link);
        let name = match first {
            true => proxy_name(link),
            false => {
                let n = self.more.lock().unwrap().get(link).map_or(0, Vec::len);
                format!("{}_{}", proxy_name(link), n + 2)
            }
        };
        let info = self
            .client
            .create_proxy(&name, listen, upstream)
            .await
            .map_err(|e| anyhow::anyhow!("proxy for {link}: {e}"))?;
        match first {
            true => {
                self.listen
                    .lock()
                    .unwrap()
                    .insert(link.to_string(), info.listen.clone());
            }
            false => self
                .more
                .lock()
                .unwrap()
                .entry(link.to_string())
                .or_default()
                .push(name),
        }
        Ok(info.listen)
    }

    /// The proxies of `link`: its own, then any further ones.
    fn proxies(&self, link: &str) -> Vec<String> {
        let mut out = vec![proxy_name(link)];
        if let Some(more) = self.more.lock().unwrap().get(link) {
            out.extend(more.iter().cloned());
        }
        out
    }

    /// Forward `link` to `node` at `upstream` from now on (Redis's floating address after a
    /// promotion): a stop of `node` cuts it from then on, not one of the node its name says;
    /// cut because that node was stopped, it opens again (unless a `down` holds it).
    pub async fn repoint(&self, link: &str, node: &str, upstream: &str) -> anyhow::Result<()> {
        self.client
            .set_upstream(&proxy_name(link), upstream)
            .await
            .map_err(|e| anyhow::anyhow!("re-point {link} to {upstream}: {e}"))?;
        self.moved
            .lock()
            .unwrap()
            .insert(link.to_string(), node.to_string());
        let was_cut = {
            let mut cut = self.cut.lock().unwrap();
            let mut found = false;
            for links in cut.values_mut() {
                let before = links.len();
                links.retain(|l| l != link);
                found |= links.len() != before;
            }
            found
        };
        if was_cut && !self.downed.lock().unwrap().contains(link) {
            self.client.up(&proxy_name(link)).await?;
        }
        Ok(())
    }

    /// Make one call through the client before the scenario clock starts: its first call sets
    /// up the blocking HTTP client (about 8 ms here), which would otherwise delay the faults
    /// due at the scenario's start and so the movers' start.
    pub async fn warm_up(&self) {
        let _ = self.client.list().await;
    }

    /// The address clients of `link` connect to.
    pub fn addr(&self, link: &str) -> Option<String> {
        self.listen.lock().unwrap().get(link).cloned()
    }

    /// The proxy client; `held_until` on it makes a clone whose changes land at an instant.
    pub fn client(&self) -> &ToxiproxyClient {
        &self.client
    }

    /// Cut `link` through `c` (new connections refused, open ones closed): a `down` fault,
    /// which a node's restart must not undo.
    pub async fn down_with(&self, c: &ToxiproxyClient, link: &str) -> anyhow::Result<()> {
        c.down_all(&self.proxies(link)).await?;
        self.downed.lock().unwrap().insert(link.to_string());
        Ok(())
    }

    /// Add `toxic` on each of `streams` of `link` through `c`, all at once.
    pub async fn add_toxic_with(
        &self,
        c: &ToxiproxyClient,
        link: &str,
        streams: &[chaos_proxy::Stream],
        toxic: ToxicKind,
    ) -> anyhow::Result<()> {
        let mut specs = Vec::new();
        for name in self.proxies(link) {
            for s in streams {
                specs.push((name.clone(), ToxicSpec::new(*s, toxic.clone())));
            }
        }
        all(specs
            .into_iter()
            .map(|(name, spec)| async move { c.add_toxic(&name, spec).await }))
        .await?;
        Ok(())
    }

    /// Remove every toxic on `link` and enable it.
    pub async fn heal(&self, link: &str) -> anyhow::Result<()> {
        self.heal_with(&self.client, link).await
    }

    /// Heal `link` through `c`. A link cut because its database is stopped is cut again at
    /// once (Toxiproxy's heal enables the proxy): the database is still down.
    pub async fn heal_with(&self, c: &ToxiproxyClient, link: &str) -> anyhow::Result<()> {
        all(self.proxies(link).iter().map(|p| c.heal(p))).await?;
        self.downed.lock().unwrap().remove(link);
        let still_cut = self
            .cut
            .lock()
            .unwrap()
            .get(link_target(link))
            .is_some_and(|l| l.iter().any(|x| x == link));
        if still_cut {
            all(self.proxies(link).iter().map(|p| self.client.down(p))).await?;
        }
        Ok(())
    }

    /// Every link to `node`.
    fn links_to(&self, node: &str) -> Vec<String> {
        let moved = self.moved.lock().unwrap().clone();
        self.listen
            .lock()
            .unwrap()
            .keys()
            .filter(|l| match moved.get(*l) {
                Some(to) => to == node,
                None => link_target(l) == node,
            })
            .cloned()
            .collect()
    }

    /// Cut every link to `node` (all at once, through `c`): its database is being stopped,
    /// and its clients lose it at this instant rather than whenever the shutdown gets to them.
    pub async fn cut_node(&self, c: &ToxiproxyClient, node: &str) -> anyhow::Result<usize> {
        let links = self.links_to(node);
        let names: Vec<String> = links.iter().flat_map(|l| self.proxies(l)).collect();
        if !names.is_empty() {
            c.down_all(&names).await?;
        }
        let n = links.len();
        self.cut.lock().unwrap().insert(node.to_string(), links);
        Ok(n)
    }

    /// Open the links cut by [`Links::cut_node`] again (all at once, through `c`), except
    /// those a `down` fault still holds down. A held `c` lands later than this call: a `down`
    /// that lands in between (April's on box 2's routing link, 10 s before a start begun
    /// early in containers) is put back at once, so the restart never undoes it.
    pub async fn restore_node(&self, c: &ToxiproxyClient, node: &str) -> anyhow::Result<usize> {
        let links = self.cut.lock().unwrap().remove(node).unwrap_or_default();
        let open: Vec<String> = {
            let downed = self.downed.lock().unwrap();
            links.into_iter().filter(|l| !downed.contains(l)).collect()
        };
        let names: Vec<String> = open.iter().flat_map(|l| self.proxies(l)).collect();
        if !names.is_empty() {
            c.up_all(&names).await?;
        }
        let downed_since: Vec<String> = {
            let downed = self.downed.lock().unwrap();
            open.iter()
                .filter(|l| downed.contains(*l))
                .flat_map(|l| self.proxies(l))
                .collect()
        };
        all(downed_since.iter().map(|n| self.client.down(n))).await?;
        Ok(open.len() - downed_since.len())
    }

    /// Remove every toxic everywhere and enable every proxy.
    pub async fn reset(&self) -> anyhow::Result<()> {
        self.client.reset().await?;
        self.downed.lock().unwrap().clear();
        self.cut.lock().unwrap().clear();
        Ok(())
    }

    /// Stop the embedded server (a real Toxiproxy is left as found, less our proxies).
    pub async fn shutdown(&self) {
        let server = self.embedded.lock().unwrap().take();
        match server {
            Some(s) => s.shutdown().await,
            None => {
                let names: Vec<String> = self
                    .listen
                    .lock()
                    .unwrap()
                    .keys()
                    .flat_map(|l| self.proxies(l))
                    .collect();
                for n in names {
                    let _ = self.client.delete_proxy(&n).await;
                }
            }
        }
    }
}

/// Run proxy calls together; the first error wins.
async fn all<T, F>(calls: impl IntoIterator<Item = F>) -> Result<Vec<T>, chaos_proxy::ClientError>
where
    F: std::future::Future<Output = Result<T, chaos_proxy::ClientError>>,
{
    futures_util::future::join_all(calls)
        .await
        .into_iter()
        .collect()
}
