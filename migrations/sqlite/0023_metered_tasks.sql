-- A task type priced per verified unit (x402 `upto`): `{"unit": "item", "max_units": 5}` as
-- JSON text, `price` then being the price of one unit; null for a price per contract. Keep in
-- step with ../postgres/0023_metered_tasks.sql.
alter table worker_task add column metering text;
