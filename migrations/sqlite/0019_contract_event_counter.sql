-- The contract row counts its events. Keep in step with ../postgres/0019_contract_event_counter.sql.
-- Each event takes its seq from the row update that locks the contract (`event_seq + 1 ...
-- returning event_seq`), so on PostgreSQL a state change and its event can be one statement
-- (a data-modifying CTE) without reading `max(seq)` from a snapshot older than the lock.
alter table contract add column event_seq integer not null default 0;
update contract set event_seq = coalesce(
    (select max(seq) from contract_event where contract_event.contract_id = contract.contract_id), 0);
