//! The final reads of a failover run: each server's role and every order it holds (who committed it, who wrote it, its commit timestamp), through its unproxied admin URL, after every fault was healed and the app stopped.

use chaos_history::{FailoverFinal, OrderRow, ServerOrders};
use std::time::Duration;

const READ_LIMIT: Duration = Duration::from_secs(30);

const ORDERS: &str = "select id, accepted_by, app, \
    (extract(epoch from pg_xact_commit_timestamp(xmin)) * 1000000)::bigint * 1000 \
    from orders order by id";

/// Read every server in `servers` (node, admin URL); a server that cannot be read is named in
/// `missing` and the state is not `complete` (the verdict is then unknown where it needs it).
pub async fn read(servers: &[(String, String)]) -> FailoverFinal {
    let mut out = FailoverFinal {
        complete: true,
        ..Default::default()
    };
    for (node, url) in servers {
        let s = match tokio::time::timeout(READ_LIMIT, read_one(node, url)).await {
            Ok(Ok(s)) => s,
            Ok(Err(e)) => unread(node, e),
            Err(_) => unread(node, format!("no answer within {} s", READ_LIMIT.as_secs())),
        };
        if !s.read {
            out.complete = false;
            out.missing.push(node.clone());
        }
        out.servers.push(s);
    }
    out
}

fn unread(node: &str, error: String) -> ServerOrders {
    eprintln!("chaos: final read of {node}: {error}");
    ServerOrders {
        node: node.to_string(),
        read: false,
        in_recovery: None,
        orders: vec![],
        error: Some(error),
    }
}

async fn read_one(node: &str, url: &str) -> Result<ServerOrders, String> {
    let c = crate::db::connect(url, "harness", Duration::from_secs(10)).await?;
    let in_recovery: bool = c
        .query_one("select pg_is_in_recovery()", &[])
        .await
        .map_err(|e| e.to_string())?
        .get(0);
    let rows = c.query(ORDERS, &[]).await.map_err(|e| e.to_string())?;
    let orders = rows
        .iter()
        .map(|r| OrderRow {
            id: r.get(0),
            accepted_by: r.get(1),
            app: r.get(2),
            commit_unix_ns: r.get(3),
        })
        .collect();
    Ok(ServerOrders {
        node: node.to_string(),
        read: true,
        in_recovery: Some(in_recovery),
        orders,
        error: None,
    })
}
