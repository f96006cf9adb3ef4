//! Reputation: what a worker listing's verified, paid outcomes say about it, and nothing else.
//!
//! The figures are computed from [`HireFact`]s, one per *paid* contract of the listing that was
//! judged (its deliverable verified, whatever happens to the money afterwards) or ended (reached
//! a terminal state). The gateway reads them from its own records of payments,
//! verifications, attempts and disputes; there is no self-reporting and there are no reviews, so
//! the only way to earn a figure is to be paid for work that passed its pinned verification.
//!
//! **Self-dealing.** A hire counts nowhere when it was paid from a wallet that is the payout
//! address of any listing of the same operator, retired listings included
//! ([`SELF_DEALING_RULE`]): an operator hiring its own worker moves money from one pocket to the
//! other and proves nothing. Such hires are only counted in `excluded_self_dealt`. Every figure
//! also carries the number of distinct seekers behind it, so a reader can discount figures that
//! one seeker made on its own.
//!
//! **Windows.** Each figure is given over the last 7 days, the last 30 days and all time,
//! by the time the hire was decided: its first verdict, else its end ([`Window`]).
//!
//! **What each figure counts** (per task type and over all task types):
//! - `hires`: the counted hires;
//! - `hires_settled`: those that ended `settled`;
//! - `pass_rate`: first verdicts that passed, over hires that were judged;
//! - `failure_rate` / `timeout_rate`: hires that ended `failed` because the worker failed,
//!   respectively did not answer within the SLA, over all hires;
//! - `disputes_opened` / `disputes_lost`: hires disputed by either party, and those decided `void`
//!   (the worker was not paid);
//! - `latency`: p50 and p95 (nearest rank) of the time from the payment being held to the first
//!   verdict, over hires that were judged;
//! - `volume_settled`: the settled amount per network and asset.
//!
//! Each figure lists the contracts it was computed from (its sample), so anyone can fetch their
//! receipts and recount. The gateway signs the whole [`ReputationSnapshot`] like a receipt
//! (`typ` = [`REPUTATION_TOKEN_TYPE`]); [`verify_reputation_snapshot`] checks it offline with the
//! JWKS.

use std::{
    collections::{BTreeMap, BTreeSet},
    fmt,
    str::FromStr,
};

use serde::{Deserialize, Serialize};

use crate::{
    id::{ContractId, WorkerId},
    money::AtomicAmount,
    state::{ContractState, DisputeDecision},
    time::Timestamp,
    token::{ISSUER, Jwks, REPUTATION_TOKEN_TYPE, TokenError, verify_signed_json},
};

/// The self-dealing rule a snapshot applies (see the module docs).
pub const SELF_DEALING_RULE: &str = "payer_is_operator_payout.v1";

/// How the first verification of a delivery ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Verdict {
    /// The deliverable met the contract.
    Passed,
    /// It did not.
    Failed,
    /// The policy could not decide (e.g. evidence unreachable); not a pass.
    Inconclusive,
}

impl FromStr for Verdict {
    type Err = UnknownVerdict;

    fn from_str(raw: &str) -> Result<Self, Self::Err> {
        match raw {
            "passed" => Ok(Self::Passed),
            "failed" => Ok(Self::Failed),
            "inconclusive" => Ok(Self::Inconclusive),
            other => Err(UnknownVerdict(other.to_owned())),
        }
    }
}

/// A verification status outside [`Verdict`].
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unknown verification status {0:?}")]
pub struct UnknownVerdict(String);

/// The money that paid a hire.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Paid {
    /// CAIP-2 network.
    pub network: String,
    /// Token address.
    pub asset: String,
    /// Atomic units.
    pub amount: AtomicAmount,
    /// The wallet that paid.
    pub payer: String,
}

/// One paid contract of the listing that was judged or ended: the input of [`compute`].
#[derive(Debug, Clone, PartialEq)]
pub struct HireFact {
    /// The contract.
    pub contract_id: ContractId,
    /// Its task type.
    pub task_type: String,
    /// The seeker who proposed it (only counted, never published).
    pub seeker: String,
    /// Its state: terminal, or the verdict's (`accepted`, `rejected`, `disputed`, …).
    pub outcome: ContractState,
    /// When it was decided: its first verdict, else its end.
    pub decided_at: Timestamp,
    /// When the payment was held (the contract became `paid`).
    pub paid_at: Option<Timestamp>,
    /// The first verification's verdict and its time, if the delivery was judged.
    pub verdict: Option<(Verdict, Timestamp)>,
    /// The last attempt ended because the worker did not answer within the SLA.
    pub timed_out: bool,
    /// Whether a dispute was opened, and how it was decided if it was.
    pub dispute: Option<Option<DisputeDecision>>,
    /// The payment.
    pub paid: Paid,
    /// Paid from a payout address of the listing's operator ([`SELF_DEALING_RULE`]).
    pub self_dealt: bool,
}

/// A rolling window of figures.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub enum Window {
    /// The last 7 days.
    #[serde(rename = "7d")]
    Week,
    /// The last 30 days.
    #[serde(rename = "30d")]
    Month,
    /// Everything.
    #[serde(rename = "all")]
    AllTime,
}

impl Window {
    /// Every window, shortest first.
    pub const ALL: [Self; 3] = [Self::Week, Self::Month, Self::AllTime];

    /// The name on the wire.
    #[must_use]
    pub const fn as_str(&self) -> &'static str {
        match self {
            Self::Week => "7d",
            Self::Month => "30d",
            Self::AllTime => "all",
        }
    }

    const fn days(self) -> Option<i64> {
        match self {
            Self::Week => Some(7),
            Self::Month => Some(30),
            Self::AllTime => None,
        }
    }

    /// The earliest decision time a hire may have to count in this window at `now`.
    #[must_use]
    pub fn since(self, now: Timestamp) -> Option<Timestamp> {
        let days = self.days()?;
        Timestamp::from_unix_millis(now.unix_millis() - days * 86_400_000).ok()
    }
}

impl FromStr for Window {
    type Err = UnknownWindow;

    fn from_str(raw: &str) -> Result<Self, Self::Err> {
        Self::ALL
            .into_iter()
            .find(|window| window.as_str() == raw)
            .ok_or_else(|| UnknownWindow(raw.to_owned()))
    }
}

impl fmt::Display for Window {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A window name other than `7d`, `30d` or `all`.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unknown window {0:?}: use 7d, 30d or all")]
pub struct UnknownWindow(String);

/// How many hires have a property.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Count {
    /// How many.
    pub value: u64,
    /// Distinct seekers behind them.
    pub distinct_seekers: u64,
    /// The contracts counted.
    pub contracts: Vec<ContractId>,
}

/// A share of a sample of hires.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Rate {
    /// `hits / sample`; `null` on an empty sample.
    pub value: Option<f64>,
    /// Hires with the property.
    pub hits: u64,
    /// Hires the share is taken of.
    pub sample: u64,
    /// Distinct seekers behind the sample.
    pub distinct_seekers: u64,
    /// The contracts of the sample.
    pub contracts: Vec<ContractId>,
}

impl Rate {
    /// The lower bound of the 95 % Wilson score interval of the rate: a rate backed by more hires
    /// ranks above the same rate backed by fewer. 0 for an empty sample.
    #[must_use]
    pub fn wilson_lower_bound(&self) -> f64 {
        if self.sample == 0 {
            return 0.0;
        }
        const Z: f64 = 1.96;
        #[allow(clippy::cast_precision_loss)]
        let (hits, n) = (self.hits as f64, self.sample as f64);
        let p = hits / n;
        let z2 = Z * Z;
        let centre = p + z2 / (2.0 * n);
        let margin = Z * (p * (1.0 - p) / n + z2 / (4.0 * n * n)).sqrt();
        ((centre - margin) / (1.0 + z2 / n)).max(0.0)
    }
}

/// Time from the payment being held to the first verdict.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Latency {
    /// Median, milliseconds (nearest rank).
    pub p50_ms: Option<u64>,
    /// 95th percentile, milliseconds (nearest rank).
    pub p95_ms: Option<u64>,
    /// Judged hires measured.
    pub sample: u64,
    /// Distinct seekers behind the sample.
    pub distinct_seekers: u64,
    /// The contracts of the sample.
    pub contracts: Vec<ContractId>,
}

/// Money settled in one asset.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Volume {
    /// CAIP-2 network.
    pub network: String,
    /// Token address.
    pub asset: String,
    /// Sum of the settled payments (atomic units; saturates at 2^128 - 1).
    pub amount: AtomicAmount,
    /// Settled hires paid in it.
    pub hires: u64,
    /// Distinct seekers behind them.
    pub distinct_seekers: u64,
    /// The contracts.
    pub contracts: Vec<ContractId>,
}

/// Every figure over one set of hires.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Figures {
    /// Counted hires (judged or ended).
    pub hires: Count,
    /// Those that ended `settled`.
    pub hires_settled: Count,
    /// First verdicts that passed, of the judged hires.
    pub pass_rate: Rate,
    /// Worker failures (not timeouts) that ended the hire, of all hires.
    pub failure_rate: Rate,
    /// SLA timeouts that ended the hire, of all hires.
    pub timeout_rate: Rate,
    /// Hires disputed by either party.
    pub disputes_opened: Count,
    /// Disputes decided `void`.
    pub disputes_lost: Count,
    /// Payment held → first verdict.
    pub latency: Latency,
    /// Settled money per asset.
    pub volume_settled: Vec<Volume>,
    /// Hires left out by the self-dealing rule.
    pub excluded_self_dealt: u64,
}

/// The figures of one window.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct WindowFigures {
    /// Which window.
    pub window: Window,
    /// Hires decided at or after this count; `null` for all time.
    pub since: Option<Timestamp>,
    /// Over every task type.
    pub overall: Figures,
    /// Per task type.
    pub by_task_type: BTreeMap<String, Figures>,
}

/// The gateway-signed reputation of one worker listing. Field names are the wire format.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ReputationSnapshot {
    /// Always [`ISSUER`].
    pub iss: String,
    /// The worker listing.
    pub sub: WorkerId,
    /// When it was computed, Unix seconds.
    pub iat: i64,
    /// When it was computed.
    pub computed_at: Timestamp,
    /// The self-dealing rule applied ([`SELF_DEALING_RULE`]).
    pub self_dealing_rule: String,
    /// 7 days, 30 days, all time.
    pub windows: Vec<WindowFigures>,
}

impl ReputationSnapshot {
    /// The figures of `window`, for `task_type` or over every task type.
    #[must_use]
    pub fn figures(&self, window: Window, task_type: Option<&str>) -> Option<&Figures> {
        let figures = self.windows.iter().find(|w| w.window == window)?;
        match task_type {
            Some(task_type) => figures.by_task_type.get(task_type),
            None => Some(&figures.overall),
        }
    }
}

/// The reputation of `worker` at `now` from the facts of its paid hires.
#[must_use]
pub fn compute(worker: &WorkerId, facts: &[HireFact], now: Timestamp) -> ReputationSnapshot {
    let windows = Window::ALL
        .into_iter()
        .map(|window| {
            let since = window.since(now);
            let in_window: Vec<&HireFact> = facts
                .iter()
                .filter(|fact| since.is_none_or(|since| fact.decided_at >= since))
                .collect();
            let task_types: BTreeSet<&str> = in_window
                .iter()
                .map(|fact| fact.task_type.as_str())
                .collect();
            let by_task_type = task_types
                .into_iter()
                .map(|task_type| {
                    let of_type: Vec<&HireFact> = in_window
                        .iter()
                        .copied()
                        .filter(|fact| fact.task_type == task_type)
                        .collect();
                    (task_type.to_owned(), figures(&of_type))
                })
                .collect();
            WindowFigures {
                window,
                since,
                overall: figures(&in_window),
                by_task_type,
            }
        })
        .collect();
    ReputationSnapshot {
        iss: ISSUER.to_owned(),
        sub: worker.clone(),
        iat: now.unix_seconds(),
        computed_at: now,
        self_dealing_rule: SELF_DEALING_RULE.to_owned(),
        windows,
    }
}

fn figures(facts: &[&HireFact]) -> Figures {
    let (counted, self_dealt): (Vec<&HireFact>, Vec<&HireFact>) =
        facts.iter().copied().partition(|fact| !fact.self_dealt);
    let failed = |fact: &&HireFact| fact.outcome == ContractState::Failed;
    let judged: Vec<&HireFact> = counted
        .iter()
        .copied()
        .filter(|f| f.verdict.is_some())
        .collect();
    let disputed: Vec<&HireFact> = counted
        .iter()
        .copied()
        .filter(|f| f.dispute.is_some())
        .collect();
    let settled: Vec<&HireFact> = counted
        .iter()
        .copied()
        .filter(|f| f.outcome == ContractState::Settled)
        .collect();
    Figures {
        hires: count(&counted, |_| true),
        hires_settled: count(&settled, |_| true),
        pass_rate: rate(&judged, |f| matches!(f.verdict, Some((Verdict::Passed, _)))),
        failure_rate: rate(&counted, |f| failed(f) && !f.timed_out),
        timeout_rate: rate(&counted, |f| failed(f) && f.timed_out),
        disputes_opened: count(&disputed, |_| true),
        disputes_lost: count(&disputed, |f| {
            f.dispute == Some(Some(DisputeDecision::Void))
        }),
        latency: latency(&counted),
        volume_settled: volumes(&settled),
        excluded_self_dealt: self_dealt.len() as u64,
    }
}

fn distinct_seekers(facts: &[&HireFact]) -> u64 {
    facts
        .iter()
        .map(|fact| fact.seeker.as_str())
        .collect::<BTreeSet<_>>()
        .len() as u64
}

fn contracts(facts: &[&HireFact]) -> Vec<ContractId> {
    facts.iter().map(|fact| fact.contract_id.clone()).collect()
}

fn count(facts: &[&HireFact], keep: impl Fn(&&HireFact) -> bool) -> Count {
    let kept: Vec<&HireFact> = facts.iter().copied().filter(keep).collect();
    Count {
        value: kept.len() as u64,
        distinct_seekers: distinct_seekers(&kept),
        contracts: contracts(&kept),
    }
}

fn rate(sample: &[&HireFact], hit: impl Fn(&&HireFact) -> bool) -> Rate {
    let hits = sample.iter().filter(|fact| hit(fact)).count() as u64;
    let size = sample.len() as u64;
    #[allow(clippy::cast_precision_loss)]
    let value = (size > 0).then(|| hits as f64 / size as f64);
    Rate {
        value,
        hits,
        sample: size,
        distinct_seekers: distinct_seekers(sample),
        contracts: contracts(sample),
    }
}

fn latency(facts: &[&HireFact]) -> Latency {
    let measured: Vec<(&HireFact, u64)> = facts
        .iter()
        .filter_map(|fact| {
            let paid_at = fact.paid_at?;
            let (_, verdict_at) = fact.verdict?;
            let millis = verdict_at
                .unix_millis()
                .checked_sub(paid_at.unix_millis())?;
            Some((*fact, u64::try_from(millis).unwrap_or(0)))
        })
        .collect();
    let mut durations: Vec<u64> = measured.iter().map(|(_, ms)| *ms).collect();
    durations.sort_unstable();
    let sample: Vec<&HireFact> = measured.iter().map(|(fact, _)| *fact).collect();
    Latency {
        p50_ms: nearest_rank(&durations, 50),
        p95_ms: nearest_rank(&durations, 95),
        sample: durations.len() as u64,
        distinct_seekers: distinct_seekers(&sample),
        contracts: contracts(&sample),
    }
}

/// The nearest-rank `percent`-th percentile of ascending `sorted`.
fn nearest_rank(sorted: &[u64], percent: usize) -> Option<u64> {
    if sorted.is_empty() {
        return None;
    }
    let rank = (percent * sorted.len()).div_ceil(100).max(1);
    sorted.get(rank - 1).copied()
}

fn volumes(settled: &[&HireFact]) -> Vec<Volume> {
    let mut by_asset: BTreeMap<(&str, &str), Vec<&HireFact>> = BTreeMap::new();
    for fact in settled {
        by_asset
            .entry((fact.paid.network.as_str(), fact.paid.asset.as_str()))
            .or_default()
            .push(fact);
    }
    by_asset
        .into_iter()
        .map(|((network, asset), facts)| Volume {
            network: network.to_owned(),
            asset: asset.to_owned(),
            amount: AtomicAmount::new(facts.iter().fold(0u128, |sum, fact| {
                sum.saturating_add(fact.paid.amount.units())
            })),
            hires: facts.len() as u64,
            distinct_seekers: distinct_seekers(&facts),
            contracts: contracts(&facts),
        })
        .collect()
}

/// Why a reputation snapshot did not verify.
#[derive(Debug, thiserror::Error)]
pub enum ReputationError {
    /// Signature, key, `typ` or JSON shape is wrong.
    #[error("reputation snapshot does not verify: {0}")]
    Token(#[from] TokenError),
    /// Signed by a key in the JWKS, but not issued by the gateway.
    #[error("reputation snapshot issuer is `{0}`, expected `{ISSUER}`")]
    WrongIssuer(String),
}

/// Checks a reputation snapshot offline: EdDSA signature by a key in `jwks`, `typ` and issuer.
/// Returns what it states.
pub fn verify_reputation_snapshot(
    token: &str,
    jwks: &Jwks,
) -> Result<ReputationSnapshot, ReputationError> {
    let snapshot: ReputationSnapshot =
        verify_signed_json(token.trim(), jwks, REPUTATION_TOKEN_TYPE)?;
    if snapshot.iss != ISSUER {
        return Err(ReputationError::WrongIssuer(snapshot.iss));
    }
    Ok(snapshot)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::token::{GatewayKey, KeyId, KeyRing};

    const DAY: i64 = 86_400_000;

    fn at(millis: i64) -> Timestamp {
        Timestamp::from_unix_millis(millis).unwrap()
    }

    fn fact(seeker: &str, outcome: ContractState, ended_days_ago: i64) -> HireFact {
        let now = 100 * DAY;
        let ended = now - ended_days_ago * DAY;
        HireFact {
            contract_id: ContractId::generate(),
            task_type: "summarize".to_owned(),
            seeker: seeker.to_owned(),
            outcome,
            decided_at: at(ended),
            paid_at: Some(at(ended - 1_000)),
            verdict: None,
            timed_out: false,
            dispute: None,
            paid: Paid {
                network: "eip155:31337".to_owned(),
                asset: "0xtoken".to_owned(),
                amount: AtomicAmount::new(1_000),
                payer: "0xpayer".to_owned(),
            },
            self_dealt: false,
        }
    }

    fn judged(mut fact: HireFact, verdict: Verdict, latency_ms: i64) -> HireFact {
        let paid_at = fact.paid_at.unwrap();
        fact.verdict = Some((verdict, at(paid_at.unix_millis() + latency_ms)));
        fact
    }

    /// Two settled passes by two seekers, a rejection, a worker failure, a timeout, a lost
    /// dispute, a self-dealt hire, and one settled pass 20 days ago (in 30d and all, not 7d).
    fn mix() -> Vec<HireFact> {
        let mut lost = judged(fact("skr_b", ContractState::Voided, 1), Verdict::Passed, 40);
        lost.dispute = Some(Some(DisputeDecision::Void));
        let mut timeout = fact("skr_a", ContractState::Failed, 1);
        timeout.timed_out = true;
        let mut own = judged(fact("skr_c", ContractState::Settled, 1), Verdict::Passed, 5);
        own.self_dealt = true;
        vec![
            judged(
                fact("skr_a", ContractState::Settled, 1),
                Verdict::Passed,
                10,
            ),
            judged(
                fact("skr_b", ContractState::Settled, 2),
                Verdict::Passed,
                20,
            ),
            judged(fact("skr_a", ContractState::Voided, 3), Verdict::Failed, 30),
            fact("skr_a", ContractState::Failed, 3),
            timeout,
            lost,
            own,
            judged(
                fact("skr_b", ContractState::Settled, 20),
                Verdict::Passed,
                100,
            ),
        ]
    }

    #[test]
    fn figures_match_a_hand_count() {
        let snapshot = compute(&WorkerId::generate(), &mix(), at(100 * DAY));
        let week = snapshot.figures(Window::Week, None).unwrap();
        assert_eq!(week.hires.value, 6);
        assert_eq!(week.hires.distinct_seekers, 2);
        assert_eq!(week.hires_settled.value, 2);
        assert_eq!(week.hires_settled.distinct_seekers, 2);
        // Judged: pass 10 ms, pass 20 ms, fail 30 ms, disputed pass 40 ms.
        assert_eq!((week.pass_rate.hits, week.pass_rate.sample), (3, 4));
        assert_eq!(week.pass_rate.value, Some(0.75));
        assert_eq!((week.failure_rate.hits, week.failure_rate.sample), (1, 6));
        assert_eq!((week.timeout_rate.hits, week.timeout_rate.sample), (1, 6));
        assert_eq!(week.disputes_opened.value, 1);
        assert_eq!(week.disputes_lost.value, 1);
        assert_eq!(week.latency.p50_ms, Some(20));
        assert_eq!(week.latency.p95_ms, Some(40));
        assert_eq!(week.volume_settled.len(), 1);
        assert_eq!(week.volume_settled[0].amount, AtomicAmount::new(2_000));
        assert_eq!(week.excluded_self_dealt, 1);

        let month = snapshot.figures(Window::Month, Some("summarize")).unwrap();
        assert_eq!(month.hires.value, 7);
        assert_eq!(month.hires_settled.value, 3);
        assert_eq!((month.pass_rate.hits, month.pass_rate.sample), (4, 5));
        assert_eq!(month.latency.p95_ms, Some(100));
        assert_eq!(month.volume_settled[0].amount, AtomicAmount::new(3_000));
        assert_eq!(
            snapshot.figures(Window::AllTime, None).unwrap().hires.value,
            7
        );
        assert!(snapshot.figures(Window::Week, Some("translate")).is_none());
    }

    #[test]
    fn a_self_dealt_hire_counts_nowhere() {
        let mut own = judged(fact("skr_c", ContractState::Settled, 1), Verdict::Passed, 5);
        own.self_dealt = true;
        let snapshot = compute(&WorkerId::generate(), &[own], at(100 * DAY));
        let all = snapshot.figures(Window::AllTime, None).unwrap();
        assert_eq!(all.hires.value, 0);
        assert_eq!(all.pass_rate.value, None);
        assert!(all.volume_settled.is_empty());
        assert_eq!(all.excluded_self_dealt, 1);
    }

    #[test]
    fn more_evidence_ranks_higher_at_the_same_rate() {
        let rate = |hits, sample| Rate {
            value: None,
            hits,
            sample,
            distinct_seekers: 1,
            contracts: Vec::new(),
        };
        assert!(rate(90, 100).wilson_lower_bound() > rate(9, 10).wilson_lower_bound());
        assert!(rate(9, 10).wilson_lower_bound() > rate(1, 10).wilson_lower_bound());
        assert_eq!(rate(0, 0).wilson_lower_bound(), 0.0);
    }

    #[test]
    fn nearest_rank_percentiles() {
        assert_eq!(nearest_rank(&[], 50), None);
        assert_eq!(nearest_rank(&[7], 95), Some(7));
        let hundred: Vec<u64> = (1..=100).collect();
        assert_eq!(nearest_rank(&hundred, 50), Some(50));
        assert_eq!(nearest_rank(&hundred, 95), Some(95));
    }

    #[test]
    fn a_signed_snapshot_verifies_offline_and_a_tampered_one_does_not() {
        let ring =
            KeyRing::new(GatewayKey::from_seed("k1".parse::<KeyId>().unwrap(), [7; 32]).unwrap());
        let snapshot = compute(&WorkerId::generate(), &mix(), at(100 * DAY));
        let token = ring.sign_json(REPUTATION_TOKEN_TYPE, &snapshot).unwrap();
        assert_eq!(
            verify_reputation_snapshot(&token, &ring.jwks()).unwrap(),
            snapshot
        );
        let mut parts: Vec<String> = token.split('.').map(str::to_owned).collect();
        parts[1] = parts[1].replacen('e', "f", 1);
        assert!(verify_reputation_snapshot(&parts.join("."), &ring.jwks()).is_err());
        let receipt_typed = ring
            .sign_json(crate::token::RECEIPT_TOKEN_TYPE, &snapshot)
            .unwrap();
        assert!(verify_reputation_snapshot(&receipt_typed, &ring.jwks()).is_err());
    }
}
