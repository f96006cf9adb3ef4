-- A contract's signed documents in a table of their own, written once when the contract is
-- proposed: its terms, the gateway's JWS over them and the payment offer its 402 carries. Keep
-- in step with ../postgres/0026_contract_document.sql.
--
-- Together they are several KiB, so in the contract row they spilled into overflow pages, and
-- the columns added later (state's neighbours event_seq, queued_at, settlement_retries, the
-- webhook_url the outbox trigger reads on every event) sat behind them. Every event rewrote the
-- row: when its size changed (a state of another length, a first deadline), SQLite freed and
-- wrote the whole overflow chain again, and reading any late column walked the chain. The
-- contract row now holds only what changes or is searched on, a few hundred bytes.
create table contract_document (
    contract_id   text primary key references contract (contract_id),
    terms         text not null,
    gateway_jws   text not null,
    payment_offer text
) strict;
insert into contract_document (contract_id, terms, gateway_jws, payment_offer)
    select contract_id, terms, gateway_jws, payment_offer from contract;
alter table contract drop column terms;
alter table contract drop column gateway_jws;
alter table contract drop column payment_offer;
