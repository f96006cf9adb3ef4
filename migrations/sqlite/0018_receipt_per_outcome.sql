-- One receipt per terminal outcome of a contract. Keep in step with
-- ../postgres/0018_receipt_per_outcome.sql.
-- A contract can leave a terminal state (an operator's dispute of a failure settles it; an
-- arbiter refunds a settled escrow), and a receipt written once per contract would then keep
-- vouching for the old outcome. Each outcome now has its own write-once receipt. Receipts issued
-- before this migration keep their bytes under outcome '' (their outcome is in the signed token).
create table contract_receipt_per_outcome (
    contract_id text not null references contract (contract_id),
    outcome     text not null,
    kid         text not null,
    token       text not null,
    issued_at   integer not null,
    primary key (contract_id, outcome)
) strict;

insert into contract_receipt_per_outcome (contract_id, outcome, kid, token, issued_at)
    select contract_id, '', kid, token, issued_at from contract_receipt;

drop table contract_receipt;

alter table contract_receipt_per_outcome rename to contract_receipt;

create trigger contract_receipt_no_update before update on contract_receipt
begin
    select raise(abort, 'contract_receipt is write-once');
end;
