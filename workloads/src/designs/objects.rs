//! The updater: ten objects under one lease (the GC-pause question's follow-up). The leader publishes its version of a ten-object configuration, one object at a time, on objects spread over shards that each accept a write only if its token is at least the highest they have seen.
//!
//! A leader's version is its token; object `i` of version `v` holds `v{v}-o{i}`. It renews once
//! per version (a version takes well under a lease), records the version it finished in the
//! routing db (`config_published`), and releases. `--fence` chooses the design:
//! - `off`: plain updates; a paused leader's late writes land wherever they go.
//! - `write`: every object write is guarded (`... and token <= $t`): a stale leader is refused
//!   on every object a newer leader has written, and admitted on the others.
//! - `grant`: as `write`, and the leader fences all ten objects when it takes the claim, so a
//!   stale leader is refused everywhere from then on.
//! - `pointer`: the leader writes its version beside the live one, then flips one pointer
//!   object with a compare-and-set: readers see one whole version or the other.

use super::lock::{failure_kind, pace, Base, Renewed};
use crate::mover::history::{fenced_message, fenced_value};
use crate::mover::{Env, Exit};
use chaos_history::verb;
use chaos_history::RealMs;
use clap::{Parser, ValueEnum};
use serde_json::json;
use std::time::{Duration, Instant};

const SQL_LAYOUT: &str = "select object_id, shard from config_layout order by object_id";
const SQL_PUBLISHED: &str = "select version from config_published where job = $1";
const SQL_PUBLISH: &str =
    "insert into config_published (job, version, holder) values ($1, $2, $3) on conflict do nothing";
const SQL_FENCE_ALL: &str = "update config_objects set token = $1 where token <= $1";
const SQL_COUNT: &str = "select count(*) from config_objects";
const SQL_WRITE: &str =
    "update config_objects set version = $2, token = $2, value = $3, written_by = current_setting('application_name') where object_id = $1";
const SQL_WRITE_GUARDED: &str =
    "update config_objects set version = $2, token = $2, value = $3, written_by = current_setting('application_name') where object_id = $1 and token <= $2";
const SQL_SIDE: &str =
    "insert into config_versions (version, object_id, token, value) values ($2, $1, $2, $3) on conflict do nothing";
const SQL_FLIP: &str = "update config_pointer set version = $1, token = $1 where token <= $1";
const SQL_OBJECT_TOKEN: &str = "select token from config_objects where object_id = $1";
const SQL_POINTER_TOKEN: &str = "select token from config_pointer";

/// `--fence`: how the objects are kept from a stale leader.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum ObjectsFence {
    /// Plain updates: no object checks a token.
    Off,
    /// Each object write is guarded by its own token check.
    Write,
    /// As `write`, and all ten are fenced at the moment the claim is taken.
    Grant,
    /// The version is written beside the live one and one pointer object is flipped by
    /// compare-and-set.
    Pointer,
}

/// The updater's switches: the design under test.
#[derive(Debug, Clone, Parser)]
#[command(name = "updater", version)]
pub struct UpdaterArgs {
    #[arg(long, value_enum, default_value = "off")]
    pub fence: ObjectsFence,
    /// How long every database may stay unreachable at start before the updater exits 2.
    #[arg(long, default_value_t = 5000)]
    pub start_timeout_ms: RealMs,
}

/// Why a holder stopped holding.
enum Stop {
    Done,
    GiveUp(String),
    Fenced,
    Bad(String),
}

/// Object `object` of version `version`, as every writer spells it.
pub fn object_value(version: i64, object: i32) -> String {
    format!("v{version}-o{object}")
}

/// Run one box of the update to its end.
pub async fn run(args: UpdaterArgs, env: Env) -> Exit {
    let mut base = Base::new("updater", env);
    if let Err(msg) = base
        .start(Duration::from_millis(args.start_timeout_ms))
        .await
    {
        eprintln!("updater: {}: {msg}", base.env.box_name);
        return Exit::BadInput;
    }
    base.log(format!(
        "started: job {} lease {} ms poll {} ms, one object every {} ms, fence {:?}",
        base.env.job, base.env.lease_ms, base.env.poll_ms, base.env.copy_ms, args.fence
    ));
    loop {
        let token = base.acquire().await;
        match publish(&mut base, args.fence, token).await {
            Stop::Done => {
                base.release(token).await;
                base.h.ok(verb::DONE, json!({ "token": token }));
                return Exit::Done;
            }
            Stop::Fenced => return Exit::Fenced,
            Stop::Bad(msg) => {
                eprintln!("updater: {}: {msg}", base.env.box_name);
                return Exit::BadInput;
            }
            Stop::GiveUp(why) => base.log(format!("no longer the holder ({why}); polling again")),
        }
    }
}

/// Hold the claim: unless a version was published already, write this leader's version of
/// every object (the pointer design: beside the live ones, then flip), renew, record it.
async fn publish(base: &mut Base, fence: ObjectsFence, token: i64) -> Stop {
    let job = base.env.job.clone();
    match base.routing.query(SQL_PUBLISHED, &[&job]).await {
        Ok(rows) if !rows.is_empty() => return Stop::Done,
        Ok(_) => {}
        Err(e) if e.schema() => {
            return Stop::Bad(format!(
                "the routing db lacks config_published ({e}): load workloads/sql/routing.sql"
            ))
        }
        Err(e) => return Stop::GiveUp(format!("cannot read the published version: {e}")),
    }
    let layout: Vec<(i32, String)> = match base.routing.query(SQL_LAYOUT, &[]).await {
        Ok(rows) => rows.iter().map(|r| (r.get(0), r.get(1))).collect(),
        Err(e) => return Stop::GiveUp(format!("cannot read the layout: {e}")),
    };
    let pointer_shard = layout.iter().find(|(o, _)| *o == 0).map(|(_, s)| s.clone());
    let objects: Vec<(i32, String)> = layout.into_iter().filter(|(o, _)| *o > 0).collect();
    if fence == ObjectsFence::Grant {
        if let Some(stop) = fence_all(base, &objects, token).await {
            return stop;
        }
    }
    let slot = Duration::from_millis(base.env.copy_ms);
    let start = Instant::now();
    for (n, (object, shard)) in objects.iter().enumerate() {
        if let Some(stop) = write_object(base, fence, *object, shard, token).await {
            return stop;
        }
        pace(start, slot, n as u32 + 1).await;
    }
    if fence == ObjectsFence::Pointer {
        let Some(shard) = pointer_shard else {
            return Stop::Bad("config_layout names no shard for the pointer (object 0)".into());
        };
        if let Some(stop) = flip(base, &shard, token).await {
            return stop;
        }
    }
    if base.renew(token).await != Renewed::Yes {
        return Stop::GiveUp("the renewal was refused or unanswered".into());
    }
    let me = base.env.box_name.clone();
    if let Err(e) = base
        .routing
        .execute(SQL_PUBLISH, &[&job, &token, &me])
        .await
    {
        return Stop::GiveUp(format!("cannot record version {token} as published: {e}"));
    }
    Stop::Done
}

/// Grant-time fencing: every shard's objects take this token before any is written. A shard
/// whose objects do not all take it has served a newer leader.
async fn fence_all(base: &mut Base, objects: &[(i32, String)], token: i64) -> Option<Stop> {
    let mut shards: Vec<&String> = objects.iter().map(|(_, s)| s).collect();
    shards.sort();
    shards.dedup();
    for shard in shards {
        let db = match base.shard(shard) {
            Ok(db) => db,
            Err(msg) => return Some(Stop::Bad(msg)),
        };
        let (fenced, total) = match (
            db.execute(SQL_FENCE_ALL, &[&token]).await,
            db.query(SQL_COUNT, &[]).await,
        ) {
            (Ok(n), Ok(rows)) => (n, rows.first().map_or(0, |r| r.get::<_, i64>(0))),
            (Err(e), _) | (_, Err(e)) => {
                return Some(Stop::GiveUp(format!("cannot fence {shard}: {e}")))
            }
        };
        if (fenced as i64) < total {
            base.h
                .fail(verb::FENCE, fenced_value(token, None, shard, None));
            eprintln!("{}", fenced_message(&base.env.box_name, shard, token, None));
            return Some(Stop::Fenced);
        }
        base.h.ok(
            verb::FENCE,
            json!({ "shard": shard, "token": token, "objects": fenced }),
        );
    }
    None
}

/// Write one object of this leader's version.
async fn write_object(
    base: &mut Base,
    fence: ObjectsFence,
    object: i32,
    shard: &str,
    token: i64,
) -> Option<Stop> {
    let value = object_value(token, object);
    base.h.invoke(
        "write-object",
        json!({ "object": object, "shard": shard, "version": token, "token": token }),
    );
    let sql = match fence {
        ObjectsFence::Off => SQL_WRITE,
        ObjectsFence::Write | ObjectsFence::Grant => SQL_WRITE_GUARDED,
        ObjectsFence::Pointer => SQL_SIDE,
    };
    let db = match base.shard(shard) {
        Ok(db) => db,
        Err(msg) => return Some(Stop::Bad(msg)),
    };
    match db.execute(sql, &[&object, &token, &value]).await {
        Ok(0) if fence != ObjectsFence::Pointer => {
            let shard_token = db
                .query(SQL_OBJECT_TOKEN, &[&object])
                .await
                .ok()
                .and_then(|rows| rows.first().map(|r| r.get::<_, i64>(0)));
            let mut v = fenced_value(token, shard_token, shard, None);
            v["object"] = json!(object);
            base.h.fail("write-object", v);
            eprintln!(
                "{}",
                fenced_message(&base.env.box_name, shard, token, shard_token)
            );
            Some(Stop::Fenced)
        }
        Ok(_) => {
            base.h.ok(
                "write-object",
                json!({ "object": object, "version": token }),
            );
            None
        }
        Err(e) if e.schema() => Some(Stop::Bad(format!(
            "{shard} lacks the objects ({e}): load workloads/sql/objects.sql"
        ))),
        Err(e) => {
            base.h.emit(
                failure_kind(&e),
                "write-object",
                json!({ "object": object, "reason": "unreachable", "error": e.to_string() }),
            );
            Some(Stop::GiveUp(format!("cannot write object {object}: {e}")))
        }
    }
}

/// The pointer design's one atomic step: flip the pointer to this version, unless a newer
/// leader already has.
async fn flip(base: &mut Base, shard: &str, token: i64) -> Option<Stop> {
    base.h.invoke(
        "flip",
        json!({ "shard": shard, "version": token, "token": token }),
    );
    let db = match base.shard(shard) {
        Ok(db) => db,
        Err(msg) => return Some(Stop::Bad(msg)),
    };
    match db.execute(SQL_FLIP, &[&token]).await {
        Ok(0) => {
            let shard_token = db
                .query(SQL_POINTER_TOKEN, &[])
                .await
                .ok()
                .and_then(|rows| rows.first().map(|r| r.get::<_, i64>(0)));
            base.h
                .fail("flip", fenced_value(token, shard_token, shard, None));
            eprintln!(
                "{}",
                fenced_message(&base.env.box_name, shard, token, shard_token)
            );
            Some(Stop::Fenced)
        }
        Ok(_) => {
            base.h.ok("flip", json!({ "version": token }));
            None
        }
        Err(e) => {
            base.h.emit(
                failure_kind(&e),
                "flip",
                json!({ "reason": "unreachable", "error": e.to_string() }),
            );
            Some(Stop::GiveUp(format!("cannot flip the pointer: {e}")))
        }
    }
}
