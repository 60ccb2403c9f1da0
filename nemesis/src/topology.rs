//! What a fault can name: boxes, database nodes and the links between clients and nodes.

/// The cluster's names, as a scenario sees them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Topology {
    /// Mover boxes: `box-1` ...
    pub boxes: Vec<String>,
    /// Database nodes: `routing`, `shard1` ...
    pub nodes: Vec<String>,
    /// Clients with links: every box, and `ingest`.
    pub clients: Vec<String>,
}

impl Topology {
    /// `boxes` movers, `shards` shards, one routing db; the ingest talks to shards only.
    pub fn new(boxes: usize, shards: usize) -> Topology {
        let boxes: Vec<String> = (1..=boxes).map(|i| format!("box-{i}")).collect();
        let mut nodes = vec!["routing".to_string()];
        nodes.extend((1..=shards).map(|i| format!("shard{i}")));
        let mut clients = boxes.clone();
        clients.push("ingest".into());
        Topology {
            boxes,
            nodes,
            clients,
        }
    }

    /// The shards: every node but the routing db.
    pub fn shards(&self) -> &[String] {
        &self.nodes[1..]
    }

    /// Every link `client->node` that exists (the ingest has none to routing).
    pub fn links(&self) -> Vec<String> {
        let mut out = Vec::new();
        for c in &self.clients {
            for n in &self.nodes {
                if c == "ingest" && n == "routing" {
                    continue;
                }
                out.push(format!("{c}->{n}"));
            }
        }
        out
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
        let (client, node) = text.split_once("->")?;
        let (client, node) = (client.trim(), node.trim());
        if client.is_empty() || node.is_empty() {
            return None;
        }
        Some(LinkPattern {
            client: client.into(),
            node: node.into(),
        })
    }

    /// The links of `topology` this pattern names (empty when none).
    pub fn resolve(&self, topology: &Topology) -> Vec<String> {
        topology
            .links()
            .into_iter()
            .filter(|l| {
                let (c, n) = l.split_once("->").expect("links have arrows");
                glob(&self.client, c) && glob(&self.node, n)
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
}
