-- What the worker said about its own listing when it was last probed at registration or
-- update (Superwire `/validate` diagnostics), shown to its operator. JSON text (as every JSON
-- column since 0008); null when the worker said nothing. Keep in step with
-- ../sqlite/0016_worker_probe_diagnostics.sql.
alter table worker add column probe_diagnostics text;
