//! Prints proxy round-trip figures (direct vs proxied vs 50 ms latency toxic); not a timed test.
//!
//! `cargo bench -p chaos-proxy -- [exchanges=N] [latency_ms=N] [latency_connections=N]
//! [latency_exchanges=N] [payload_bytes=N] [workers=N]`

fn main() {
    let mut opts = chaos_proxy::BenchOptions::default();
    let mut workers = 4;
    for arg in std::env::args().skip(1) {
        let Some((k, v)) = arg.split_once('=') else {
            // cargo passes `--bench`; anything without '=' is not ours.
            continue;
        };
        let Ok(n) = v.parse::<usize>() else {
            eprintln!("ignoring {arg}: not a number");
            continue;
        };
        match k {
            "exchanges" => opts.exchanges = n,
            "latency_ms" => opts.latency_ms = n as u32,
            "latency_connections" => opts.latency_connections = n,
            "latency_exchanges" => opts.latency_exchanges_per_connection = n,
            "payload_bytes" => opts.payload_bytes = n,
            "workers" => workers = n.max(1),
            _ => eprintln!("ignoring unknown option {k}"),
        }
    }
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(workers)
        .enable_all()
        .build()
        .expect("tokio runtime");
    match rt.block_on(chaos_proxy::bench(opts)) {
        Ok(report) => println!("{report}"),
        Err(e) => {
            eprintln!("bench failed: {e}");
            std::process::exit(1);
        }
    }
}
