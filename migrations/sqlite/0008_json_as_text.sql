-- JSON columns hold the gateway's serialized JSON as TEXT (they always did here; PostgreSQL
-- moves from jsonb to text in this step). Keep in step with ../postgres/0008_json_as_text.sql.
--
-- The webhook outbox trigger reads the contract's webhook_url column, filled when the contract
-- is inserted, instead of looking inside the terms, so both dialects enqueue from the same
-- column.

alter table contract add column webhook_url text;
update contract set webhook_url = json_extract(terms, '$.webhook_url');

drop trigger contract_event_webhook_outbox;
create trigger contract_event_webhook_outbox after insert on contract_event
for each row
begin
    insert into webhook_delivery (event_id, contract_id, seeker_id, url, state, attempts,
        total_attempts, next_attempt_at, created_at, updated_at)
    select new.event_id, new.contract_id, c.seeker_id, c.webhook_url,
        'pending', 0, 0, new.at, new.at, new.at
    from contract c
    where c.contract_id = new.contract_id
      and c.webhook_url is not null;
end;
