-- The card processor's ledger (system `payout`): it takes every payment it is sent. No
-- conditional write, no fence: a resource that cannot keep score. An idempotency key, when the
-- sender gives one, is the only thing that makes a second send of the same payment harmless.

create table if not exists payouts (
    id              bigserial primary key,
    publisher       text not null,
    month           text not null,
    amount_cents    bigint not null,
    idempotency_key text unique,
    token           bigint,
    app             text not null default coalesce(current_setting('application_name', true), ''),
    paid_at         timestamptz not null default clock_timestamp()
);
