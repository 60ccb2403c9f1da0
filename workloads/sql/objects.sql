-- Ten objects under one lease (system `ten-objects`), on every shard: the objects this shard
-- holds, the versions written beside them, the pointer (used on one shard only), and the audit.
-- An object accepts a write only if the writer's token is at least the highest it has obeyed
-- (the guarded update `... where object_id = $1 and token <= $t`); no transaction spans two
-- shards, so no statement updates the ten together.

create table if not exists config_objects (
    object_id  int primary key,
    version    bigint not null default 0,
    token      bigint not null default 0,
    value      text not null,
    written_by text not null default ''
);

-- The pointer design: a leader writes its version beside the live one, then flips the pointer.
create table if not exists config_versions (
    version    bigint not null,
    object_id  int not null,
    token      bigint not null,
    value      text not null,
    written_by text not null default coalesce(current_setting('application_name', true), ''),
    primary key (version, object_id)
);

create table if not exists config_pointer (
    version bigint not null,
    token   bigint not null
);

-- Every committed write to an object, a side version or the pointer, with the writer's xid
-- (commit time from pg_xact_commit_timestamp(xmin) when dumped).
create table if not exists chaos_object_audit (
    id        bigserial primary key,
    object_id int not null,
    kind      text not null,
    version   bigint not null,
    token     bigint not null,
    app       text not null,
    xid       bigint not null
);

create or replace function chaos_object_fn() returns trigger language plpgsql as $$
declare app text := coalesce(current_setting('application_name', true), '');
begin
    if tg_table_name = 'config_objects' then
        insert into chaos_object_audit (object_id, kind, version, token, app, xid)
        values (new.object_id,
                case when new.value is distinct from old.value or new.version <> old.version
                     then 'content' else 'fence' end,
                new.version, new.token, app, txid_current());
    elsif tg_table_name = 'config_versions' then
        insert into chaos_object_audit (object_id, kind, version, token, app, xid)
        values (new.object_id, 'side', new.version, new.token, app, txid_current());
    else
        insert into chaos_object_audit (object_id, kind, version, token, app, xid)
        values (0, 'pointer', new.version, new.token, app, txid_current());
    end if;
    return null;
end $$;
