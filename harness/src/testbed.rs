//! The testbed a scenario runs on: the routing db and the shards, a proxy on every link, the
//! schema, the plan and the seeded readings. `chaos run` and `chaos up` bring it up through
//! this one path (the sweep runs `chaos run`), so a node, a link or a URL means the same in both.

use crate::backend::{BackendKind, Cluster, ClusterSpec};
use crate::links::{link_target, Links};
use crate::lock::{is_lock_node, LockServer};
use crate::scenario::Scenario;
use crate::setup;
use chaos_history::SeededTurbine;
use chaos_workloads::galewatch::Farm;
use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Instant;

/// Where a testbed runs and where it writes.
pub struct BedOptions {
    pub backend: BackendKind,
    /// A Toxiproxy API to drive instead of the proxy the harness serves itself.
    pub toxiproxy: Option<String>,
    pub log_dir: PathBuf,
    pub run_id: String,
}

/// The databases and links of a run, up and reachable.
pub struct Testbed {
    pub cluster: Cluster,
    pub links: Arc<Links>,
    /// The lock service's own server, when it has one (etcd).
    pub lock: LockServer,
    /// `routing`, then `shard1` .. `shardN` (the databases; a lock server is apart).
    pub nodes: Vec<String>,
    pub urls: LinkUrls,
    /// Real seconds spent bringing the databases up.
    pub cluster_s: f64,
}

/// Per link: the URL a mover dials, and the URL the harness dials, both through the link's
/// proxy (they differ when the movers are containers on a private network).
#[derive(Debug, Clone, Default)]
pub struct LinkUrls(BTreeMap<String, (String, String)>);

impl LinkUrls {
    /// Each of `names`, through its proxy on `links`, as a mover and as the harness dial it.
    pub fn of(cluster: &Cluster, links: &Links, names: Vec<String>) -> LinkUrls {
        let urls = names
            .into_iter()
            .map(|link| {
                let reported = links.addr(&link).unwrap_or_default();
                let url = |for_harness| {
                    format!(
                        "postgres://postgres@{}/postgres",
                        cluster.client_addr(&link, &reported, for_harness)
                    )
                };
                let pair = (url(false), url(true));
                (link, pair)
            })
            .collect();
        LinkUrls(urls)
    }

    /// The URL a mover dials for `link`.
    pub fn mover(&self, link: &str) -> String {
        self.0.get(link).map(|u| u.0.clone()).unwrap_or_default()
    }

    /// The `host:port` a mover dials for `link` (a lock service that is not Postgres).
    pub fn mover_addr(&self, link: &str) -> String {
        let url = self.mover(link);
        let rest = url.split_once('@').map_or(url.as_str(), |(_, r)| r);
        rest.split('/').next().unwrap_or_default().to_string()
    }

    /// The URL the harness itself dials for `link` (the ingest).
    pub fn harness(&self, link: &str) -> String {
        self.0.get(link).map(|u| u.1.clone()).unwrap_or_default()
    }

    /// The links, each with the URL the harness dials.
    pub fn for_harness(&self) -> impl Iterator<Item = (&String, &String)> {
        self.0.iter().map(|(l, u)| (l, &u.1))
    }
}

/// The farm a scenario describes: how many turbines, where they live, which ones move (none
/// for the systems that are not the mover).
pub fn farm(s: &Scenario) -> Farm {
    let d = &s.file.data;
    if !crate::systems::of(s.file.system).moves_turbines() {
        return Farm {
            turbines: 0,
            seeded_turbines: 0,
            ..Farm::ardnave_point()
        };
    }
    Farm {
        turbines: d.turbines,
        seeded_turbines: d.seeded_turbines,
        rows_per_turbine: d.rows_per_turbine,
        old_divisor: d.old_divisor,
        new_divisor: d.new_divisor,
    }
}

impl Testbed {
    /// Start the databases, then a proxy per link of the scenario's topology.
    pub async fn start(scenario: &Scenario, o: &BedOptions) -> anyhow::Result<Testbed> {
        let topology = scenario.topology();
        let nodes: Vec<String> = topology
            .nodes
            .iter()
            .filter(|n| !is_lock_node(n))
            .cloned()
            .collect();
        let spec = ClusterSpec {
            nodes: nodes.clone(),
            links: topology.links(),
            log_dir: o.log_dir.clone(),
            run_id: o.run_id.clone(),
            asynchronous_commit: topology.asynchronous_commit.clone(),
        };
        crate::faults::clock::prepare_nodes(scenario, &o.log_dir)?;
        let began = Instant::now();
        let cluster = Cluster::start(o.backend, &spec).await?;
        let mut lock =
            LockServer::plan(&scenario.file.lock, o.backend, &o.run_id, &o.log_dir).await?;
        let proxy_api = o.toxiproxy.clone().or_else(|| cluster.proxy_api());
        let events = cluster.link_events().filter(|_| o.toxiproxy.is_none());
        let links = Arc::new(
            Links::start(proxy_api.as_deref())
                .await?
                .with_events(events),
        );
        // A cluster's members find each other through the proxy: their links first.
        let peers = lock.peer_links();
        for (link, listen, upstream) in &peers {
            links.add(link, listen, upstream).await?;
        }
        if let Err(e) = lock.launch().await {
            // Its logs copied into the run's (the error names them), its containers removed.
            lock.stop().await;
            return Err(e);
        }
        // Tests plant a panic here to prove no server outlives the harness.
        if std::env::var("CHAOS_TEST_PANIC").as_deref() == Ok("after-cluster") {
            panic!("planted panic (CHAOS_TEST_PANIC) after the cluster started");
        }
        let cluster_s = began.elapsed().as_secs_f64();
        let others: Vec<String> = topology
            .links()
            .into_iter()
            .filter(|l| !peers.iter().any(|p| &p.0 == l))
            .collect();
        add_links(
            &links,
            &others,
            |link, i| cluster.link_listen(link, i),
            |node| match lock.upstream(node) {
                Some(addr) => addr,
                None => cluster.upstream(node),
            },
        )
        .await?;
        let urls = LinkUrls::of(&cluster, &links, topology.links());
        Ok(Testbed {
            cluster,
            links,
            lock,
            nodes,
            urls,
            cluster_s,
        })
    }

    /// Where the databases run, and the lock service's own server when it has one.
    pub fn describe(&self) -> String {
        match self.lock.describe() {
            Some(lock) => format!("{}; lock service {lock}", self.cluster.describe()),
            None => self.cluster.describe(),
        }
    }

    /// The shards' names, `shard1` .. `shardN`.
    pub fn shards(&self) -> &[String] {
        &self.nodes[1..]
    }

    /// Install the claim table and the plan on the routing db, and the schema and the seeded
    /// readings (ending where the scenario starts) on every shard, the shards at once.
    pub async fn install(
        &self,
        scenario: &Scenario,
        farm: &Farm,
    ) -> anyhow::Result<Vec<SeededTurbine>> {
        let admin: BTreeMap<String, String> = self
            .nodes
            .iter()
            .map(|n| (n.clone(), self.cluster.admin_url(n)))
            .collect();
        install_at(scenario, farm, &admin).await
    }
}

/// A proxy for every link (number i in the topology's order): `listen(link, i)` is where it
/// listens, `upstream(node)` where it forwards.
pub async fn add_links(
    links: &Links,
    names: &[String],
    listen: impl Fn(&str, usize) -> String,
    upstream: impl Fn(&str) -> String,
) -> anyhow::Result<()> {
    for (i, link) in names.iter().enumerate() {
        links
            .add(link, &listen(link, i), &upstream(link_target(link)))
            .await?;
    }
    Ok(())
}

/// The testbed's install on databases given by their URLs (`routing`, `shard1` ..): the claim
/// table and the plan on the routing db, the schema and the seeded readings on every shard (the
/// shards at once), and what the scenario's system adds. `chaos run`, `chaos up` and
/// `chaos install` (a cluster somebody else runs) all install through this.
pub async fn install_at(
    scenario: &Scenario,
    farm: &Farm,
    admin: &BTreeMap<String, String>,
) -> anyhow::Result<Vec<SeededTurbine>> {
    let url = |n: &str| {
        admin
            .get(n)
            .cloned()
            .ok_or_else(|| anyhow::anyhow!("no URL for database {n}"))
    };
    let start_ts_ms = scenario.day_unix_ms + scenario.start_ms;
    let seeded = farm.seeded(start_ts_ms);
    let first_ms = seeded
        .first()
        .map(|t| t.run.first_ms)
        .unwrap_or(start_ts_ms);
    let lease = &scenario.file.lease;
    let routing = url("routing")?;
    setup::routing(&routing, &lease.job, lease.first_token, &farm.plan())
        .await
        .map_err(anyhow::Error::msg)?;
    let shards: Vec<(String, String)> = scenario
        .topology()
        .shards()
        .iter()
        .map(|n| Ok((n.clone(), url(n)?)))
        .collect::<anyhow::Result<_>>()?;
    let loads = shards
        .iter()
        .map(|(n, url)| async move { setup::shard(n, url, farm, first_ms).await });
    for r in futures_util::future::join_all(loads).await {
        r.map_err(anyhow::Error::msg)?;
    }
    crate::systems::of(scenario.file.system)
        .install(scenario, &routing, &shards)
        .await
        .map_err(anyhow::Error::msg)?;
    for node in &scenario.topology().asynchronous_commit {
        setup::written_out(node, &url(node)?)
            .await
            .map_err(anyhow::Error::msg)?;
    }
    Ok(seeded)
}
