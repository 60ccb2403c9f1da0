//! The failover system's testbed: the primary and the replica (made a streaming standby by a base backup through the replication link), a proxy on every link, the service record naming the primary, the orders table.

use crate::backend::standby::{wait_streaming, Upstream};
use crate::backend::{Cluster, ClusterSpec};
use crate::links::{link_target, Links};
use crate::scenario::Scenario;
use crate::testbed::{BedOptions, LinkUrls};
use chaos_history::failover_names as names;
use chaos_workloads::failover::ORDERS_SQL;
use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// The servers and links of a failover run, up, replicating and reachable.
pub struct FailoverBed {
    pub cluster: Cluster,
    pub links: Arc<Links>,
    pub urls: LinkUrls,
    /// Each server's address as the proxy reaches it: what the service record names.
    pub upstreams: BTreeMap<String, String>,
    /// Real seconds to bring both servers up and replicating.
    pub cluster_s: f64,
}

/// How long the replica may take to stream from the primary once started.
const STREAMING_LIMIT: Duration = Duration::from_secs(30);

/// Give the primary a line allowing replication from any address (a container's included):
/// pg_hba.conf rewritten through SQL, so it works with any image, then reloaded.
const HBA_SQL: &str = r#"
do $$
declare
  f text := current_setting('hba_file');
  lines text[] := string_to_array(replace(pg_read_file(f), E'\t', ' '), E'\n');
  want text := 'host replication all all trust';
begin
  if not (want = any(lines)) then
    execute format('copy (select unnest(%L::text[])) to %L', lines || want, f);
  end if;
end $$;
select pg_reload_conf();
"#;

impl FailoverBed {
    /// Start both servers, a proxy per link and the service record, install the orders table
    /// on the primary, and make the replica its streaming standby.
    pub async fn start(scenario: &Scenario, o: &BedOptions) -> anyhow::Result<FailoverBed> {
        let topology = scenario.topology();
        let mut proxies = topology.links();
        proxies.push(names::SERVICE.to_string());
        let spec = ClusterSpec {
            nodes: topology.nodes.clone(),
            links: proxies.clone(),
            log_dir: o.log_dir.clone(),
            run_id: o.run_id.clone(),
            asynchronous_commit: vec![],
        };
        let began = Instant::now();
        let mut cluster = Cluster::start(o.backend, &spec).await?;
        let proxy_api = o.toxiproxy.clone().or_else(|| cluster.proxy_api());
        let links = Arc::new(Links::start(proxy_api.as_deref()).await?);
        for (i, link) in proxies.iter().enumerate() {
            let target = if link == names::SERVICE {
                names::PRIMARY
            } else {
                link_target(link)
            };
            links
                .add(
                    link,
                    &cluster.link_listen(link, i),
                    &cluster.upstream(target),
                )
                .await?;
        }
        let urls = LinkUrls::of(&cluster, &links, topology.links());
        let primary = cluster.admin_url(names::PRIMARY);
        let db = crate::db::connect(&primary, "harness", Duration::from_secs(10))
            .await
            .map_err(anyhow::Error::msg)?;
        sql(&db, HBA_SQL, "primary: allow replication").await?;
        sql(&db, ORDERS_SQL, "primary: create the orders table").await?;
        let (host, port) =
            host_port(&urls.mover(&chaos_nemesis::Link::name(names::REPLICA, names::PRIMARY)))?;
        let from = Upstream {
            host,
            port,
            application_name: names::REPLICA.to_string(),
        };
        cluster.make_standby(names::REPLICA, &from).await?;
        wait_streaming(
            names::REPLICA,
            &cluster.admin_url(names::REPLICA),
            STREAMING_LIMIT,
        )
        .await?;
        // A standby whose primary is gone retries every wal_retrieve_retry_interval (5 s) and
        // notices a promotion only then: on the scenario's clock, as every other constant.
        let retry_ms = scenario.real_ms(5_000.0).max(10);
        let replica = crate::db::connect(
            &cluster.admin_url(names::REPLICA),
            "harness",
            Duration::from_secs(10),
        )
        .await
        .map_err(anyhow::Error::msg)?;
        let retry = format!("alter system set wal_retrieve_retry_interval = '{retry_ms}ms'");
        for stmt in [retry.as_str(), "select pg_reload_conf()"] {
            sql(&replica, stmt, "replica: wal_retrieve_retry_interval").await?;
        }
        if scenario
            .file
            .failover
            .as_ref()
            .is_some_and(|f| f.synchronous)
        {
            // Set after the base backup, so the replica (promoted) does not wait for itself.
            let names = format!(
                "alter system set synchronous_standby_names = '{}'",
                names::REPLICA
            );
            for stmt in [names.as_str(), "select pg_reload_conf()"] {
                sql(&db, stmt, "primary: synchronous replication").await?;
            }
            wait_sync(&db).await?;
        }
        let upstreams = [names::PRIMARY, names::REPLICA]
            .iter()
            .map(|n| (n.to_string(), cluster.upstream(n)))
            .collect();
        Ok(FailoverBed {
            cluster,
            links,
            urls,
            upstreams,
            cluster_s: began.elapsed().as_secs_f64(),
        })
    }
}

/// Run `stmt` (one statement, or a script that may run in one transaction), saying what failed.
async fn sql(db: &tokio_postgres::Client, stmt: &str, what: &str) -> anyhow::Result<()> {
    db.batch_execute(stmt).await.map_err(|e| {
        let why = e
            .as_db_error()
            .map_or(e.to_string(), |d| d.message().to_string());
        anyhow::anyhow!("{what}: {why}")
    })
}

/// Wait until the primary reports its standby as synchronous.
async fn wait_sync(db: &tokio_postgres::Client) -> anyhow::Result<()> {
    let began = Instant::now();
    while began.elapsed() < STREAMING_LIMIT {
        let row = db
            .query_opt(
                "select sync_state from pg_stat_replication where sync_state = 'sync'",
                &[],
            )
            .await?;
        if row.is_some() {
            return Ok(());
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    anyhow::bail!(
        "the replica did not become synchronous within {} s",
        STREAMING_LIMIT.as_secs()
    )
}

/// `postgres://user@host:port/db` -> (host, port).
fn host_port(url: &str) -> anyhow::Result<(String, u16)> {
    let rest = url.split_once('@').map_or(url, |(_, r)| r);
    let addr = rest.split('/').next().unwrap_or(rest);
    let (host, port) = addr
        .rsplit_once(':')
        .ok_or_else(|| anyhow::anyhow!("no host:port in {url}"))?;
    let port = port
        .parse()
        .map_err(|_| anyhow::anyhow!("no port in {url}"))?;
    Ok((host.to_string(), port))
}

#[cfg(test)]
mod tests {
    #[test]
    fn urls_give_host_and_port() {
        let (h, p) = super::host_port("postgres://postgres@chaos-x-proxy:20004/postgres").unwrap();
        assert_eq!((h.as_str(), p), ("chaos-x-proxy", 20004));
        assert!(super::host_port("postgres://postgres@nohost/postgres").is_err());
    }
}
