-- One receipt per terminal outcome of a contract. Keep in step with
-- ../sqlite/0018_receipt_per_outcome.sql.
-- A contract can leave a terminal state (an operator's dispute of a failure settles it; an
-- arbiter refunds a settled escrow), and a receipt written once per contract would then keep
-- vouching for the old outcome. Each outcome now has its own write-once receipt. Receipts issued
-- before this migration keep their bytes under outcome '' (their outcome is in the signed token).
alter table contract_receipt add column outcome text not null default '';
alter table contract_receipt alter column outcome drop default;
alter table contract_receipt drop constraint contract_receipt_pkey;
alter table contract_receipt add primary key (contract_id, outcome);
