-- JSON columns hold the gateway's serialized JSON as TEXT, as on SQLite. Keep in step with
-- ../sqlite/0008_json_as_text.sql.
--
-- jsonb cannot hold U+0000 in a string (a seeker's input or a worker's error message with
-- "\u0000" was a 500 here and fine on SQLite), and it rewrites numbers (-0.0 becomes 0.0, 1e16
-- becomes the integer 10000000000000000): the value read back was not the value written. No
-- query looks inside these columns except the webhook outbox trigger, which now reads the
-- contract's webhook_url column, filled when the contract is inserted.

alter table contract add column webhook_url text;
update contract set webhook_url = terms ->> 'webhook_url';

create or replace function webhook_outbox_enqueue() returns trigger language plpgsql as $$
begin
    insert into webhook_delivery (event_id, contract_id, seeker_id, url, state, attempts,
        total_attempts, next_attempt_at, created_at, updated_at)
    select new.event_id, new.contract_id, c.seeker_id, c.webhook_url,
        'pending', 0, 0, new.at, new.at, new.at
    from contract c
    where c.contract_id = new.contract_id
      and c.webhook_url is not null;
    return new;
end;
$$;

alter table worker alter column protocol_options drop default;
alter table worker alter column protocol_options type text using protocol_options::text;
alter table worker alter column protocol_options set default '{}';
alter table worker_task alter column output_schema type text using output_schema::text;
alter table contract
    alter column terms type text using terms::text,
    alter column payment_offer type text using payment_offer::text;
alter table contract_event alter column details type text using details::text;
alter table payment
    alter column payload type text using payload::text,
    alter column settle_response type text using settle_response::text;
alter table attempt alter column error type text using error::text;
alter table verification
    alter column reason_codes type text using reason_codes::text,
    alter column result type text using result::text;
alter table job alter column payload type text using payload::text;
alter table dispute
    alter column claim type text using claim::text,
    alter column replay type text using replay::text;
