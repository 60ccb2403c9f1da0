-- A shard: readings (no unique constraint, as at Galewatch), the fence, and the audit.

create table if not exists readings (
    turbine_id text not null,
    ts         timestamptz not null,
    value      double precision not null
);
create index if not exists readings_turbine_ts on readings (turbine_id, ts);
-- Autovacuum on the scenario's clock. A moved turbine leaves its source's
-- index full of dead entries until a vacuum; an existence check then visits
-- every one (about 4-7 ms real instead of under 1 ms). At Galewatch autovacuum
-- ran every minute; at 10 ms per scenario second a default server would not
-- vacuum once in the whole night, and box 3's walk over 107 moved turbines
-- would take 75 scenario s instead of 9. So: a vacuum every ~3 moved turbines
-- (with `autovacuum_naptime = 1s` on the server), at the default throttle (an
-- unthrottled vacuum slowed the copies on a 2-core machine), never truncating
-- (truncation wants an exclusive lock the ingest would queue behind).
-- And no autoanalyze during the night: the statistics the seeding took stay
-- true (the same turbines with the same rows per turbine, only their shard
-- changes), while each analyze costs 0.15-0.18 s of CPU, 15-18 scenario s at
-- this scale. With the default (10% of the table changed) the three shards
-- ran 34 analyzes a night, often together, and one that fell in box 2's copy
-- of turbine 105 made it 17 s late and cost the night its 107th turbine.
alter table readings set (
    autovacuum_vacuum_scale_factor = 0,
    autovacuum_vacuum_threshold = 50000,
    vacuum_truncate = false,
    autovacuum_analyze_scale_factor = 0,
    autovacuum_analyze_threshold = 2000000000
);

create table if not exists mover_fence (token bigint not null);
insert into mover_fence select 0 where not exists (select 1 from mover_fence);

-- Every committed INSERT/DELETE on readings, per statement and turbine,
-- and every fence update. The writer may say its token with
-- `set chaos.token = '17'` (or set_config('chaos.token', '17', true)).
create table if not exists chaos_write_audit (
    id         bigserial primary key,
    op         text not null,
    turbine_id text,
    n_rows     bigint not null,
    min_ts     timestamptz,
    max_ts     timestamptz,
    token      bigint,
    app        text not null,
    xid        bigint not null
);

create or replace function chaos_token() returns bigint language sql stable as $$
    select nullif(current_setting('chaos.token', true), '')::bigint
$$;

-- The ingest writes hundreds of turbines a statement, all night: its rows are
-- audited one row per statement (turbine_id null), which keeps the trigger's
-- cost and the audit's size small; every other writer (a mover) per turbine.
create or replace function chaos_readings_ins_fn() returns trigger language plpgsql as $$
declare app text := coalesce(current_setting('application_name', true), '');
begin
    if app like 'ingest%' then
        insert into chaos_write_audit (op, turbine_id, n_rows, min_ts, max_ts, token, app, xid)
        select 'insert', null, count(*), min(ts), max(ts), chaos_token(), app, txid_current()
          from new_rows;
    else
        insert into chaos_write_audit (op, turbine_id, n_rows, min_ts, max_ts, token, app, xid)
        select 'insert', turbine_id, count(*), min(ts), max(ts), chaos_token(), app, txid_current()
          from new_rows group by turbine_id;
    end if;
    return null;
end $$;

create or replace function chaos_readings_del_fn() returns trigger language plpgsql as $$
begin
    insert into chaos_write_audit (op, turbine_id, n_rows, min_ts, max_ts, token, app, xid)
    select 'delete', turbine_id, count(*), min(ts), max(ts), chaos_token(),
           coalesce(current_setting('application_name', true), ''), txid_current()
      from old_rows group by turbine_id;
    return null;
end $$;

create or replace function chaos_fence_fn() returns trigger language plpgsql as $$
begin
    insert into chaos_write_audit (op, turbine_id, n_rows, token, app, xid)
    select 'fence', null, count(*), max(token),
           coalesce(current_setting('application_name', true), ''), txid_current()
      from new_rows having count(*) > 0;
    return null;
end $$;
