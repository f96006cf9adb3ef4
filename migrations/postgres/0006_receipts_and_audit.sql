-- Signed receipts of terminal contracts, and the append-only guarantee of the audit log.
-- Keep in step with ../sqlite/0006_receipts_and_audit.sql.

-- One receipt per contract, issued once when first asked for after the contract ended and
-- never re-signed: a party holding it and the gateway agree on its exact bytes.
create table contract_receipt (
    contract_id text primary key references contract (contract_id),
    kid         text not null,
    token       text not null,
    issued_at   bigint not null
);

-- The event log is the audit trail: refuse any change or removal, whoever asks.
create function hiregate_refuse_change() returns trigger language plpgsql as $$
begin
    raise exception '% is append-only', tg_table_name;
end;
$$;

create trigger contract_event_no_update before update or delete on contract_event
    for each row execute function hiregate_refuse_change();

-- TRUNCATE bypasses row triggers; refuse it too.
create trigger contract_event_no_truncate before truncate on contract_event
    for each statement execute function hiregate_refuse_change();

create trigger contract_receipt_no_update before update on contract_receipt
    for each row execute function hiregate_refuse_change();
