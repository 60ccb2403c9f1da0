//! The mover's lease in Redis, in redis-py's idiom: `SET key box NX PX lease` to take it (with the grant's token drawn by `INCR` in the same script, as Redisson's fenced lock does), a compare-and-extend script to renew it and a compare-and-delete script to give it back.

use super::db::{timed, DbError};
use crate::lock::{redis_token_key, REDIS_ACQUIRE, REDIS_RELEASE, REDIS_RENEW};
use redis::aio::MultiplexedConnection;
use redis::{AsyncConnectionConfig, Script};
use std::time::Duration;

/// The lock as one box holds it in Redis.
pub struct RedisLock {
    url: String,
    key: String,
    pub timeout: Duration,
    conn: Option<MultiplexedConnection>,
    acquire: Script,
    renew: Script,
    release: Script,
}

/// A Redis error in the routing db's terms: an error reply means the call did not happen; an
/// I/O error or a dropped connection may have reached the server.
fn sort(e: redis::RedisError) -> DbError {
    if e.is_connection_refusal() {
        DbError::Connect(e.to_string())
    } else if e.is_io_error() || e.is_connection_dropped() || e.is_timeout() {
        DbError::Closed(e.to_string())
    } else {
        DbError::Sql(e.to_string())
    }
}

impl RedisLock {
    pub fn new(url: String, key: String, timeout: Duration) -> RedisLock {
        RedisLock {
            url,
            key,
            timeout,
            conn: None,
            acquire: Script::new(REDIS_ACQUIRE),
            renew: Script::new(REDIS_RENEW),
            release: Script::new(REDIS_RELEASE),
        }
    }

    pub fn display(&self) -> String {
        format!("redis {} key {}", self.url, self.key)
    }

    /// A connection, made on demand; dropped on any doubt.
    async fn conn(&mut self) -> Result<MultiplexedConnection, DbError> {
        if let Some(c) = &self.conn {
            return Ok(c.clone());
        }
        let client = redis::Client::open(self.url.as_str())
            .map_err(|e| DbError::Connect(format!("{}: {e}", self.url)))?;
        let config = AsyncConnectionConfig::new()
            .set_connection_timeout(Some(self.timeout))
            .set_response_timeout(None);
        let connecting = client.get_multiplexed_async_connection_with_config(&config);
        match timed(self.timeout, connecting).await {
            None => Err(DbError::Connect(format!(
                "no answer within {} ms",
                self.timeout.as_millis()
            ))),
            Some(Err(e)) => Err(DbError::Connect(e.to_string())),
            Some(Ok(c)) => {
                self.conn = Some(c.clone());
                Ok(c)
            }
        }
    }

    /// Run one command (or script) under the timeout; a timeout or a lost connection forgets
    /// the connection.
    async fn call<T: redis::FromRedisValue>(
        &mut self,
        cmd: impl FnOnce(MultiplexedConnection) -> CallFuture<T>,
    ) -> Result<T, DbError> {
        let conn = self.conn().await?;
        match timed(self.timeout, cmd(conn)).await {
            None => {
                self.conn = None;
                Err(DbError::Timeout(self.timeout.as_millis()))
            }
            Some(Err(e)) => {
                let e = sort(e);
                if e.unreachable() {
                    self.conn = None;
                }
                Err(e)
            }
            Some(Ok(v)) => Ok(v),
        }
    }

    /// Connect (the start gate waits for it).
    pub async fn connect(&mut self) -> Result<(), DbError> {
        self.call::<String>(|mut c| {
            Box::pin(async move { redis::cmd("PING").query_async(&mut c).await })
        })
        .await?;
        Ok(())
    }

    /// `SET NX PX` and the token in one script: the token, or None when somebody holds it.
    pub async fn acquire(&mut self, holder: &str, lease_ms: u64) -> Result<Option<i64>, DbError> {
        let (script, key, holder) = (self.acquire.clone(), self.key.clone(), holder.to_string());
        self.call::<Option<i64>>(move |mut c| {
            Box::pin(async move {
                let token = redis_token_key(&key);
                let mut inv = script.key(&key);
                inv.key(token).arg(holder).arg(lease_ms.max(1));
                inv.invoke_async(&mut c).await
            })
        })
        .await
    }

    /// Extend the key's expiry to a whole lease while it is still this holder's: true while held.
    pub async fn renew(&mut self, holder: &str, lease_ms: u64) -> Result<bool, DbError> {
        let (script, key, holder) = (self.renew.clone(), self.key.clone(), holder.to_string());
        let n = self
            .call::<i64>(move |mut c| {
                Box::pin(async move {
                    let mut inv = script.key(key);
                    inv.arg(holder).arg(lease_ms.max(1));
                    inv.invoke_async(&mut c).await
                })
            })
            .await?;
        Ok(n == 1)
    }

    /// Who holds the key (its value) and the counter's last token.
    pub async fn who(&mut self) -> Result<(Option<String>, Option<i64>), DbError> {
        let (key, token) = (self.key.clone(), redis_token_key(&self.key));
        let (holder, t): (Option<String>, Option<i64>) = self
            .call(move |mut c| {
                Box::pin(async move { redis::pipe().get(key).get(token).query_async(&mut c).await })
            })
            .await?;
        Ok((holder.clone(), holder.and(t)))
    }

    /// Delete the key if it is still this holder's: true when deleted.
    pub async fn release(&mut self, holder: &str) -> Result<bool, DbError> {
        let (script, key, holder) = (self.release.clone(), self.key.clone(), holder.to_string());
        let n = self
            .call::<i64>(move |mut c| {
                Box::pin(async move { script.key(key).arg(holder).invoke_async(&mut c).await })
            })
            .await?;
        Ok(n == 1)
    }
}

/// One call's future on its own connection.
type CallFuture<T> =
    std::pin::Pin<Box<dyn std::future::Future<Output = redis::RedisResult<T>> + Send>>;
