-- Disputes of accepted (seeker) and rejected (operator) contracts, and their decisions.
-- Keep in step with ../postgres/0007_disputes.sql.

-- One dispute per contract, ever: the unique contract_id lets concurrent openings (several
-- instances, double clicks) resolve to one winner in the database.
create table dispute (
    dispute_id                  text primary key,
    contract_id                 text not null unique references contract (contract_id),
    party                       text not null,
    opened_by                   text not null,
    reason                      text not null,
    claim                       text,
    state                       text not null,
    replay                      text,
    replay_verifier_result_hash text,
    decision                    text,
    decided_by                  text,
    decision_reason             text,
    decided_via                 text,
    created_at                  integer not null,
    decided_at                  integer
) strict;

create index dispute_state on dispute (state);
