//! When a fault lands at a moment of the system rather than at a clock instant (DESIGN section
//! 10): `when = { on = "renew", by = "holder", nth = 3 }`. A trigger names events observed from
//! outside the mover (the routing db's claim changes, a link's transactions), so any mover at
//! any pace meets the fault at the same point of its work.
//!
//! Pure data, as the rest of this crate: the harness watches the events and counts.

use serde::{Deserialize, Serialize};

/// What a trigger waits for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Event {
    /// The claim is granted (a new token), seen as the routing db commits it.
    Grant,
    /// The holder's claim is renewed (same token, a later expiry), as it commits.
    Renew,
    /// A transaction opens on a box-to-shard link.
    Txn,
    /// A row-changing statement or COPY completes on a box-to-shard link.
    Write,
    /// A transaction commits on a box-to-shard link.
    Commit,
}

impl Event {
    /// Read from a box-to-shard link's traffic (else from the routing db's claim changes).
    pub fn on_link(self) -> bool {
        matches!(self, Event::Txn | Event::Write | Event::Commit)
    }

    pub fn name(self) -> &'static str {
        match self {
            Event::Grant => "grant",
            Event::Renew => "renew",
            Event::Txn => "txn",
            Event::Write => "write",
            Event::Commit => "commit",
        }
    }
}

/// Whose event counts, and whom a fault targets: a box, or a role at the moment it fires.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(try_from = "String", into = "String")]
pub enum Who {
    /// Any box.
    #[default]
    Any,
    /// The box holding the claim at the event (the grantee, for a grant).
    Holder,
    /// The box that held the claim before the latest grant to another box.
    PreviousHolder,
    /// One named box (`box-2`).
    Box(String),
}

impl TryFrom<String> for Who {
    type Error = String;
    fn try_from(s: String) -> Result<Who, String> {
        Ok(match s.as_str() {
            "any" => Who::Any,
            "holder" => Who::Holder,
            "previous-holder" => Who::PreviousHolder,
            "" => return Err("an empty name (give a box, holder, previous-holder or any)".into()),
            _ => Who::Box(s),
        })
    }
}

impl From<Who> for String {
    fn from(w: Who) -> String {
        match w {
            Who::Any => "any".into(),
            Who::Holder => "holder".into(),
            Who::PreviousHolder => "previous-holder".into(),
            Who::Box(b) => b,
        }
    }
}

/// Where in the writing transaction a link-event trigger fires.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Inside {
    /// While the transaction that wrote is still open (its locks held): the answer to the
    /// write is held until the fault has landed.
    Transaction,
    /// Right after that transaction commits.
    Between,
}

fn first() -> u32 {
    1
}

/// A fault's `when`: the `nth` event `on` by `by` (counted from the fault's `at`, or the start).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Trigger {
    pub on: Event,
    #[serde(default)]
    pub by: Who,
    #[serde(default = "first")]
    pub nth: u32,
    /// For link events: in the writing transaction or right after it (default: at the event).
    #[serde(default)]
    pub inside: Option<Inside>,
    /// Scenario seconds between the event and the fault.
    #[serde(default)]
    pub delay_s: f64,
    /// For link events: only this shard's links.
    #[serde(default)]
    pub shard: Option<String>,
}

impl Trigger {
    /// One line for the story and the errors: `the 7th write by holder`.
    pub fn describe(&self) -> String {
        let nth = match self.nth {
            1 => "1st".to_string(),
            2 => "2nd".to_string(),
            3 => "3rd".to_string(),
            n => format!("{n}th"),
        };
        let by: String = self.by.clone().into();
        let mut s = format!("the {nth} {} by {by}", self.on.name());
        if let Some(shard) = &self.shard {
            s.push_str(&format!(" on {shard}"));
        }
        match self.inside {
            Some(Inside::Transaction) => s.push_str(", inside its transaction"),
            Some(Inside::Between) => s.push_str(", after its commit"),
            None => {}
        }
        if self.delay_s > 0.0 {
            s.push_str(&format!(", {} s later", self.delay_s));
        }
        s
    }

    /// Whether an event by `who` (a box), while `holder` holds the claim and `previous` held
    /// it before, is one this trigger counts.
    pub fn counts(&self, who: &str, holder: Option<&str>, previous: Option<&str>) -> bool {
        match &self.by {
            Who::Any => true,
            Who::Holder => holder == Some(who),
            Who::PreviousHolder => previous == Some(who),
            Who::Box(b) => b == who,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_trigger_reads_from_toml_words_and_says_itself() {
        let t: Trigger = serde_json::from_str(
            r#"{"on":"write","by":"holder","nth":7,"inside":"between","shard":"shard2"}"#,
        )
        .unwrap();
        assert_eq!(t.on, Event::Write);
        assert_eq!(t.by, Who::Holder);
        assert_eq!(
            t.describe(),
            "the 7th write by holder on shard2, after its commit"
        );
        let t: Trigger = serde_json::from_str(r#"{"on":"grant"}"#).unwrap();
        assert_eq!((t.by.clone(), t.nth), (Who::Any, 1));
        assert!(!t.on.on_link());
        assert!(serde_json::from_str::<Trigger>(r#"{"on":"grant","after":"x"}"#).is_err());
        assert!(serde_json::from_str::<Trigger>(r#"{"on":"sneeze"}"#).is_err());
    }

    #[test]
    fn roles_count_the_events_of_whoever_holds_them_then() {
        let t = |by: &str| Trigger {
            on: Event::Renew,
            by: Who::try_from(by.to_string()).unwrap(),
            nth: 1,
            inside: None,
            delay_s: 0.0,
            shard: None,
        };
        assert!(t("holder").counts("box-2", Some("box-2"), Some("box-1")));
        assert!(!t("holder").counts("box-1", Some("box-2"), Some("box-1")));
        assert!(t("previous-holder").counts("box-1", Some("box-2"), Some("box-1")));
        assert!(t("box-3").counts("box-3", None, None));
        assert!(t("any").counts("box-4", Some("box-2"), None));
    }
}
