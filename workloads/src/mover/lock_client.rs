//! The mover's end of the lock service `CHAOS_LOCK` names: the claim row (through the routing connection), an advisory lock's own session, an etcd client, a Redis connection or a ZooKeeper session. The calls the state machine makes on it are in `run/lock.rs`.

use crate::lock::{advisory_options, LockKind};
use crate::mover::config::{parse_pg_url, Settings};
use crate::mover::db::Db;
use crate::mover::env;
use crate::mover::etcd::EtcdLock;
use crate::mover::redis::RedisLock;
use crate::mover::zookeeper::ZkLock;

/// The mover's end of the lock service.
pub(crate) enum LockClient {
    /// The claim row, through the mover's routing connection.
    Claims,
    /// An advisory lock: the session that holds it is the lease.
    Advisory {
        session: Db,
        key: i64,
    },
    Etcd(EtcdLock),
    Redis(Box<RedisLock>),
    Zookeeper(ZkLock),
}

impl LockClient {
    /// The client the environment asks for (`Env::from_vars` checked its URLs and key).
    pub(crate) fn new(s: &Settings) -> LockClient {
        let env = &s.env;
        match env.lock {
            LockKind::Claims => LockClient::Claims,
            LockKind::Advisory => {
                let (mut config, display) = match env.lock_urls.first() {
                    Some(url) => parse_pg_url(env::LOCK_URLS, url)
                        .unwrap_or_else(|_| (env.routing.clone(), env.routing_display.clone())),
                    None => (env.routing.clone(), env.routing_display.clone()),
                };
                // Without the harness's URL (which carries them), the lease is the lease.
                if config.get_options().is_none() {
                    config.options(advisory_options(env.lease_ms));
                }
                LockClient::Advisory {
                    session: Db::new("lock", &display, config, &env.box_name, s.routing_timeout),
                    key: env.lock_key.parse().unwrap_or(crate::lock::ADVISORY_KEY),
                }
            }
            LockKind::Etcd => LockClient::Etcd(EtcdLock::new(
                env.lock_urls.clone(),
                env.lock_key.clone(),
                s.routing_timeout,
            )),
            LockKind::Redis => LockClient::Redis(Box::new(RedisLock::new(
                env.lock_urls.first().cloned().unwrap_or_default(),
                env.lock_key.clone(),
                s.routing_timeout,
            ))),
            LockKind::Zookeeper => LockClient::Zookeeper(ZkLock::new(
                env.lock_urls.clone(),
                env.lock_key.clone(),
                s.routing_timeout,
            )),
        }
    }
}
