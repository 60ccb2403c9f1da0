//! Prints proxy round-trip figures (direct vs proxied vs 50 ms latency toxic); not a timed test.

fn main() {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(4)
        .enable_all()
        .build()
        .expect("tokio runtime");
    let opts = chaos_proxy::BenchOptions::default();
    match rt.block_on(chaos_proxy::bench(opts)) {
        Ok(report) => println!("{report}"),
        Err(e) => {
            eprintln!("bench failed: {e}");
            std::process::exit(1);
        }
    }
}
