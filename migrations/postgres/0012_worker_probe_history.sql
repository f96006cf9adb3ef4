-- The recent health probes of each listing, for its operator's health history. Only the latest
-- probes are kept (the store prunes older rows in the probe's own transaction), so the table
-- stays small however often the health loop runs. Keep in step with
-- ../sqlite/0012_worker_probe_history.sql.
create table worker_probe (
    probe_id   bigserial primary key,
    worker_id  text not null references worker (worker_id),
    at         bigint not null,
    passed     boolean not null,
    health     text not null check (health in ('healthy', 'unhealthy')),
    error      text
);
create index worker_probe_worker_idx on worker_probe (worker_id, probe_id);
