-- What the worker said about its own listing when it was last probed at registration or
-- update (Superwire `/validate` diagnostics), shown to its operator. JSON text; null when the
-- worker said nothing. Keep in step with ../postgres/0016_worker_probe_diagnostics.sql.
alter table worker add column probe_diagnostics text;
