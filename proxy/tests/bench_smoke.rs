//! The library `bench()` runs end to end with small numbers (the figures come from `cargo bench`).

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bench_runs_and_reports() {
    let opts = chaos_proxy::BenchOptions {
        exchanges: 200,
        warmup_exchanges: 10,
        payload_bytes: 64,
        latency_ms: 20,
        latency_connections: 2,
        latency_exchanges_per_connection: 5,
    };
    let r = chaos_proxy::bench(opts).await.unwrap();
    assert_eq!(
        (r.direct.count, r.proxied.count, r.latency.count),
        (200, 200, 10)
    );
    assert!(r.latency.p50_us >= 20_000, "{r}");
    assert!(r.timer_floor.p50_us >= 20_000, "{r}");
    let text = r.to_string();
    assert!(
        text.contains("added by proxy at p50") && text.contains("|p99 - 20 ms|"),
        "{text}"
    );
}
