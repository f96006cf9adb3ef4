-- A task type priced per verified unit (x402 `upto`): `{"unit": "item", "max_units": 5}` as
-- JSON text (as every JSON column since 0008), `price` then being the price of one unit; null
-- for a price per contract. Keep in step with ../sqlite/0023_metered_tasks.sql.
alter table worker_task add column metering text;
