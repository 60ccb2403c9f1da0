//! What a fault can name: boxes, database nodes and the links between clients and nodes.
//!
//! A system under test brings its own names: the mover's are `Topology::new` (boxes, a routing
//! db and shards, every client linked to every node but the ingest to the routing db); another
//! system lists its own with `Topology::with_links` (the failover's `app->primary`, ...).

use crate::link::Link;

/// The cluster's names, as a scenario sees them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Topology {
    /// Mover boxes: `box-1` ...
    pub boxes: Vec<String>,
    /// Database nodes: `routing`, `shard1` ...
    pub nodes: Vec<String>,
    /// Clients with links: every box, and `ingest`.
    pub clients: Vec<String>,
    /// Every link `client->node` that exists.
    links: Vec<String>,
    /// Nodes that are processes a signal fault may pause or kill too (a lock service's
    /// members), and the roles a fault may name for one (`lock-leader`, resolved when it lands).
    pub members: Vec<String>,
    /// Postgres nodes that run asynchronous commit (`synchronous_commit = off`): a commit is
    /// acknowledged before its WAL is written, and only a crash of one of these can lose it
    /// (`lose_unsynced`).
    pub asynchronous_commit: Vec<String>,
}

impl Topology {
    /// The database nodes that are Postgres servers (a lock service's members are nodes too):
    /// what a stall, a cpu fault or a node's clock may name.
    pub fn postgres_nodes(&self) -> Vec<String> {
        self.nodes
            .iter()
            .filter(|n| !self.members.contains(n))
            .cloned()
            .collect()
    }

    /// `boxes` movers, `shards` shards, one routing db; the ingest talks to shards only.
    pub fn new(boxes: usize, shards: usize) -> Topology {
        let boxes: Vec<String> = (1..=boxes).map(|i| format!("box-{i}")).collect();
        let mut nodes = vec!["routing".to_string()];
        nodes.extend((1..=shards).map(|i| format!("shard{i}")));
        let mut clients = boxes.clone();
        clients.push("ingest".into());
        let mut links = Vec::new();
        for c in &clients {
            for n in &nodes {
                if c == "ingest" && n == "routing" {
                    continue;
                }
                links.push(Link::name(c, n));
            }
        }
        Topology {
            boxes,
            nodes,
            clients,
            links,
            members: vec![],
            asynchronous_commit: vec![],
        }
    }

    /// The mover's names with a lock service of its own: `members` (nodes after the shards),
    /// each linked from every box (the ingest never asks the lock) and, with more than one,
    /// from every other member (`lock-1->lock-2`: peer traffic, one link per direction);
    /// `roles` are names a fault may give a member by, resolved when it lands (`lock-leader`).
    pub fn with_lock(boxes: usize, shards: usize, members: &[String], roles: &[&str]) -> Topology {
        let mut t = Topology::new(boxes, shards);
        for m in members {
            t.nodes.push(m.clone());
            for b in &t.boxes {
                t.links.push(Link::name(b, m));
            }
        }
        for from in members.iter().filter(|_| members.len() > 1) {
            for to in members.iter().filter(|to| *to != from) {
                t.links.push(Link::name(from, to));
            }
        }
        t.members = members.to_vec();
        t.members.extend(roles.iter().map(|r| r.to_string()));
        t
    }

    /// A replica of member `primary` (Redis's `lock-2`): a node a fault may stop, pause or
    /// crash, with no link from the boxes (they reach the service at `primary`'s name, a
    /// floating address) and one link each way with the primary (`lock-2->lock`: the replica's
    /// replication from the primary; `lock->lock-2`: the same once the roles are swapped).
    pub fn with_replica(mut self, primary: &str, replica: &str) -> Topology {
        self.nodes.push(replica.to_string());
        self.links.push(Link::name(replica, primary));
        self.links.push(Link::name(primary, replica));
        self.members.push(replica.to_string());
        self
    }

    /// A system's own names: its boxes (processes the nemesis may pause or kill), its database
    /// nodes and its links, each `client->node` (the clients are read from the links).
    pub fn with_links(boxes: Vec<String>, nodes: Vec<String>, links: Vec<String>) -> Topology {
        let mut clients: Vec<String> = Vec::new();
        for l in &links {
            let client = Link::parse(l).map_or(l.as_str(), |l| l.client);
            if !clients.iter().any(|c| c == client) {
                clients.push(client.to_string());
            }
        }
        Topology {
            boxes,
            nodes,
            clients,
            links,
            members: vec![],
            asynchronous_commit: vec![],
        }
    }

    /// The shards: every node named `shard...` (not the routing db, not a lock service).
    pub fn shards(&self) -> &[String] {
        let n = self.nodes.iter().filter(|n| n.starts_with("shard")).count();
        &self.nodes[1..1 + n]
    }

    /// Every link `client->node` that exists (the mover's ingest has none to routing).
    pub fn links(&self) -> Vec<String> {
        self.links.clone()
    }
}

/// A link name or pattern: `box-2->shard1`, `box-*->routing`, `*->shard3`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LinkPattern {
    pub client: String,
    pub node: String,
}

impl LinkPattern {
    pub fn parse(text: &str) -> Option<LinkPattern> {
        let l = Link::parse(text)?;
        Some(LinkPattern {
            client: l.client.into(),
            node: l.node.into(),
        })
    }

    /// The links of `topology` this pattern names (empty when none).
    pub fn resolve(&self, topology: &Topology) -> Vec<String> {
        topology
            .links()
            .into_iter()
            .filter(|l| {
                Link::parse(l)
                    .is_some_and(|l| glob(&self.client, l.client) && glob(&self.node, l.node))
            })
            .collect()
    }
}

/// `*` alone, or a trailing `*` as a prefix match; anything else exact.
fn glob(pattern: &str, name: &str) -> bool {
    match pattern.strip_suffix('*') {
        Some(prefix) => name.starts_with(prefix),
        None => pattern == name,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn patterns_resolve_against_the_topology() {
        let t = Topology::new(4, 3);
        let p = LinkPattern::parse("box-*->routing").unwrap();
        assert_eq!(p.resolve(&t).len(), 4);
        assert_eq!(
            LinkPattern::parse("ingest->shard3").unwrap().resolve(&t),
            vec!["ingest->shard3"]
        );
        assert!(LinkPattern::parse("ingest->routing")
            .unwrap()
            .resolve(&t)
            .is_empty());
        assert_eq!(
            LinkPattern::parse("*->*").unwrap().resolve(&t).len(),
            4 * 4 + 3
        );
        assert!(LinkPattern::parse("box-2").is_none());
    }

    #[test]
    fn a_three_member_lock_has_a_link_per_direction_between_members() {
        let members: Vec<String> = (1..=3).map(|i| format!("lock-{i}")).collect();
        let t = Topology::with_lock(4, 3, &members, &["lock-leader"]);
        assert_eq!(t.shards().len(), 3);
        let peers = LinkPattern::parse("lock-*->lock-*").unwrap().resolve(&t);
        assert_eq!(peers.len(), 6);
        assert!(peers.contains(&"lock-1->lock-2".to_string()));
        assert!(peers.contains(&"lock-2->lock-1".to_string()));
        assert_eq!(
            LinkPattern::parse("box-*->lock-2")
                .unwrap()
                .resolve(&t)
                .len(),
            4
        );
        assert!(t.members.contains(&"lock-leader".to_string()));
        let one = Topology::with_lock(4, 3, &["lock".to_string()], &[]);
        assert!(LinkPattern::parse("lock->*")
            .unwrap()
            .resolve(&one)
            .is_empty());
    }

    #[test]
    fn a_system_lists_its_own_links() {
        let names = |v: &[&str]| v.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        let t = Topology::with_links(
            names(&["watcher"]),
            names(&["primary", "replica"]),
            names(&["app->primary", "watcher->primary", "replica->primary"]),
        );
        assert_eq!(t.clients, names(&["app", "watcher", "replica"]));
        let p = LinkPattern::parse("*->primary").unwrap();
        assert_eq!(p.resolve(&t).len(), 3);
        assert!(LinkPattern::parse("app->replica")
            .unwrap()
            .resolve(&t)
            .is_empty());
    }
}
