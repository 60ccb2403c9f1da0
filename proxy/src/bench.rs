//! Round-trip benchmark: loopback echo direct, through the proxy, and through a latency toxic.

use crate::client::ToxiproxyClient;
use crate::error::ProxyError;
use crate::model::{Stream, ToxicKind, ToxicSpec};
use crate::RealMs;
use hdrhistogram::Histogram;
use std::fmt;
use std::net::SocketAddr;
use std::time::{Duration, Instant};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::task::JoinSet;

/// Largest payload the benchmark accepts; it measures small request/response exchanges.
const MAX_PAYLOAD_BYTES: usize = 64 * 1024;
/// One exchange taking longer than this means something is broken, not slow.
const EXCHANGE_TIMEOUT: Duration = Duration::from_secs(10);

/// What to measure.
#[derive(Debug, Clone)]
pub struct BenchOptions {
    /// Measured exchanges for the direct and no-toxic runs.
    pub exchanges: usize,
    /// Unmeasured exchanges before each run.
    pub warmup_exchanges: usize,
    /// Bytes per request (echoed back).
    pub payload_bytes: usize,
    /// Latency toxic, applied downstream.
    pub latency_ms: RealMs<u32>,
    /// Concurrent connections in the latency run (each exchange takes latency_ms).
    pub latency_connections: usize,
    /// Exchanges per connection in the latency run.
    pub latency_exchanges_per_connection: usize,
}

impl Default for BenchOptions {
    fn default() -> Self {
        BenchOptions {
            exchanges: 20_000,
            warmup_exchanges: 500,
            payload_bytes: 64,
            latency_ms: 50,
            latency_connections: 10,
            latency_exchanges_per_connection: 100,
        }
    }
}

/// Percentiles of one run, in microseconds.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct RunSummary {
    pub count: u64,
    pub p50_us: u64,
    pub p99_us: u64,
    pub p999_us: u64,
    pub max_us: u64,
}

impl RunSummary {
    fn of(h: &Histogram<u64>) -> Self {
        RunSummary {
            count: h.len(),
            p50_us: h.value_at_quantile(0.50),
            p99_us: h.value_at_quantile(0.99),
            p999_us: h.value_at_quantile(0.999),
            max_us: h.max(),
        }
    }
}

/// The figures `chaos bench` prints.
#[derive(Debug, Clone)]
pub struct BenchReport {
    pub payload_bytes: usize,
    pub latency_ms: RealMs<u32>,
    pub direct: RunSummary,
    pub proxied: RunSummary,
    pub latency: RunSummary,
    /// Bare timer: tasks sleeping `latency_ms` with the shared timer thread, no I/O. The
    /// machine's wake-up noise floor for the latency run.
    pub timer_floor: RunSummary,
    /// The same sleeps on a timerfd each, as a delayed link waits now (taken in turns with
    /// the timer thread's).
    pub timerfd_floor: RunSummary,
}

impl BenchReport {
    /// Extra round-trip time the proxy adds at p50 with no toxic.
    pub fn added_p50_us(&self) -> i64 {
        self.proxied.p50_us as i64 - self.direct.p50_us as i64
    }

    /// |p99 - latency| for the latency run.
    pub fn latency_p99_error_us(&self) -> u64 {
        (self.latency.p99_us as i64 - i64::from(self.latency_ms) * 1000).unsigned_abs()
    }
}

impl fmt::Display for BenchReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(
            f,
            "round trips of {}-byte request/response over 127.0.0.1 (microseconds)",
            self.payload_bytes
        )?;
        writeln!(
            f,
            "{:<28} {:>8} {:>9} {:>9} {:>9} {:>9}",
            "run", "count", "p50", "p99", "p99.9", "max"
        )?;
        let latency_label = format!("proxy, latency {} ms", self.latency_ms);
        for (name, r) in [
            ("direct", &self.direct),
            ("proxy, no toxic", &self.proxied),
            (latency_label.as_str(), &self.latency),
            ("timer floor (sleep only)", &self.timer_floor),
            ("timerfd floor (sleep only)", &self.timerfd_floor),
        ] {
            writeln!(
                f,
                "{:<28} {:>8} {:>9} {:>9} {:>9} {:>9}",
                name, r.count, r.p50_us, r.p99_us, r.p999_us, r.max_us
            )?;
        }
        writeln!(f, "added by proxy at p50: {} us", self.added_p50_us())?;
        write!(
            f,
            "latency toxic: p50 {} us, p99 {} us, |p99 - {} ms| = {} us",
            self.latency.p50_us,
            self.latency.p99_us,
            self.latency_ms,
            self.latency_p99_error_us()
        )
    }
}

fn histogram() -> Result<Histogram<u64>, ProxyError> {
    Histogram::new_with_bounds(1, 60_000_000, 3).map_err(|e| ProxyError::Histogram(e.to_string()))
}

async fn echo_server() -> Result<(SocketAddr, tokio::task::JoinHandle<()>), ProxyError> {
    let listener = TcpListener::bind("127.0.0.1:0")
        .await
        .map_err(ProxyError::BenchIo)?;
    let addr = listener.local_addr().map_err(ProxyError::BenchIo)?;
    let task = tokio::spawn(async move {
        let mut conns = JoinSet::new();
        while let Ok((mut s, _)) = listener.accept().await {
            let _ = s.set_nodelay(true);
            conns.spawn(async move {
                let mut buf = vec![0u8; 64 * 1024];
                while let Ok(n) = s.read(&mut buf).await {
                    if n == 0 || s.write_all(&buf[..n]).await.is_err() {
                        break;
                    }
                }
            });
        }
    });
    Ok((addr, task))
}

/// `warmup` unmeasured then `count` measured exchanges on one connection.
async fn run_exchanges(
    addr: SocketAddr,
    payload_bytes: usize,
    warmup: usize,
    count: usize,
) -> Result<Histogram<u64>, ProxyError> {
    let mut h = histogram()?;
    let mut s = TcpStream::connect(addr)
        .await
        .map_err(ProxyError::BenchIo)?;
    s.set_nodelay(true).map_err(ProxyError::BenchIo)?;
    let req = vec![0x5Au8; payload_bytes];
    let mut resp = vec![0u8; payload_bytes];
    for i in 0..warmup + count {
        let t0 = Instant::now();
        let exchange = async {
            s.write_all(&req).await?;
            s.read_exact(&mut resp).await
        };
        tokio::time::timeout(EXCHANGE_TIMEOUT, exchange)
            .await
            .map_err(|_| ProxyError::Timeout("benchmark exchange"))?
            .map_err(ProxyError::BenchIo)?;
        if i >= warmup {
            h.record(t0.elapsed().as_micros().max(1) as u64)
                .map_err(|e| ProxyError::Histogram(e.to_string()))?;
        }
    }
    Ok(h)
}

/// Concurrent tasks sleeping `latency_ms` on the shared timer thread or (`timerfd`) each on
/// a timerfd of its own, measured like an exchange.
async fn timer_floor(
    latency_ms: u32,
    tasks: usize,
    per_task: usize,
    timerfd: bool,
) -> Result<Histogram<u64>, ProxyError> {
    let mut set = JoinSet::new();
    for _ in 0..tasks {
        set.spawn(async move {
            let mut h = histogram()?;
            let mut fd = crate::server::Deadline::new().map_err(ProxyError::BenchIo)?;
            for _ in 0..per_task {
                let t0 = Instant::now();
                let at = t0 + Duration::from_millis(latency_ms.into());
                if timerfd {
                    fd.sleep_until(at).await.map_err(ProxyError::BenchIo)?;
                } else {
                    crate::server::precise_sleep_until(at).await;
                }
                h.record(t0.elapsed().as_micros().max(1) as u64)
                    .map_err(|e| ProxyError::Histogram(e.to_string()))?;
            }
            Ok::<_, ProxyError>(h)
        });
    }
    let mut all = histogram()?;
    while let Some(r) = set.join_next().await {
        let h = r.map_err(|e| ProxyError::BenchIo(std::io::Error::other(e.to_string())))??;
        all.add(&h)
            .map_err(|e| ProxyError::Histogram(e.to_string()))?;
    }
    Ok(all)
}

/// Measure direct vs proxied round trips on an in-process server and echo upstream.
pub async fn bench(opts: BenchOptions) -> Result<BenchReport, ProxyError> {
    let payload_bytes = opts.payload_bytes.clamp(1, MAX_PAYLOAD_BYTES);
    let (echo_addr, echo_task) = echo_server().await?;
    let server = crate::server::start(SocketAddr::from(([127, 0, 0, 1], 0))).await?;
    let result = async {
        let client = ToxiproxyClient::new(server.api_addr());
        let p = client
            .create_proxy("bench", "127.0.0.1:0", &echo_addr.to_string())
            .await?;
        let proxy_addr: SocketAddr = p
            .listen
            .parse()
            .map_err(|_| ProxyError::Timeout("proxy reported an unparsable listen address"))?;

        let direct = run_exchanges(
            echo_addr,
            payload_bytes,
            opts.warmup_exchanges,
            opts.exchanges,
        )
        .await?;
        let proxied = run_exchanges(
            proxy_addr,
            payload_bytes,
            opts.warmup_exchanges,
            opts.exchanges,
        )
        .await?;

        let toxic = ToxicKind::Latency {
            latency_ms: opts.latency_ms,
            jitter_ms: 0,
        };
        client
            .add_toxic("bench", ToxicSpec::new(Stream::Downstream, toxic))
            .await?;
        let mut runs = JoinSet::new();
        for _ in 0..opts.latency_connections.max(1) {
            runs.spawn(run_exchanges(
                proxy_addr,
                payload_bytes,
                1,
                opts.latency_exchanges_per_connection.max(1),
            ));
        }
        let mut latency = histogram()?;
        while let Some(r) = runs.join_next().await {
            let h = r.map_err(|e| ProxyError::BenchIo(std::io::Error::other(e.to_string())))??;
            latency
                .add(&h)
                .map_err(|e| ProxyError::Histogram(e.to_string()))?;
        }
        // In turns, so a slow spell of the machine lands on both.
        let (mut thread_floor, mut fd_floor) = (histogram()?, histogram()?);
        for turn in 0..4 {
            let h = timer_floor(
                opts.latency_ms,
                opts.latency_connections.max(1),
                opts.latency_exchanges_per_connection.max(1).div_ceil(2),
                turn % 2 == 1,
            )
            .await?;
            let into = if turn % 2 == 1 {
                &mut fd_floor
            } else {
                &mut thread_floor
            };
            into.add(&h)
                .map_err(|e| ProxyError::Histogram(e.to_string()))?;
        }
        Ok::<_, ProxyError>(BenchReport {
            timer_floor: RunSummary::of(&thread_floor),
            timerfd_floor: RunSummary::of(&fd_floor),
            payload_bytes,
            latency_ms: opts.latency_ms,
            direct: RunSummary::of(&direct),
            proxied: RunSummary::of(&proxied),
            latency: RunSummary::of(&latency),
        })
    }
    .await;
    server.shutdown().await;
    echo_task.abort();
    result
}
