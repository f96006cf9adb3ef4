-- SW4RM semantics of a paid gateway. Keep in step with
-- ../postgres/0017_correlation_and_worker_queue.sql.
-- correlation_id: the one id that follows a hire from proposal to receipt (requests, jobs, worker
-- calls, webhooks); fixed at proposal. Null for contracts proposed before this migration: they
-- keep the per-request ids they had.
alter table contract add column correlation_id text;
-- queued_at: a paid contract waiting for a free slot at its worker (beyond max_parallel), in
-- arrival order; cleared when its attempt starts. The queue is counted from here, so every
-- instance (and one restarted after a crash) sees the same queue.
alter table contract add column queued_at integer;
create index contract_worker_queue_idx on contract (worker_id, queued_at)
    where queued_at is not null;
