//! `chaos install`: a scenario's testbed installed on databases and a Toxiproxy somebody else runs (docker-compose.yml's init service): the schema, plan and seeded readings through the testbed's own install, and a proxy per link.
//!
//! It waits for every database and the proxy to answer, installs once (a routing db that
//! already holds a plan is left as it is) and creates only the links that are missing, so a
//! second `docker compose up` finds the cluster as the first left it.

use crate::links::{proxy_name, Links};
use crate::run::{resolve, RunOptions};
use crate::testbed::{add_links, farm, install_at};
use std::collections::BTreeMap;
use std::time::{Duration, Instant};

#[derive(clap::Args, Debug)]
pub struct InstallArgs {
    /// Scenario whose schema, plan and seeded data to install.
    #[arg(long, default_value = "april")]
    scenario: String,
    /// A database of the scenario, as NAME=URL (routing=postgres://postgres@routing:5432/postgres); one for each (routing, shard1 ..).
    #[arg(long = "db", value_name = "NAME=URL", required = true)]
    dbs: Vec<String>,
    /// The Toxiproxy API (HOST:PORT) on which to create a proxy per link, forwarding to the database's host and port as given by --db.
    #[arg(long, value_name = "HOST:PORT")]
    toxiproxy: Option<String>,
    /// Link number i (in the scenario's order: box-1->routing, box-1->shard1, ...) listens on HOST:(FIRST_PORT + i).
    #[arg(long, default_value = "0.0.0.0", value_name = "HOST")]
    listen_host: String,
    #[arg(long, default_value_t = 20000, value_name = "FIRST_PORT")]
    first_port: u16,
    /// Install the schema and plan but load no readings.
    #[arg(long)]
    no_seed: bool,
    /// How many seconds to wait for the databases and the proxy to answer.
    #[arg(long, default_value_t = 120, value_name = "SECONDS")]
    wait_s: u64,
}

pub async fn install(a: InstallArgs) -> anyhow::Result<u8> {
    let scenario = resolve(&RunOptions {
        scenario: a.scenario.clone(),
        ..Default::default()
    })?;
    let topology = scenario.topology();
    let admin = databases(&a.dbs, &topology.nodes)?;
    let began = Instant::now();
    let wait = Duration::from_secs(a.wait_s);
    for (node, url) in &admin {
        wait_for(node, wait, || crate::db::ping(url)).await?;
    }
    let mut farm = farm(&scenario);
    if a.no_seed {
        farm.seeded_turbines = 0;
    }
    if installed(&admin["routing"]).await {
        println!(
            "chaos install: {} is installed already on {}: left as it is",
            scenario.file.name, admin["routing"]
        );
    } else {
        let t = Instant::now();
        install_at(&scenario, &farm, &admin).await?;
        println!(
            "chaos install: {} on {} databases in {:.1} s: {} turbines x {} readings seeded; plan moves {}",
            scenario.file.name,
            admin.len(),
            t.elapsed().as_secs_f64(),
            farm.seeded_turbines,
            farm.rows_per_turbine,
            farm.plan().len()
        );
    }
    if let Some(api) = &a.toxiproxy {
        wait_for("the proxy", wait, || {
            let client = chaos_proxy::ToxiproxyClient::new(api);
            async move { client.version().await.is_ok() }
        })
        .await?;
        let links = Links::start(Some(api.as_str())).await?;
        let existing = links.client().list().await?;
        let missing: Vec<String> = topology
            .links()
            .into_iter()
            .filter(|l| !existing.contains_key(&proxy_name(l)))
            .collect();
        let numbers: BTreeMap<String, usize> = topology
            .links()
            .into_iter()
            .enumerate()
            .map(|(i, l)| (l, i))
            .collect();
        add_links(
            &links,
            &missing,
            |link, _| {
                format!(
                    "{}:{}",
                    a.listen_host,
                    a.first_port as usize + numbers[link]
                )
            },
            |node| host_port(&admin[node]),
        )
        .await?;
        println!(
            "chaos install: {} links on {api} ({} created), listening on {}:{}..{}",
            numbers.len(),
            missing.len(),
            a.listen_host,
            a.first_port,
            a.first_port as usize + numbers.len() - 1
        );
    }
    println!(
        "chaos install: ready in {:.1} s",
        began.elapsed().as_secs_f64()
    );
    Ok(0)
}

/// `NAME=URL` for each of the scenario's databases, every one given once.
fn databases(given: &[String], nodes: &[String]) -> anyhow::Result<BTreeMap<String, String>> {
    let mut admin = BTreeMap::new();
    for g in given {
        let (name, url) = g
            .split_once('=')
            .ok_or_else(|| anyhow::anyhow!("--db {g}: expected NAME=URL"))?;
        if !nodes.iter().any(|n| n == name) {
            anyhow::bail!(
                "--db {name}: the scenario has no such database (it has {})",
                nodes.join(", ")
            );
        }
        if admin.insert(name.to_string(), url.to_string()).is_some() {
            anyhow::bail!("--db {name} is given twice");
        }
    }
    let missing: Vec<&str> = nodes
        .iter()
        .filter(|n| !admin.contains_key(*n))
        .map(String::as_str)
        .collect();
    if !missing.is_empty() {
        anyhow::bail!("no --db for {}", missing.join(", "));
    }
    Ok(admin)
}

/// The host and port of a postgres URL (where the proxy forwards that database's links).
fn host_port(url: &str) -> String {
    let rest = url.split_once("://").map_or(url, |(_, r)| r);
    let rest = rest.rsplit_once('@').map_or(rest, |(_, r)| r);
    let hp = rest.split(['/', '?']).next().unwrap_or(rest);
    if hp.contains(':') {
        hp.to_string()
    } else {
        format!("{hp}:5432")
    }
}

/// Whether the routing db already holds a move plan.
async fn installed(routing: &str) -> bool {
    let Ok(c) = crate::db::connect(routing, "chaos-install", Duration::from_secs(10)).await else {
        return false;
    };
    let has = |sql: &'static str| {
        let c = &c;
        async move {
            c.query_one(sql, &[])
                .await
                .ok()
                .and_then(|r| r.try_get::<_, bool>(0).ok())
                .unwrap_or(false)
        }
    };
    has("select to_regclass('move_plan') is not null").await
        && has("select exists (select 1 from move_plan)").await
}

async fn wait_for<F, Fut>(what: &str, limit: Duration, mut ask: F) -> anyhow::Result<()>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    let began = Instant::now();
    while !ask().await {
        if began.elapsed() > limit {
            anyhow::bail!("{what} did not answer within {} s", limit.as_secs());
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_url_names_the_proxy_upstream() {
        assert_eq!(
            host_port("postgres://postgres@routing:5432/postgres"),
            "routing:5432"
        );
        assert_eq!(host_port("postgres://u:p@shard1/db?x=1"), "shard1:5432");
    }

    #[test]
    fn every_database_once() {
        let nodes: Vec<String> = ["routing", "shard1"].map(String::from).to_vec();
        let ok = databases(&["routing=a".into(), "shard1=b".into()], &nodes).unwrap();
        assert_eq!(ok["shard1"], "b");
        let e = databases(&["routing=a".into()], &nodes).unwrap_err();
        assert_eq!(e.to_string(), "no --db for shard1");
        assert!(databases(&["shard9=x".into()], &nodes).is_err());
        assert!(databases(&["routing".into()], &nodes).is_err());
    }
}
