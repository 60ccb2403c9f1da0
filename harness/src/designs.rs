//! The harness's side of the seed's other designs (systems `payout` and `ten-objects`): what each installs before the run, what the run's record says it was, and what is read back at the end.
//!
//! They run on the mover's testbed (a routing db, shards, boxes, a proxy on every link), so
//! everything else (the boxes, the gate, the supervisor, the nemesis and its triggers) is the
//! mover's own.

use crate::db;
use crate::scenario::{Scenario, System};
use chaos_history::{
    ConfigObject, ConfigPointer, ConfigState, ObjectWrite, ObjectWriteKind, ObjectsMeta, Payee,
    Payment, PayoutMeta,
};
use chaos_workloads::schema::{OBJECTS_AUDIT_SQL, OBJECTS_SQL, PROCESSOR_SQL};
use std::time::Duration;

const TIMEOUT: Duration = Duration::from_secs(30);

/// The publishers owed this month: `P-0001`.., each a different amount (cents), so a payment
/// names whom it was for.
pub fn payees(s: &Scenario) -> Vec<Payee> {
    (1..=s.file.payout.publishers as i32)
        .map(|i| Payee {
            position: i,
            publisher: format!("P-{i:04}"),
            amount_cents: 10_000 + 137 * i as i64,
        })
        .collect()
}

/// The shard that holds object `object` (1-based) of `count`, and the pointer's (object 0).
pub fn object_shard(shards: &[String], object: i32) -> String {
    if object <= 0 {
        return shards[0].clone();
    }
    shards[(object as usize - 1) % shards.len()].clone()
}

/// What the run's record keeps of the design: the payout owed, or the objects' layout.
pub fn meta(s: &Scenario) -> (Option<PayoutMeta>, Option<ObjectsMeta>) {
    match s.file.system {
        System::Payout => (
            Some(PayoutMeta {
                month: s.file.payout.month.clone(),
                payees: payees(s),
                processor: s.file.payout.processor.clone(),
            }),
            None,
        ),
        System::TenObjects => {
            let shards = s.topology().shards().to_vec();
            (
                None,
                Some(ObjectsMeta {
                    count: s.file.objects.count as i32,
                    pointer_shard: object_shard(&shards, 0),
                }),
            )
        }
        System::Mover | System::Failover => (None, None),
    }
}

/// Install the design's tables and their starting rows: the payout plan and the processor's
/// ledger, or the objects (version 0 everywhere), their layout and the pointer; the objects'
/// audit last, so the starting rows are not audited.
pub async fn install(
    s: &Scenario,
    routing_url: &str,
    shards: &[(String, String)],
) -> Result<(), String> {
    let routing = db::connect(routing_url, "harness", TIMEOUT).await?;
    let err = |what: &str| {
        let what = what.to_string();
        move |e: tokio_postgres::Error| format!("{what}: {e}")
    };
    match s.file.system {
        System::Payout => {
            let processor = &s.file.payout.processor;
            for p in payees(s) {
                routing
                    .execute(
                        "insert into payout_plan (position, publisher, month, amount_cents, processor) values ($1, $2, $3, $4, $5)",
                        &[&p.position, &p.publisher, &s.file.payout.month, &p.amount_cents, processor],
                    )
                    .await
                    .map_err(err("routing: payout plan"))?;
            }
            let url = &shards
                .iter()
                .find(|(n, _)| n == processor)
                .ok_or_else(|| format!("no shard {processor} for the processor"))?
                .1;
            let c = db::connect(url, "harness", TIMEOUT).await?;
            c.batch_execute(PROCESSOR_SQL)
                .await
                .map_err(err(&format!("{processor}: the payouts ledger")))?;
        }
        System::TenObjects => {
            let names: Vec<String> = shards.iter().map(|(n, _)| n.clone()).collect();
            let count = s.file.objects.count as i32;
            for object in 0..=count {
                routing
                    .execute(
                        "insert into config_layout (object_id, shard) values ($1, $2)",
                        &[&object, &object_shard(&names, object)],
                    )
                    .await
                    .map_err(err("routing: objects layout"))?;
            }
            for (name, url) in shards {
                let c = db::connect(url, "harness", TIMEOUT).await?;
                c.batch_execute(OBJECTS_SQL)
                    .await
                    .map_err(err(&format!("{name}: the objects")))?;
                for object in (1..=count).filter(|&o| &object_shard(&names, o) == name) {
                    c.execute(
                        "insert into config_objects (object_id, version, token, value, written_by) values ($1, 0, 0, $2, 'harness')",
                        &[&object, &format!("v0-o{object}")],
                    )
                    .await
                    .map_err(err(&format!("{name}: object {object}")))?;
                }
                if name == &names[0] {
                    c.batch_execute("insert into config_pointer (version, token) values (0, 0)")
                        .await
                        .map_err(err(&format!("{name}: the pointer")))?;
                }
                c.batch_execute(OBJECTS_AUDIT_SQL)
                    .await
                    .map_err(err(&format!("{name}: the objects' audit")))?;
            }
        }
        System::Mover | System::Failover => {}
    }
    Ok(())
}

/// `timestamptz` of the row's commit as Unix ns (0 when the server did not keep it).
const COMMIT_NS: &str =
    "coalesce((extract(epoch from pg_xact_commit_timestamp(xmin)) * 1000000)::bigint * 1000, 0)";

/// The processor's ledger: every payment it took.
pub async fn payments(shard: &str, url: &str) -> Result<Vec<Payment>, String> {
    let c = db::connect(url, "harness", TIMEOUT).await?;
    let sql = format!(
        "select publisher, month, amount_cents, app, token, idempotency_key, {COMMIT_NS} from payouts order by id"
    );
    let rows = c
        .query(&sql, &[])
        .await
        .map_err(|e| format!("{shard}: reading the payouts ledger: {e}"))?;
    Ok(rows
        .iter()
        .map(|r| Payment {
            publisher: r.get(0),
            month: r.get(1),
            amount_cents: r.get(2),
            app: r.get(3),
            token: r.get(4),
            idempotency_key: r.get(5),
            commit_unix_ns: r.get(6),
        })
        .collect())
}

/// One shard's objects at the end, the versions beside them, its pointer, and its object audit.
pub struct ShardObjects {
    pub objects: Vec<ConfigObject>,
    pub versions: Vec<ConfigObject>,
    pub pointer: Option<ConfigPointer>,
    pub writes: Vec<ObjectWrite>,
}

/// Read one shard's objects, side versions, pointer and object audit.
pub async fn shard_objects(shard: &str, url: &str) -> Result<ShardObjects, String> {
    let c = db::connect(url, "harness", TIMEOUT).await?;
    let e = |what: &str| {
        let what = format!("{shard}: reading {what}");
        move |e: tokio_postgres::Error| format!("{what}: {e}")
    };
    let object = |r: &tokio_postgres::Row| ConfigObject {
        object: r.get(0),
        shard: shard.to_string(),
        version: r.get(1),
        token: r.get(2),
        value: r.get(3),
        app: r.get(4),
    };
    let objects = c
        .query("select object_id, version, token, value, written_by from config_objects order by object_id", &[])
        .await
        .map_err(e("the objects"))?
        .iter()
        .map(object)
        .collect();
    let versions = c
        .query("select object_id, version, token, value, written_by from config_versions order by version, object_id", &[])
        .await
        .map_err(e("the side versions"))?
        .iter()
        .map(object)
        .collect();
    let pointer = c
        .query("select version, token from config_pointer", &[])
        .await
        .map_err(e("the pointer"))?
        .first()
        .map(|r| ConfigPointer {
            version: r.get(0),
            token: r.get(1),
        });
    let sql = format!("select object_id, kind, version, token, app, xid, {COMMIT_NS} from chaos_object_audit order by id");
    let writes = c
        .query(&sql, &[])
        .await
        .map_err(e("the objects' audit"))?
        .iter()
        .map(|r| ObjectWrite {
            shard: shard.to_string(),
            object: r.get(0),
            kind: match r.get::<_, &str>(1) {
                "content" => ObjectWriteKind::Content,
                "fence" => ObjectWriteKind::Fence,
                "side" => ObjectWriteKind::Side,
                _ => ObjectWriteKind::Pointer,
            },
            version: r.get(2),
            token: r.get(3),
            app: r.get(4),
            xid: r.get(5),
            commit_unix_ns: r.get(6),
        })
        .collect();
    Ok(ShardObjects {
        objects,
        versions,
        pointer,
        writes,
    })
}

/// The configuration a reader can see, from every shard's objects: the live objects, the
/// pointer (on the pointer's shard) and the side rows of the version it names.
pub fn config_state(
    parts: Vec<ShardObjects>,
    pointer_shard_index: usize,
) -> (ConfigState, Vec<ObjectWrite>) {
    let mut state = ConfigState::default();
    let mut writes = Vec::new();
    let mut versions = Vec::new();
    for (i, p) in parts.into_iter().enumerate() {
        state.objects.extend(p.objects);
        versions.extend(p.versions);
        if i == pointer_shard_index {
            state.pointer = p.pointer;
        }
        writes.extend(p.writes);
    }
    let pointed = state.pointer.map_or(0, |p| p.version);
    state.pointed = versions
        .into_iter()
        .filter(|v| v.version == pointed)
        .collect();
    state.objects.sort_by_key(|o| o.object);
    state.pointed.sort_by_key(|o| o.object);
    writes.sort_by_key(|w| (w.commit_unix_ns, w.xid));
    (state, writes)
}

/// Read the design's final state and audit back into the run's record; a shard that cannot
/// be read makes them incomplete, naming it.
pub async fn read_back(
    s: &Scenario,
    shards: &[(String, String)],
    audit: &mut chaos_history::Audit,
    fin: &mut chaos_history::FinalState,
) {
    match s.file.system {
        System::Payout => {
            let processor = &s.file.payout.processor;
            if let Some((name, url)) = shards.iter().find(|(n, _)| n == processor) {
                match payments(name, url).await {
                    Ok(p) => fin.payments = p,
                    Err(e) => {
                        fin.complete = false;
                        fin.missing.push(e);
                    }
                }
            }
        }
        System::TenObjects => {
            let reads = shards.iter().map(|(n, u)| shard_objects(n, u));
            let mut parts = Vec::new();
            for r in futures_util::future::join_all(reads).await {
                match r {
                    Ok(p) => parts.push(p),
                    Err(e) => {
                        fin.complete = false;
                        audit.complete = false;
                        fin.missing.push(e.clone());
                        audit.missing.push(e);
                    }
                }
            }
            if fin.complete {
                let (state, writes) = config_state(parts, 0);
                fin.config = Some(state);
                audit.object_writes = writes;
            }
        }
        System::Mover | System::Failover => {}
    }
}
