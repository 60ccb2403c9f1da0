-- The routing db: the lock service (DESIGN section 4), the move plan and the claim audit.
-- Installed by the harness before any mover starts. Placeholders: none.

create table if not exists claims (
    job        text primary key,
    holder     text,
    token      bigint not null default 0,
    expires_at timestamptz not null default '-infinity'
);

-- Tokens only go up. The harness sets its start per scenario (April: 17).
create sequence if not exists claim_tokens;

create table if not exists move_plan (
    position   int primary key,
    turbine_id text not null,
    from_shard text not null,
    to_shard   text not null
);

-- Acquire: succeeds when the row is absent or expired (by this server's
-- clock) and hands out a NEW token; null when somebody else holds it.
-- Concurrent callers serialize on the row lock BEFORE a token is drawn: the
-- loser re-reads the winner's expiry and burns no token, so tokens run
-- without gaps (an UPDATE that draws nextval in its SET list would draw it
-- before it waits for the row, and the loser's value would be lost).
create or replace function claim_acquire(p_job text, p_holder text, p_lease_ms bigint)
returns bigint language plpgsql as $$
declare t bigint; e timestamptz;
begin
    insert into claims (job) values (p_job) on conflict (job) do nothing;
    select expires_at into e from claims where job = p_job for update;
    if e >= clock_timestamp() then
        return null;
    end if;
    update claims
       set holder = p_holder,
           token = nextval('claim_tokens'),
           expires_at = clock_timestamp() + p_lease_ms * interval '1 millisecond'
     where job = p_job
    returning token into t;
    return t;
end $$;

-- Renew: succeeds while holder and token are still the caller's; moves the expiry.
-- Note: it does not look at the expiry's time. A holder whose lease lapsed but
-- which nobody replaced keeps it, as in April's lock. A released claim stays
-- released: a renewal that arrives after the release (sent before it) is refused.
create or replace function claim_renew(p_job text, p_holder text, p_token bigint, p_lease_ms bigint)
returns boolean language plpgsql as $$
begin
    update claims
       set expires_at = clock_timestamp() + p_lease_ms * interval '1 millisecond'
     where job = p_job and holder = p_holder and token = p_token
       and expires_at <> '-infinity';
    return found;
end $$;

-- Release: the holder gives the claim up when its work is done.
create or replace function claim_release(p_job text, p_holder text, p_token bigint)
returns boolean language plpgsql as $$
begin
    update claims set expires_at = '-infinity'
     where job = p_job and holder = p_holder and token = p_token;
    return found;
end $$;

-- An advisory lock (`CHAOS_LOCK=advisory`) mints no token: the fenced design draws one from
-- claim_tokens under the lock and records it beside the session that holds it, so the
-- harness's observer (pg_locks, polled) can name the grant's token.
create table if not exists lock_tokens (
    pid           int not null,
    backend_start timestamptz not null,
    holder        text not null,
    token         bigint not null
);

-- Lesson 007's election: at-most-once, no expiry, no renewal.
create table if not exists job_runs (
    job    text not null,
    run_on date not null,
    holder text not null,
    primary key (job, run_on)
);

-- The audit: every committed change of a claim row, with the writer's xid
-- (commit time comes from pg_xact_commit_timestamp(xmin) when dumped).
create table if not exists chaos_claim_audit (
    id         bigserial primary key,
    job        text not null,
    holder     text,
    token      bigint not null,
    expires_at timestamptz not null,
    app        text not null,
    xid        bigint not null
);

create or replace function chaos_claim_audit_fn() returns trigger language plpgsql as $$
begin
    insert into chaos_claim_audit (job, holder, token, expires_at, app, xid)
    values (new.job, new.holder, new.token, new.expires_at,
            coalesce(current_setting('application_name', true), ''), txid_current());
    -- Pushed to the harness as the change commits (a trigger on grant or renew listens).
    -- `held`: whether the claim still runs; a release (expires_at in the past) keeps its
    -- holder and token in the row but is no renewal.
    perform pg_notify('chaos_claims', json_build_object(
        'holder', new.holder, 'token', new.token,
        'held', new.expires_at > clock_timestamp())::text);
    return null;
end $$;

drop trigger if exists chaos_claim_audit on claims;
create trigger chaos_claim_audit after insert or update on claims
    for each row execute function chaos_claim_audit_fn();

-- job_runs inserts count as grants too (election = unique): token 0.
create or replace function chaos_job_runs_audit_fn() returns trigger language plpgsql as $$
begin
    insert into chaos_claim_audit (job, holder, token, expires_at, app, xid)
    values (new.job, new.holder, 0, 'infinity',
            coalesce(current_setting('application_name', true), ''), txid_current());
    -- The winner is the holder for a trigger too (`by = "holder"`).
    perform pg_notify('chaos_claims', json_build_object(
        'holder', new.holder, 'token', 0)::text);
    return null;
end $$;

drop trigger if exists chaos_job_runs_audit on job_runs;
create trigger chaos_job_runs_audit after insert on job_runs
    for each row execute function chaos_job_runs_audit_fn();

-- The ten objects (system `ten-objects`): where each object lives (object 0 is the pointer),
-- and the job's done marker: the version a leader finished publishing.
create table if not exists config_layout (
    object_id int primary key,
    shard     text not null
);
create table if not exists config_published (
    job     text primary key,
    version bigint not null,
    holder  text not null
);

-- Lesson 007's payout (system `payout`): the month's plan and the payer's own record of what it
-- has sent. Everything here is safe to run twice; the send itself (a row of the processor's
-- ledger, processor.sql) is not. The election is `claims` (lease) or `job_runs` (unique).
create table if not exists payout_plan (
    position     int primary key,
    publisher    text not null,
    month        text not null,
    amount_cents bigint not null,
    -- The shard that plays the card processor.
    processor    text not null
);
create table if not exists payout_progress (
    publisher text not null,
    month     text not null,
    paid_by   text not null,
    token     bigint not null,
    primary key (publisher, month)
);
