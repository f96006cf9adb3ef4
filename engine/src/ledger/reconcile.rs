//! Reconciliation: the store's settled payments against the chain's token movements, for a
//! block range. Shared by `hiregate reconcile` and `GET /v1/admin/reconcile`.
//!
//! Per configured chain (or the one `network` names):
//!
//! 1. Read every stored payment on the network (any state) with the payout address its
//!    contract's signed terms fix.
//! 2. Look up the receipt of every `settled` payment's transaction; its block decides whether
//!    the record falls in the range (the store keeps no block numbers). A settled record whose
//!    transaction the chain does not know is reported whatever the range.
//! 3. Read the range's `Transfer` logs to the payout addresses the store knows (contracts and
//!    listings) and the `AuthorizationUsed` logs of the payers the store knows. Permit2 logs no
//!    use: a transfer no settled record or EIP-3009 use accounts for is read as a Permit2 use
//!    when its transaction is an x402 Permit2 proxy settlement (owner and nonce from its
//!    calldata, see [`super::chain`]).
//! 4. Compare:
//!
//! | kind | what it means |
//! |---|---|
//! | `settled_without_transfer` | a settled record whose transaction does not hold its `AuthorizationUsed(payer, nonce)` (for a Permit2 payment: is not a Permit2 proxy settlement carrying its permit, owner and nonce) and a `Transfer(payer → pay_to, amount)` of its asset (reverted, unknown, other amount or recipient) |
//! | `used_not_recorded_settled` | the chain used the authorization of a stored payment, in any state, that the store does not record as settled with that transaction: money moved that the ledger does not show — the worst kind |
//! | `orphan_transfer` | a `Transfer` to a payout address that no stored payment explains (a matched settlement, or the authorization use of a payment with the same payer, payee and amount in the same transaction) |
//!
//! Totals per (network, asset) count the settled records in range (store side) and the
//! transfers to payout addresses in range (chain side), in atomic units.
//!
//! Escrowed (`auth-capture`) payments are left out of the above and reconciled against the
//! escrow's own events instead ([`super::escrow`]): the report's `escrow` section holds their
//! totals (authorized, captured and fees, voided, refunded, reclaimed, held) and the payments
//! proven step by step, and their disagreements join `mismatches` with kinds of their own
//! (`escrow_recorded_without_event`, `escrow_event_not_recorded`, `escrow_payment_unreadable`).
//! A capture's transfer to a payout address is the escrow section's, never an orphan.

use std::{
    collections::{BTreeMap, BTreeSet, HashMap, HashSet},
    str::FromStr,
};

use alloy::{
    primitives::{Address, B256, TxHash, U256},
    providers::{Provider as _, ProviderBuilder},
};
use serde::Serialize;

use super::{
    chain::{AuthorizationUse, ChainReader, SettleTx, TransferLog},
    escrow::{EscrowReport, Escrowed},
    report::{Mismatch, MismatchKind, ReconcileError, Tally, decimal},
};
use crate::settings::ChainSettings;
use hiregate_contracts::id::{ContractId, PaymentId};
use hiregate_store::{LedgerPayment, Store, states::PaymentState};

/// Stored payments read per query.
const PAYMENT_PAGE: u32 = 500;

/// What to reconcile.
#[derive(Debug, Clone, Default)]
pub struct ReconcileRequest {
    /// First block (inclusive).
    pub from_block: u64,
    /// Last block (inclusive); `None` (or past the head) means the chain's latest block.
    pub to_block: Option<u64>,
    /// Only this CAIP-2 network; `None` means every configured chain.
    pub network: Option<String>,
    /// Blocks per `eth_getLogs`; `None` means [`super::chain::DEFAULT_LOG_CHUNK_BLOCKS`].
    pub log_chunk_blocks: Option<u64>,
}

/// The block range reconciled on one network (the requested one, capped at the chain head).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct NetworkRange {
    /// CAIP-2 network.
    pub network: String,
    /// First block.
    pub from_block: u64,
    /// Last block.
    pub to_block: u64,
}

/// Both sides' totals for one (network, asset).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct AssetTotals {
    /// CAIP-2 network.
    pub network: String,
    /// Token contract (EIP-55).
    pub asset: String,
    /// Settled records in range.
    pub store: Tally,
    /// Transfers to payout addresses in range.
    pub chain: Tally,
}

/// A settled record and the transfer that proves it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct MatchedSettlement {
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
    /// Payout address.
    pub pay_to: String,
    /// Atomic units.
    #[serde(serialize_with = "decimal")]
    pub amount: U256,
    /// Settlement transaction.
    pub transaction: String,
    /// Its block.
    pub block: u64,
}

/// The outcome of a reconciliation.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct ReconcileReport {
    /// Whether store and chain agree (no mismatch).
    pub ok: bool,
    /// The range per network.
    pub networks: Vec<NetworkRange>,
    /// Totals per (network, asset).
    pub totals: Vec<AssetTotals>,
    /// Settled records proven by a transfer.
    pub matched: Vec<MatchedSettlement>,
    /// Escrowed (`auth-capture`) payments: totals and the payments proven by the escrow's
    /// events.
    pub escrow: EscrowReport,
    /// Mismatches by kind (`exact` and escrow).
    pub mismatch_counts: BTreeMap<&'static str, usize>,
    /// Every disagreement.
    pub mismatches: Vec<Mismatch>,
}

impl ReconcileReport {
    /// No mismatch.
    pub fn ok(&self) -> bool {
        self.mismatches.is_empty()
    }

    fn finish(mut self) -> Self {
        self.ok = self.mismatches.is_empty();
        self.mismatch_counts = MismatchKind::ALL
            .iter()
            .map(|kind| {
                let count = self.mismatches.iter().filter(|m| m.kind == *kind).count();
                (kind.as_str(), count)
            })
            .collect();
        self
    }

    /// A plain-text rendering for people (the CLI without `--json`).
    pub fn to_text(&self) -> String {
        use std::fmt::Write as _;
        let mut out = String::new();
        for range in &self.networks {
            let _ = writeln!(
                out,
                "{}: blocks {} to {}",
                range.network, range.from_block, range.to_block
            );
        }
        let _ = writeln!(out, "\ntotals (atomic units):");
        if self.totals.is_empty() {
            let _ = writeln!(out, "  none");
        }
        for total in &self.totals {
            let _ = writeln!(
                out,
                "  {} {}: store {} settled = {}; chain {} transfers = {}",
                total.network,
                total.asset,
                total.store.count,
                total.store.amount,
                total.chain.count,
                total.chain.amount
            );
        }
        let _ = writeln!(out, "\nmatched settlements: {}", self.matched.len());
        let _ = writeln!(out, "\nescrow totals (atomic units):");
        if self.escrow.totals.is_empty() {
            let _ = writeln!(out, "  none");
        }
        for total in &self.escrow.totals {
            for (side, tally) in [("store", &total.store), ("chain", &total.chain)] {
                let _ = writeln!(
                    out,
                    "  {} {} {side}: authorized {} = {}; captured {} = {} (fees {}); voided {} = {}; refunded {} = {}; reclaimed {} = {}; held {} = {}",
                    total.network,
                    total.asset,
                    tally.authorized.count,
                    tally.authorized.amount,
                    tally.captured.count,
                    tally.captured.amount,
                    tally.fees,
                    tally.voided.count,
                    tally.voided.amount,
                    tally.refunded.count,
                    tally.refunded.amount,
                    tally.reclaimed.count,
                    tally.reclaimed.amount,
                    tally.held.count,
                    tally.held.amount,
                );
            }
        }
        let _ = writeln!(
            out,
            "matched escrowed payments: {}",
            self.escrow.matched.len()
        );
        let _ = writeln!(out, "mismatches: {}", self.mismatches.len());
        for mismatch in &self.mismatches {
            let _ = writeln!(
                out,
                "  {} {} payment={} contract={} state={} payer={} pay_to={} amount={} tx={} block={}\n    {}",
                mismatch.kind.as_str(),
                mismatch.network,
                mismatch.payment_id.as_ref().map_or("-", PaymentId::as_str),
                mismatch
                    .contract_id
                    .as_ref()
                    .map_or("-", ContractId::as_str),
                mismatch.payment_state.map_or("-", PaymentState::as_str),
                mismatch.payer.as_deref().unwrap_or("-"),
                mismatch.pay_to.as_deref().unwrap_or("-"),
                mismatch
                    .amount
                    .map_or_else(|| "-".to_owned(), |a| a.to_string()),
                mismatch.transaction.as_deref().unwrap_or("-"),
                mismatch
                    .block
                    .map_or_else(|| "-".to_owned(), |b| b.to_string()),
                mismatch.detail,
            );
        }
        let _ = writeln!(
            out,
            "\n{}",
            if self.ok() {
                "OK: the store's settlements and escrow steps equal the chain's transfers and escrow events"
            } else {
                "MISMATCH: the store and the chain disagree"
            }
        );
        out
    }
}

/// Reconcile `store` with the chains in `chains` for `request`.
pub async fn reconcile<'a>(
    store: &Store,
    chains: impl IntoIterator<Item = &'a ChainSettings>,
    request: &ReconcileRequest,
) -> Result<ReconcileReport, ReconcileError> {
    if let Some(to) = request.to_block
        && request.from_block > to
    {
        return Err(ReconcileError::InvalidRange {
            from: request.from_block,
            to,
        });
    }
    let mut selected: Vec<&ChainSettings> = chains
        .into_iter()
        .filter(|chain| {
            request
                .network
                .as_ref()
                .is_none_or(|network| chain.network.as_str() == network)
        })
        .collect();
    selected.sort_by_key(|a| a.network);
    selected.dedup_by(|a, b| a.network == b.network);
    if selected.is_empty() {
        return Err(match &request.network {
            Some(network) => ReconcileError::NetworkNotConfigured(network.clone()),
            None => ReconcileError::NoChains,
        });
    }
    let mut report = ReconcileReport::default();
    for chain in selected {
        reconcile_network(store, chain, request, &mut report).await?;
    }
    Ok(report.finish())
}

/// A stored payment with its values parsed.
struct Held {
    record: LedgerPayment,
    nonce: B256,
    amount: U256,
    pay_to: Option<Address>,
}

impl Held {
    fn parse(record: LedgerPayment) -> Result<Self, ReconcileError> {
        let corrupt = |field| ReconcileError::CorruptPayment {
            payment_id: record.payment_id.clone(),
            field,
        };
        let nonce = B256::from_str(&record.nonce).map_err(|_| corrupt("nonce"))?;
        let amount = U256::from_str_radix(&record.amount, 10).map_err(|_| corrupt("amount"))?;
        // A contract whose terms lack a payout address (or hold garbage) cannot be matched;
        // its settled record is then reported, not the run aborted.
        let pay_to = record
            .pay_to
            .as_deref()
            .and_then(|p| Address::from_str(p).ok());
        Ok(Self {
            record,
            nonce,
            amount,
            pay_to,
        })
    }

    fn settle_tx(&self) -> Option<TxHash> {
        self.record
            .settle_tx
            .as_deref()
            .and_then(|tx| TxHash::from_str(tx).ok())
    }

    fn is_settled(&self) -> bool {
        self.record.state == PaymentState::Settled
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
            pay_to: self.pay_to.map(|a| a.to_checksum(None)),
            amount: Some(self.amount),
            transaction: self.record.settle_tx.clone(),
            block: None,
            payment_hash: None,
            detail,
        }
    }

    fn pays(&self, transfer: &TransferLog) -> bool {
        transfer.asset == self.record.asset
            && transfer.from == self.record.payer
            && Some(transfer.to) == self.pay_to
            && transfer.value == self.amount
    }

    fn used_by(&self, authorization: &AuthorizationUse) -> bool {
        authorization.asset == self.record.asset
            && authorization.authorizer == self.record.payer
            && authorization.nonce == self.nonce
    }
}

fn rpc(network: &str) -> impl Fn(alloy::transports::TransportError) -> ReconcileError + '_ {
    move |source| ReconcileError::Rpc {
        network: network.to_owned(),
        source,
    }
}

/// The network's stored payments, paged: those that settle by transfer (`exact`) and the
/// escrowed ones, their escrow `PaymentInfo` rebuilt for `chain_id`.
async fn stored_payments(
    store: &Store,
    chain: &ChainSettings,
    chain_id: u64,
) -> Result<(Vec<Held>, Vec<Escrowed>), ReconcileError> {
    let mut held = Vec::new();
    let mut after: Option<PaymentId> = None;
    loop {
        let page = store
            .ledger_payments(&chain.network, after.as_ref(), PAYMENT_PAGE)
            .await?;
        let full = page.len() >= PAYMENT_PAGE as usize;
        after = page.last().map(|p| p.payment_id.clone());
        for record in page {
            held.push(Held::parse(record)?);
        }
        if !full {
            break;
        }
    }

    let addresses = hiregate_payments::EscrowAddresses {
        escrow: chain.auth_capture_escrow,
        erc3009_collector: chain.erc3009_token_collector,
        operator_refund_collector: chain.operator_refund_collector,
    };
    let mut escrowed = Vec::new();
    let mut after: Option<PaymentId> = None;
    loop {
        let page = store
            .ledger_escrow_payments(&chain.network, after.as_ref(), PAYMENT_PAGE)
            .await?;
        let full = page.len() >= PAYMENT_PAGE as usize;
        after = page.last().map(|p| p.payment_id.clone());
        for record in page {
            escrowed.push(Escrowed::parse(record, chain_id, addresses)?);
        }
        if !full {
            break;
        }
    }

    Ok((held, escrowed))
}

async fn reconcile_network(
    store: &Store,
    chain: &ChainSettings,
    request: &ReconcileRequest,
    report: &mut ReconcileReport,
) -> Result<(), ReconcileError> {
    let network = chain.network.as_str();
    let provider = ProviderBuilder::new()
        .connect_http(chain.rpc_url.clone())
        .erased();
    let reader = ChainReader::new(
        provider,
        request
            .log_chunk_blocks
            .unwrap_or(super::chain::DEFAULT_LOG_CHUNK_BLOCKS),
    );
    let actual = reader.chain_id().await.map_err(rpc(network))?;
    if chain.chain_id() != Some(actual) {
        return Err(ReconcileError::WrongChain {
            network: network.to_owned(),
            actual,
        });
    }
    let head = reader.head().await.map_err(rpc(network))?;
    let from = request.from_block;
    let to = request.to_block.map_or(head, |to| to.min(head));
    report.networks.push(NetworkRange {
        network: network.to_owned(),
        from_block: from,
        to_block: to,
    });

    // Checked above: the node serves the configured chain.
    let (held, escrowed) = stored_payments(store, chain, actual).await?;

    let mut assets: BTreeSet<Address> = held.iter().map(|p| p.record.asset).collect();
    let mut payees: BTreeSet<Address> = held.iter().filter_map(|p| p.pay_to).collect();
    assets.extend(escrowed.iter().map(Escrowed::asset));
    payees.extend(escrowed.iter().filter_map(Escrowed::receiver));
    for (asset, pay_to) in store.listing_payout_addresses(network).await? {
        if let (Ok(asset), Ok(pay_to)) = (Address::from_str(&asset), Address::from_str(&pay_to)) {
            assets.insert(asset);
            payees.insert(pay_to);
        }
    }
    assets.extend(chain.tokens.iter().map(|token| token.address));
    let payers: BTreeSet<Address> = held.iter().map(|p| p.record.payer).collect();
    let assets: Vec<Address> = assets.into_iter().collect();

    let settle_txs = reader
        .settle_txs(
            held.iter()
                .filter(|p| p.is_settled())
                .filter_map(Held::settle_tx)
                .collect::<HashSet<_>>(),
        )
        .await
        .map_err(rpc(network))?;
    let transfers = reader
        .transfers_to(&assets, &payees.into_iter().collect::<Vec<_>>(), from, to)
        .await
        .map_err(rpc(network))?;
    let mut uses = reader
        .authorization_uses_by(&assets, &payers.into_iter().collect::<Vec<_>>(), from, to)
        .await
        .map_err(rpc(network))?;
    // Permit2 settlements log no use of their own: the transfers that neither a settled
    // record's transaction nor an EIP-3009 use accounts for are asked whether they are proxy
    // settlements carrying a stored payment's permit.
    let accounted: HashSet<TxHash> = uses
        .iter()
        .map(|u| u.tx)
        .chain(settle_txs.keys().copied())
        .collect();
    let unaccounted: Vec<&TransferLog> = transfers
        .iter()
        .filter(|t| !accounted.contains(&t.tx))
        .collect();
    uses.extend(
        reader
            .permit_uses(&unaccounted)
            .await
            .map_err(rpc(network))?,
    );

    let hashes: Vec<B256> = escrowed.iter().filter_map(Escrowed::hash).collect();
    let escrow_events = reader
        .escrow_events(chain.auth_capture_escrow, &hashes, from, to)
        .await
        .map_err(rpc(network))?;
    // Receipts of every escrow transaction involved: the store's (their blocks place them in
    // the range) and the captures the events show (their payouts are explained).
    let escrow_txs: HashSet<TxHash> = escrowed
        .iter()
        .flat_map(Escrowed::claimed_txs)
        .chain(escrow_events.iter().filter_map(|(_, event)| {
            matches!(
                event.kind,
                hiregate_payments::EscrowEventKind::Captured { .. }
                    | hiregate_payments::EscrowEventKind::Charged { .. }
            )
            .then_some(event.tx_hash)
            .flatten()
        }))
        .collect();
    let escrow_receipts = reader.settle_txs(escrow_txs).await.map_err(rpc(network))?;
    let escrow = super::escrow::compare(
        network,
        (from, to),
        &escrowed,
        &escrow_events,
        &escrow_receipts,
        report,
    );

    compare(
        network,
        (from, to),
        &held,
        &settle_txs,
        &transfers,
        &uses,
        &escrow.claimed_transfers,
        report,
    );
    Ok(())
}

/// The comparison proper, on what was read (no I/O). `escrowed_transfers` are accounted by
/// the escrow section: neither counted nor orphans here.
#[allow(clippy::too_many_arguments)]
fn compare(
    network: &str,
    (from, to): (u64, u64),
    held: &[Held],
    settle_txs: &HashMap<TxHash, SettleTx>,
    transfers: &[TransferLog],
    uses: &[AuthorizationUse],
    escrowed_transfers: &HashSet<(TxHash, u64)>,
    report: &mut ReconcileReport,
) {
    let mut totals: BTreeMap<Address, AssetTotals> = BTreeMap::new();
    // (tx, log index) of transfers that a settled record accounts for.
    let mut claimed: HashSet<(TxHash, u64)> = HashSet::new();

    // (a): every settled record in range must hold its authorization use and its transfer.
    for payment in held.iter().filter(|p| p.is_settled()) {
        let Some(tx) = payment.settle_tx() else {
            report.mismatches.push(payment.mismatch(
                MismatchKind::SettledWithoutTransfer,
                "recorded settled without a (valid) transaction hash".to_owned(),
            ));
            continue;
        };
        let Some(SettleTx::Mined {
            block,
            success,
            transfers: tx_transfers,
            authorization_uses,
        }) = settle_txs.get(&tx)
        else {
            report.mismatches.push(payment.mismatch(
                MismatchKind::SettledWithoutTransfer,
                "the chain does not know the settlement transaction".to_owned(),
            ));
            continue;
        };
        if *block < from || *block > to {
            continue;
        }
        tally(&mut totals, network, payment.record.asset)
            .store
            .add(payment.amount);
        let problem = if !success {
            Some("the settlement transaction reverted".to_owned())
        } else if !authorization_uses.iter().any(|u| payment.used_by(u)) {
            Some(
                "the transaction does not use this payment's authorization (payer, nonce)"
                    .to_owned(),
            )
        } else if payment.pay_to.is_none() {
            Some("the contract's terms hold no valid payout address".to_owned())
        } else {
            match tx_transfers
                .iter()
                .find(|t| payment.pays(t) && !claimed.contains(&(t.tx, t.log_index)))
            {
                Some(transfer) => {
                    claimed.insert((transfer.tx, transfer.log_index));
                    report.matched.push(MatchedSettlement {
                        payment_id: payment.record.payment_id.clone(),
                        contract_id: payment.record.contract_id.clone(),
                        network: network.to_owned(),
                        asset: payment.record.asset.to_checksum(None),
                        payer: payment.record.payer.to_checksum(None),
                        pay_to: transfer.to.to_checksum(None),
                        amount: payment.amount,
                        transaction: tx.to_string(),
                        block: *block,
                    });
                    None
                }
                None => Some(format!(
                    "no Transfer of exactly the stored amount from the payer to the payout address in the transaction (its transfers: {})",
                    describe_transfers(tx_transfers)
                )),
            }
        };
        if let Some(detail) = problem {
            let mut mismatch = payment.mismatch(MismatchKind::SettledWithoutTransfer, detail);
            mismatch.block = Some(*block);
            report.mismatches.push(mismatch);
        }
    }

    // (b): an authorization of a stored payment used on chain must be recorded settled there.
    let mut uses_by_tx: HashMap<TxHash, Vec<&Held>> = HashMap::new();
    for authorization in uses {
        let Some(payment) = held.iter().find(|p| p.used_by(authorization)) else {
            // The payer used an authorization the gateway never held: not its business.
            continue;
        };
        uses_by_tx
            .entry(authorization.tx)
            .or_default()
            .push(payment);
        let recorded = payment.is_settled() && payment.settle_tx() == Some(authorization.tx);
        if !recorded {
            let mut mismatch = payment.mismatch(
                MismatchKind::UsedNotRecordedSettled,
                format!(
                    "the authorization was used on chain but the store records state `{}` with transaction {}",
                    payment.record.state,
                    payment.record.settle_tx.as_deref().unwrap_or("none")
                ),
            );
            mismatch.transaction = Some(authorization.tx.to_string());
            mismatch.block = Some(authorization.block);
            report.mismatches.push(mismatch);
        }
    }

    // (c): every transfer to a payout address needs a stored payment behind it.
    for transfer in transfers {
        if escrowed_transfers.contains(&(transfer.tx, transfer.log_index)) {
            continue;
        }
        tally(&mut totals, network, transfer.asset)
            .chain
            .add(transfer.value);
        if claimed.contains(&(transfer.tx, transfer.log_index)) {
            continue;
        }
        let explained = uses_by_tx
            .get(&transfer.tx)
            .is_some_and(|payments| payments.iter().any(|p| p.pays(transfer)));
        if explained {
            // Its payment is either matched above or already reported under (b).
            continue;
        }
        report.mismatches.push(Mismatch {
            kind: MismatchKind::OrphanTransfer,
            network: network.to_owned(),
            asset: transfer.asset.to_checksum(None),
            payment_id: None,
            contract_id: None,
            payment_state: None,
            payer: Some(transfer.from.to_checksum(None)),
            pay_to: Some(transfer.to.to_checksum(None)),
            amount: Some(transfer.value),
            transaction: Some(transfer.tx.to_string()),
            block: Some(transfer.block),
            payment_hash: None,
            detail: "a transfer to a payout address that no stored payment explains".to_owned(),
        });
    }
    report.totals.extend(totals.into_values());
}

fn tally<'a>(
    totals: &'a mut BTreeMap<Address, AssetTotals>,
    network: &str,
    asset: Address,
) -> &'a mut AssetTotals {
    totals.entry(asset).or_insert_with(|| AssetTotals {
        network: network.to_owned(),
        asset: asset.to_checksum(None),
        store: Tally::default(),
        chain: Tally::default(),
    })
}

fn describe_transfers(transfers: &[TransferLog]) -> String {
    if transfers.is_empty() {
        return "none".to_owned();
    }
    transfers
        .iter()
        .map(|t| format!("{} -> {} {}", t.from, t.to, t.value))
        .collect::<Vec<_>>()
        .join(", ")
}

#[cfg(test)]
mod tests {
    use super::*;

    const NETWORK: &str = "eip155:31337";

    fn address(byte: u8) -> Address {
        Address::repeat_byte(byte)
    }

    /// The payment id a test names `name` (`p1`, `p2`…), one per name.
    fn payment_id(name: &str) -> PaymentId {
        PaymentId::from_ulid(ulid_of(name))
    }

    fn ulid_of(name: &str) -> ulid::Ulid {
        let body = name
            .bytes()
            .fold(0u128, |acc, b| (acc << 8) | u128::from(b));
        ulid::Ulid::from_parts(0, body)
    }

    fn held(id: &str, state: PaymentState, tx: Option<TxHash>, nonce: u8) -> Held {
        Held::parse(LedgerPayment {
            payment_id: payment_id(id),
            contract_id: ContractId::from_ulid(ulid_of(id)),
            network: NETWORK.parse().unwrap(),
            asset: address(0xaa),
            payer: address(0x01),
            nonce: B256::repeat_byte(nonce).to_string(),
            amount: "1500000".to_owned(),
            state,
            settle_tx: tx.map(|t| t.to_string()),
            pay_to: Some(address(0x02).to_string()),
        })
        .unwrap()
    }

    fn transfer(tx: TxHash, value: u64, log_index: u64) -> TransferLog {
        TransferLog {
            asset: address(0xaa),
            from: address(0x01),
            to: address(0x02),
            value: U256::from(value),
            tx,
            block: 10,
            log_index,
        }
    }

    fn used(tx: TxHash, nonce: u8) -> AuthorizationUse {
        AuthorizationUse {
            asset: address(0xaa),
            authorizer: address(0x01),
            nonce: B256::repeat_byte(nonce),
            tx,
            block: 10,
        }
    }

    fn mined(tx: TxHash, nonce: u8, value: u64) -> SettleTx {
        SettleTx::Mined {
            block: 10,
            success: true,
            transfers: vec![transfer(tx, value, 0)],
            authorization_uses: vec![used(tx, nonce)],
        }
    }

    fn run(
        held: &[Held],
        receipts: &[(TxHash, SettleTx)],
        transfers: &[TransferLog],
        uses: &[AuthorizationUse],
        range: (u64, u64),
    ) -> ReconcileReport {
        let mut report = ReconcileReport::default();
        let receipts = receipts.iter().cloned().collect();
        compare(
            NETWORK,
            range,
            held,
            &receipts,
            transfers,
            uses,
            &HashSet::new(),
            &mut report,
        );
        report.finish()
    }

    fn kinds(report: &ReconcileReport) -> Vec<MismatchKind> {
        report.mismatches.iter().map(|m| m.kind).collect()
    }

    #[test]
    fn a_settled_payment_with_its_transfer_matches() {
        let tx = B256::repeat_byte(0x11);
        let report = run(
            &[held("p1", PaymentState::Settled, Some(tx), 1)],
            &[(tx, mined(tx, 1, 1_500_000))],
            &[transfer(tx, 1_500_000, 0)],
            &[used(tx, 1)],
            (0, 100),
        );
        assert!(report.ok(), "{report:?}");
        assert_eq!(report.matched.len(), 1);
        assert_eq!(report.totals[0].store.count, 1);
        assert_eq!(report.totals[0].chain.amount, U256::from(1_500_000u64));
    }

    #[test]
    fn out_of_range_settlements_are_left_out() {
        let tx = B256::repeat_byte(0x11);
        let report = run(
            &[held("p1", PaymentState::Settled, Some(tx), 1)],
            &[(tx, mined(tx, 1, 1_500_000))],
            &[],
            &[],
            (11, 100),
        );
        assert!(report.ok(), "{report:?}");
        assert!(report.matched.is_empty());
        assert!(report.totals.is_empty());
    }

    #[test]
    fn another_amount_is_a_settled_record_without_transfer_and_an_orphan() {
        let tx = B256::repeat_byte(0x11);
        let report = run(
            &[held("p1", PaymentState::Settled, Some(tx), 1)],
            &[(tx, mined(tx, 1, 1_000_000))],
            &[transfer(tx, 1_000_000, 0)],
            &[used(tx, 1)],
            (0, 100),
        );
        assert_eq!(
            kinds(&report),
            [
                MismatchKind::SettledWithoutTransfer,
                MismatchKind::OrphanTransfer
            ]
        );
    }

    #[test]
    fn an_unknown_transaction_is_reported_whatever_the_range() {
        let tx = B256::repeat_byte(0x11);
        let report = run(
            &[
                held("p1", PaymentState::Settled, Some(tx), 1),
                held("p2", PaymentState::Settled, None, 2),
            ],
            &[(tx, SettleTx::NotFound)],
            &[],
            &[],
            (50, 60),
        );
        assert_eq!(
            kinds(&report),
            [
                MismatchKind::SettledWithoutTransfer,
                MismatchKind::SettledWithoutTransfer
            ]
        );
    }

    #[test]
    fn a_used_authorization_of_an_unsettled_payment_is_the_worst_mismatch() {
        let tx = B256::repeat_byte(0x22);
        let report = run(
            &[held("p1", PaymentState::SettlementFailed, None, 1)],
            &[],
            &[transfer(tx, 1_500_000, 3)],
            &[used(tx, 1)],
            (0, 100),
        );
        assert_eq!(kinds(&report), [MismatchKind::UsedNotRecordedSettled]);
        assert_eq!(report.mismatches[0].transaction, Some(tx.to_string()));
        assert_eq!(report.mismatch_counts["used_not_recorded_settled"], 1);
    }

    #[test]
    fn a_settled_record_naming_another_transaction_is_caught_both_ways() {
        let real = B256::repeat_byte(0x33);
        let recorded = B256::repeat_byte(0x44);
        let report = run(
            &[held("p1", PaymentState::Settled, Some(recorded), 1)],
            &[(recorded, SettleTx::NotFound)],
            &[transfer(real, 1_500_000, 0)],
            &[used(real, 1)],
            (0, 100),
        );
        assert_eq!(
            kinds(&report),
            [
                MismatchKind::SettledWithoutTransfer,
                MismatchKind::UsedNotRecordedSettled
            ]
        );
    }

    #[test]
    fn one_transfer_proves_one_payment_only() {
        // Two records claim the same transaction and the same transfer; the second payment's
        // authorization was never used in it.
        let tx = B256::repeat_byte(0x55);
        let report = run(
            &[
                held("p1", PaymentState::Settled, Some(tx), 1),
                held("p2", PaymentState::Settled, Some(tx), 2),
            ],
            &[(tx, mined(tx, 1, 1_500_000))],
            &[transfer(tx, 1_500_000, 0)],
            &[used(tx, 1)],
            (0, 100),
        );
        assert_eq!(kinds(&report), [MismatchKind::SettledWithoutTransfer]);
        assert_eq!(report.mismatches[0].payment_id, Some(payment_id("p2")));
    }

    #[test]
    fn a_transfer_nobody_explains_is_an_orphan() {
        let tx = B256::repeat_byte(0x66);
        let mut stray = transfer(tx, 7, 0);
        stray.from = Address::ZERO;
        let report = run(&[], &[], &[stray], &[], (0, 100));
        assert_eq!(kinds(&report), [MismatchKind::OrphanTransfer]);
        assert_eq!(report.totals[0].chain.count, 1);
        assert_eq!(report.totals[0].store.count, 0);
    }
}
