//! The mover's input: its switches (clap) and the protocol's environment variables, checked up front so a bad input is one clear line.

use crate::lock::{LockKind, LOCK_KEY_VAR, LOCK_URLS_VAR, LOCK_VAR};
use crate::mover::env;
use chaos_history::RealMs;
use clap::{Parser, ValueEnum};
use std::collections::BTreeMap;
use std::time::Duration;
use tokio_postgres::config::Host;

/// `--fencing`: whether shards check the grant's token.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Fencing {
    Off,
    On,
}

/// `--on-renew-failure`: what a holder does when a renewal cannot reach the routing db.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum OnRenewFailure {
    /// April's author: retry for `--renew-retry-ms`, then go on as if renewed.
    CarryOn,
    /// Give the role up and go back to polling.
    Stop,
}

/// `--on-lost`: what a holder does when a renewal reaches the db and says somebody else holds the claim.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum OnLost {
    /// April: delete the half-finished turbine from the destination, then stop holding.
    TidyUp,
    /// Just stop holding.
    Stop,
}

/// `--election`: how a box comes to own the job.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Election {
    /// A claim row with an expiry, renewed between turbines (section 4).
    Lease,
    /// Lesson 007: one insert into `job_runs` keyed on job and date; no expiry, no renewal, token 0.
    Unique,
}

/// A switch's name as it is written on the command line and in a scenario (`carry-on`).
pub fn switch_name<T: ValueEnum>(v: T) -> String {
    v.to_possible_value()
        .map(|p| p.get_name().to_string())
        .unwrap_or_default()
}

/// The reference mover: moves turbines between shards under a lease, with the switches that reproduce each design in the seeds.
///
/// Everything about the run (who it is, where the databases are, the lease,
/// poll and copy times) comes from the CHAOS_* environment variables of the
/// mover protocol; the flags only choose the design.
#[derive(Debug, Clone, Parser)]
#[command(name = "mover", version)]
pub struct Args {
    /// Check the grant's token on every shard write (and fence every shard of the plan at grant time).
    #[arg(long, value_enum, default_value = "off")]
    pub fencing: Fencing,
    /// What to do when a renewal cannot reach the routing db.
    #[arg(long, value_enum, default_value = "stop")]
    pub on_renew_failure: OnRenewFailure,
    /// What to do when a renewal answers that the claim is somebody else's.
    #[arg(long, value_enum, default_value = "stop")]
    pub on_lost: OnLost,
    /// Before each write, check the local lease belief and stop if it has expired.
    #[arg(long)]
    pub check_expiry_before_write: bool,
    /// How the job's owner is chosen.
    #[arg(long, value_enum, default_value = "lease")]
    pub election: Election,
    /// Renew the claim from a task of its own, every third of a lease, whatever the work is
    /// doing (the seed's short-lease design); the work reads what it found at each turbine.
    #[arg(long)]
    pub renew_on_thread: bool,
    /// carry-on: how long to retry an unreachable renewal before going on [default: CHAOS_LEASE_MS].
    #[arg(long)]
    pub renew_retry_ms: Option<RealMs>,
    /// Timeout of every routing db call [default: CHAOS_LEASE_MS].
    #[arg(long)]
    pub routing_timeout_ms: Option<RealMs>,
    /// Timeout of every shard call [default: max(4 x CHAOS_COPY_MS, 1000)].
    #[arg(long)]
    pub shard_timeout_ms: Option<RealMs>,
    /// How long a shard write may keep failing (reconnect and retry) before the holder gives the role up [default: CHAOS_LEASE_MS].
    #[arg(long)]
    pub shard_retry_ms: Option<RealMs>,
    /// How long every database may stay unreachable at start before the mover exits 2.
    #[arg(long, default_value_t = 5000)]
    pub start_timeout_ms: RealMs,
    /// The clock the copy's pace is kept by, and so when each renewal after a copy comes.
    #[arg(long, value_enum, default_value = "monotonic")]
    pub timer: Timer,
}

/// `--timer`: which clock paces the copies.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Timer {
    /// The monotonic clock: a box's wall clock moving or running fast or slow changes nothing.
    Monotonic,
    /// The wall clock, as a mover that reads `time.time()` or `System.currentTimeMillis()`:
    /// a box's clock running slow stretches every copy, and its renewal comes late.
    Wall,
}

/// One shard as `CHAOS_SHARD_URLS` names it.
#[derive(Debug, Clone)]
pub struct ShardUrl {
    pub name: String,
    pub config: tokio_postgres::Config,
    /// `host:port/db`, for messages (never the password).
    pub display: String,
}

/// The mover protocol's environment (DESIGN section 5), parsed.
#[derive(Debug, Clone)]
pub struct Env {
    pub box_name: String,
    pub job: String,
    pub routing: tokio_postgres::Config,
    pub routing_display: String,
    pub shards: Vec<ShardUrl>,
    /// The protocol's `CHAOS_LEASE_MS`, `CHAOS_POLL_MS`, `CHAOS_COPY_MS`: real ms, scaled.
    pub lease_ms: RealMs,
    pub poll_ms: RealMs,
    pub copy_ms: RealMs,
    pub batches: u32,
    /// `CHAOS_GATE` (optional): a fifo to read one line from once connected, before the
    /// first claim attempt, so every box starts with the harness's scenario clock.
    pub gate: Option<std::path::PathBuf>,
    /// `CHAOS_LOCK` (optional, `claims`): the lock service that holds the lease.
    pub lock: LockKind,
    /// `CHAOS_LOCK_URLS`: the service's endpoints (the routing db's URL when it is the lock).
    pub lock_urls: Vec<String>,
    /// `CHAOS_LOCK_KEY`: the key (etcd, Redis) or the advisory lock's number.
    pub lock_key: String,
}

/// Everything the mover runs on: env plus flags, with every default resolved.
#[derive(Debug, Clone)]
pub struct Settings {
    pub env: Env,
    pub fencing: Fencing,
    pub on_renew_failure: OnRenewFailure,
    pub on_lost: OnLost,
    pub check_expiry_before_write: bool,
    pub election: Election,
    pub renew_on_thread: bool,
    pub renew_retry: Duration,
    pub routing_timeout: Duration,
    pub shard_timeout: Duration,
    pub shard_retry: Duration,
    pub start_timeout: Duration,
    pub timer: Timer,
}

/// A bad input, as the one line printed on stderr before exiting 2.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct BadInput(pub String);

/// Largest batch count accepted: a batch is at least one round trip, and a copy slot split finer than that is noise.
pub const MAX_BATCHES: u32 = 100_000;

impl Env {
    /// Read the protocol's variables through `get` (the process env in the binary, a map in tests).
    pub fn from_vars(get: impl Fn(&str) -> Option<String>) -> Result<Env, BadInput> {
        let required = |name: &str, what: &str| -> Result<String, BadInput> {
            match get(name) {
                Some(v) if !v.trim().is_empty() => Ok(v.trim().to_string()),
                Some(_) => Err(BadInput(format!("{name} is empty: set it to {what}"))),
                None => Err(BadInput(format!("{name} is not set: set it to {what}"))),
            }
        };
        let box_name = required(env::BOX, "this mover's name, e.g. box-2")?;
        let job = required(
            env::JOB,
            "the job's name (the key of its claim row), e.g. rebalance",
        )?;
        let routing_text = required(
            env::ROUTING_URL,
            "the routing db's URL, e.g. postgres://postgres@127.0.0.1:5432/routing",
        )?;
        let (routing, routing_display) = parse_pg_url(env::ROUTING_URL, &routing_text)?;
        let shards_text = required(
            env::SHARD_URLS,
            "name=URL pairs, e.g. shard1=postgres://postgres@127.0.0.1:5433/shard1,shard2=...",
        )?;
        let shards = parse_shard_urls(&shards_text)?;
        let lease_ms = parse_ms(&get, env::LEASE_MS, None)?;
        let poll_ms = parse_ms(&get, env::POLL_MS, None)?;
        let copy_ms = parse_ms(&get, env::COPY_MS, None)?;
        let batches = parse_ms(&get, env::BATCHES, Some(10))?;
        if batches > MAX_BATCHES as u64 {
            return Err(BadInput(format!(
                "{} is {batches}: use 1..={MAX_BATCHES} (batches per turbine copy)",
                env::BATCHES
            )));
        }
        let lock = LockKind::from_var(get(LOCK_VAR).as_deref()).map_err(BadInput)?;
        let lock_urls: Vec<String> = get(LOCK_URLS_VAR)
            .unwrap_or_default()
            .split(',')
            .map(|u| u.trim().to_string())
            .filter(|u| !u.is_empty())
            .collect();
        if lock == LockKind::Etcd && lock_urls.is_empty() {
            return Err(BadInput(format!(
                "{LOCK_URLS_VAR} is not set: with {LOCK_VAR}=etcd set it to the members' endpoints, e.g. http://127.0.0.1:2379"
            )));
        }
        if lock == LockKind::Redis {
            match lock_urls.first() {
                None => {
                    return Err(BadInput(format!(
                        "{LOCK_URLS_VAR} is not set: with {LOCK_VAR}=redis set it to the server, e.g. redis://127.0.0.1:6379"
                    )))
                }
                Some(u) if !u.starts_with("redis://") => {
                    return Err(BadInput(format!(
                        "{LOCK_URLS_VAR} is {u:?}: a Redis endpoint is redis://host:port"
                    )))
                }
                Some(_) => {}
            }
        }
        if lock == LockKind::Zookeeper {
            if lock_urls.is_empty() {
                return Err(BadInput(format!(
                    "{LOCK_URLS_VAR} is not set: with {LOCK_VAR}=zookeeper set it to the members' host:port, e.g. 127.0.0.1:2181,127.0.0.1:2182"
                )));
            }
            if let Some(bad) = lock_urls.iter().find(|u| {
                u.contains("://")
                    || u.rsplit_once(':')
                        .is_none_or(|(_, p)| p.parse::<u16>().is_err())
            }) {
                return Err(BadInput(format!(
                    "{LOCK_URLS_VAR} has {bad:?}: ZooKeeper's members are host:port, comma-separated, no scheme (e.g. 127.0.0.1:2181)"
                )));
            }
        }
        let lock_key = get(LOCK_KEY_VAR)
            .map(|k| k.trim().to_string())
            .filter(|k| !k.is_empty())
            .unwrap_or_else(|| lock.key(&job));
        if lock == LockKind::Advisory {
            if let Some(url) = lock_urls.first() {
                parse_pg_url(LOCK_URLS_VAR, url)?;
            }
        }
        if lock == LockKind::Zookeeper
            && (!lock_key.starts_with('/') || lock_key.ends_with('/') || lock_key.contains("//"))
        {
            return Err(BadInput(format!(
                "{LOCK_KEY_VAR} is {lock_key:?}: a ZooKeeper lock path is absolute with no trailing slash, e.g. /locks/job"
            )));
        }
        if lock == LockKind::Advisory && lock_key.parse::<i64>().is_err() {
            return Err(BadInput(format!(
                "{LOCK_KEY_VAR} is {lock_key:?}: an advisory lock's key is a whole number, e.g. {}",
                crate::lock::ADVISORY_KEY
            )));
        }
        Ok(Env {
            lock,
            lock_urls,
            lock_key,
            box_name,
            job,
            routing,
            routing_display,
            shards,
            lease_ms,
            poll_ms,
            copy_ms,
            batches: batches as u32,
            gate: get(env::GATE)
                .filter(|v| !v.trim().is_empty())
                .map(std::path::PathBuf::from),
        })
    }

    /// The shard called `name`, if `CHAOS_SHARD_URLS` has it.
    pub fn shard(&self, name: &str) -> Option<&ShardUrl> {
        self.shards.iter().find(|s| s.name == name)
    }
}

/// A positive integer variable; `default` when it may be absent.
fn parse_ms(
    get: &impl Fn(&str) -> Option<String>,
    name: &str,
    default: Option<u64>,
) -> Result<u64, BadInput> {
    let text = match (get(name), default) {
        (Some(v), _) if !v.trim().is_empty() => v.trim().to_string(),
        (_, Some(d)) => return Ok(d),
        (_, None) => {
            return Err(BadInput(format!(
                "{name} is not set: set it to a whole number of real milliseconds, e.g. 600"
            )))
        }
    };
    match text.parse::<u64>() {
        Ok(0) => Err(BadInput(format!(
            "{name} is 0: it must be a positive whole number"
        ))),
        // A day of real time is far past any run the harness bounds; larger is a unit mistake.
        Ok(v) if v > 86_400_000 => Err(BadInput(format!(
            "{name} is {v}: more than a day; give real milliseconds, already scaled"
        ))),
        Ok(v) => Ok(v),
        Err(_) => Err(BadInput(format!(
            "{name} is {text:?}: expected a positive whole number"
        ))),
    }
}

/// Parse one postgres URL; the error names the variable.
pub fn parse_pg_url(var: &str, text: &str) -> Result<(tokio_postgres::Config, String), BadInput> {
    if !(text.starts_with("postgres://") || text.starts_with("postgresql://")) {
        return Err(BadInput(format!(
            "{var}: {:?} is not a postgres URL: expected postgres://user@host:port/db",
            redact(text)
        )));
    }
    let config: tokio_postgres::Config = text.parse().map_err(|e| {
        BadInput(format!(
            "{var}: cannot parse {:?}: {e}; expected postgres://user@host:port/db",
            redact(text)
        ))
    })?;
    if config.get_hosts().is_empty() {
        return Err(BadInput(format!(
            "{var}: {:?} names no host: expected postgres://user@host:port/db",
            redact(text)
        )));
    }
    let display = describe(&config);
    Ok((config, display))
}

/// `CHAOS_SHARD_URLS`: `name=URL` pairs separated by commas. A comma only
/// starts a new pair when `name=` follows it, so a multi-host URL survives.
pub fn parse_shard_urls(text: &str) -> Result<Vec<ShardUrl>, BadInput> {
    const VAR: &str = env::SHARD_URLS;
    let mut pieces: Vec<String> = Vec::new();
    for piece in text.split(',') {
        if pieces.is_empty() || starts_with_name(piece) {
            pieces.push(piece.to_string());
        } else {
            let last = pieces.last_mut().expect("not empty");
            last.push(',');
            last.push_str(piece);
        }
    }
    let mut shards: Vec<ShardUrl> = Vec::new();
    for (i, piece) in pieces.iter().enumerate() {
        let piece = piece.trim();
        let Some((name, url)) = piece.split_once('=') else {
            return Err(BadInput(format!(
                "{VAR}: entry {} ({:?}) has no '=': expected name=postgres://user@host:port/db, comma-separated",
                i + 1,
                redact(piece)
            )));
        };
        let name = name.trim();
        if name.is_empty()
            || !name
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || "_.-".contains(c))
        {
            return Err(BadInput(format!(
                "{VAR}: entry {} has a bad shard name {name:?}: use letters, digits, '_', '.', '-'",
                i + 1
            )));
        }
        if shards.iter().any(|s| s.name == name) {
            return Err(BadInput(format!(
                "{VAR}: shard {name} is named twice: give each shard once"
            )));
        }
        let (config, display) = parse_pg_url(&format!("{VAR} ({name})"), url.trim())?;
        shards.push(ShardUrl {
            name: name.to_string(),
            config,
            display,
        });
    }
    if shards.is_empty() {
        return Err(BadInput(format!(
            "{VAR} names no shard: expected name=postgres://..."
        )));
    }
    Ok(shards)
}

fn starts_with_name(piece: &str) -> bool {
    match piece.trim_start().split_once('=') {
        Some((name, rest)) => {
            !name.is_empty()
                && name
                    .chars()
                    .all(|c| c.is_ascii_alphanumeric() || "_.-".contains(c))
                && (rest.starts_with("postgres://") || rest.starts_with("postgresql://"))
        }
        None => false,
    }
}

/// Hide a password in a URL echoed back in an error.
fn redact(text: &str) -> String {
    let Some(scheme_end) = text.find("://") else {
        return text.to_string();
    };
    let rest = &text[scheme_end + 3..];
    let auth_end = rest.find('/').unwrap_or(rest.len());
    match rest[..auth_end].rfind('@') {
        Some(at) => match rest[..at].find(':') {
            Some(colon) => format!(
                "{}://{}:***{}",
                &text[..scheme_end],
                &rest[..colon],
                &rest[at..]
            ),
            None => text.to_string(),
        },
        None => text.to_string(),
    }
}

/// `host:port/db` of a config, for messages.
pub fn describe(config: &tokio_postgres::Config) -> String {
    let host = match config.get_hosts().first() {
        Some(Host::Tcp(h)) => h.clone(),
        Some(Host::Unix(p)) => p.display().to_string(),
        None => "?".into(),
    };
    let port = config.get_ports().first().copied().unwrap_or(5432);
    format!("{host}:{port}/{}", config.get_dbname().unwrap_or("?"))
}

impl Settings {
    /// Resolve the flags' defaults against the environment.
    pub fn new(args: &Args, env: Env) -> Settings {
        let lease = env.lease_ms;
        Settings {
            fencing: args.fencing,
            on_renew_failure: args.on_renew_failure,
            on_lost: args.on_lost,
            check_expiry_before_write: args.check_expiry_before_write,
            election: args.election,
            renew_on_thread: args.renew_on_thread,
            renew_retry: Duration::from_millis(args.renew_retry_ms.unwrap_or(lease)),
            routing_timeout: Duration::from_millis(args.routing_timeout_ms.unwrap_or(lease).max(1)),
            shard_timeout: Duration::from_millis(
                args.shard_timeout_ms
                    .unwrap_or((4 * env.copy_ms).max(1000))
                    .max(1),
            ),
            shard_retry: Duration::from_millis(args.shard_retry_ms.unwrap_or(lease)),
            start_timeout: Duration::from_millis(args.start_timeout_ms),
            timer: args.timer,
            env,
        }
    }

    /// The flags as `name=value`, for the first stderr line.
    pub fn describe_switches(&self) -> BTreeMap<&'static str, String> {
        let name = |v: &dyn ValueEnumName| v.name();
        BTreeMap::from([
            ("fencing", name(&self.fencing)),
            ("on-renew-failure", name(&self.on_renew_failure)),
            ("on-lost", name(&self.on_lost)),
            (
                "check-expiry-before-write",
                self.check_expiry_before_write.to_string(),
            ),
            ("election", name(&self.election)),
            ("renew-on-thread", self.renew_on_thread.to_string()),
            ("timer", name(&self.timer)),
        ])
    }
}

/// The name a value has on the command line.
trait ValueEnumName {
    fn name(&self) -> String;
}

impl<T: ValueEnum> ValueEnumName for T {
    fn name(&self) -> String {
        self.to_possible_value()
            .map(|p| p.get_name().to_string())
            .unwrap_or_default()
    }
}
