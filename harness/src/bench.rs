//! `chaos bench`: figures, not timed tests: cluster start and stop, proxy overhead and latency precision, checker throughput. Medians and ratios from one run.

use crate::backend::{process::ProcessCluster, ClusterSpec};
use std::time::Instant;

#[derive(clap::Args, Debug)]
pub struct BenchArgs {
    /// What to measure: cluster, proxy, checker or all.
    #[arg(long, default_value = "all", value_parser = ["cluster", "proxy", "checker", "all"])]
    what: String,
    /// Repetitions (the median is reported).
    #[arg(long, default_value_t = 5)]
    repeat: usize,
    /// History events for the checker benchmark.
    #[arg(long, default_value_t = 10_000_000)]
    events: u64,
}

pub use crate::sweep::{sweep, SweepArgs};

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(|a, b| a.total_cmp(b));
    v[v.len() / 2]
}

pub async fn bench(a: BenchArgs) -> anyhow::Result<u8> {
    let repeat = a.repeat.max(1);
    if a.what == "cluster" || a.what == "all" {
        let log_dir = std::env::temp_dir().join(format!("chaos-bench-{}", std::process::id()));
        std::fs::create_dir_all(&log_dir)?;
        // The template is made once, outside the measurement.
        crate::pg::PgInstall::find()?.template().await?;
        let (mut starts, mut stops) = (vec![], vec![]);
        for i in 0..repeat {
            let spec = ClusterSpec {
                nodes: vec![
                    "routing".into(),
                    "shard1".into(),
                    "shard2".into(),
                    "shard3".into(),
                ],
                links: vec![],
                log_dir: log_dir.clone(),
                run_id: format!("bench-{}-{i}", std::process::id()),
            };
            let t = Instant::now();
            let mut c = ProcessCluster::start(&spec).await?;
            starts.push(t.elapsed().as_secs_f64());
            let t = Instant::now();
            c.stop_all().await;
            stops.push(t.elapsed().as_secs_f64());
        }
        let _ = std::fs::remove_dir_all(&log_dir);
        println!(
            "cluster (process backend, routing + 3 shards, template copy + start in parallel): start median {:.3} s (min {:.3}, max {:.3}); stop median {:.3} s; {repeat} runs",
            median(starts.clone()),
            starts.iter().cloned().fold(f64::MAX, f64::min),
            starts.iter().cloned().fold(0.0, f64::max),
            median(stops)
        );
    }
    if a.what == "proxy" || a.what == "all" {
        let report = chaos_proxy::bench(chaos_proxy::BenchOptions::default()).await?;
        println!("{report}");
    }
    if a.what == "checker" || a.what == "all" {
        let events = a.events;
        let text =
            tokio::task::spawn_blocking(move || chaos_checkers::bench_synthetic(events)).await?;
        println!("{text}");
    }
    Ok(0)
}
