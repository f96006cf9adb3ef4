//! `dispute`: one dispute per contract (unique in the database), its replay and its decision.
//! A decision is written once (`decided_at is null` guards the update). Who opened, answered
//! and decided it are [`Actor`]s, each the actor of the event that recorded it. Its party,
//! state, decision and route are parsed once when the row is read; a row holding another
//! spelling is corrupt.

use super::json::JsonText;
use super::states::{Actor, DecidedVia, DisputeState};
use chrono::{DateTime, Utc};
use hiregate_contracts::{
    id::{ContractId, DisputeId},
    state::{DisputeDecision, Party},
};
use serde_json::Value;

use super::{
    Store, StoreError, from_millis, from_millis_opt, on_backend, on_writer, parse_id, to_millis,
};

const ENTITY: &str = "dispute";

const COLUMNS: &str = "dispute_id, contract_id, party, opened_by, reason, claim, state, replay, \
    replay_verifier_result_hash, decision, decided_by, decision_reason, decided_via, created_at, \
    decided_at, response, response_claim, responded_by, responded_at";

/// A dispute to open.
#[derive(Debug, Clone)]
pub struct NewDispute {
    /// `dsp_…`.
    pub dispute_id: DisputeId,
    /// The disputed contract.
    pub contract_id: ContractId,
    /// Who opened it.
    pub party: Party,
    /// Who opened it: the seeker or the operator.
    pub opened_by: Actor,
    /// Why the party disputes.
    pub reason: String,
    /// What the party claims, free-form.
    pub claim: Option<Value>,
    /// When.
    pub created_at: DateTime<Utc>,
}

/// A stored dispute.
#[derive(Debug, Clone, PartialEq)]
pub struct DisputeRecord {
    /// `dsp_…`.
    pub dispute_id: DisputeId,
    /// The disputed contract.
    pub contract_id: ContractId,
    /// Who opened it.
    pub party: Party,
    /// Who opened it.
    pub opened_by: Actor,
    /// Why.
    pub reason: String,
    /// The party's claim.
    pub claim: Option<Value>,
    /// Where it is.
    pub state: DisputeState,
    /// The replayed verification result, once replayed.
    pub replay: Option<Value>,
    /// The replay's `verifier_result_hash`.
    pub replay_verifier_result_hash: Option<String>,
    /// Once decided: what.
    pub decision: Option<DisputeDecision>,
    /// [`Actor::Replay`], [`Actor::Admin`] (the arbiter) or [`Actor::System`] (its deadline).
    pub decided_by: Option<Actor>,
    /// Why it was decided so.
    pub decision_reason: Option<String>,
    /// Once decided: how.
    pub decided_via: Option<DecidedVia>,
    /// Opened at.
    pub created_at: DateTime<Utc>,
    /// Decided at.
    pub decided_at: Option<DateTime<Utc>>,
    /// The other party's answer, once given.
    pub response: Option<DisputeResponse>,
}

/// The other party's statement on a dispute.
#[derive(Debug, Clone, PartialEq)]
pub struct DisputeResponse {
    /// What the other party says.
    pub statement: String,
    /// Its claim, free-form.
    pub claim: Option<Value>,
    /// Who answered: the seeker or the operator.
    pub by: Actor,
    /// When.
    pub at: DateTime<Utc>,
}

/// A decision to record.
#[derive(Debug, Clone)]
pub struct DisputeDecisionRecord {
    /// What.
    pub decision: DisputeDecision,
    /// [`Actor::Replay`], [`Actor::Admin`] (the arbiter) or [`Actor::System`] (its deadline).
    pub decided_by: Actor,
    /// Why.
    pub reason: String,
    /// How.
    pub via: DecidedVia,
    /// When.
    pub at: DateTime<Utc>,
}

#[derive(sqlx::FromRow)]
struct DisputeRow {
    dispute_id: String,
    contract_id: String,
    party: String,
    opened_by: String,
    reason: String,
    claim: Option<JsonText<Value>>,
    state: String,
    replay: Option<JsonText<Value>>,
    replay_verifier_result_hash: Option<String>,
    decision: Option<String>,
    decided_by: Option<String>,
    decision_reason: Option<String>,
    decided_via: Option<String>,
    created_at: i64,
    decided_at: Option<i64>,
    response: Option<String>,
    response_claim: Option<JsonText<Value>>,
    responded_by: Option<String>,
    responded_at: Option<i64>,
}

impl TryFrom<DisputeRow> for DisputeRecord {
    type Error = StoreError;

    fn try_from(row: DisputeRow) -> Result<Self, Self::Error> {
        Ok(Self {
            dispute_id: parse_id(ENTITY, &row.dispute_id)?,
            contract_id: parse_id(ENTITY, &row.contract_id)?,
            party: parse(&row.party)?,
            opened_by: parse(&row.opened_by)?,
            reason: row.reason,
            claim: row.claim.map(|j| j.0),
            state: parse(&row.state)?,
            replay: row.replay.map(|j| j.0),
            replay_verifier_result_hash: row.replay_verifier_result_hash,
            decision: row.decision.as_deref().map(parse).transpose()?,
            decided_by: row.decided_by.as_deref().map(parse).transpose()?,
            decision_reason: row.decision_reason,
            decided_via: row.decided_via.as_deref().map(parse).transpose()?,
            created_at: from_millis(ENTITY, row.created_at)?,
            decided_at: from_millis_opt(ENTITY, row.decided_at)?,
            response: match (row.response, row.responded_by, row.responded_at) {
                (Some(statement), Some(by), Some(at)) => Some(DisputeResponse {
                    statement,
                    claim: row.response_claim.map(|j| j.0),
                    by: parse(&by)?,
                    at: from_millis(ENTITY, at)?,
                }),
                _ => None,
            },
        })
    }
}

/// A stored column of a closed vocabulary, parsed once; another spelling is corrupt.
fn parse<T>(stored: &str) -> Result<T, StoreError>
where
    T: std::str::FromStr,
    T::Err: std::fmt::Display,
{
    stored.parse().map_err(|e| StoreError::corrupt(ENTITY, &e))
}

impl Store {
    /// Open a dispute in state `open`; [`StoreError::Duplicate`] when the contract already has
    /// one.
    pub async fn insert_dispute(&self, dispute: &NewDispute) -> Result<(), StoreError> {
        on_writer!(self, conn => {
            super::advance::apply_side_write(conn, super::SideWrite::Dispute(dispute)).await?;
        });
        Ok(())
    }

    /// The dispute `dispute_id`.
    pub async fn get_dispute(&self, dispute_id: &str) -> Result<Option<DisputeRecord>, StoreError> {
        let sql = format!("select {COLUMNS} from dispute where dispute_id = $1");
        let row: Option<DisputeRow> = on_backend!(self, conn => {
            sqlx::query_as(&sql).bind(dispute_id).fetch_optional(conn).await?
        });
        row.map(DisputeRecord::try_from).transpose()
    }

    /// The dispute of `contract_id`, if it has one.
    pub async fn dispute_of_contract(
        &self,
        contract_id: &str,
    ) -> Result<Option<DisputeRecord>, StoreError> {
        let sql = format!("select {COLUMNS} from dispute where contract_id = $1");
        let row: Option<DisputeRow> = on_backend!(self, conn => {
            sqlx::query_as(&sql).bind(contract_id).fetch_optional(conn).await?
        });
        row.map(DisputeRecord::try_from).transpose()
    }

    /// Store the replay of an undecided dispute and move it to `state` (`open` stays open for
    /// the replay's decision, `escalated` waits for the arbiter).
    pub async fn record_dispute_replay(
        &self,
        dispute_id: &str,
        replay: &Value,
        verifier_result_hash: &str,
        state: DisputeState,
    ) -> Result<(), StoreError> {
        const SQL: &str = "update dispute set replay = $2, replay_verifier_result_hash = $3, \
            state = $4 where dispute_id = $1 and decided_at is null";
        on_writer!(self, conn => {
            sqlx::query(SQL)
                .bind(dispute_id)
                .bind(JsonText(replay))
                .bind(verifier_result_hash)
                .bind(state.as_str())
                .execute(conn)
                .await?;
        });
        Ok(())
    }

    /// Record the decision of an undecided dispute; `false` when it was already decided.
    pub async fn decide_dispute(
        &self,
        dispute_id: &str,
        decision: &DisputeDecisionRecord,
    ) -> Result<bool, StoreError> {
        const SQL: &str = "update dispute set state = 'decided', decision = $2, decided_by = $3, \
            decision_reason = $4, decided_via = $5, decided_at = $6 \
            where dispute_id = $1 and decided_at is null";
        let changed = on_writer!(self, conn => {
            sqlx::query(SQL)
                .bind(dispute_id)
                .bind(decision.decision.as_str())
                .bind(decision.decided_by.to_string())
                .bind(&decision.reason)
                .bind(decision.via.as_str())
                .bind(to_millis(decision.at))
                .execute(conn)
                .await?
                .rows_affected()
        });
        Ok(changed == 1)
    }
}

impl Store {
    /// Record the other party's answer on an undecided, unanswered dispute; `false` when it was
    /// answered or decided before.
    pub async fn answer_dispute(
        &self,
        dispute_id: &str,
        response: &DisputeResponse,
    ) -> Result<bool, StoreError> {
        const SQL: &str = "update dispute set response = $2, response_claim = $3, \
            responded_by = $4, responded_at = $5 \
            where dispute_id = $1 and responded_at is null and decided_at is null";
        let changed = on_writer!(self, conn => {
            sqlx::query(SQL)
                .bind(dispute_id)
                .bind(&response.statement)
                .bind(response.claim.as_ref().map(JsonText))
                .bind(response.by.to_string())
                .bind(to_millis(response.at))
                .execute(conn)
                .await?
                .rows_affected()
        });
        Ok(changed == 1)
    }

    /// Disputes in `state`, oldest first (the arbiter's queue order), after the dispute id
    /// `after` (keyset page), at most `limit`.
    pub async fn list_disputes(
        &self,
        state: DisputeState,
        after: Option<&str>,
        limit: u32,
    ) -> Result<Vec<DisputeRecord>, StoreError> {
        // Dispute ids are `dsp_` + a ULID: their byte order is creation order on both backends.
        let sql = format!(
            "select {COLUMNS} from dispute where state = $1 and ($2 is null or dispute_id > $2) \
             order by dispute_id limit $3"
        );
        let rows: Vec<DisputeRow> = on_backend!(self, conn => {
            sqlx::query_as(&sql)
                .bind(state.as_str())
                .bind(after)
                .bind(i64::from(limit))
                .fetch_all(conn)
                .await?
        });
        rows.into_iter().map(DisputeRecord::try_from).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use hiregate_contracts::id::PrincipalId;

    fn decided_row() -> DisputeRow {
        DisputeRow {
            dispute_id: DisputeId::generate().to_string(),
            contract_id: ContractId::generate().to_string(),
            party: "operator".to_owned(),
            opened_by: format!("operator:{}", PrincipalId::generate_operator()),
            reason: "the output is fine".to_owned(),
            claim: None,
            state: "decided".to_owned(),
            replay: None,
            replay_verifier_result_hash: None,
            decision: Some("void".to_owned()),
            decided_by: Some("system".to_owned()),
            decision_reason: Some("arbiter_silent".to_owned()),
            decided_via: Some("timeout".to_owned()),
            created_at: 0,
            decided_at: Some(1),
            response: None,
            response_claim: None,
            responded_by: None,
            responded_at: None,
        }
    }

    #[test]
    fn a_dispute_row_is_parsed_once() {
        let dispute = DisputeRecord::try_from(decided_row()).unwrap();
        assert_eq!(dispute.party, Party::Operator);
        assert!(matches!(dispute.opened_by, Actor::Operator(_)));
        assert_eq!(dispute.state, DisputeState::Decided);
        assert_eq!(dispute.decision, Some(DisputeDecision::Void));
        assert_eq!(dispute.decided_by, Some(Actor::System));
        assert_eq!(dispute.decided_via, Some(DecidedVia::Timeout));
    }

    #[test]
    fn a_dispute_row_with_another_spelling_is_corrupt() {
        let rows = [
            DisputeRow {
                party: "worker".to_owned(),
                ..decided_row()
            },
            DisputeRow {
                state: "Decided".to_owned(),
                ..decided_row()
            },
            DisputeRow {
                decision: Some("refund".to_owned()),
                ..decided_row()
            },
            DisputeRow {
                decided_via: Some("admin".to_owned()),
                ..decided_row()
            },
            DisputeRow {
                decided_by: Some("arbiter:key_1".to_owned()),
                ..decided_row()
            },
            DisputeRow {
                opened_by: "operator:op_x".to_owned(),
                ..decided_row()
            },
        ];
        for row in rows {
            let error = DisputeRecord::try_from(row).unwrap_err();
            assert!(
                matches!(error, StoreError::Corrupt { entity: ENTITY, .. }),
                "{error}"
            );
        }
    }
}
