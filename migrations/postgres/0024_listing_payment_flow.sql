-- When a listing's `exact` contracts are paid: 'authorization' (verified before the work,
-- settled after it when the deliverable passed) or 'upfront' (settled on chain before the
-- worker is called). Keep in step with ../sqlite/0024_listing_payment_flow.sql.
alter table worker add column payment_flow text not null default 'authorization'
    check (payment_flow in ('authorization', 'upfront'));
