-- hiregate schema, SQLite dialect. Keep in step with ../postgres/0001_initial.sql (same file
-- names, same tables, same constraints; a test checks the names). Never edit an applied
-- migration: add the next number instead.
--
-- Conventions: ids are prefixed ULIDs (TEXT; byte-order collation where listings page by id); times are Unix milliseconds UTC (INTEGER);
-- token amounts are decimal TEXT (uint256 does not fit an integer column); JSON is TEXT here
-- and JSONB on PostgreSQL. Uniqueness that protects money lives in constraints, so concurrent
-- duplicates resolve to one winner whatever the number of gateway instances.

-- API keys, stored as SHA-256 of the key. principal_id is the owning seeker/operator account.
create table api_key (
    api_key_id   text primary key,
    key_hash     text not null,
    key_prefix   text not null,
    role         text not null check (role in ('seeker', 'operator', 'admin')),
    principal_id text not null,
    label        text,
    created_at   integer not null,
    revoked_at   integer,
    constraint api_key_hash_unique unique (key_hash)
) strict;
create index api_key_principal_idx on api_key (principal_id);

-- Worker listings. Retired listings stay (contracts reference them); health is debounced by
-- consecutive_misses; next_probe_at is the lease that lets several instances share probing.
create table worker (
    worker_id          text primary key,
    operator_id        text not null,
    endpoint           text not null,
    protocol           text not null check (protocol in ('hire', 'wattswarm', 'superwire')),
    pay_to             text not null,
    network            text not null,
    asset              text not null,
    max_parallel       integer not null check (max_parallel > 0),
    health             text not null check (health in ('healthy', 'unhealthy')),
    consecutive_misses integer not null default 0 check (consecutive_misses >= 0),
    last_probe_at      integer,
    last_probe_error   text,
    next_probe_at      integer not null,
    callback_secret    text not null,
    created_at         integer not null,
    updated_at         integer not null,
    retired_at         integer
) strict;
create index worker_operator_idx on worker (operator_id);
create index worker_probe_due_idx on worker (next_probe_at) where retired_at is null;

-- One row per task type a worker offers. price_key is the price zero-padded to 78 digits so
-- text order is numeric order (max_price filters in SQL on both backends).
create table worker_task (
    worker_id     text not null references worker (worker_id),
    task_type     text not null,
    price         text not null,
    price_key     text not null,
    output_schema text not null,
    primary key (worker_id, task_type)
) strict;
create index worker_task_type_price_idx on worker_task (task_type, price_key);

-- Contracts between a seeker and a worker. terms is the signed terms document, terms_hash its
-- canonical hash, gateway_jws the gateway's signature over it. deadline_at is the next
-- time-based transition (offer expiry, authorization expiry, acceptance window end) for sweeps.
create table contract (
    contract_id   text primary key,
    seeker_id     text not null,
    worker_id     text not null references worker (worker_id),
    task_type     text not null,
    terms         text not null,
    terms_hash    text not null,
    gateway_jws   text not null,
    state         text not null,
    attempts_used integer not null default 0 check (attempts_used >= 0),
    deadline_at   integer,
    created_at    integer not null,
    updated_at    integer not null,
    constraint contract_terms_hash_unique unique (terms_hash)
) strict;
create index contract_seeker_idx on contract (seeker_id, created_at);
create index contract_worker_state_idx on contract (worker_id, state);
create index contract_deadline_idx on contract (deadline_at) where deadline_at is not null;

-- Append-only audit trail. seq counts 1, 2, 3… per contract and is the SSE event id: it is
-- assigned while the contract row is locked, so a reader never sees seq n+1 before n.
-- event_id orders events across contracts (webhook outbox).
create table contract_event (
    event_id       integer primary key autoincrement,
    contract_id    text not null references contract (contract_id),
    seq            integer not null check (seq > 0),
    at             integer not null,
    actor          text not null,
    correlation_id text not null,
    kind           text not null,
    from_state     text,
    to_state       text,
    details        text not null,
    constraint contract_event_seq_unique unique (contract_id, seq)
) strict;

-- x402 payments. An authorization (network, asset, payer, nonce) pays at most one contract;
-- payment_identifier is the x402 payment-identifier extension; settle_started_at is set when
-- the payment enters settlement, and at most one payment per contract may ever do so.
create table payment (
    payment_id         text primary key,
    contract_id        text not null references contract (contract_id),
    network            text not null,
    asset              text not null,
    payer              text not null,
    nonce              text not null,
    amount             text not null,
    valid_after        integer not null,
    valid_before       integer not null,
    payload            text not null,
    payload_hash       text not null,
    payment_identifier text,
    state              text not null,
    settle_started_at  integer,
    settle_tx          text,
    settle_response    text,
    created_at         integer not null,
    updated_at         integer not null,
    constraint payment_authorization_unique unique (network, asset, payer, nonce),
    constraint payment_identifier_unique unique (payment_identifier)
) strict;
create index payment_contract_idx on payment (contract_id);
create unique index payment_one_settlement_per_contract
    on payment (contract_id) where settle_started_at is not null;

-- Each forward of a paid contract to its worker (retries reuse the held payment).
create table attempt (
    attempt_id     text primary key,
    contract_id    text not null references contract (contract_id),
    attempt_no     integer not null check (attempt_no > 0),
    payment_id     text references payment (payment_id),
    state          text not null,
    worker_task_id text,
    poll_url       text,
    http_status    integer,
    error          text,
    started_at     integer not null,
    finished_at    integer,
    constraint attempt_no_unique unique (contract_id, attempt_no)
) strict;

-- Deliverables of an attempt, with their bytes kept for dispute replay.
create table deliverable (
    deliverable_id text primary key,
    contract_id    text not null references contract (contract_id),
    attempt_id     text not null references attempt (attempt_id),
    position       integer not null check (position >= 0),
    name           text,
    kind           text not null,
    media_type     text,
    digest         text not null,
    size_bytes     integer not null check (size_bytes >= 0),
    content        blob,
    source_url     text,
    created_at     integer not null,
    constraint deliverable_position_unique unique (attempt_id, position)
) strict;
create index deliverable_contract_idx on deliverable (contract_id);

-- Verification results (pinned policy applied to an attempt's deliverables; disputes replay).
create table verification (
    verification_id      text primary key,
    contract_id          text not null references contract (contract_id),
    attempt_id           text references attempt (attempt_id),
    policy_id            text not null,
    policy_version       text not null,
    policy_hash          text not null,
    passed               integer not null check (passed in (0, 1)),
    score                real not null,
    reason_codes         text not null,
    status               text not null check (status in ('passed', 'failed', 'inconclusive')),
    verifier_result_hash text not null,
    result               text not null,
    created_at           integer not null
) strict;
create index verification_contract_idx on verification (contract_id);

-- Background work (polling, webhooks, settlement retries, sweeps), claimed with a lease so
-- several instances share it and a crashed instance's jobs are picked up when its lease ends.
-- dedupe_key makes enqueueing idempotent (e.g. one settle job per contract).
create table job (
    job_id      text primary key,
    kind        text not null,
    dedupe_key  text,
    payload     text not null,
    state       text not null check (state in ('queued', 'done', 'dead')),
    run_at      integer not null,
    attempts    integer not null default 0 check (attempts >= 0),
    lease_owner text,
    lease_until integer,
    last_error  text,
    created_at  integer not null,
    updated_at  integer not null,
    constraint job_dedupe_unique unique (dedupe_key)
) strict;
create index job_due_idx on job (kind, run_at) where state = 'queued';
