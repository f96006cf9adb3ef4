-- Signed receipts of terminal contracts, and the append-only guarantee of the audit log.
-- Keep in step with ../postgres/0006_receipts_and_audit.sql.

-- One receipt per contract, issued once when first asked for after the contract ended and
-- never re-signed: a party holding it and the gateway agree on its exact bytes.
create table contract_receipt (
    contract_id text primary key references contract (contract_id),
    kid         text not null,
    token       text not null,
    issued_at   integer not null
) strict;

-- The event log is the audit trail: refuse any change or removal, whoever asks.
create trigger contract_event_no_update before update on contract_event
begin
    select raise(abort, 'contract_event is append-only');
end;

create trigger contract_event_no_delete before delete on contract_event
begin
    select raise(abort, 'contract_event is append-only');
end;

create trigger contract_receipt_no_update before update on contract_receipt
begin
    select raise(abort, 'contract_receipt is write-once');
end;
