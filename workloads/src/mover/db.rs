//! One database as the mover sees it: a connection made on demand (with `application_name` = the box), every call under a timeout, and errors sorted by what they mean for the history.

use std::collections::HashMap;
use std::future::Future;
use std::time::Duration;
use tokio_postgres::{Client, NoTls, Statement};

/// Extra time given to a call after its timeout fires: after a SIGSTOP the
/// timer and the socket wake together, and the answer sitting in the socket
/// should win over a timeout that only the pause caused.
const PAUSE_GRACE: Duration = Duration::from_millis(20);

/// Why a call failed, in the terms a history needs.
#[derive(Debug, Clone, thiserror::Error)]
pub enum DbError {
    /// No connection could be made: the call certainly did not happen.
    #[error("cannot connect: {0}")]
    Connect(String),
    /// The call was sent and no answer came in time: it may or may not have happened.
    #[error("timed out after {0} ms")]
    Timeout(u128),
    /// The connection dropped mid-call: it may or may not have happened.
    #[error("connection lost: {0}")]
    Closed(String),
    /// The database answered with an error: the statement did not happen.
    #[error("{0}")]
    Sql(String),
}

impl DbError {
    /// True when the call may have taken effect although it did not answer.
    pub fn maybe_applied(&self) -> bool {
        matches!(self, DbError::Timeout(_) | DbError::Closed(_))
    }

    /// True when the database could not be reached or did not answer (as opposed to answering no).
    pub fn unreachable(&self) -> bool {
        !matches!(self, DbError::Sql(_))
    }

    /// True when the schema is missing or wrong (SQLSTATE class 42: undefined table, function, column):
    /// retrying cannot help, the SQL files were not loaded.
    pub fn schema(&self) -> bool {
        matches!(self, DbError::Sql(text) if text.starts_with("42"))
    }
}

/// Run `fut` under `limit` (plus a short grace for a resumed process).
pub async fn timed<T>(limit: Duration, fut: impl Future<Output = T>) -> Option<T> {
    let mut fut = std::pin::pin!(fut);
    match tokio::time::timeout(limit, &mut fut).await {
        Ok(v) => Some(v),
        Err(_) => tokio::time::timeout(PAUSE_GRACE, &mut fut).await.ok(),
    }
}

/// A database connection made on demand and dropped on any doubt.
pub struct Db {
    pub name: String,
    pub display: String,
    config: tokio_postgres::Config,
    pub timeout: Duration,
    client: Option<Client>,
    statements: HashMap<&'static str, Statement>,
}

impl Db {
    pub fn new(
        name: &str,
        display: &str,
        mut config: tokio_postgres::Config,
        app: &str,
        timeout: Duration,
    ) -> Db {
        config.application_name(app);
        config.connect_timeout(timeout);
        // The server gives up on a statement the client has stopped waiting
        // for, so a timed-out call does not keep a lock on the server.
        // Settings the URL brings (an advisory lock's session timeouts) are kept.
        let prior = config
            .get_options()
            .map(|o| format!("{o} "))
            .unwrap_or_default();
        config.options(format!(
            "{prior}-c statement_timeout={}",
            timeout.as_millis().max(1)
        ));
        Db {
            name: name.into(),
            display: display.into(),
            config,
            timeout,
            client: None,
            statements: HashMap::new(),
        }
    }

    /// Forget the connection (a dropped client ends it, rolling back any open transaction).
    pub fn reset(&mut self) {
        self.client = None;
        self.statements.clear();
    }

    pub fn connected(&self) -> bool {
        self.client.as_ref().is_some_and(|c| !c.is_closed())
    }

    /// Connect if there is no live connection.
    pub async fn connect(&mut self) -> Result<(), DbError> {
        if self.connected() {
            return Ok(());
        }
        self.reset();
        let connecting = self.config.connect(NoTls);
        match timed(self.timeout, connecting).await {
            None => Err(DbError::Connect(format!(
                "no answer within {} ms",
                self.timeout.as_millis()
            ))),
            Some(Err(e)) => Err(DbError::Connect(error_text(&e))),
            Some(Ok((client, connection))) => {
                tokio::spawn(async move {
                    // The connection ends when the client is dropped or the server goes; either is seen by the next call.
                    let _ = connection.await;
                });
                self.client = Some(client);
                Ok(())
            }
        }
    }

    /// The statement for `sql`, prepared once per connection (one round trip per call after that).
    async fn statement(&mut self, sql: &'static str) -> Result<Statement, DbError> {
        if let Some(s) = self.statements.get(sql) {
            return Ok(s.clone());
        }
        let client = self
            .client
            .as_ref()
            .ok_or_else(|| DbError::Closed("no connection".into()))?;
        let prepared = timed(self.timeout, client.prepare(sql)).await;
        let s = self.settle(prepared)?;
        self.statements.insert(sql, s.clone());
        Ok(s)
    }

    /// Prepare `sqls` now (connecting first), so the first real call is one round trip:
    /// a mover warms up before the start gate, and box 2's first grant is not late by
    /// the parse of every statement.
    pub async fn prepare_all(&mut self, sqls: &[&'static str]) -> Result<(), DbError> {
        self.connect().await?;
        for sql in sqls {
            self.statement(sql).await?;
        }
        Ok(())
    }

    /// Turn a timed call's outcome into a result, dropping the connection when it is in doubt.
    fn settle<T>(
        &mut self,
        outcome: Option<Result<T, tokio_postgres::Error>>,
    ) -> Result<T, DbError> {
        match outcome {
            Some(Ok(v)) => Ok(v),
            None => {
                self.reset();
                Err(DbError::Timeout(self.timeout.as_millis()))
            }
            Some(Err(e)) => {
                let closed = e.is_closed()
                    || e.as_db_error().is_none()
                    || self.client.as_ref().is_none_or(|c| c.is_closed());
                let text = error_text(&e);
                if closed {
                    self.reset();
                    Err(DbError::Closed(text))
                } else {
                    Err(DbError::Sql(text))
                }
            }
        }
    }

    /// Rows of a prepared query (connecting first if needed).
    pub async fn query(
        &mut self,
        sql: &'static str,
        params: &[&(dyn tokio_postgres::types::ToSql + Sync)],
    ) -> Result<Vec<tokio_postgres::Row>, DbError> {
        self.connect().await?;
        let s = self.statement(sql).await?;
        let client = self
            .client
            .as_ref()
            .ok_or_else(|| DbError::Closed("no connection".into()))?;
        let outcome = timed(self.timeout, client.query(&s, params)).await;
        self.settle(outcome)
    }

    /// Rows changed by a prepared statement.
    pub async fn execute(
        &mut self,
        sql: &'static str,
        params: &[&(dyn tokio_postgres::types::ToSql + Sync)],
    ) -> Result<u64, DbError> {
        self.connect().await?;
        let s = self.statement(sql).await?;
        let client = self
            .client
            .as_ref()
            .ok_or_else(|| DbError::Closed("no connection".into()))?;
        let outcome = timed(self.timeout, client.execute(&s, params)).await;
        self.settle(outcome)
    }

    /// Load readings with binary COPY (one round trip, no array decoding on
    /// the server): markedly cheaper than an INSERT of unnested arrays, which
    /// matters at a scale where one turbine's copy has 250 real ms.
    pub async fn copy_readings(
        &mut self,
        turbine: &str,
        ts: &[std::time::SystemTime],
        values: &[f64],
    ) -> Result<u64, DbError> {
        use tokio_postgres::binary_copy::BinaryCopyInWriter;
        use tokio_postgres::types::Type;
        self.connect().await?;
        let client = self
            .client
            .as_ref()
            .ok_or_else(|| DbError::Closed("no connection".into()))?;
        let load = async {
            let sink = client
                .copy_in("copy readings (turbine_id, ts, value) from stdin (format binary)")
                .await?;
            let writer =
                BinaryCopyInWriter::new(sink, &[Type::TEXT, Type::TIMESTAMPTZ, Type::FLOAT8]);
            futures_util::pin_mut!(writer);
            for (t, v) in ts.iter().zip(values) {
                writer.as_mut().write(&[&turbine, t, v]).await?;
            }
            writer.finish().await
        };
        let outcome = timed(self.timeout, load).await;
        self.settle(outcome)
    }

    /// A simple-protocol script (one round trip); the row counts and first-column values it returned.
    pub async fn simple(
        &mut self,
        sql: &str,
    ) -> Result<Vec<tokio_postgres::SimpleQueryMessage>, DbError> {
        self.connect().await?;
        let client = self
            .client
            .as_ref()
            .ok_or_else(|| DbError::Closed("no connection".into()))?;
        let outcome = timed(self.timeout, client.simple_query(sql)).await;
        self.settle(outcome)
    }
}

/// An error's full text: tokio-postgres hides the server's message behind "db error".
pub fn error_text(e: &tokio_postgres::Error) -> String {
    match e.as_db_error() {
        Some(db) => format!("{}: {}", db.code().code(), db.message()),
        None => {
            let mut text = e.to_string();
            let mut source = std::error::Error::source(e);
            while let Some(s) = source {
                text.push_str(": ");
                text.push_str(&s.to_string());
                source = s.source();
            }
            text
        }
    }
}
