//! Reconciliation of escrowed (`auth-capture`) payments: the steps the store records for each
//! payment against the escrow's own events for that payment, to the atomic unit.
//!
//! An escrowed payment is keyed on chain by `getHash(paymentInfo)`; the `PaymentInfo` is rebuilt
//! from the stored payload against the contract's own stored offer (as the gateway does when it
//! drives the escrow, [`crate::hire::escrow::payment_info`]), and the capture's fee from the
//! signed terms ([`CaptureOrder`]).
//!
//! What the store claims, per payment state (the transaction column in brackets):
//!
//! | state | authorize (`authorize_tx`) | capture (`settle_tx`) | void / reclaim / refund (`release_tx`) |
//! |---|---|---|---|
//! | `authorized`, `settling`, `settlement_failed`, `settlement_unknown`, `voiding` | ✓ | | |
//! | `settled`, `refunding` | ✓ | ✓ (and the remainder's void, `remainder_tx`) | |
//! | `refunded` | ✓ | ✓ (and the remainder's void) | refund |
//! | `voided` | ✓ (none when nothing was ever locked) | | void |
//! | `reclaimed` | ✓ | | reclaim |
//! | `authorizing`, `authorization_refused` | | | |
//!
//! The authorization is of what the payer signed for; the capture of the payment's amount (all
//! of it, or what a metered contract verified, whose remainder is then voided: `remainder_tx`,
//! on a settled, refunding or refunded payment); a void or reclaim of everything locked; a
//! refund of what the arbiter refunded (`refunded_amount`, all of the capture when unset). A
//! capture also pays `amount × fee_bps / 10000` (rounded down, as the escrow does) to the
//! terms' treasury and the rest to the payout address.
//! A step counts in the range when its transaction's block does (the store keeps no blocks); a
//! step whose transaction the chain does not know is reported whatever the range. The escrow
//! events are read for the range. Then:
//!
//! | kind | what it means |
//! |---|---|
//! | `escrow_recorded_without_event` | a step the store records that the escrow's events do not show in that transaction with that amount (and fee, fee receiver, and the capture's two transfers): e.g. the store says voided, the chain still holds the money |
//! | `escrow_event_not_recorded` | an escrow event of a stored payment that the store does not record: e.g. the chain voided what the store says is `authorized`, or captured what the store does not know captured |
//! | `escrow_payment_unreadable` | a stored escrowed payment whose `PaymentInfo` cannot be rebuilt (payload, offer or terms do not parse): the chain cannot be asked about it |
//!
//! Totals per (network, asset), both sides: authorized, captured (and its fees), voided,
//! refunded, reclaimed, and what is still held (authorized minus captured, voided and reclaimed,
//! per payment, within the range). A capture's transfer to a payout address is accounted here,
//! so the `exact` section does not count it or call it an orphan.

use std::{
    collections::{BTreeMap, HashMap, HashSet},
    str::FromStr,
};

use alloy::primitives::{Address, B256, TxHash, U256};
use hiregate_payments::{EscrowAddresses, EscrowEvent, EscrowEventKind, PaymentPayload};
use serde::Serialize;

use super::{
    chain::{SettleTx, TransferLog},
    report::{Mismatch, MismatchKind, ReconcileError, Tally, decimal, optional_decimal},
};
use crate::hire::escrow::CaptureOrder;
use hiregate_contracts::id::{ContractId, PaymentId};
use hiregate_store::{LedgerEscrowPayment, states::PaymentState};

/// One step of an escrowed payment's life on chain.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum EscrowStep {
    /// Payer → escrow (`PaymentAuthorized`).
    Authorize,
    /// Escrow → payout address and treasury (`PaymentCaptured`).
    Capture,
    /// Escrow → payer by the operator (`PaymentVoided`).
    Void,
    /// Escrow → payer by the payer after the capture deadline (`PaymentReclaimed`).
    Reclaim,
    /// Operator's wallet → payer after a capture (`PaymentRefunded`).
    Refund,
    /// Payer → payout address and treasury in one step (`PaymentCharged`; the gateway never
    /// charges, so one is always unrecorded).
    Charge,
}

impl EscrowStep {
    /// The stable name.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Authorize => "authorize",
            Self::Capture => "capture",
            Self::Void => "void",
            Self::Reclaim => "reclaim",
            Self::Refund => "refund",
            Self::Charge => "charge",
        }
    }

    fn of(kind: &EscrowEventKind) -> Self {
        match kind {
            EscrowEventKind::Authorized { .. } => Self::Authorize,
            EscrowEventKind::Charged { .. } => Self::Charge,
            EscrowEventKind::Captured { .. } => Self::Capture,
            EscrowEventKind::Voided { .. } => Self::Void,
            EscrowEventKind::Reclaimed { .. } => Self::Reclaim,
            EscrowEventKind::Refunded { .. } => Self::Refund,
        }
    }
}

/// One side's escrow totals for one (network, asset), atomic units.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct EscrowTally {
    /// Locked by `authorize`.
    pub authorized: Tally,
    /// Paid out by `capture` (fees included).
    pub captured: Tally,
    /// The fees within `captured`, to the treasury.
    #[serde(serialize_with = "decimal")]
    pub fees: U256,
    /// Returned by the operator's `void`.
    pub voided: Tally,
    /// Returned from the operator's wallet by `refund`.
    pub refunded: Tally,
    /// Returned by the payer's `reclaim`.
    pub reclaimed: Tally,
    /// Still locked: per payment, authorized minus captured, voided and reclaimed (the count is
    /// of payments holding something).
    pub held: Tally,
}

impl EscrowTally {
    fn add(&mut self, step: EscrowStep, amount: U256, fee: U256) {
        match step {
            EscrowStep::Authorize => self.authorized.add(amount),
            EscrowStep::Capture | EscrowStep::Charge => {
                self.captured.add(amount);
                self.fees = self.fees.saturating_add(fee);
            }
            EscrowStep::Void => self.voided.add(amount),
            EscrowStep::Reclaim => self.reclaimed.add(amount),
            EscrowStep::Refund => self.refunded.add(amount),
        }
    }
}

/// Both sides' escrow totals for one (network, asset).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct EscrowAssetTotals {
    /// CAIP-2 network.
    pub network: String,
    /// Token contract (EIP-55).
    pub asset: String,
    /// What the store records, for the steps in range.
    pub store: EscrowTally,
    /// What the escrow's events say, in range.
    pub chain: EscrowTally,
}

/// A recorded step and the escrow event that proves it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct MatchedStep {
    /// Which step.
    pub step: EscrowStep,
    /// Atomic units.
    #[serde(serialize_with = "decimal")]
    pub amount: U256,
    /// The fee to the treasury (captures).
    #[serde(
        serialize_with = "optional_decimal",
        skip_serializing_if = "Option::is_none"
    )]
    pub fee: Option<U256>,
    /// Its transaction.
    pub transaction: String,
    /// Its block.
    pub block: u64,
}

/// An escrowed payment whose recorded steps in range are all proven by the escrow's events.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct MatchedEscrowPayment {
    /// Payment id.
    pub payment_id: PaymentId,
    /// Contract.
    pub contract_id: ContractId,
    /// CAIP-2 network.
    pub network: String,
    /// Token contract.
    pub asset: String,
    /// Payer.
    pub payer: String,
    /// Payout address (the PaymentInfo's receiver).
    pub pay_to: String,
    /// `getHash(paymentInfo)`.
    pub payment_hash: String,
    /// Stored payment state.
    pub state: PaymentState,
    /// Atomic units.
    #[serde(serialize_with = "decimal")]
    pub amount: U256,
    /// The steps in range, oldest first.
    pub steps: Vec<MatchedStep>,
}

/// The escrow section of a reconciliation report.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct EscrowReport {
    /// Totals per (network, asset).
    pub totals: Vec<EscrowAssetTotals>,
    /// Payments proven step by step.
    pub matched: Vec<MatchedEscrowPayment>,
}

/// A stored escrowed payment with its values parsed and its on-chain key rebuilt.
pub(super) struct Escrowed {
    record: LedgerEscrowPayment,
    amount: U256,
    /// `None` when the PaymentInfo cannot be rebuilt: the reason.
    chain: Result<OnChain, String>,
}

struct OnChain {
    hash: B256,
    receiver: Address,
    /// What the payer authorized (the metered maximum, or the price).
    authorized: U256,
    capture: CaptureOrder,
}

impl Escrowed {
    /// Parses `record`, rebuilding its `PaymentInfo` on `chain_id` against `addresses`.
    pub(super) fn parse(
        record: LedgerEscrowPayment,
        chain_id: u64,
        addresses: EscrowAddresses,
    ) -> Result<Self, ReconcileError> {
        let corrupt = |field| ReconcileError::CorruptPayment {
            payment_id: record.payment_id.clone(),
            field,
        };
        let amount = U256::from_str_radix(&record.amount, 10).map_err(|_| corrupt("amount"))?;
        let chain = on_chain(&record, amount, chain_id, addresses);
        Ok(Self {
            record,
            amount,
            chain,
        })
    }

    /// `getHash(paymentInfo)`, when it could be rebuilt.
    pub(super) fn hash(&self) -> Option<B256> {
        self.chain.as_ref().ok().map(|c| c.hash)
    }

    /// The payout address, when the PaymentInfo could be rebuilt.
    pub(super) fn receiver(&self) -> Option<Address> {
        self.chain.as_ref().ok().map(|c| c.receiver)
    }

    /// The asset.
    pub(super) fn asset(&self) -> Address {
        self.record.asset
    }

    /// The steps the store records, with the transaction it names (raw).
    fn claimed(&self) -> Vec<(EscrowStep, Option<&str>)> {
        let record = &self.record;
        let authorize = record.authorize_tx.as_deref();
        let release = record.release_tx.as_deref();
        let capture = record.settle_tx.as_deref();
        match record.state {
            PaymentState::Authorized
            | PaymentState::Settling
            | PaymentState::SettlementFailed
            | PaymentState::SettlementUnknown => {
                vec![(EscrowStep::Authorize, authorize)]
            }
            // A void intent of a payment that was never locked has nothing to prove.
            PaymentState::Voiding => authorize
                .map(|tx| vec![(EscrowStep::Authorize, Some(tx))])
                .unwrap_or_default(),
            PaymentState::Voided => match authorize {
                Some(tx) => vec![
                    (EscrowStep::Authorize, Some(tx)),
                    (EscrowStep::Void, release),
                ],
                None => Vec::new(),
            },
            PaymentState::Settled | PaymentState::Refunding | PaymentState::Refunded => {
                let mut steps = vec![
                    (EscrowStep::Authorize, authorize),
                    (EscrowStep::Capture, capture),
                ];
                if let Some(remainder) = record.remainder_tx.as_deref() {
                    steps.push((EscrowStep::Void, Some(remainder)));
                }
                if record.state == PaymentState::Refunded {
                    steps.push((EscrowStep::Refund, release));
                }
                steps
            }
            PaymentState::Reclaimed => vec![
                (EscrowStep::Authorize, authorize),
                (EscrowStep::Reclaim, release),
            ],
            // Nothing was locked (yet): no step to prove.
            PaymentState::Verified
            | PaymentState::Authorizing
            | PaymentState::AuthorizationRefused => Vec::new(),
        }
    }

    /// The transactions the store names for its steps (those that parse).
    pub(super) fn claimed_txs(&self) -> impl Iterator<Item = TxHash> + '_ {
        self.claimed()
            .into_iter()
            .filter_map(|(_, tx)| tx.and_then(|tx| TxHash::from_str(tx).ok()))
    }

    fn mismatch(&self, kind: MismatchKind, detail: String) -> Mismatch {
        Mismatch {
            kind,
            network: self.record.network.to_string(),
            asset: self.record.asset.to_checksum(None),
            payment_id: Some(self.record.payment_id.clone()),
            contract_id: Some(self.record.contract_id.clone()),
            payment_state: Some(self.record.state),
            payer: Some(self.record.payer.to_checksum(None)),
            pay_to: self.receiver().map(|a| a.to_checksum(None)),
            amount: Some(self.amount),
            transaction: None,
            block: None,
            payment_hash: self.hash().map(|h| h.to_string()),
            detail,
        }
    }
}

fn on_chain(
    record: &LedgerEscrowPayment,
    amount: U256,
    chain_id: u64,
    addresses: EscrowAddresses,
) -> Result<OnChain, String> {
    let capture = CaptureOrder::of(&record.terms, amount)
        .ok_or_else(|| "the contract's terms hold no escrow".to_owned())?;
    let offer = record
        .payment_offer
        .as_ref()
        .ok_or_else(|| "the contract has no stored offer".to_owned())?;
    let requirements = offer
        .requirements()
        .ok_or_else(|| "the stored offer has no requirements".to_owned())?;
    let payload: PaymentPayload = serde_json::from_value(record.payload.clone())
        .map_err(|e| format!("the stored payload does not parse: {e}"))?;
    let info = crate::hire::escrow::payment_info(&payload, requirements, addresses)
        .map_err(|refusal| format!("the stored payment is refused: {}", refusal.reason))?;
    Ok(OnChain {
        hash: info.get_hash(chain_id, addresses.escrow),
        receiver: info.receiver,
        authorized: info.max_amount(),
        capture,
    })
}

/// What the escrow comparison leaves for the rest of the report.
#[derive(Debug, Default)]
pub(super) struct EscrowOutcome {
    /// Transfers (tx, log index) the escrow accounts for: a capture's payouts.
    pub(super) claimed_transfers: HashSet<(TxHash, u64)>,
}

/// The comparison proper (no I/O): `payments` of `network` against their escrow `events` in
/// `[from, to]` and the `receipts` of the transactions involved.
pub(super) fn compare(
    network: &str,
    window: (u64, u64),
    payments: &[Escrowed],
    events: &[(B256, EscrowEvent)],
    receipts: &HashMap<TxHash, SettleTx>,
    report: &mut super::ReconcileReport,
) -> EscrowOutcome {
    let mut outcome = EscrowOutcome::default();
    let mut totals: BTreeMap<Address, EscrowAssetTotals> = BTreeMap::new();
    let mut by_hash: HashMap<B256, Vec<&EscrowEvent>> = HashMap::new();
    for (hash, event) in events {
        by_hash.entry(*hash).or_default().push(event);
    }
    for payment in payments {
        let on_chain = match &payment.chain {
            Ok(on_chain) => on_chain,
            Err(why) => {
                report.mismatches.push(payment.mismatch(
                    MismatchKind::EscrowPaymentUnreadable,
                    format!("the escrow's PaymentInfo cannot be rebuilt: {why}"),
                ));
                continue;
            }
        };
        let events = by_hash.remove(&on_chain.hash).unwrap_or_default();
        let totals = totals
            .entry(payment.record.asset)
            .or_insert_with(|| EscrowAssetTotals {
                network: network.to_owned(),
                asset: payment.record.asset.to_checksum(None),
                store: EscrowTally::default(),
                chain: EscrowTally::default(),
            });
        let mismatches_before = report.mismatches.len();
        let mut check = PaymentCheck {
            payment,
            on_chain,
            events: &events,
            receipts,
            totals,
            report: &mut *report,
            outcome: &mut outcome,
        };
        let (claimed_events, matched_steps) = check.recorded_steps(window);
        check.chain_events(&claimed_events);

        if report.mismatches.len() == mismatches_before && !matched_steps.is_empty() {
            report.escrow.matched.push(MatchedEscrowPayment {
                payment_id: payment.record.payment_id.clone(),
                contract_id: payment.record.contract_id.clone(),
                network: network.to_owned(),
                asset: payment.record.asset.to_checksum(None),
                payer: payment.record.payer.to_checksum(None),
                pay_to: on_chain.receiver.to_checksum(None),
                payment_hash: on_chain.hash.to_string(),
                state: payment.record.state,
                amount: payment.amount,
                steps: matched_steps,
            });
        }
    }
    report.escrow.totals.extend(
        totals
            .into_values()
            .filter(|t| t.store != EscrowTally::default() || t.chain != EscrowTally::default()),
    );
    outcome
}

/// One escrowed payment held against its escrow events: the store's side, then the chain's.
struct PaymentCheck<'a> {
    payment: &'a Escrowed,
    on_chain: &'a OnChain,
    /// The escrow's events of this payment (by its hash) in the window.
    events: &'a [&'a EscrowEvent],
    receipts: &'a HashMap<TxHash, SettleTx>,
    totals: &'a mut EscrowAssetTotals,
    report: &'a mut super::ReconcileReport,
    outcome: &'a mut EscrowOutcome,
}

impl PaymentCheck<'_> {
    /// The amount of `step` as the store records it: the authorization is of what the payer
    /// signed for, the capture of the payment's amount (a metered contract's verified one), a
    /// void or reclaim of everything when nothing was captured and of the remainder after a
    /// capture, a refund of what the arbiter refunded.
    fn step_amount(&self, step: EscrowStep) -> U256 {
        let record = &self.payment.record;
        let captured = self.payment.amount;
        let authorized = self.on_chain.authorized;
        match step {
            EscrowStep::Authorize => authorized,
            EscrowStep::Capture | EscrowStep::Charge => captured,
            EscrowStep::Void | EscrowStep::Reclaim => match record.state {
                PaymentState::Settled | PaymentState::Refunding | PaymentState::Refunded => {
                    authorized.saturating_sub(captured)
                }
                _ => authorized,
            },
            EscrowStep::Refund => record
                .refunded_amount
                .as_deref()
                .and_then(|refunded| U256::from_str_radix(refunded, 10).ok())
                .unwrap_or(captured),
        }
    }

    /// Each step the store records, mined in `[from, to]`, must be proven by an escrow event of
    /// its transaction. Returns the events that proved a step (by index) and the proven steps.
    fn recorded_steps(&mut self, (from, to): (u64, u64)) -> (HashSet<usize>, Vec<MatchedStep>) {
        let mut claimed_events: HashSet<usize> = HashSet::new();
        let mut matched_steps = Vec::new();
        let mut store_held = (U256::ZERO, U256::ZERO);
        for (step, recorded_tx) in self.payment.claimed() {
            let amount = self.step_amount(step);
            let fee = (step == EscrowStep::Capture).then(|| self.on_chain.capture.fee());
            let Some(tx) = recorded_tx.and_then(|tx| TxHash::from_str(tx).ok()) else {
                self.report.mismatches.push(self.payment.mismatch(
                    MismatchKind::EscrowRecordedWithoutEvent,
                    format!(
                        "records the {} step without a (valid) transaction hash ({})",
                        step.as_str(),
                        recorded_tx.unwrap_or("none")
                    ),
                ));
                continue;
            };
            let Some(SettleTx::Mined {
                block,
                success,
                transfers,
                ..
            }) = self.receipts.get(&tx)
            else {
                let mut mismatch = self.payment.mismatch(
                    MismatchKind::EscrowRecordedWithoutEvent,
                    format!("the chain does not know the {} transaction", step.as_str()),
                );
                mismatch.transaction = Some(tx.to_string());
                self.report.mismatches.push(mismatch);
                continue;
            };
            if *block < from || *block > to {
                continue;
            }
            self.totals.store.add(step, amount, fee.unwrap_or_default());
            match step {
                EscrowStep::Authorize => store_held.0 += amount,
                EscrowStep::Capture | EscrowStep::Void | EscrowStep::Reclaim => {
                    store_held.1 += amount;
                }
                EscrowStep::Refund | EscrowStep::Charge => {}
            }
            let found = self.events.iter().enumerate().find(|(index, event)| {
                !claimed_events.contains(index)
                    && event.tx_hash == Some(tx)
                    && proves(event, step, amount, &self.on_chain.capture)
            });
            let problem = if !success {
                Some(format!("the {} transaction reverted", step.as_str()))
            } else if let Some((index, _)) = found {
                if step == EscrowStep::Capture {
                    match capture_transfers(self.payment, self.on_chain, tx, transfers) {
                        Ok(payouts) => {
                            claimed_events.insert(index);
                            self.outcome.claimed_transfers.extend(payouts);
                            None
                        }
                        Err(why) => Some(why),
                    }
                } else {
                    claimed_events.insert(index);
                    None
                }
            } else {
                Some(format!(
                    "the escrow shows no {} of {}{} in this transaction (the payment's events in range: {})",
                    step.as_str(),
                    amount,
                    fee.map_or_else(String::new, |fee| format!(
                        " with fee {fee} ({} bps) to {}",
                        self.on_chain.capture.fee_bps, self.on_chain.capture.fee_receiver
                    )),
                    describe(self.events)
                ))
            };
            match problem {
                Some(detail) => {
                    let mut mismatch = self
                        .payment
                        .mismatch(MismatchKind::EscrowRecordedWithoutEvent, detail);
                    mismatch.transaction = Some(tx.to_string());
                    mismatch.block = Some(*block);
                    self.report.mismatches.push(mismatch);
                }
                None => matched_steps.push(MatchedStep {
                    step,
                    amount,
                    fee,
                    transaction: tx.to_string(),
                    block: *block,
                }),
            }
        }
        if store_held.0 > store_held.1 {
            self.totals.store.held.add(store_held.0 - store_held.1);
        }
        (claimed_events, matched_steps)
    }

    /// Each escrow event of the payment counts in the chain's tally; one that proved no
    /// recorded step is a step the store does not know.
    fn chain_events(&mut self, claimed_events: &HashSet<usize>) {
        let mut chain_held = (U256::ZERO, U256::ZERO);
        for (index, event) in self.events.iter().enumerate() {
            let step = EscrowStep::of(&event.kind);
            let (amount, fee) = amount_and_fee(&event.kind);
            self.totals.chain.add(step, amount, fee);
            match step {
                EscrowStep::Authorize => chain_held.0 += amount,
                EscrowStep::Capture | EscrowStep::Void | EscrowStep::Reclaim => {
                    chain_held.1 += amount;
                }
                EscrowStep::Refund | EscrowStep::Charge => {}
            }
            if step == EscrowStep::Capture || step == EscrowStep::Charge {
                // Its payouts are explained (by an event the store may not know: reported
                // below), not orphans.
                if let Some(tx) = event.tx_hash
                    && let Some(SettleTx::Mined { transfers, .. }) = self.receipts.get(&tx)
                {
                    self.outcome.claimed_transfers.extend(
                        transfers
                            .iter()
                            .filter(|t| t.asset == self.payment.record.asset)
                            .map(|t| (t.tx, t.log_index)),
                    );
                }
            }
            if claimed_events.contains(&index) {
                continue;
            }
            let mut mismatch = self.payment.mismatch(
                MismatchKind::EscrowEventNotRecorded,
                format!(
                    "the escrow recorded a {} of {amount}{} that the store does not (payment state `{}`, authorize {}, capture {}, release {})",
                    step.as_str(),
                    if fee.is_zero() {
                        String::new()
                    } else {
                        format!(" (fee {fee})")
                    },
                    self.payment.record.state,
                    self.payment.record.authorize_tx.as_deref().unwrap_or("none"),
                    self.payment.record.settle_tx.as_deref().unwrap_or("none"),
                    self.payment.record.release_tx.as_deref().unwrap_or("none"),
                ),
            );
            mismatch.amount = Some(amount);
            mismatch.transaction = event.tx_hash.map(|tx| tx.to_string());
            mismatch.block = event.block_number;
            self.report.mismatches.push(mismatch);
        }
        if chain_held.0 > chain_held.1 {
            self.totals.chain.held.add(chain_held.0 - chain_held.1);
        }
    }
}

/// Whether `event` is `step` of the whole `amount` (a capture also at the terms' fee, to the
/// terms' treasury).
fn proves(event: &EscrowEvent, step: EscrowStep, amount: U256, capture: &CaptureOrder) -> bool {
    match (&event.kind, step) {
        (EscrowEventKind::Authorized { amount: a, .. }, EscrowStep::Authorize)
        | (EscrowEventKind::Voided { amount: a }, EscrowStep::Void)
        | (EscrowEventKind::Reclaimed { amount: a }, EscrowStep::Reclaim)
        | (EscrowEventKind::Refunded { amount: a, .. }, EscrowStep::Refund) => *a == amount,
        (
            EscrowEventKind::Captured {
                amount: a,
                fee_bps,
                fee_receiver,
            },
            EscrowStep::Capture,
        ) => *a == amount && *fee_bps == capture.fee_bps && *fee_receiver == capture.fee_receiver,
        _ => false,
    }
}

/// The capture transaction's payouts: the amount minus the fee to the payout address and the
/// fee to the treasury (when not zero), as (tx, log index); or what is missing.
fn capture_transfers(
    payment: &Escrowed,
    on_chain: &OnChain,
    tx: TxHash,
    transfers: &[TransferLog],
) -> Result<Vec<(TxHash, u64)>, String> {
    let fee = on_chain.capture.fee();
    let to_worker = payment.amount.saturating_sub(fee);
    let find = |to: Address, value: U256| {
        transfers
            .iter()
            .find(|t| t.asset == payment.record.asset && t.to == to && t.value == value)
    };
    let mut payouts = Vec::new();
    match find(on_chain.receiver, to_worker) {
        Some(t) => payouts.push((t.tx, t.log_index)),
        None => {
            return Err(format!(
                "the capture transaction {tx} holds no Transfer of {to_worker} to the payout address {}",
                on_chain.receiver
            ));
        }
    }
    if !fee.is_zero() {
        match find(on_chain.capture.fee_receiver, fee) {
            Some(t) => payouts.push((t.tx, t.log_index)),
            None => {
                return Err(format!(
                    "the capture transaction {tx} holds no Transfer of the fee {fee} to the treasury {}",
                    on_chain.capture.fee_receiver
                ));
            }
        }
    }
    Ok(payouts)
}

fn amount_and_fee(kind: &EscrowEventKind) -> (U256, U256) {
    let fee = |amount: U256, bps: u16| amount * U256::from(bps) / U256::from(10_000u32);
    match *kind {
        EscrowEventKind::Authorized { amount, .. }
        | EscrowEventKind::Voided { amount }
        | EscrowEventKind::Reclaimed { amount }
        | EscrowEventKind::Refunded { amount, .. } => (amount, U256::ZERO),
        EscrowEventKind::Captured {
            amount, fee_bps, ..
        }
        | EscrowEventKind::Charged {
            amount, fee_bps, ..
        } => (amount, fee(amount, fee_bps)),
    }
}

fn describe(events: &[&EscrowEvent]) -> String {
    if events.is_empty() {
        return "none".to_owned();
    }
    events
        .iter()
        .map(|event| {
            let (amount, _) = amount_and_fee(&event.kind);
            format!(
                "{} {amount} in {}",
                EscrowStep::of(&event.kind).as_str(),
                event
                    .tx_hash
                    .map_or_else(|| "?".to_owned(), |tx| tx.to_string())
            )
        })
        .collect::<Vec<_>>()
        .join(", ")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ledger::ReconcileReport;
    use hiregate_contracts::terms::ContractTerms;

    const NETWORK: &str = "eip155:31337";
    const AMOUNT: u64 = 1_000_000;

    fn address(byte: u8) -> Address {
        Address::repeat_byte(byte)
    }

    fn tx(byte: u8) -> TxHash {
        TxHash::repeat_byte(byte)
    }

    fn hash() -> B256 {
        B256::repeat_byte(0xee)
    }

    fn capture_order() -> CaptureOrder {
        CaptureOrder {
            amount: U256::from(AMOUNT),
            fee_bps: 250,
            fee_receiver: address(0x7e),
        }
    }

    /// Signed terms as a contract row holds them (the comparison reads the chain's facts
    /// from `OnChain` below, not from these).
    fn escrowed_terms() -> ContractTerms {
        serde_json::from_value(serde_json::json!({
            "terms_version": "hiregate.terms.v1",
            "contract_id": "ctr_01JJVHA5G00000000000000001",
            "seeker": "skr_01HF7YAT000000000000000003",
            "worker": {"id": "wk_01HF7YAT000000000000000007", "endpoint": "https://worker.example.com/",
                       "protocol": "hire", "payout_address": "0x5aAeb6053F3E94C9b9A09f33669435E7Ef1BeAed"},
            "task": {"task_type": "code_review",
                     "input": {"depth": 2, "files": ["src/main.rs"], "repo": "https://git.example.com/app"},
                     "input_digest": "sha256:96943b57e2d21c05d3563fda68d44cbb909df4e9bfedf770ccf66ac05f096218",
                     "output_schemas": [{"type": "object"}]},
            "price": {"scheme": "exact", "network": NETWORK, "asset": "0x036CbD53842c5426634e7929541eC2318f3dCF7e",
                      "amount": AMOUNT.to_string()},
            "verification": {"policy_id": "vp.schema_thresholds.v1", "policy_version": "1",
                             "policy_hash": "sha256:185fc144f23fa3a7b7bd55993677f2c3ee1ada4072cebe528c3f0b27df875987",
                             "policy_params": {"thresholds": [{"op": ">=", "pointer": "/score", "value": 5}]}},
            "sla": {"max_latency_ms": 30000, "poll_window_s": 600},
            "retry_policy": {"max_attempts": 2},
            "acceptance_window_s": 600,
            "created_at": "2025-01-30T12:00:00.000Z",
            "offer_expires_at": "2025-01-30T12:15:00.000Z"
        }))
        .unwrap()
    }

    /// A stored escrowed payment in `state` with its transactions.
    fn payment(
        state: PaymentState,
        authorize: Option<TxHash>,
        capture: Option<TxHash>,
        release: Option<TxHash>,
    ) -> Escrowed {
        let record = LedgerEscrowPayment {
            payment_id: PaymentId::from_ulid(ulid::Ulid::from_parts(0, 1)),
            contract_id: ContractId::from_ulid(ulid::Ulid::from_parts(0, 1)),
            network: NETWORK.parse().unwrap(),
            asset: address(0xaa),
            payer: address(0x01),
            amount: AMOUNT.to_string(),
            state,
            authorize_tx: authorize.map(|t| t.to_string()),
            settle_tx: capture.map(|t| t.to_string()),
            release_tx: release.map(|t| t.to_string()),
            remainder_tx: None,
            refunded_amount: None,
            payload: serde_json::Value::Null,
            terms: escrowed_terms(),
            payment_offer: None,
        };
        Escrowed {
            record,
            amount: U256::from(AMOUNT),
            chain: Ok(OnChain {
                hash: hash(),
                receiver: address(0x02),
                authorized: U256::from(AMOUNT),
                capture: capture_order(),
            }),
        }
    }

    fn event(kind: EscrowEventKind, tx: TxHash, block: u64) -> (B256, EscrowEvent) {
        (
            hash(),
            EscrowEvent {
                kind,
                tx_hash: Some(tx),
                block_number: Some(block),
                log_index: Some(0),
            },
        )
    }

    fn authorized(tx: TxHash) -> (B256, EscrowEvent) {
        event(
            EscrowEventKind::Authorized {
                amount: U256::from(AMOUNT),
                token_collector: address(0xc0),
            },
            tx,
            10,
        )
    }

    fn captured(tx: TxHash, fee_bps: u16) -> (B256, EscrowEvent) {
        event(
            EscrowEventKind::Captured {
                amount: U256::from(AMOUNT),
                fee_bps,
                fee_receiver: address(0x7e),
            },
            tx,
            11,
        )
    }

    fn transfer(tx: TxHash, to: Address, value: U256, log_index: u64) -> TransferLog {
        TransferLog {
            asset: address(0xaa),
            from: address(0x5e),
            to,
            value,
            tx,
            block: 11,
            log_index,
        }
    }

    fn mined(block: u64, transfers: Vec<TransferLog>) -> SettleTx {
        SettleTx::Mined {
            block,
            success: true,
            transfers,
            authorization_uses: Vec::new(),
        }
    }

    /// The capture's receipt: the price minus 2.5 % to the worker, the fee to the treasury.
    fn capture_receipt(tx: TxHash) -> SettleTx {
        let fee = capture_order().fee();
        mined(
            11,
            vec![
                transfer(tx, address(0x02), U256::from(AMOUNT) - fee, 0),
                transfer(tx, address(0x7e), fee, 1),
            ],
        )
    }

    fn run(
        payments: &[Escrowed],
        events: &[(B256, EscrowEvent)],
        receipts: &[(TxHash, SettleTx)],
        range: (u64, u64),
    ) -> (ReconcileReport, EscrowOutcome) {
        let mut report = ReconcileReport::default();
        let receipts = receipts.iter().cloned().collect();
        let outcome = compare(NETWORK, range, payments, events, &receipts, &mut report);
        (report, outcome)
    }

    fn kinds(report: &ReconcileReport) -> Vec<MismatchKind> {
        report.mismatches.iter().map(|m| m.kind).collect()
    }

    #[test]
    fn a_capture_with_its_fee_matches_and_claims_its_payouts() {
        let (a, c) = (tx(0xa1), tx(0xc1));
        let (report, outcome) = run(
            &[payment(PaymentState::Settled, Some(a), Some(c), None)],
            &[authorized(a), captured(c, 250)],
            &[(a, mined(10, Vec::new())), (c, capture_receipt(c))],
            (0, 100),
        );
        assert!(report.mismatches.is_empty(), "{report:?}");
        assert_eq!(report.escrow.matched.len(), 1);
        assert_eq!(report.escrow.matched[0].steps.len(), 2);
        assert_eq!(
            report.escrow.matched[0].steps[1].fee,
            Some(U256::from(25_000u64))
        );
        let totals = &report.escrow.totals[0];
        assert_eq!(totals.store, totals.chain);
        assert_eq!(totals.chain.fees, U256::from(25_000u64));
        assert_eq!(totals.chain.held.count, 0);
        assert_eq!(outcome.claimed_transfers, HashSet::from([(c, 0), (c, 1)]));
    }

    #[test]
    fn voided_in_the_store_but_held_on_chain_is_reported() {
        let (a, v) = (tx(0xa1), tx(0xb1));
        let (report, _) = run(
            &[payment(PaymentState::Voided, Some(a), None, Some(v))],
            &[authorized(a)],
            &[(a, mined(10, Vec::new())), (v, mined(12, Vec::new()))],
            (0, 100),
        );
        assert_eq!(kinds(&report), [MismatchKind::EscrowRecordedWithoutEvent]);
        assert_eq!(report.mismatches[0].transaction, Some(v.to_string()));
        assert_eq!(report.mismatches[0].payment_hash, Some(hash().to_string()));
        let totals = &report.escrow.totals[0];
        assert_eq!(totals.chain.held.amount, U256::from(AMOUNT));
        assert_eq!(totals.store.held.amount, U256::ZERO);
        assert_eq!(totals.store.voided.amount, U256::from(AMOUNT));
        assert!(report.escrow.matched.is_empty());
    }

    #[test]
    fn a_capture_at_another_fee_is_no_proof_and_is_unrecorded() {
        let (a, c) = (tx(0xa1), tx(0xc1));
        let (report, outcome) = run(
            &[payment(PaymentState::Settled, Some(a), Some(c), None)],
            &[authorized(a), captured(c, 100)],
            &[(a, mined(10, Vec::new())), (c, capture_receipt(c))],
            (0, 100),
        );
        assert_eq!(
            kinds(&report),
            [
                MismatchKind::EscrowRecordedWithoutEvent,
                MismatchKind::EscrowEventNotRecorded
            ]
        );
        // Its payouts are still the escrow's, not orphans of the exact section.
        assert_eq!(outcome.claimed_transfers.len(), 2);
    }

    #[test]
    fn a_capture_the_store_does_not_know_is_unrecorded() {
        let (a, c) = (tx(0xa1), tx(0xc1));
        let (report, _) = run(
            &[payment(PaymentState::Authorized, Some(a), None, None)],
            &[authorized(a), captured(c, 250)],
            &[(a, mined(10, Vec::new())), (c, capture_receipt(c))],
            (0, 100),
        );
        assert_eq!(kinds(&report), [MismatchKind::EscrowEventNotRecorded]);
        assert_eq!(report.mismatches[0].transaction, Some(c.to_string()));
        assert_eq!(
            report.mismatches[0].payment_state,
            Some(PaymentState::Authorized)
        );
    }

    #[test]
    fn steps_out_of_range_are_left_out_but_unknown_transactions_are_not() {
        let (a, c) = (tx(0xa1), tx(0xc1));
        let (report, _) = run(
            &[payment(PaymentState::Settled, Some(a), Some(c), None)],
            &[],
            &[(a, mined(10, Vec::new())), (c, capture_receipt(c))],
            (50, 100),
        );
        assert!(report.mismatches.is_empty(), "{report:?}");
        assert!(report.escrow.totals.is_empty());
        let (report, _) = run(
            &[payment(PaymentState::Settled, Some(a), Some(c), None)],
            &[],
            &[(a, mined(10, Vec::new())), (c, SettleTx::NotFound)],
            (50, 100),
        );
        assert_eq!(kinds(&report), [MismatchKind::EscrowRecordedWithoutEvent]);
        assert_eq!(report.mismatches[0].transaction, Some(c.to_string()));
    }

    #[test]
    fn a_payment_whose_payment_info_cannot_be_rebuilt_is_reported() {
        let mut unreadable = payment(PaymentState::Authorized, Some(tx(0xa1)), None, None);
        unreadable.chain = Err("the stored payload does not parse".to_owned());
        let (report, _) = run(&[unreadable], &[], &[], (0, 100));
        assert_eq!(kinds(&report), [MismatchKind::EscrowPaymentUnreadable]);
    }

    #[test]
    fn states_claim_the_steps_the_table_says() {
        let (a, c, r) = (Some(tx(1)), Some(tx(2)), Some(tx(3)));
        let steps = |p: Escrowed| -> Vec<EscrowStep> {
            p.claimed().into_iter().map(|(step, _)| step).collect()
        };
        use EscrowStep::{Authorize, Capture, Reclaim, Refund, Void};
        assert_eq!(
            steps(payment(PaymentState::Authorizing, None, None, None)),
            []
        );
        assert_eq!(
            steps(payment(PaymentState::SettlementUnknown, a, None, None)),
            [Authorize]
        );
        assert_eq!(
            steps(payment(PaymentState::Refunding, a, c, None)),
            [Authorize, Capture]
        );
        assert_eq!(
            steps(payment(PaymentState::Refunded, a, c, r)),
            [Authorize, Capture, Refund]
        );
        assert_eq!(
            steps(payment(PaymentState::Reclaimed, a, None, r)),
            [Authorize, Reclaim]
        );
        assert_eq!(
            steps(payment(PaymentState::Voided, a, None, r)),
            [Authorize, Void]
        );
        // Voided before anything was locked: nothing to prove.
        assert_eq!(steps(payment(PaymentState::Voided, None, None, None)), []);
    }
}
