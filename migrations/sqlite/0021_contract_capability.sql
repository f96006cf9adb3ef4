-- Contracts hired over the stable x402 resource (POST /x402/workers/{id}/{task}) have no API-key
-- seeker: the payer's wallet is the seeker, and a per-contract capability token returned with
-- the paid answer proves it on the contract's read routes. Stored as the token's SHA-256 (hex),
-- like API keys. Keep in step with ../postgres/0021_contract_capability.sql.
create table contract_capability (
    token_hash  text primary key,
    contract_id text not null references contract (contract_id),
    created_at  integer not null
) strict;
create index contract_capability_contract_idx on contract_capability (contract_id);
