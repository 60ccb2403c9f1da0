//! A link's name, `client->node` (`box-2->shard1`, `lock-1->lock-2`): the one place that writes the arrow and reads it back.

/// What separates a link's client from its node.
pub const ARROW: &str = "->";

/// A link, or a link pattern (`box-*->routing`), read from its name.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Link<'a> {
    pub client: &'a str,
    pub node: &'a str,
}

impl<'a> Link<'a> {
    /// `client->node`, each side trimmed; None without an arrow or with an empty side.
    pub fn parse(text: &'a str) -> Option<Link<'a>> {
        let (client, node) = text.split_once(ARROW)?;
        let (client, node) = (client.trim(), node.trim());
        (!client.is_empty() && !node.is_empty()).then_some(Link { client, node })
    }

    /// The name of the link from `client` to `node`.
    pub fn name(client: &str, node: &str) -> String {
        format!("{client}{ARROW}{node}")
    }

    /// Its proxy's name in a Toxiproxy API, where `->` cannot be in a URL path:
    /// `box-2->shard1` is `box-2_to_shard1`.
    pub fn proxy_name(&self) -> String {
        format!("{}_to_{}", self.client, self.node)
    }
}

impl std::fmt::Display for Link<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}{ARROW}{}", self.client, self.node)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_link_reads_back_as_written_and_names_its_proxy() {
        let l = Link::parse(" box-2 -> shard1 ").unwrap();
        assert_eq!((l.client, l.node), ("box-2", "shard1"));
        assert_eq!(l.to_string(), Link::name("box-2", "shard1"));
        assert_eq!(l.proxy_name(), "box-2_to_shard1");
        assert_eq!(Link::parse("routing"), None);
        assert_eq!(Link::parse("->shard1"), None);
        assert_eq!(Link::parse("box-1->"), None);
    }
}
