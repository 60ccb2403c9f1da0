//! The lease as the mover takes it from whichever lock service `CHAOS_LOCK` names: the claim row (routing.sql's functions), an advisory lock held by a session of its own, an etcd key under a lease, a Redis key with an expiry, or a ZooKeeper lock node held by a session. One set of calls for the state machine, each answering in the routing db's error terms.

use super::*;
use crate::lock::{
    SQL_ADVISORY_ACQUIRE, SQL_ADVISORY_HELD, SQL_ADVISORY_RELEASE, SQL_ADVISORY_WHO,
};
use crate::mover::etcd::EtcdGrant;

impl Mover {
    /// Reach the lock service (claims: the routing db, connected already).
    pub(super) async fn connect_lock(&mut self) -> Result<(), DbError> {
        match &mut self.lock {
            LockClient::Claims => Ok(()),
            LockClient::Advisory { session, .. } => session.connect().await,
            LockClient::Etcd(e) => e.connect().await,
            LockClient::Redis(r) => r.connect().await,
            LockClient::Zookeeper(z) => z.connect(self.s.env.lease_ms).await,
        }
    }

    pub(super) fn lock_display(&self) -> String {
        match &self.lock {
            LockClient::Claims => self.routing.display.clone(),
            LockClient::Advisory { session, .. } => session.display.clone(),
            LockClient::Etcd(e) => e.display(),
            LockClient::Redis(r) => r.display(),
            LockClient::Zookeeper(z) => z.display(),
        }
    }

    /// Every lock call's timeout (a renewal narrows it to its budget).
    pub(super) fn set_lock_timeout(&mut self, t: Duration) {
        match &mut self.lock {
            LockClient::Claims => self.routing.timeout = t,
            LockClient::Advisory { session, .. } => session.timeout = t,
            LockClient::Etcd(e) => e.timeout = t,
            LockClient::Redis(r) => r.timeout = t,
            LockClient::Zookeeper(z) => z.timeout = t,
        }
    }

    /// One attempt at the lease: the grant's token and (etcd) its lease, or None when
    /// somebody else holds it.
    pub(super) async fn lock_acquire(&mut self) -> Result<Option<(i64, i64)>, DbError> {
        let (job, me) = (self.s.env.job.clone(), self.s.env.box_name.clone());
        let lease_ms = self.s.env.lease_ms;
        match &mut self.lock {
            LockClient::Claims => {
                let rows = self
                    .routing
                    .query(SQL_ACQUIRE, &[&job, &me, &(lease_ms as i64)])
                    .await?;
                Ok(rows
                    .first()
                    .and_then(|r| r.get::<_, Option<i64>>(0))
                    .map(|t| (t, 0)))
            }
            LockClient::Advisory { session, key } => {
                let rows = session.query(SQL_ADVISORY_ACQUIRE, &[key, &me]).await?;
                Ok(rows.first().map(|r| (r.get::<_, i64>(0), 0)))
            }
            LockClient::Etcd(e) => Ok(e
                .acquire(&me, lease_ms)
                .await?
                .map(|g| (g.revision, g.lease_id))),
            LockClient::Redis(r) => Ok(r.acquire(&me, lease_ms).await?.map(|t| (t, 0))),
            // A waiter waits on its predecessor's watch up to a poll, as the recipe does.
            LockClient::Zookeeper(z) => {
                let wait = Duration::from_millis(self.s.env.poll_ms);
                Ok(z.acquire(&me, lease_ms, wait)
                    .await?
                    .map(|czxid| (czxid, 0)))
            }
        }
    }

    /// Renew the grant: true when the service still has it as this box's.
    pub(super) async fn lock_renew(&mut self, grant: &Grant) -> Result<bool, DbError> {
        let (job, me) = (self.s.env.job.clone(), self.s.env.box_name.clone());
        let me = me.as_str();
        let lease_ms = self.s.env.lease_ms as i64;
        match &mut self.lock {
            LockClient::Claims => {
                let rows = self
                    .routing
                    .query(SQL_RENEW, &[&job, &me, &grant.token, &lease_ms])
                    .await?;
                Ok(first_bool(&rows))
            }
            // A session that ended took the lock with it: a new one finds it does not hold it.
            LockClient::Advisory { session, key } => {
                let rows = session.query(SQL_ADVISORY_HELD, &[key]).await?;
                Ok(first_bool(&rows))
            }
            LockClient::Etcd(e) => e.renew(me, grant.etcd()).await,
            LockClient::Redis(r) => r.renew(me, lease_ms as u64).await,
            LockClient::Zookeeper(z) => z.renew(me, lease_ms as u64, grant.token).await,
        }
    }

    /// Who holds the lease now, and with which token, as far as the service says.
    pub(super) async fn lock_who(&mut self) -> (Option<String>, Option<i64>) {
        let job = self.s.env.job.clone();
        let lease_ms = self.s.env.lease_ms;
        match &mut self.lock {
            LockClient::Claims => match self.routing.query(SQL_WHO, &[&job]).await {
                Ok(rows) => match rows.first() {
                    Some(r) => (r.get::<_, Option<String>>(0), r.get::<_, Option<i64>>(1)),
                    None => (None, None),
                },
                Err(_) => (None, None),
            },
            LockClient::Advisory { session, key } => {
                match session.query(SQL_ADVISORY_WHO, &[key]).await {
                    Ok(rows) => match rows.first() {
                        Some(r) => (r.get::<_, Option<String>>(0), r.get::<_, Option<i64>>(1)),
                        None => (None, None),
                    },
                    Err(_) => (None, None),
                }
            }
            LockClient::Etcd(e) => e.who().await.unwrap_or((None, None)),
            LockClient::Redis(r) => r.who().await.unwrap_or((None, None)),
            LockClient::Zookeeper(z) => z.who(lease_ms).await.unwrap_or((None, None)),
        }
    }

    /// Give the lease back: true when the service took it back from this box.
    pub(super) async fn lock_release(&mut self, grant: &Grant) -> Result<bool, DbError> {
        let (job, me) = (self.s.env.job.clone(), self.s.env.box_name.clone());
        match &mut self.lock {
            LockClient::Claims => {
                let rows = self
                    .routing
                    .query(SQL_RELEASE, &[&job, &me, &grant.token])
                    .await?;
                Ok(first_bool(&rows))
            }
            LockClient::Advisory { session, key } => {
                let rows = session.query(SQL_ADVISORY_RELEASE, &[key]).await?;
                Ok(first_bool(&rows))
            }
            LockClient::Etcd(e) => e.release(grant.etcd()).await,
            LockClient::Redis(r) => r.release(&me).await,
            LockClient::Zookeeper(z) => z.release(self.s.env.lease_ms, grant.token).await,
        }
    }
}

/// The first column of the first row as a boolean (a function's answer); false when absent.
fn first_bool(rows: &[tokio_postgres::Row]) -> bool {
    rows.first()
        .and_then(|r| r.get::<_, Option<bool>>(0))
        .unwrap_or(false)
}

impl Grant {
    /// The grant as etcd knows it: the key's create revision and the lease it lives on.
    fn etcd(&self) -> EtcdGrant {
        EtcdGrant {
            revision: self.token,
            lease_id: self.lease_id,
        }
    }
}
