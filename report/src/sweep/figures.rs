//! What one run contributes to a sweep row, as plain data: its renewal latencies, false expiries, takeovers, kills, loss and stalls (the harness measures them from the history).

use serde::Serialize;

/// A takeover that a live, working holder did not cause.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct FalseExpiry {
    /// The holder that lost its claim, and its token.
    pub holder: String,
    pub token: i64,
    /// The box that took over, and when (scenario time).
    pub by: String,
    pub at: String,
}

/// One mover process life's stall line (the last it printed), real µs.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize)]
pub struct Stall {
    pub p50_us: u64,
    pub p99_us: u64,
    pub p999_us: u64,
    pub max_us: u64,
    pub samples: u64,
}

/// What one run contributes to a sweep row.
#[derive(Debug, Clone, Default, Serialize)]
pub struct RunFigures {
    /// Every completed renewal's latency, scenario µs (merged per row, not written out).
    #[serde(skip)]
    pub renew_us: Vec<u64>,
    pub renewals: u64,
    pub false_expiries: Vec<FalseExpiry>,
    pub takeovers: u64,
    pub grants: u64,
    pub vacancy_total_s: f64,
    pub vacancy_max_s: f64,
    /// Kills of the box holding the claim, and for each the scenario seconds to the next grant (None: no grant followed).
    pub holder_kills: Vec<Option<f64>>,
    /// Kills of a box that did not hold the claim at that moment.
    pub other_kills: u64,
    pub writes_after_expiry: u64,
    pub writes_after_expiry_max_s: f64,
    pub rows_lost: u64,
    pub lost_turbines: u64,
    /// Writes of an older grant a shard accepted after a newer grant's (`stale-write`).
    pub stale_writes_accepted: u64,
    pub refused_writes: u64,
    /// Claims renewed for more than two leases with no write by their holder
    /// (`stalled-holder`), and the longest such stretch, scenario seconds.
    pub stalled_holders: u64,
    pub stalled_holder_max_s: f64,
    /// Scenario seconds from the start to the last planned turbine leaving its source; None: unfinished.
    pub finish_s: Option<f64>,
    /// The worst of the run's mover lives (each figure its own maximum), and the lives seen.
    pub stall: Stall,
    pub stall_lives: u64,
    /// The dangerous moments the run reached (its verdict's `reached`).
    #[serde(default)]
    pub reached: Vec<chaos_history::Moment>,
}
