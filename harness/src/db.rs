//! Harness-side database access: connect with a timeout, ping, run SQL scripts.

use std::time::Duration;
use tokio_postgres::{Client, NoTls};

/// Connect with a time limit; the connection task runs in the background
/// and ends when the client is dropped.
pub async fn connect(url: &str, app: &str, timeout: Duration) -> Result<Client, String> {
    let mut config: tokio_postgres::Config = url
        .parse()
        .map_err(|e| format!("bad database url {url}: {e}"))?;
    config.application_name(app).connect_timeout(timeout);
    match tokio::time::timeout(timeout, config.connect(NoTls)).await {
        Ok(Ok((client, conn))) => {
            tokio::spawn(async move {
                let _ = conn.await;
            });
            Ok(client)
        }
        Ok(Err(e)) => Err(format!("{url}: {e}")),
        Err(_) => Err(format!(
            "{url}: no connection within {} ms",
            timeout.as_millis()
        )),
    }
}

/// Whether the server accepts a connection and answers a query.
pub async fn ping(url: &str) -> bool {
    match connect(url, "harness", Duration::from_millis(500)).await {
        Ok(c) => c.simple_query("select 1").await.is_ok(),
        Err(_) => false,
    }
}
