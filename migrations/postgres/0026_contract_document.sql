-- A contract's signed documents in a table of their own, written once when the contract is
-- proposed: its terms, the gateway's JWS over them and the payment offer its 402 carries. Keep
-- in step with ../sqlite/0026_contract_document.sql (whose comment says what it saves there;
-- here TOAST already kept the large values out of the row, and the tables stay alike).
create table contract_document (
    contract_id   text primary key references contract (contract_id),
    terms         text not null,
    gateway_jws   text not null,
    payment_offer text
);
insert into contract_document (contract_id, terms, gateway_jws, payment_offer)
    select contract_id, terms, gateway_jws, payment_offer from contract;
alter table contract
    drop column terms,
    drop column gateway_jws,
    drop column payment_offer;
