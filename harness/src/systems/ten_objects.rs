//! System `ten-objects`: a configuration of `count` objects spread over the shards (object `i`
//! on shard `(i - 1) % shards + 1`, the pointer on shard1), written by the reference updater
//! under one lease. The harness installs the objects at version 0 and their audit, and reads
//! back what a reader can see at the end: the live objects, the pointer and its side rows.

use super::interface::{
    common_settings, failed, Settings, ShardUrl, SystemUnderTest, COMMIT_NS, TIMEOUT,
};
use crate::db;
use crate::scenario::{Scenario, ScenarioError, ScenarioFile, Validator};
use chaos_history::{
    Audit, ConfigObject, ConfigPointer, ConfigState, FinalState, ObjectWrite, ObjectWriteKind,
    ObjectsMeta, PayoutMeta,
};
use chaos_workloads::mover::switch_name;
use chaos_workloads::schema::{OBJECTS_AUDIT_SQL, OBJECTS_SQL};
use futures_util::future::BoxFuture;

/// System `ten-objects`.
pub struct TenObjects;

/// The shard that holds object `object` (1-based) of `count`, and the pointer's (object 0).
pub fn object_shard(shards: &[String], object: i32) -> String {
    if object <= 0 {
        return shards[0].clone();
    }
    shards[(object as usize - 1) % shards.len()].clone()
}

/// The objects' layout in the routing db; on each shard its objects at version 0, the pointer
/// on the first, and the objects' audit last, so the starting rows are not audited.
async fn install(s: &Scenario, routing_url: &str, shards: &[ShardUrl]) -> Result<(), String> {
    let routing = db::connect(routing_url, "harness", TIMEOUT).await?;
    let names: Vec<String> = shards.iter().map(|(n, _)| n.clone()).collect();
    let count = s.file.objects.count as i32;
    for object in 0..=count {
        routing
            .execute(
                "insert into config_layout (object_id, shard) values ($1, $2)",
                &[&object, &object_shard(&names, object)],
            )
            .await
            .map_err(failed("routing: objects layout"))?;
    }
    for (name, url) in shards {
        let c = db::connect(url, "harness", TIMEOUT).await?;
        c.batch_execute(OBJECTS_SQL)
            .await
            .map_err(failed(&format!("{name}: the objects")))?;
        for object in (1..=count).filter(|&o| &object_shard(&names, o) == name) {
            c.execute(
                "insert into config_objects (object_id, version, token, value, written_by) values ($1, 0, 0, $2, 'harness')",
                &[&object, &format!("v0-o{object}")],
            )
            .await
            .map_err(failed(&format!("{name}: object {object}")))?;
        }
        if name == &names[0] {
            c.batch_execute("insert into config_pointer (version, token) values (0, 0)")
                .await
                .map_err(failed(&format!("{name}: the pointer")))?;
        }
        c.batch_execute(OBJECTS_AUDIT_SQL)
            .await
            .map_err(failed(&format!("{name}: the objects' audit")))?;
    }
    Ok(())
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
    let e = |what: &str| failed(&format!("{shard}: reading {what}"));
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

/// Every shard's objects read back; any shard unread makes the record incomplete.
async fn read_back(shards: &[ShardUrl], audit: &mut Audit, fin: &mut FinalState) {
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

impl SystemUnderTest for TenObjects {
    fn program(&self) -> &'static str {
        "updater"
    }

    fn check_file(&self, v: &Validator, file: &ScenarioFile) -> Result<(), ScenarioError> {
        v.lease_settings(file)?;
        let count = file.objects.count;
        v.within(
            "objects.count",
            (1..=100).contains(&count),
            "1 to 100",
            count,
        )
    }

    fn reference_args(&self, s: &ScenarioFile) -> Vec<String> {
        let mut args = vec!["--fence".to_string(), switch_name(s.objects.fence)];
        args.extend(s.mover.args.iter().cloned());
        args
    }

    fn settings(&self, s: &Scenario) -> Settings {
        let mut settings = common_settings(s, "object_s");
        settings.extend([
            ("system".into(), "ten-objects".into()),
            ("objects_fence".into(), switch_name(s.file.objects.fence)),
        ]);
        settings
    }

    fn meta(&self, s: &Scenario) -> (Option<PayoutMeta>, Option<ObjectsMeta>) {
        let shards = s.topology().shards().to_vec();
        let meta = ObjectsMeta {
            count: s.file.objects.count as i32,
            pointer_shard: object_shard(&shards, 0),
        };
        (None, Some(meta))
    }

    fn install<'a>(
        &'a self,
        s: &'a Scenario,
        routing_url: &'a str,
        shards: &'a [ShardUrl],
    ) -> BoxFuture<'a, Result<(), String>> {
        Box::pin(install(s, routing_url, shards))
    }

    fn read_back<'a>(
        &'a self,
        _s: &'a Scenario,
        shards: &'a [ShardUrl],
        audit: &'a mut Audit,
        fin: &'a mut FinalState,
    ) -> BoxFuture<'a, ()> {
        Box::pin(read_back(shards, audit, fin))
    }
}
