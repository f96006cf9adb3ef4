-- Protocol-specific listing settings as JSON (Superwire: the workflow source every hire runs).
-- Keep in step with ../postgres/0005_worker_protocol_options.sql.
alter table worker add column protocol_options text not null default '{}';
