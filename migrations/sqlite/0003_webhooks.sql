-- Seeker webhooks: per-seeker signing secrets, endpoints disabled by a 410, the delivery outbox
-- and its attempt log. Keep in step with ../postgres/0003_webhooks.sql.
--
-- The outbox is filled by a trigger on contract_event, so the delivery row commits in the same
-- transaction as the event it announces, whichever code path appended the event: a crash can
-- neither lose a webhook nor enqueue it twice (event_id is the primary key). A tailer reading
-- contract_event by event_id would be simpler to write but could skip events, because
-- autoincrement ids are not committed in id order on PostgreSQL.

-- One Standard Webhooks secret (whsec_…) per seeker. Kept in clear like worker callback
-- secrets: HMAC signing needs the key itself.
create table webhook_secret (
    seeker_id  text primary key,
    secret     text not null,
    created_at integer not null
) strict;

-- A seeker's webhook URL that answered 410 Gone: no further deliveries until the seeker asks
-- for a redelivery (which re-enables it).
create table webhook_endpoint (
    seeker_id       text not null,
    url             text not null,
    disabled_at     integer not null,
    disabled_status integer not null,
    primary key (seeker_id, url)
) strict;

-- One row per (event, webhook): the message id sent as `webhook-id` derives from event_id, so it
-- is stable across retries and redeliveries. Claimed with a lease like `job`. `attempts` counts
-- tries in the current round (reset by a redelivery); `total_attempts` never resets.
create table webhook_delivery (
    event_id        integer primary key references contract_event (event_id),
    contract_id     text not null references contract (contract_id),
    seeker_id       text not null,
    url             text not null,
    state           text not null check (state in ('pending', 'delivered', 'dead')),
    attempts        integer not null default 0 check (attempts >= 0),
    total_attempts  integer not null default 0 check (total_attempts >= 0),
    next_attempt_at integer not null,
    lease_owner     text,
    lease_until     integer,
    last_status     integer,
    last_error      text,
    created_at      integer not null,
    updated_at      integer not null,
    finished_at     integer
) strict;
create index webhook_delivery_due_idx on webhook_delivery (next_attempt_at) where state = 'pending';
create index webhook_delivery_contract_idx on webhook_delivery (contract_id, event_id);
create index webhook_delivery_dead_idx on webhook_delivery (seeker_id, event_id) where state = 'dead';

-- Every HTTP try of a delivery (the per-contract delivery log).
create table webhook_attempt (
    attempt_id  integer primary key autoincrement,
    event_id    integer not null references webhook_delivery (event_id),
    attempt_no  integer not null check (attempt_no > 0),
    at          integer not null,
    http_status integer,
    error       text,
    duration_ms integer not null check (duration_ms >= 0)
) strict;
create index webhook_attempt_event_idx on webhook_attempt (event_id, attempt_no);

create trigger contract_event_webhook_outbox after insert on contract_event
for each row
begin
    insert into webhook_delivery (event_id, contract_id, seeker_id, url, state, attempts,
        total_attempts, next_attempt_at, created_at, updated_at)
    select new.event_id, new.contract_id, c.seeker_id, json_extract(c.terms, '$.webhook_url'),
        'pending', 0, 0, new.at, new.at, new.at
    from contract c
    where c.contract_id = new.contract_id
      and json_extract(c.terms, '$.webhook_url') is not null;
end;
