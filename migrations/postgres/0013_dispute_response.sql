-- The other party's answer to a dispute: the arbiter decides with both sides' statements in
-- front of them. Written once, before the decision. Keep in step with
-- ../sqlite/0013_dispute_response.sql.
alter table dispute add column response text;
alter table dispute add column response_claim text;
alter table dispute add column responded_by text;
alter table dispute add column responded_at bigint;
