-- A settlement whose outcome is unknown is retried in place. Keep in step with
-- ../postgres/0020_settlement_retries.sql.
-- A retry that changes nothing (the chain still shows the money unmoved and usable) is not a
-- state change, so it appends no event: the contract counts it here instead, and the retry's
-- claim bumps `updated_at`, which the settlement sweep waits on.
alter table contract add column settlement_retries integer not null default 0;
