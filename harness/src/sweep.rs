//! `chaos sweep`: one scenario, several lease durations, measured renewal latency, false expiries, vacancy and loss, in a table.

#[derive(clap::Args, Debug)]
pub struct SweepArgs {
    /// Scenario to sweep.
    #[arg(long)]
    scenario: String,
}

pub async fn sweep(_a: SweepArgs) -> anyhow::Result<u8> {
    anyhow::bail!("chaos sweep is not built yet")
}
