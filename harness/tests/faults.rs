//! Each fault's effect on a real Postgres connection: a SIGSTOPped client makes no progress
//! and resumes; a stopped or crashed routing db refuses connections and comes back with its
//! data; boxes racing for an expired claim get one grant and burn no token; a 200 ms latency toxic slows a round trip and healing restores it; down cuts open
//! connections and refuses new ones; timeout and reset_peer end an open connection. The link
//! faults run twice: through the harness's `Links` (embedded proxy) and through
//! `ToxiproxyClient` (the project's toxiproxy_rust wrapper) against a standalone
//! `chaos proxy` process.

use crate::common::*;
use chaos_harness::backend::{
    BackendKind, Cluster, ClusterSpec, MoverProgram, MoverSpec, Signaller, StopMode,
};
use chaos_harness::links::{proxy_name, Links};
use chaos_harness::scenario::{self, Scenario, ScenarioFile};
use chaos_nemesis::{FaultKind, Stream as LinkStream};
use chaos_proxy::{ProxyInfo, Stream, ToxicKind, ToxicSpec, ToxiproxyClient};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};
use tokio_postgres::Client;

const NODE: &str = "routing";
const LINK: &str = "box-1->routing";

// ---------------------------------------------------------------------------------------------
// Fixtures: one Postgres node, the links, a standalone proxy process.
// ---------------------------------------------------------------------------------------------

/// A one-node process-backend cluster. Dropping it (any path, panics included) stops the
/// server through `ProcessCluster`/`PgNode`'s own Drop; `stop` also checks nothing is left.
struct Db {
    cluster: Cluster,
    /// The node's data root, which the server's command line names.
    data_root: PathBuf,
    log_dir: PathBuf,
}

impl Db {
    async fn start(test: &str) -> Db {
        let dir = temp_dir(&format!("faults-{test}"));
        let log_dir = dir.join("logs");
        std::fs::create_dir_all(&log_dir).unwrap();
        let run_id = format!("faults-{test}-{}", std::process::id());
        // Where ProcessCluster puts it (no set_var: tests run in parallel threads).
        let data_root = chaos_harness::backend::process::data_root().join(&run_id);
        let spec = ClusterSpec {
            nodes: vec![NODE.into()],
            links: vec![LINK.into()],
            log_dir: log_dir.clone(),
            run_id,
            asynchronous_commit: vec![],
        };
        let cluster = Cluster::start(BackendKind::Process, &spec)
            .await
            .expect("the routing db starts");
        Db {
            cluster,
            data_root,
            log_dir,
        }
    }

    fn admin_url(&self) -> String {
        self.cluster.admin_url(NODE)
    }

    fn upstream(&self) -> String {
        self.cluster.upstream(NODE)
    }

    /// Stop the server, remove its data, and check no process still names the data dir.
    async fn stop(mut self) {
        self.cluster.stop_all().await;
        assert_none_left(&self.data_root.display().to_string(), 10);
    }
}

/// `chaos proxy --listen 127.0.0.1:PORT` as a child process, stopped by PID on every path.
struct StandaloneProxy {
    child: Option<std::process::Child>,
    api: String,
}

impl StandaloneProxy {
    async fn start() -> StandaloneProxy {
        let mut last = String::new();
        // The free port is released before the child binds it: retry if another test took it.
        for _ in 0..5 {
            let port = chaos_harness::ports::free_port().unwrap();
            let api = format!("127.0.0.1:{port}");
            let mut cmd = std::process::Command::new(chaos());
            cmd.args(["proxy", "--listen", &api])
                .stdin(std::process::Stdio::null())
                .stdout(std::process::Stdio::null())
                .stderr(std::process::Stdio::null());
            // Die with the test process even if it is SIGKILLed.
            unsafe {
                std::os::unix::process::CommandExt::pre_exec(&mut cmd, || {
                    if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL) != 0 {
                        return Err(std::io::Error::last_os_error());
                    }
                    Ok(())
                });
            }
            let mut p = StandaloneProxy {
                child: Some(cmd.spawn().expect("spawn chaos proxy")),
                api: api.clone(),
            };
            let client = ToxiproxyClient::new(&api);
            let began = Instant::now();
            while began.elapsed() < Duration::from_secs(10) {
                if let Some(status) = p.child.as_mut().unwrap().try_wait().unwrap() {
                    last = format!("chaos proxy on {api} exited: {status}");
                    break;
                }
                match client.version().await {
                    Ok(_) => return p,
                    Err(e) => last = e.to_string(),
                }
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
            drop(p);
        }
        panic!("the standalone proxy did not answer: {last}");
    }

    fn pid(&self) -> i32 {
        self.child.as_ref().map(|c| c.id() as i32).unwrap_or(-1)
    }

    /// SIGTERM, then SIGKILL after 3 s; returns the exit status.
    fn stop_by_pid(&mut self) -> Option<std::process::ExitStatus> {
        let mut child = self.child.take()?;
        if let Ok(Some(s)) = child.try_wait() {
            return Some(s);
        }
        unsafe { libc::kill(child.id() as i32, libc::SIGTERM) };
        let began = Instant::now();
        while began.elapsed() < Duration::from_secs(3) {
            if let Ok(Some(s)) = child.try_wait() {
                return Some(s);
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        unsafe { libc::kill(child.id() as i32, libc::SIGKILL) };
        child.wait().ok()
    }
}

impl Drop for StandaloneProxy {
    fn drop(&mut self) {
        self.stop_by_pid();
    }
}

/// The scenario `Links::inject` scales by: the default 10 real ms per scenario second.
fn scenario() -> Scenario {
    let file: ScenarioFile = toml::from_str(
        r#"
        name = "faults-test"
        start = "12:00:00"
        end = "12:10:00"
        time_scale_ms = 10
        [lease]
        lease_s = 10
        poll_s = 2
        copy_s = 5
        "#,
    )
    .unwrap();
    scenario::load::validate(file, Path::new("faults-test.toml"), &[]).unwrap()
}

/// Scenario ms that the default scale turns into `real_ms`.
fn scenario_ms(real_ms: i64) -> i64 {
    real_ms * 100
}

/// Who applies the link faults: the harness's `Links` on its embedded proxy, or the
/// `ToxiproxyClient` (toxiproxy_rust, blocking, in spawn_blocking) on a standalone proxy.
enum Driver {
    Links {
        links: Links,
        scenario: Scenario,
        /// A second client on the same API, to read each change back independently.
        reader: ToxiproxyClient,
    },
    Standalone {
        client: ToxiproxyClient,
        server: StandaloneProxy,
    },
}

impl Driver {
    async fn links() -> Driver {
        let links = Links::start(None).await.expect("embedded proxy");
        let reader = ToxiproxyClient::new(&links.api);
        Driver::Links {
            links,
            scenario: scenario(),
            reader,
        }
    }

    async fn standalone() -> Driver {
        let server = StandaloneProxy::start().await;
        let client = ToxiproxyClient::new(&server.api);
        Driver::Standalone { client, server }
    }

    fn label(&self) -> &'static str {
        match self {
            Driver::Links { .. } => "Links (embedded proxy)",
            Driver::Standalone { .. } => "ToxiproxyClient -> `chaos proxy` process",
        }
    }

    fn reader(&self) -> &ToxiproxyClient {
        match self {
            Driver::Links { reader, .. } => reader,
            Driver::Standalone { client, .. } => client,
        }
    }

    /// Create the link's proxy to `upstream` on a free loopback port; the address to dial.
    async fn add(&self, upstream: &str) -> String {
        let addr = match self {
            Driver::Links { links, .. } => {
                let a = links.add(LINK, "127.0.0.1:0", upstream).await.unwrap();
                assert_eq!(links.addr(LINK).as_deref(), Some(a.as_str()));
                a
            }
            Driver::Standalone { client, .. } => {
                client
                    .create_proxy(&proxy_name(LINK), "127.0.0.1:0", upstream)
                    .await
                    .unwrap()
                    .listen
            }
        };
        let got = self.read().await;
        assert_eq!(got.listen, addr);
        assert_eq!(got.upstream, upstream);
        assert!(got.enabled && got.toxics.is_empty(), "{got:?}");
        assert!(addr.starts_with("127.0.0.1:"), "{addr}");
        addr
    }

    /// The link's proxy as the API reports it now.
    async fn read(&self) -> ProxyInfo {
        self.reader().get(&proxy_name(LINK)).await.unwrap()
    }

    async fn inject(&self, kind: FaultKind) {
        match self {
            Driver::Links {
                links, scenario, ..
            } => {
                chaos_harness::faults::link::inject(links, links.client(), LINK, &kind, scenario)
                    .await
                    .unwrap();
            }
            Driver::Standalone { client, .. } => {
                let name = proxy_name(LINK);
                let real = |scen: i64| (scen / 100) as u32;
                match kind {
                    FaultKind::Latency {
                        latency_ms,
                        jitter_ms,
                        ..
                    } => {
                        let toxic = ToxicKind::Latency {
                            latency_ms: real(latency_ms),
                            jitter_ms: real(jitter_ms),
                        };
                        client
                            .add_toxic(&name, ToxicSpec::new(Stream::Downstream, toxic))
                            .await
                            .unwrap();
                    }
                    FaultKind::Down { .. } => {
                        client.down(&name).await.unwrap();
                    }
                    FaultKind::Timeout { timeout_ms, .. } => {
                        let toxic = ToxicKind::Timeout {
                            timeout_ms: real(timeout_ms),
                        };
                        client
                            .add_toxic(&name, ToxicSpec::new(Stream::Downstream, toxic))
                            .await
                            .unwrap();
                    }
                    FaultKind::ResetPeer { timeout_ms, .. } => {
                        let toxic = ToxicKind::ResetPeer {
                            timeout_ms: real(timeout_ms),
                        };
                        client
                            .add_toxic(&name, ToxicSpec::new(Stream::Downstream, toxic))
                            .await
                            .unwrap();
                    }
                    other => panic!("not a link fault here: {other:?}"),
                }
            }
        }
    }

    /// A downstream toxic of `kind` with `attr` = `real_ms` is on the link, and nothing else.
    async fn assert_toxic(&self, kind: &str, attr: &str, real_ms: i64) {
        let got = self.read().await;
        assert_eq!(got.toxics.len(), 1, "{got:?}");
        let t = &got.toxics[0];
        assert_eq!(t.kind, kind, "{got:?}");
        assert_eq!(t.stream, "downstream", "{got:?}");
        assert_eq!(t.attr_i64(attr), Some(real_ms), "{got:?}");
        assert!(got.enabled, "{got:?}");
    }

    async fn latency(&self, real_ms: i64) {
        self.inject(FaultKind::Latency {
            link: LINK.into(),
            latency_ms: scenario_ms(real_ms),
            jitter_ms: 0,
            stream: LinkStream::Downstream,
        })
        .await;
        self.assert_toxic("latency", "latency", real_ms).await;
    }

    async fn timeout(&self, real_ms: i64) {
        self.inject(FaultKind::Timeout {
            link: LINK.into(),
            timeout_ms: scenario_ms(real_ms),
            stream: LinkStream::Downstream,
        })
        .await;
        self.assert_toxic("timeout", "timeout", real_ms).await;
    }

    async fn reset_peer(&self, real_ms: i64) {
        self.inject(FaultKind::ResetPeer {
            link: LINK.into(),
            timeout_ms: scenario_ms(real_ms),
            stream: LinkStream::Downstream,
        })
        .await;
        self.assert_toxic("reset_peer", "timeout", real_ms).await;
    }

    async fn down(&self) {
        self.inject(FaultKind::Down { link: LINK.into() }).await;
        let got = self.read().await;
        assert!(!got.enabled, "down must disable the proxy: {got:?}");
    }

    /// Links: `heal` (every toxic removed, proxy enabled). Standalone: `heal` too.
    async fn heal(&self) {
        match self {
            Driver::Links { links, .. } => links.heal(LINK).await.unwrap(),
            Driver::Standalone { client, .. } => {
                client.heal(&proxy_name(LINK)).await.unwrap();
            }
        }
        let got = self.read().await;
        assert!(got.enabled && got.toxics.is_empty(), "after heal: {got:?}");
    }

    /// Links: `heal` is how the nemesis ends a down. Standalone: the client's `up`.
    async fn up(&self) {
        match self {
            Driver::Links { links, .. } => links.heal(LINK).await.unwrap(),
            Driver::Standalone { client, .. } => {
                client.up(&proxy_name(LINK)).await.unwrap();
            }
        }
        let got = self.read().await;
        assert!(got.enabled, "after up: {got:?}");
    }

    async fn shutdown(self) {
        match self {
            Driver::Links { links, .. } => links.shutdown().await,
            Driver::Standalone { client, mut server } => {
                client.delete_proxy(&proxy_name(LINK)).await.unwrap();
                let pid = server.pid();
                let status = server.stop_by_pid().expect("the proxy process was running");
                assert!(
                    status.success(),
                    "chaos proxy (pid {pid}) exits 0 on SIGTERM: {status}"
                );
            }
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Small helpers.
// ---------------------------------------------------------------------------------------------

fn url_via(addr: &str) -> String {
    format!("postgres://postgres@{addr}/postgres")
}

async fn connect(url: &str) -> Client {
    chaos_harness::db::connect(url, "faults-test", Duration::from_secs(5))
        .await
        .unwrap_or_else(|e| panic!("connect {url}: {e}"))
}

/// A connection whose task's own result is kept (db::connect discards it).
async fn connect_watched(
    url: &str,
) -> (
    Client,
    tokio::task::JoinHandle<Result<(), tokio_postgres::Error>>,
) {
    let mut config: tokio_postgres::Config = url.parse().unwrap();
    config
        .application_name("faults-test")
        .connect_timeout(Duration::from_secs(5));
    let (client, conn) = tokio::time::timeout(
        Duration::from_secs(5),
        config.connect(tokio_postgres::NoTls),
    )
    .await
    .expect("connect within 5 s")
    .unwrap_or_else(|e| panic!("connect {url}: {e}"));
    (client, tokio::spawn(conn))
}

/// The io::ErrorKind at the bottom of an error's source chain.
fn io_kind(e: &(dyn std::error::Error + 'static)) -> Option<std::io::ErrorKind> {
    let mut cur: Option<&(dyn std::error::Error + 'static)> = Some(e);
    while let Some(err) = cur {
        if let Some(io) = err.downcast_ref::<std::io::Error>() {
            return Some(io.kind());
        }
        cur = err.source();
    }
    None
}

async fn query_i64(url: &str, sql: &str) -> i64 {
    connect(url).await.query_one(sql, &[]).await.unwrap().get(0)
}

/// One `select 1` round trip on an open connection.
async fn round_trip(c: &Client) -> Duration {
    let t = Instant::now();
    let rows = tokio::time::timeout(Duration::from_secs(5), c.simple_query("select 1"))
        .await
        .expect("round trip within 5 s")
        .expect("select 1");
    assert!(!rows.is_empty());
    t.elapsed()
}

async fn round_trips(c: &Client, n: usize) -> Vec<Duration> {
    let mut v = Vec::with_capacity(n);
    for _ in 0..n {
        v.push(round_trip(c).await);
    }
    v.sort();
    v
}

fn median(v: &[Duration]) -> Duration {
    v[v.len() / 2]
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}

/// One process of a group as /proc shows it.
#[derive(Debug)]
struct ProcState {
    pid: i32,
    comm: String,
    /// R, S, D, T, Z ...
    state: char,
    /// Where a blocked process waits in the kernel (`kernel_clone`: a vfork parent).
    wchan: String,
}

impl ProcState {
    /// Makes no progress until SIGCONT: stopped, or a vfork parent blocked on a stopped
    /// child (dash vforks its commands; the parent shows D in `kernel_clone` until the child
    /// execs, and that child is stopped).
    fn held(&self) -> bool {
        self.state == 'T' || (self.state == 'D' && self.wchan.contains("clone"))
    }
}

/// Every process of group `pgid`, zombies included.
fn group_states(pgid: i32) -> Vec<ProcState> {
    let mut out = Vec::new();
    for e in std::fs::read_dir("/proc").unwrap().flatten() {
        let Some(pid) = e.file_name().to_str().and_then(|s| s.parse::<i32>().ok()) else {
            continue;
        };
        let Ok(stat) = std::fs::read_to_string(e.path().join("stat")) else {
            continue;
        };
        // pid (comm) state ppid pgrp ...; comm may hold spaces, so split at the last ')'.
        let Some((head, rest)) = stat.rsplit_once(')') else {
            continue;
        };
        let comm = head
            .split_once('(')
            .map(|(_, c)| c)
            .unwrap_or("")
            .to_string();
        let fields: Vec<&str> = rest.split_whitespace().collect();
        if fields.len() > 2 && fields[2].parse::<i32>().ok() == Some(pgid) {
            out.push(ProcState {
                pid,
                comm,
                state: fields[0].chars().next().unwrap_or('?'),
                wchan: std::fs::read_to_string(e.path().join("wchan")).unwrap_or_default(),
            });
        }
    }
    out
}

// ---------------------------------------------------------------------------------------------
// 1. pause: SIGSTOP through the harness's Signaller; no progress; SIGCONT; progress again.
// ---------------------------------------------------------------------------------------------

#[tokio::test(flavor = "multi_thread")]
async fn a_paused_mover_makes_no_progress_and_resumes() {
    let db = Db::start("pause").await;
    let driver = Driver::links().await;
    let addr = driver.add(&db.upstream()).await;
    let admin = db.admin_url();
    connect(&admin)
        .await
        .batch_execute("create table ticks (n bigserial primary key, at timestamptz default clock_timestamp())")
        .await
        .unwrap();

    // A minimal mover: a shell loop feeding one psql session an insert every 10 ms, through
    // the proxy, started by the harness's own launcher (own process group, dies with us).
    let psql = chaos_harness::pg::PgInstall::find()
        .map(|i| i.bindir.join("psql"))
        .ok()
        .filter(|p| p.is_file())
        .unwrap_or_else(|| PathBuf::from("psql"));
    let script = format!(
        "while :; do echo 'insert into ticks default values;'; sleep 0.01; done | {} -X -q -v ON_ERROR_STOP=1 -d \"$CHAOS_ROUTING_URL\" >/dev/null",
        psql.display()
    );
    let log_path = db.log_dir.join("box-1.log");
    let spec = MoverSpec {
        box_name: "box-1".into(),
        program: MoverProgram::Exec {
            program: "/bin/sh".into(),
            args: vec!["-c".into(), script],
        },
        env: vec![
            ("CHAOS_ROUTING_URL".into(), url_via(&addr)),
            ("PGAPPNAME".into(), "box-1".into()),
        ],
        log_path: log_path.clone(),
        reads_gate: false,
        ready_timeout: std::time::Duration::from_secs(30),
    };
    let (mut mover, mut stdout) = db
        .cluster
        .launcher()
        .spawn(&spec)
        .await
        .expect("spawn mover");
    tokio::spawn(async move {
        let _ = tokio::io::copy(&mut stdout, &mut tokio::io::sink()).await;
    });
    let signaller = mover.signaller();
    let pgid: i32 = match &signaller {
        Signaller::Process(pid) => *pid,
        _ => unreachable!("process backend"),
    };
    let count = "select count(*) from ticks";

    // Running: rows arrive.
    let began = Instant::now();
    while query_i64(&admin, count).await < 20 {
        assert!(
            began.elapsed() < Duration::from_secs(10),
            "the mover made no progress in 10 s; log: {}",
            std::fs::read_to_string(&log_path).unwrap_or_default()
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let r0 = query_i64(&admin, count).await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    let r1 = query_i64(&admin, count).await;
    assert!(
        r1 > r0,
        "the mover progresses before the pause ({r0} -> {r1})"
    );
    let rate_before = (r1 - r0) as f64 / 0.3;

    // Pause through the harness's Signaller (what the nemesis calls for a pause fault).
    signaller
        .signal(libc::SIGSTOP, false)
        .await
        .expect("SIGSTOP");
    let paused = Instant::now();
    // Every live process of the group stops once the kernel has delivered the signal:
    // psql (the only one talking to the db) and the shell loop feeding it. A `sleep` that
    // exited just before the stop stays a zombie until its stopped parent reaps it.
    loop {
        let states = group_states(pgid);
        let live: Vec<&ProcState> = states.iter().filter(|p| p.state != 'Z').collect();
        let psql_stopped = live.iter().any(|p| p.comm == "psql" && p.state == 'T');
        if psql_stopped && live.len() >= 2 && live.iter().all(|p| p.held()) {
            break;
        }
        assert!(
            paused.elapsed() < Duration::from_secs(2),
            "every live process of the mover's group is stopped within 2 s: {states:?}"
        );
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    // A statement already on the wire still lands: wait until the server has nothing of the
    // mover's in progress (its session idle, and still open: paused, not gone).
    let idle =
        "select count(*) from pg_stat_activity where application_name = 'box-1' and state = 'idle'";
    while query_i64(&admin, idle).await != 1 {
        assert!(
            paused.elapsed() < Duration::from_secs(5),
            "the paused mover's session is open and idle within 5 s"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let p0 = query_i64(&admin, count).await;
    tokio::time::sleep(Duration::from_millis(800)).await;
    let p1 = query_i64(&admin, count).await;
    assert_eq!(p0, p1, "a paused mover writes nothing");
    assert_eq!(
        query_i64(&admin, idle).await,
        1,
        "the paused mover's connection stays open"
    );

    // Resume; rows arrive again.
    let resumed = Instant::now();
    signaller
        .signal(libc::SIGCONT, false)
        .await
        .expect("SIGCONT");
    let mut first_after = None;
    let a1 = loop {
        let n = query_i64(&admin, count).await;
        if n > p1 && first_after.is_none() {
            first_after = Some(resumed.elapsed());
        }
        if n >= p1 + 10 {
            break n;
        }
        assert!(
            resumed.elapsed() < Duration::from_secs(10),
            "the mover progresses after resuming: {p1} -> {n} in 10 s"
        );
        tokio::time::sleep(Duration::from_millis(5)).await;
    };
    let ten_after = resumed.elapsed();
    let first_after = first_after.unwrap_or(ten_after);
    assert!(
        group_states(pgid).iter().all(|p| p.state != 'T'),
        "nothing in the group is still stopped"
    );
    println!(
        "pause: {rate_before:.0} rows/s before; 0 rows in 800 ms paused ({p0} = {p1}); first row {:.1} ms after SIGCONT, 10 rows in {:.0} ms ({a1} in all)",
        ms(first_after),
        ms(ten_after)
    );

    signaller.kill_now();
    let code = tokio::time::timeout(Duration::from_secs(5), mover.wait())
        .await
        .expect("the killed mover exits");
    assert_eq!(code, None, "killed by a signal");
    drop(mover);
    // The shell is reaped by us; psql and sleep were re-parented, so give their reaper a moment.
    let began = Instant::now();
    loop {
        let left: Vec<ProcState> = group_states(pgid)
            .into_iter()
            .filter(|p| p.state != 'Z' && p.state != 'X')
            .collect();
        if left.is_empty() {
            break;
        }
        assert!(
            began.elapsed() < Duration::from_secs(3),
            "processes of the mover's group still alive (pids {:?}): {left:?}",
            left.iter().map(|p| p.pid).collect::<Vec<_>>()
        );
        std::thread::sleep(Duration::from_millis(10));
    }
    driver.shutdown().await;
    db.stop().await;
}

// ---------------------------------------------------------------------------------------------
// 2. stop / crash: the routing db refuses connections and comes back with its data.
// ---------------------------------------------------------------------------------------------

#[tokio::test(flavor = "multi_thread")]
async fn a_stopped_or_crashed_routing_db_refuses_connections_and_keeps_its_data() {
    let mut db = Db::start("stop").await;
    let driver = Driver::links().await;
    let via = url_via(&driver.add(&db.upstream()).await);
    connect(&via)
        .await
        .batch_execute("create table kept (n int primary key); insert into kept values (1)")
        .await
        .unwrap();
    let log = db.log_dir.join(format!("{NODE}.log"));
    let recoveries = || {
        std::fs::read_to_string(&log)
            .unwrap_or_default()
            .matches("automatic recovery in progress")
            .count()
    };
    assert_eq!(recoveries(), 0);

    for (n, mode) in [(2, StopMode::Fast), (3, StopMode::Immediate)] {
        // A row committed through the proxy on a connection that stays open over the stop.
        let held = connect(&via).await;
        held.execute("insert into kept values ($1)", &[&n])
            .await
            .unwrap();

        let t = Instant::now();
        db.cluster.stop_node(NODE, mode).await.expect("stop");
        let stop_took = t.elapsed();

        // The open connection is gone with the server.
        let r = tokio::time::timeout(Duration::from_secs(5), held.simple_query("select 1"))
            .await
            .expect("the open connection answers (with an error) within 5 s");
        assert!(
            r.is_err(),
            "{mode:?}: a query on an open connection must fail"
        );

        // New connections through the proxy are refused, quickly (not hung to the timeout).
        let t = Instant::now();
        let refused = chaos_harness::db::connect(&via, "faults-test", Duration::from_secs(3)).await;
        let refused_in = t.elapsed();
        let err = refused.err().unwrap_or_else(|| {
            panic!("{mode:?}: connect through the proxy to a stopped db must fail")
        });
        assert!(
            refused_in < Duration::from_secs(2),
            "{mode:?}: refused at once, took {refused_in:?}: {err}"
        );
        assert!(
            chaos_harness::db::connect(&db.admin_url(), "faults-test", Duration::from_secs(1))
                .await
                .is_err(),
            "{mode:?}: the server itself is down"
        );

        let took = db.cluster.start_node(NODE).await.expect("start");
        let rows: Vec<i32> = connect(&via)
            .await
            .query("select n from kept order by n", &[])
            .await
            .unwrap()
            .iter()
            .map(|r| r.get(0))
            .collect();
        assert_eq!(
            rows,
            (1..=n).collect::<Vec<i32>>(),
            "{mode:?}: every committed row is back"
        );
        let expected_recoveries = usize::from(mode == StopMode::Immediate);
        assert_eq!(
            recoveries(),
            expected_recoveries,
            "{mode:?}: crash recovery runs after (and only after) an immediate stop"
        );
        println!(
            "stop {mode:?}: stopped in {:.0} ms; connect through the proxy refused in {:.1} ms ({err}); started again in {:.0} ms; rows {rows:?}",
            ms(stop_took),
            ms(refused_in),
            ms(took)
        );
    }
    driver.shutdown().await;
    db.stop().await;
}

// ---------------------------------------------------------------------------------------------
// The lock service under the race every takeover is: boxes call claim_acquire on an expired
// claim at once. One wins, the others get null, and no token is burnt, so the figures' "epoch
// 7, then 8" holds whoever wins.
// ---------------------------------------------------------------------------------------------

#[tokio::test(flavor = "multi_thread")]
async fn racing_acquirers_get_one_grant_and_burn_no_token() {
    let db = Db::start("acquire-race").await;
    let url = db.admin_url();
    chaos_harness::setup::routing(&url, "move", 7, &[])
        .await
        .expect("the lock service installs");
    const BOXES: usize = 6;
    const ROUNDS: i64 = 25;
    let mut clients = Vec::new();
    for _ in 0..BOXES {
        clients.push(std::sync::Arc::new(connect(&url).await));
    }
    let admin = connect(&url).await;
    let mut winners = Vec::new();
    for round in 0..ROUNDS {
        // Everyone waits on the row the first caller locks, then all are let go at once.
        let blocker = connect(&url).await;
        blocker
            .batch_execute("begin; select * from claims for update")
            .await
            .unwrap();
        let mut calls = tokio::task::JoinSet::new();
        for (i, c) in clients.iter().enumerate() {
            let c = c.clone();
            calls.spawn(async move {
                let row = c
                    .query_one(
                        "select claim_acquire('move', $1, 60000)",
                        &[&format!("box-{i}")],
                    )
                    .await
                    .expect("claim_acquire answers");
                row.get::<_, Option<i64>>(0)
            });
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
        blocker.batch_execute("commit").await.unwrap();
        let mut got = Vec::new();
        while let Some(r) = calls.join_next().await {
            got.extend(r.unwrap());
        }
        assert_eq!(got.len(), 1, "round {round}: exactly one box wins: {got:?}");
        winners.push(got[0]);
        admin
            .batch_execute("update claims set expires_at = '-infinity'")
            .await
            .unwrap();
    }
    assert_eq!(
        winners,
        (7..7 + ROUNDS).collect::<Vec<i64>>(),
        "tokens run without gaps from the first"
    );
    println!("{ROUNDS} races of {BOXES} boxes: tokens {winners:?}");
    drop(clients);
    db.stop().await;
}

/// A `down` fault outlives its database's restart even when the restart's link changes were
/// sent before the `down` landed (a start is begun early by its measured start time, and its
/// links open at the instant): in containers April's `down` on box 2's routing link, 10 s
/// before the routing db came back, was undone by the start, and box 2 renewed its lapsed
/// claim through it.
#[tokio::test(flavor = "multi_thread")]
async fn a_down_landing_while_its_node_restarts_stays_down() {
    let links = Links::start(None).await.expect("embedded proxy");
    links
        .add(LINK, "127.0.0.1:0", "127.0.0.1:9")
        .await
        .expect("the link's proxy");
    assert_eq!(links.cut_node(links.client(), NODE).await.unwrap(), 1);
    let held = links
        .client()
        .held_until(Instant::now() + Duration::from_millis(400), None, None);
    let down = FaultKind::Down {
        link: LINK.to_string(),
    };
    let (opened, ()) = tokio::join!(links.restore_node(&held, NODE), async {
        tokio::time::sleep(Duration::from_millis(150)).await;
        chaos_harness::faults::link::inject(&links, links.client(), LINK, &down, &scenario())
            .await
            .unwrap();
    });
    assert_eq!(opened.unwrap(), 0, "nothing opened: the link is down");
    let info = links.client().get(&proxy_name(LINK)).await.unwrap();
    assert!(!info.enabled, "the down holds after the restart: {info:?}");
    links.shutdown().await;
}

/// What a trigger on `grant` or `renew` hears from the lock service: a grant and a renewal
/// name their holder; a release keeps holder and token in the row but nobody holds the claim
/// (April once counted box 2's release, after the night's work was done, as "box 2's renewal"
/// and ran the whole night's faults then).
#[tokio::test(flavor = "multi_thread")]
async fn a_release_is_heard_as_no_holder_not_a_renewal() {
    let db = Db::start("claim-changes").await;
    let url = db.admin_url();
    chaos_harness::setup::routing(&url, "move", 7, &[])
        .await
        .expect("the lock service installs");
    let mut heard = chaos_harness::triggers::listen(&url)
        .await
        .expect("LISTEN on the claim changes");
    let c = connect(&url).await;
    let token: i64 = c
        .query_one("select claim_acquire('move', 'box-2', 60000)", &[])
        .await
        .unwrap()
        .get(0);
    for sql in [
        "select claim_renew('move', 'box-2', $1, 60000)",
        "select claim_release('move', 'box-2', $1)",
    ] {
        c.query_one(sql, &[&token]).await.unwrap();
    }
    let mut changes = Vec::new();
    for _ in 0..3 {
        let next = tokio::time::timeout(Duration::from_secs(10), heard.next_change())
            .await
            .expect("a notification within 10 s");
        changes.push(next.expect("the LISTEN connection stays up"));
    }
    let box2 = Some("box-2".to_string());
    assert_eq!(
        changes,
        vec![(box2.clone(), token), (box2, token), (None, token)],
        "grant, renewal, release"
    );
    drop(heard);
    db.stop().await;
}

// ---------------------------------------------------------------------------------------------
// 3. latency: 200 ms on every round trip; heal brings it back near baseline.
// ---------------------------------------------------------------------------------------------

async fn latency_adds_200ms_and_heal_restores(driver: Driver, test: &str) {
    let db = Db::start(test).await;
    let via = url_via(&driver.add(&db.upstream()).await);
    let c = connect(&via).await;
    round_trips(&c, 5).await; // warm up
    let base = round_trips(&c, 20).await;

    driver.latency(200).await;
    let slow = round_trips(&c, 3).await;
    for d in &slow {
        assert!(
            *d >= Duration::from_millis(200),
            "{}: a round trip under a 200 ms toxic took {d:?}",
            driver.label()
        );
        // Loose: one delay, not a stall (a loaded 2-CPU machine adds some hundreds of ms).
        assert!(
            *d < Duration::from_millis(2000),
            "{}: one toxic, one delay: {d:?}",
            driver.label()
        );
    }

    driver.heal().await;
    let healed = round_trips(&c, 20).await;
    // Near baseline: a toxic still in place would put the median at 200 ms or more.
    assert!(
        median(&healed) < median(&base) + Duration::from_millis(50),
        "{}: healed median {:?} vs baseline {:?}: {healed:?}",
        driver.label(),
        median(&healed),
        median(&base)
    );
    println!(
        "latency via {}: select 1 median {:.2} ms baseline; {:.1}/{:.1}/{:.1} ms with a 200 ms toxic; {:.2} ms median after heal",
        driver.label(),
        ms(median(&base)),
        ms(slow[0]),
        ms(slow[1]),
        ms(slow[2]),
        ms(median(&healed))
    );
    drop(c);
    driver.shutdown().await;
    db.stop().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn latency_200ms_via_links() {
    latency_adds_200ms_and_heal_restores(Driver::links().await, "latency-links").await;
}

#[tokio::test(flavor = "multi_thread")]
async fn latency_200ms_via_toxiproxy_client() {
    latency_adds_200ms_and_heal_restores(Driver::standalone().await, "latency-client").await;
}

// ---------------------------------------------------------------------------------------------
// 4. down: open connections cut, new ones refused; up: new connections work.
// ---------------------------------------------------------------------------------------------

async fn down_cuts_open_and_refuses_new(driver: Driver, test: &str) {
    let db = Db::start(test).await;
    let via = url_via(&driver.add(&db.upstream()).await);
    let c = connect(&via).await;
    round_trip(&c).await;

    // A query in flight when the link goes down: far longer than the cut may take.
    let inflight = tokio::spawn(async move {
        let r = c.simple_query("select pg_sleep(10)").await;
        (r.map(|_| ()), Instant::now(), c)
    });
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert!(!inflight.is_finished(), "the query is in flight");
    let t0 = Instant::now();
    driver.down().await;
    let down_call = t0.elapsed();
    let (r, ended, c) = tokio::time::timeout(Duration::from_secs(5), inflight)
        .await
        .expect("the in-flight query ends within 5 s of the down")
        .unwrap();
    let cut = ended.saturating_duration_since(t0);
    let err = r.expect_err("the open connection must get an error");
    assert!(
        cut < Duration::from_secs(2),
        "{}: cut {cut:?} after the down",
        driver.label()
    );
    assert!(
        c.is_closed(),
        "{}: the client knows it is closed",
        driver.label()
    );
    assert!(c.simple_query("select 1").await.is_err());

    // New connections are refused, at once.
    let t = Instant::now();
    let refused = chaos_harness::db::connect(&via, "faults-test", Duration::from_secs(3)).await;
    let refused_in = t.elapsed();
    let refused_err = refused
        .err()
        .unwrap_or_else(|| panic!("{}: a new connection while down must fail", driver.label()));
    assert!(
        refused_in < Duration::from_secs(2),
        "{}: refused at once, took {refused_in:?}: {refused_err}",
        driver.label()
    );

    driver.up().await;
    let c2 = connect(&via).await;
    let one: i32 = c2.query_one("select 1", &[]).await.unwrap().get(0);
    assert_eq!(one, 1);
    println!(
        "down via {}: down call {:.1} ms; open connection cut {:.1} ms after the down began ({err}); new connection refused in {:.2} ms ({refused_err}); up: new connection works",
        driver.label(),
        ms(down_call),
        ms(cut),
        ms(refused_in)
    );
    drop(c2);
    driver.shutdown().await;
    db.stop().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn down_and_up_via_links() {
    down_cuts_open_and_refuses_new(Driver::links().await, "down-links").await;
}

#[tokio::test(flavor = "multi_thread")]
async fn down_and_up_via_toxiproxy_client() {
    down_cuts_open_and_refuses_new(Driver::standalone().await, "down-client").await;
}

// ---------------------------------------------------------------------------------------------
// timeout and reset_peer on an open connection.
// ---------------------------------------------------------------------------------------------

async fn timeout_and_reset_peer_end_an_open_connection(driver: Driver, test: &str) {
    let db = Db::start(test).await;
    let via = url_via(&driver.add(&db.upstream()).await);

    // timeout 300 ms: the answer is swallowed, then the connection is closed.
    let c = connect(&via).await;
    round_trip(&c).await;
    driver.timeout(300).await;
    let t = Instant::now();
    let r = tokio::time::timeout(Duration::from_secs(5), c.simple_query("select 1"))
        .await
        .expect("the timeout toxic closes the connection within 5 s");
    let held = t.elapsed();
    let timeout_err = r.expect_err("no answer gets through a timeout toxic");
    assert!(
        held >= Duration::from_millis(250) && held < Duration::from_secs(2),
        "{}: held about 300 ms, then closed: {held:?} ({timeout_err})",
        driver.label()
    );
    driver.heal().await;
    round_trip(&connect(&via).await).await;

    // reset_peer 0: the next data brings a TCP RST. The client only says "closed"; the
    // connection task's own error tells a reset from an orderly close.
    let (c, conn) = connect_watched(&via).await;
    round_trip(&c).await;
    driver.reset_peer(0).await;
    let t = Instant::now();
    let r = tokio::time::timeout(Duration::from_secs(5), c.simple_query("select 1"))
        .await
        .expect("reset_peer ends the query within 5 s");
    let reset_in = t.elapsed();
    let reset_err = r.expect_err("no answer gets through reset_peer");
    assert!(reset_in < Duration::from_secs(1), "{reset_in:?}");
    let conn_end = tokio::time::timeout(Duration::from_secs(5), conn)
        .await
        .expect("the connection task ends")
        .unwrap();
    let conn_err = conn_end.expect_err("a reset connection ends in an error");
    assert_eq!(
        io_kind(&conn_err),
        Some(std::io::ErrorKind::ConnectionReset),
        "{}: the connection sees a TCP reset, not a close: {conn_err:?}",
        driver.label()
    );
    driver.heal().await;
    round_trip(&connect(&via).await).await;
    println!(
        "timeout via {}: select 1 held {:.0} ms then failed ({timeout_err}); reset_peer: failed in {:.1} ms ({reset_err}; connection: {conn_err})",
        driver.label(),
        ms(held),
        ms(reset_in)
    );
    driver.shutdown().await;
    db.stop().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn timeout_and_reset_peer_via_links() {
    timeout_and_reset_peer_end_an_open_connection(Driver::links().await, "timeout-links").await;
}

#[tokio::test(flavor = "multi_thread")]
async fn timeout_and_reset_peer_via_toxiproxy_client() {
    timeout_and_reset_peer_end_an_open_connection(Driver::standalone().await, "timeout-client")
        .await;
}
