-- The x402 offer a contract asks for, fixed when the contract is signed: the PaymentRequired
-- document (resource, accepts[0] with the seven requirement fields, extensions) without its
-- `error`. Execute compares a payment's `accepted` with this stored copy and sends it to the
-- facilitator, so a configuration change never alters what an existing contract accepts.
-- Keep in step with ../postgres/0002_contract_payment_offer.sql.
alter table contract add column payment_offer text;
