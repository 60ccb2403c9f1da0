//! The dangerous moments a run can reach (`Moment`): what a scenario says it exists to reach
//! (`[expect] reach`, kept in the run's record) and what the checkers found it reached.

use serde::{Deserialize, Serialize};

/// A moment of danger for a lease: a run that never reached any proves nothing about it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Moment {
    /// A holder stopped (paused, stopped, killed, crashed, starved of CPU) or cut off from the lock while its
    /// lease ran out.
    HolderStoppedPastLease,
    /// A holder wrote (or tried to: a refused write counts) after its lease expired.
    WriteAfterExpiry,
    /// Two boxes each believed they held the lease at once (each by its own history), or two
    /// grants' writes overlapped on the shards.
    TwoHolders,
    /// A write of an older grant after a newer grant's first write, accepted or refused.
    StaleWrite,
    /// Three grants in a row while the first grant's holder was still writing (DESIGN section
    /// 5's case for fencing at grant time).
    ThreeGrants,
    /// Nobody held the lease while there was work.
    Vacancy,
    /// A renewal refused or unanswered.
    RenewalFailed,
    /// The lock service could not answer the holder while it held the lease.
    LockUnavailable,
    /// The lock itself broke its promise: two grants valid at once by its own record.
    LockForgotGrant,
    /// The failover: the replica promoted while the old primary still accepted writes.
    PromotionWhileWritable,
}

impl Moment {
    pub const ALL: [Moment; 10] = [
        Moment::HolderStoppedPastLease,
        Moment::WriteAfterExpiry,
        Moment::TwoHolders,
        Moment::StaleWrite,
        Moment::ThreeGrants,
        Moment::Vacancy,
        Moment::RenewalFailed,
        Moment::LockUnavailable,
        Moment::LockForgotGrant,
        Moment::PromotionWhileWritable,
    ];

    /// The moment's name as JSON and scenarios spell it (`stale-write`).
    pub fn name(self) -> &'static str {
        match self {
            Moment::HolderStoppedPastLease => "holder-stopped-past-lease",
            Moment::WriteAfterExpiry => "write-after-expiry",
            Moment::TwoHolders => "two-holders",
            Moment::StaleWrite => "stale-write",
            Moment::ThreeGrants => "three-grants",
            Moment::Vacancy => "vacancy",
            Moment::RenewalFailed => "renewal-failed",
            Moment::LockUnavailable => "lock-unavailable",
            Moment::LockForgotGrant => "lock-forgot-grant",
            Moment::PromotionWhileWritable => "promotion-while-writable",
        }
    }

    /// The moment a name spells, or a one-line error listing the names there are.
    pub fn parse(name: &str) -> Result<Moment, String> {
        Moment::ALL
            .into_iter()
            .find(|m| m.name() == name)
            .ok_or_else(|| {
                let all: Vec<&str> = Moment::ALL.iter().map(|m| m.name()).collect();
                format!("'{name}' is no moment (one of {})", all.join(", "))
            })
    }

    /// Whether the failover system can reach it (the others are a lease's).
    pub fn failover(self) -> bool {
        self == Moment::PromotionWhileWritable
    }
}

impl std::fmt::Display for Moment {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_parse_back_and_json_spells_them_the_same() {
        for m in Moment::ALL {
            assert_eq!(Moment::parse(m.name()), Ok(m));
            assert_eq!(serde_json::to_value(m).unwrap(), m.name());
        }
        let err = Moment::parse("stale-writes").unwrap_err();
        assert!(err.contains("'stale-writes' is no moment") && err.contains("stale-write,"));
    }
}
