-- Partial escrowed payments (a metered auth-capture contract, an arbiter's partial refund):
-- remainder_tx, the void of what a metered capture left locked (the payment's amount being what
-- was captured); refunded_amount, what an arbiter's refund returns (null: the whole amount).
-- Keep in step with ../sqlite/0025_partial_escrow.sql.
alter table payment add column remainder_tx text;
alter table payment add column refunded_amount text;
