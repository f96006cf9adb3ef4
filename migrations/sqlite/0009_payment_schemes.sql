-- Payment schemes a listing accepts (x402 wire names, comma-separated, preferred first) and its
-- marketplace fee for escrowed (auth-capture) contracts, in basis points (null: the gateway's
-- escrow.default_fee_bps). Keep in step with ../postgres/0009_payment_schemes.sql.
alter table worker add column payment_schemes text not null default 'exact';
alter table worker add column fee_bps integer;
