-- Worker listings describe themselves to seekers: a display name, a description, a JSON Schema
-- for task inputs (checked at registration, enforced at proposal) and sample inputs (a JSON
-- array, each valid against input_schema). All optional: older listings keep working.
-- GET /v1/contracts pages newest first over (created_at, contract_id) for admins, and by worker
-- for operators.
-- Keep in step with ../sqlite/0011_listing_metadata.sql.
alter table worker add column name text;
alter table worker add column description text;
alter table worker add column input_schema text;
alter table worker add column examples text;
create index contract_created_idx on contract (created_at, contract_id);
create index contract_worker_created_idx on contract (worker_id, created_at);
