//! The networks of a three-member etcd on the docker backend: one private network per member, holding that member and the proxy container, so whatever a member sends another goes through the proxy on a link of its own (`lock-1->lock-2`).
//!
//! Member i sits on network i only. The proxy container is connected to every member's network
//! and so has an address on each; member i's `/etc/hosts` (docker's extra hosts) names every
//! other member (`lock-j`) at the proxy's address on network i. Each member's peer URL names a
//! port of its own (`http://lock-2:2382`), the same URL for every member as etcd requires, so the
//! proxy tells `lock-1->lock-2` from `lock-3->lock-2` by the address it listens on (its address
//! on network 1, or on network 3) and `lock-1->lock-2` from `lock-1->lock-3` by the port. The
//! proxy forwards to the target's container name, which it resolves on the target's network.
//! The networks carry the run's labels: the run's removal (containers first, then networks) and
//! the next command's reap remove them on every path.

use super::containers::*;

/// Each member's network and the proxy's address on it, by member (0-based).
pub(super) struct PeerNets {
    nets: Vec<(String, String)>,
}

impl PeerNets {
    /// Create `count` networks for the run, connect the run's proxy container to each and read
    /// its address there.
    pub(super) async fn create(
        docker: &Docker,
        run_id: &str,
        count: usize,
    ) -> anyhow::Result<PeerNets> {
        use testcontainers::bollard::models::{NetworkConnectRequest, NetworkCreateRequest};
        let proxy = docker_name(run_id, "proxy");
        let mut names = Vec::new();
        for n in 1..=count {
            // Named to sort after the run's network (`chaos-<run>-net`): the engine takes a
            // container's gateway, and programs its published ports, on the first network by
            // name; a network sorting first moved the proxy's ports when connected, and once
            // their re-binding lost a port to another process.
            let name = docker_name(run_id, &format!("net-lock-{n}"));
            let create = NetworkCreateRequest {
                name: name.clone(),
                driver: Some("bridge".into()),
                labels: Some(labels(run_id).into_iter().collect()),
                ..Default::default()
            };
            bounded(
                &format!("create network {name}"),
                docker.create_network(create),
            )
            .await?;
            let connect = NetworkConnectRequest {
                container: proxy.clone(),
                endpoint_config: None,
            };
            bounded(
                &format!("connect the proxy container to {name}"),
                docker.connect_network(&name, connect),
            )
            .await?;
            names.push(name);
        }
        let info = inspect(docker, &proxy)
            .await
            .ok_or_else(|| anyhow::anyhow!("inspect the proxy container {proxy}: no answer"))?;
        let on = info
            .network_settings
            .and_then(|s| s.networks)
            .unwrap_or_default();
        let mut nets = Vec::new();
        for name in names {
            let ip = on
                .get(&name)
                .and_then(|e| e.ip_address.clone())
                .filter(|ip| !ip.is_empty())
                .ok_or_else(|| {
                    anyhow::anyhow!("the proxy container has no address on network {name}")
                })?;
            nets.push((name, ip));
        }
        Ok(PeerNets { nets })
    }

    /// Disconnect the proxy container from every member's network, once the members are gone
    /// and before the proxy's removal: the engine releases a container's published ports on
    /// each network it is on, and the proxy's removal took 7.4-9.3 s on four networks, 1.7 s
    /// on one (measured with `docker kill`); disconnected first, 1.8 s. A disconnect the
    /// engine does not answer leaves the proxy to the run's removal by label.
    pub(super) async fn release(&self, docker: &Docker, run_id: &str) {
        use testcontainers::bollard::models::NetworkDisconnectRequest;
        let proxy = docker_name(run_id, "proxy");
        let calls = self.nets.iter().map(|(name, _)| {
            let req = NetworkDisconnectRequest {
                container: proxy.clone(),
                force: Some(true),
            };
            let what = format!("disconnect the proxy container from {name}");
            async move {
                let _ = bounded(&what, docker.disconnect_network(name, req)).await;
            }
        });
        futures_util::future::join_all(calls).await;
    }

    /// Member `i`'s network.
    pub(super) fn network(&self, i: usize) -> &str {
        &self.nets[i].0
    }

    /// The proxy's address on member `i`'s network: where member i finds every other member.
    pub(super) fn proxy_ip(&self, i: usize) -> &str {
        &self.nets[i].1
    }

    /// The members' peer links, `(link, listen, upstream)`: for each ordered pair
    /// `lock-I->lock-J`, one per peer port of J, listening on the proxy's address in I's network
    /// at that port and forwarding to J's container there. `members` are each member's node
    /// name, container name and peer ports, in order.
    pub(super) fn links(
        &self,
        members: &[(&str, &str, Vec<u16>)],
    ) -> Vec<(String, String, String)> {
        let mut out = Vec::new();
        for (i, (from, _, _)) in members.iter().enumerate() {
            for (j, (to, name, ports)) in members.iter().enumerate() {
                for port in ports.iter().filter(|_| i != j) {
                    out.push((
                        chaos_nemesis::Link::name(from, to),
                        format!("{}:{port}", self.proxy_ip(i)),
                        format!("{name}:{port}"),
                    ));
                }
            }
        }
        out
    }
}
