-- Escrowed (auth-capture) payments: the transaction that locked the money (authorize) and the one
-- that returned it to the payer (void, refund or the payer's reclaim). The capture is the
-- settlement and keeps using settle_tx. For these payments valid_before holds the escrow's
-- capture deadline: the time by which the gateway must capture or void what it holds.
-- Keep in step with ../postgres/0010_escrow_transactions.sql.
alter table payment add column authorize_tx text;
alter table payment add column release_tx text;
