-- Worker completion callbacks already accepted, by the Standard Webhooks `webhook-id` the
-- worker signed: a replayed callback (same worker, same id) is refused even inside the
-- timestamp window. Keep in step with ../postgres/0004_worker_callbacks.sql.
create table callback_receipt (
    worker_id   text not null references worker (worker_id),
    webhook_id  text not null,
    contract_id text not null references contract (contract_id),
    received_at integer not null,
    primary key (worker_id, webhook_id)
) strict;
