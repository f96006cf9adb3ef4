-- Nonces of the sign-in-with-x (CAIP-122 / EIP-4361) proofs a wallet seeker presented to read its
-- contracts. A proof is accepted once: its nonce is claimed by inserting it here, and a second
-- insert of the same nonce (a replay, on this instance or another sharing the database) finds
-- it taken. A row is kept until the proof it came from can no longer be accepted anyway
-- (expires_at, unix ms), then purged. Keep in step with ../sqlite/0022_siwx_nonce.sql.
create table siwx_nonce (
    nonce      text primary key,
    expires_at bigint not null
);
create index siwx_nonce_expires_idx on siwx_nonce (expires_at);
-- A signed-in wallet lists the contracts it paid for (GET /v1/wallet/contracts) by payer.
create index payment_payer_idx on payment (payer);
