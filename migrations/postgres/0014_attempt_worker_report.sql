-- What a HIRE worker said beside its deliverable: its free-form `metadata` (execution time,
-- model; JSON text, as every JSON column since 0008) and, for pending work, its
-- `estimated_completion`. Shown in the contract view and the execute answer; never part of the
-- deliverable digest. Keep in step with
-- ../sqlite/0014_attempt_worker_report.sql.
alter table attempt add column worker_metadata text;
alter table attempt add column estimated_completion text;
