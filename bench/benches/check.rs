//! Prints the checker's figures on a synthetic run: `cargo bench -p chaos-bench --bench check [-- EVENTS]` (default 10 M events).

fn main() {
    // cargo passes `--bench`; the first number, if any, is the event count.
    let events = std::env::args()
        .skip(1)
        .find_map(|a| a.parse::<u64>().ok())
        .unwrap_or(10_000_000);
    println!("{}", chaos_bench::bench_synthetic(events));
}
