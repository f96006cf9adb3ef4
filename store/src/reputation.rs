//! Read-only: the facts a worker listing's reputation is computed from
//! ([`hiregate_contracts::reputation`]), one row per paid contract of the listing that was
//! judged or ended.
//!
//! A contract counts as paid when a payment row exists for it (rows are only written for
//! payments that verified); the newest row is the one that paid. The self-dealing test is done
//! here, in SQL, because it needs every payout address the listing's operator ever used.
//!
//! Who the seeker is: the API-key principal that proposed the contract, or, for a contract hired
//! with no account (the stable x402 resource mints a seeker id per offer, which no key belongs
//! to), the wallet that paid (`wallet:` and its lowercased address). Otherwise every wallet hire
//! would count as a new seeker, and one wallet hiring a listing a hundred times would look like
//! a hundred independent customers.

use std::{str::FromStr, sync::LazyLock};

use hiregate_contracts::{
    id::ContractId,
    money::AtomicAmount,
    reputation::{HireFact, Paid, Verdict},
    state::{ContractState, DisputeDecision},
    time::Timestamp,
};

use super::{Store, StoreError, on_backend};
use hiregate_contracts::id::WorkerId;

const ENTITY: &str = "reputation";

#[derive(sqlx::FromRow)]
struct FactRow {
    contract_id: String,
    task_type: String,
    seeker_id: String,
    state: String,
    decided_at: i64,
    network: String,
    asset: String,
    amount: String,
    payer: String,
    paid_at: Option<i64>,
    verdict: Option<String>,
    verdict_at: Option<i64>,
    last_attempt: Option<String>,
    dispute_state: Option<String>,
    decision: Option<String>,
    self_dealt: bool,
}

impl Store {
    /// The paid contracts of `worker_id` that were judged or ended, as reputation facts.
    pub async fn hire_facts(&self, worker_id: &WorkerId) -> Result<Vec<HireFact>, StoreError> {
        const SQL: &str = "select c.contract_id, c.task_type, \
            case when exists (select 1 from api_key k where k.principal_id = c.seeker_id) \
                then c.seeker_id else 'wallet:' || lower(p.payer) end as seeker_id, c.state, \
            coalesce((select min(v.created_at) from verification v \
                where v.contract_id = c.contract_id), c.updated_at) as decided_at, p.network, p.asset, p.amount, p.payer, \
            (select min(e.at) from contract_event e \
                where e.contract_id = c.contract_id and e.to_state = 'paid') as paid_at, \
            (select v.status from verification v where v.contract_id = c.contract_id \
                order by v.created_at, v.verification_id limit 1) as verdict, \
            (select min(v.created_at) from verification v \
                where v.contract_id = c.contract_id) as verdict_at, \
            (select a.state from attempt a where a.contract_id = c.contract_id \
                order by a.attempt_no desc limit 1) as last_attempt, \
            d.state as dispute_state, d.decision, \
            exists (select 1 from worker o where o.operator_id = w.operator_id \
                and lower(o.pay_to) = lower(p.payer)) as self_dealt \
            from contract c \
            join worker w on w.worker_id = c.worker_id \
            join payment p on p.payment_id = (select p2.payment_id from payment p2 \
                where p2.contract_id = c.contract_id \
                order by p2.created_at desc, p2.payment_id desc limit 1) \
            left join dispute d on d.contract_id = c.contract_id \
            where c.worker_id = $1 and (exists (select 1 from verification v \
                where v.contract_id = c.contract_id) or c.state in (";
        // The terminal states come from the state machine (trusted constants, never input).
        static QUERY: LazyLock<String> = LazyLock::new(|| {
            let terminal: Vec<String> = ContractState::ALL
                .into_iter()
                .filter(ContractState::is_terminal)
                .map(|state| format!("'{}'", state.as_str()))
                .collect();
            format!(
                "{SQL}{})) order by c.updated_at, c.contract_id",
                terminal.join(", ")
            )
        });
        let id = worker_id.as_str();
        let rows: Vec<FactRow> = on_backend!(self, conn => {
            sqlx::query_as(QUERY.as_str()).bind(id).fetch_all(conn).await?
        });
        rows.into_iter().map(FactRow::into_fact).collect()
    }
}

impl FactRow {
    fn into_fact(self) -> Result<HireFact, StoreError> {
        let corrupt = |reason: &dyn std::fmt::Display| StoreError::corrupt(ENTITY, reason);
        let time = |millis: i64| Timestamp::from_unix_millis(millis).map_err(|e| corrupt(&e));
        let verdict = match (self.verdict, self.verdict_at) {
            (Some(status), Some(at)) => Some((
                Verdict::from_str(&status).map_err(|e| corrupt(&e))?,
                time(at)?,
            )),
            _ => None,
        };
        let decision = self
            .decision
            .as_deref()
            .map(DisputeDecision::from_str)
            .transpose()
            .map_err(|e| corrupt(&e))?;
        Ok(HireFact {
            contract_id: ContractId::from_str(&self.contract_id).map_err(|e| corrupt(&e))?,
            task_type: self.task_type,
            seeker: self.seeker_id,
            outcome: ContractState::from_str(&self.state).map_err(|e| corrupt(&e))?,
            decided_at: time(self.decided_at)?,
            paid_at: self.paid_at.map(time).transpose()?,
            verdict,
            timed_out: self.last_attempt.as_deref() == Some("timed_out"),
            dispute: self.dispute_state.map(|_| decision),
            paid: Paid {
                network: self.network,
                asset: self.asset,
                amount: AtomicAmount::from_str(&self.amount).map_err(|e| corrupt(&e))?,
                payer: self.payer,
            },
            self_dealt: self.self_dealt,
        })
    }
}
