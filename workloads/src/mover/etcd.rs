//! The mover's lease in etcd, in etcd's own idiom: a lease with a TTL, the lock key created only if absent under it (a transaction on its create revision), keepalives as renewals, and the key's revision as the fencing token (etcd's docs: revision + lease is the sequencer).

use super::db::{timed, DbError};
use etcd_client::{
    Client, Compare, CompareOp, ConnectOptions, PutOptions, Txn, TxnOp, TxnOpResponse,
};
use std::time::Duration;

/// The lock as one box holds it in etcd.
pub struct EtcdLock {
    endpoints: Vec<String>,
    key: String,
    pub timeout: Duration,
    client: Option<Client>,
}

/// A grant in etcd: the key's create revision (the token) and the lease it lives on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct EtcdGrant {
    pub revision: i64,
    pub lease_id: i64,
}

/// etcd's leases are whole seconds: the TTL that holds `lease_ms` (the harness makes the
/// scenario's lease a whole number of seconds for etcd, so nothing is rounded).
pub fn ttl_s(lease_ms: u64) -> i64 {
    lease_ms.div_ceil(1000).max(1) as i64
}

fn sort(e: etcd_client::Error) -> DbError {
    use etcd_client::Error as E;
    match e {
        E::TransportError(t) => DbError::Connect(t.to_string()),
        // gRPC's Unknown (2), DeadlineExceeded (4), Unavailable (14): the call may have
        // reached the leader and been applied.
        E::GRpcStatus(s) => match s.code() as i32 {
            2 | 4 | 14 => DbError::Closed(s.message().to_string()),
            _ => DbError::Sql(format!("{:?}: {}", s.code(), s.message())),
        },
        other => DbError::Closed(other.to_string()),
    }
}

impl EtcdLock {
    pub fn new(endpoints: Vec<String>, key: String, timeout: Duration) -> EtcdLock {
        EtcdLock {
            endpoints,
            key,
            timeout,
            client: None,
        }
    }

    pub fn display(&self) -> String {
        format!("etcd {} key {}", self.endpoints.join(","), self.key)
    }

    /// A client, connected on demand; dropped on any doubt.
    async fn client(&mut self) -> Result<Client, DbError> {
        if let Some(c) = &self.client {
            return Ok(c.clone());
        }
        let options = ConnectOptions::new()
            .with_connect_timeout(self.timeout)
            .with_timeout(self.timeout);
        let connecting = Client::connect(self.endpoints.clone(), Some(options));
        match timed(self.timeout, connecting).await {
            None => Err(DbError::Connect(format!(
                "no answer within {} ms",
                self.timeout.as_millis()
            ))),
            Some(Err(e)) => Err(DbError::Connect(e.to_string())),
            Some(Ok(c)) => {
                self.client = Some(c.clone());
                Ok(c)
            }
        }
    }

    /// Run one call under the timeout; a timeout or a lost connection forgets the client.
    async fn call<T, F>(&mut self, f: impl FnOnce(Client) -> F) -> Result<T, DbError>
    where
        F: std::future::Future<Output = Result<T, etcd_client::Error>>,
    {
        let client = self.client().await?;
        match timed(self.timeout, f(client)).await {
            None => {
                self.client = None;
                Err(DbError::Timeout(self.timeout.as_millis()))
            }
            Some(Err(e)) => {
                let e = sort(e);
                if e.unreachable() {
                    self.client = None;
                }
                Err(e)
            }
            Some(Ok(v)) => Ok(v),
        }
    }

    /// Connect (the start gate waits for it).
    pub async fn connect(&mut self) -> Result<(), DbError> {
        self.call(|mut c| async move { c.status().await }).await?;
        Ok(())
    }

    /// A lease, then the key created under it if nobody has it. None: somebody else holds it
    /// (the lease is revoked again).
    pub async fn acquire(
        &mut self,
        holder: &str,
        lease_ms: u64,
    ) -> Result<Option<EtcdGrant>, DbError> {
        let ttl = ttl_s(lease_ms);
        let lease_id = self
            .call(|mut c| async move { c.lease_grant(ttl, None).await })
            .await?
            .id();
        let (key, value) = (self.key.clone(), holder.to_string());
        let txn = Txn::new()
            .when([Compare::create_revision(key.clone(), CompareOp::Equal, 0)])
            .and_then([TxnOp::put(
                key,
                value,
                Some(PutOptions::new().with_lease(lease_id)),
            )]);
        let answer = self.call(|mut c| async move { c.txn(txn).await }).await?;
        if answer.succeeded() {
            let revision = answer.header().map_or(0, |h| h.revision());
            return Ok(Some(EtcdGrant { revision, lease_id }));
        }
        let _ = self
            .call(|mut c| async move { c.lease_revoke(lease_id).await })
            .await;
        Ok(None)
    }

    /// One keepalive of the grant's lease, then the key rewritten if it is still the grant's:
    /// true while both hold.
    pub async fn renew(&mut self, holder: &str, grant: EtcdGrant) -> Result<bool, DbError> {
        let ttl = self
            .call(|mut c| async move {
                let alive = async {
                    let (mut keeper, mut stream) = c.lease_keep_alive(grant.lease_id).await?;
                    keeper.keep_alive().await?;
                    Ok(stream.message().await?.map_or(0, |r| r.ttl()))
                };
                match alive.await {
                    // The leader revoked it at its TTL: the grant is over, not unreachable
                    // (the client reads a TTL of 0 as this error).
                    Err(etcd_client::Error::LeaseKeepAliveError(m)) if m.contains("not found") => {
                        Ok(0)
                    }
                    other => other,
                }
            })
            .await?;
        if ttl <= 0 {
            return Ok(false);
        }
        // The lease lives. Say so where a watch sees it: rewrite the key while it is still
        // this grant's (its create revision unchanged), as etcd's election recipe proclaims.
        let (key, value) = (self.key.clone(), holder.to_string());
        let txn = Txn::new()
            .when([Compare::create_revision(
                key.clone(),
                CompareOp::Equal,
                grant.revision,
            )])
            .and_then([TxnOp::put(
                key,
                value,
                Some(PutOptions::new().with_lease(grant.lease_id)),
            )]);
        let answer = self.call(|mut c| async move { c.txn(txn).await }).await?;
        Ok(answer.succeeded())
    }

    /// Who holds the key (its value) and its create revision (the holder's token).
    pub async fn who(&mut self) -> Result<(Option<String>, Option<i64>), DbError> {
        let key = self.key.clone();
        let answer = self
            .call(|mut c| async move { c.get(key, None).await })
            .await?;
        Ok(match answer.kvs().first() {
            Some(kv) => (
                kv.value_str().ok().map(str::to_string),
                Some(kv.create_revision()),
            ),
            None => (None, None),
        })
    }

    /// Delete the key if it is still this grant's, and revoke its lease.
    pub async fn release(&mut self, grant: EtcdGrant) -> Result<bool, DbError> {
        let key = self.key.clone();
        let txn = Txn::new()
            .when([Compare::create_revision(
                key.clone(),
                CompareOp::Equal,
                grant.revision,
            )])
            .and_then([TxnOp::delete(key, None)]);
        let answer = self.call(|mut c| async move { c.txn(txn).await }).await?;
        let deleted = answer.succeeded()
            && answer
                .op_responses()
                .iter()
                .any(|r| matches!(r, TxnOpResponse::Delete(d) if d.deleted() > 0));
        let _ = self
            .call(|mut c| async move { c.lease_revoke(grant.lease_id).await })
            .await;
        Ok(deleted)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_lease_is_whole_seconds_never_zero() {
        assert_eq!(ttl_s(1000), 1);
        assert_eq!(ttl_s(3000), 3);
        assert_eq!(ttl_s(600), 1);
        assert_eq!(ttl_s(1), 1);
    }
}
