//! The facilitator's on-chain half of `exact`: signature (EOA or EIP-1271), nonce state,
//! balance and simulation; the settlement call data; finding a payment's earlier settlement.

use alloy::primitives::{Address, B256, Bytes, FixedBytes, TxHash};
use alloy::providers::{DynProvider, Provider};
use alloy::rpc::types::{Filter, TransactionInput, TransactionReceipt, TransactionRequest};
use alloy::sol_types::{SolCall, SolEvent};
use alloy::transports::{RpcError, TransportError};

use self::simulations::Simulations;
use super::ExactPayment;
use crate::reason::Reason;

mod simulations;

alloy::sol! {
    /// The parts of an EIP-3009 token (FiatTokenV2_2 shape) that verification and settlement use.
    interface IEip3009Token {
        event Transfer(address indexed from, address indexed to, uint256 value);
        event AuthorizationUsed(address indexed authorizer, bytes32 indexed nonce);

        function balanceOf(address account) external view returns (uint256);
        function authorizationState(address authorizer, bytes32 nonce) external view returns (bool);
        function transferWithAuthorization(
            address from, address to, uint256 value, uint256 validAfter, uint256 validBefore,
            bytes32 nonce, uint8 v, bytes32 r, bytes32 s
        ) external;
        function transferWithAuthorization(
            address from, address to, uint256 value, uint256 validAfter, uint256 validBefore,
            bytes32 nonce, bytes signature
        ) external;
    }

    /// EIP-1271 contract-wallet signature check.
    interface IErc1271 {
        function isValidSignature(bytes32 hash, bytes signature) external view returns (bytes4 magicValue);
    }
}

/// What `isValidSignature` returns for a valid signature.
pub(crate) const ERC1271_MAGIC: FixedBytes<4> = FixedBytes([0x16, 0x26, 0xba, 0x7e]);

/// ERC-6492 wraps a signature for a not-yet-deployed wallet and ends with this suffix.
pub(crate) const ERC6492_SUFFIX: [u8; 32] = [
    0x64, 0x92, 0x64, 0x92, 0x64, 0x92, 0x64, 0x92, 0x64, 0x92, 0x64, 0x92, 0x64, 0x92, 0x64, 0x92,
    0x64, 0x92, 0x64, 0x92, 0x64, 0x92, 0x64, 0x92, 0x64, 0x92, 0x64, 0x92, 0x64, 0x92, 0x64, 0x92,
];

/// A refusal with the node's detail (e.g. the revert text of the simulation).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Refusal {
    /// The verdict reason.
    pub reason: Reason,
    /// Free-text detail for `invalidMessage` / `errorMessage`.
    pub message: Option<String>,
}

impl From<Reason> for Refusal {
    fn from(reason: Reason) -> Self {
        Self {
            reason,
            message: None,
        }
    }
}

/// The outcome of an `eth_call`.
enum CallOutcome {
    Returned(Bytes),
    Reverted(String),
}

/// The revert message when a node's error answer says the call reverted (JSON-RPC code 3, or
/// the geth/anvil "execution reverted" message), as opposed to the node failing for its own
/// reasons.
pub(crate) fn revert_message(error: &TransportError) -> Option<String> {
    let RpcError::ErrorResp(payload) = error else {
        return None;
    };
    (payload.code == 3 || payload.message.to_ascii_lowercase().contains("revert"))
        .then(|| payload.message.clone().into_owned())
}

/// `eth_call`, separating "the node ran it and it reverted" (an answer about the payment) from
/// "the node could not be asked" (an unknown outcome, returned as `Err`).
async fn eth_call(
    provider: &DynProvider,
    tx: TransactionRequest,
) -> Result<CallOutcome, TransportError> {
    match provider.call(tx).await {
        Ok(bytes) => Ok(CallOutcome::Returned(bytes)),
        Err(error) => match revert_message(&error) {
            Some(message) => Ok(CallOutcome::Reverted(message)),
            None => Err(error),
        },
    }
}

fn call_request(
    to: Address,
    from: Option<Address>,
    calldata: impl Into<Bytes>,
) -> TransactionRequest {
    let request = TransactionRequest::default()
        .to(to)
        .input(TransactionInput::new(calldata.into()));
    match from {
        Some(from) => request.from(from),
        None => request,
    }
}

/// The calldata of `transferWithAuthorization` for this payment: the `(v, r, s)` overload for a
/// 65-byte signature from an account without code (every EIP-3009 token has it), the
/// `bytes signature` overload otherwise (contract wallets; FiatTokenV2_2 and the devnet token).
#[must_use]
pub fn transfer_calldata(payment: &ExactPayment, payer_has_code: bool) -> Vec<u8> {
    let authorization = &payment.payload.authorization;
    let signature = &payment.payload.signature;
    let parsed = (signature.len() == 65 && !payer_has_code)
        .then(|| alloy::primitives::Signature::from_raw(signature).ok())
        .flatten();
    match parsed {
        Some(parsed) => IEip3009Token::transferWithAuthorization_0Call {
            from: authorization.from,
            to: authorization.to,
            value: authorization.value.get(),
            validAfter: authorization.valid_after.get(),
            validBefore: authorization.valid_before.get(),
            nonce: authorization.nonce,
            // Tokens' ecrecover wants 27/28, whatever spelling of v the client used.
            v: 27 + u8::from(parsed.v()),
            r: parsed.r().into(),
            s: parsed.s().into(),
        }
        .abi_encode(),
        None => IEip3009Token::transferWithAuthorization_1Call {
            from: authorization.from,
            to: authorization.to,
            value: authorization.value.get(),
            validAfter: authorization.valid_after.get(),
            validBefore: authorization.valid_before.get(),
            nonce: authorization.nonce,
            signature: signature.clone(),
        }
        .abi_encode(),
    }
}

/// What verification learned about the payer, reused by settlement.
#[derive(Debug, Clone, Copy)]
pub struct PayerFacts {
    /// Whether `from` is a contract (EIP-1271 wallet).
    pub has_code: bool,
}

/// Tokens of one chain seen to answer `authorizationState` like an EIP-3009 token. Whether a
/// deployed token speaks EIP-3009 does not change between payments, so once a token has shown
/// it, a plain key's payment is judged by the one simulation, and the nonce and balance are
/// asked only to name why a simulation reverted.
#[derive(Debug, Default)]
struct Eip3009Tokens(std::sync::RwLock<std::collections::HashSet<Address>>);

impl Eip3009Tokens {
    fn knows(&self, token: Address) -> bool {
        self.0
            .read()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .contains(&token)
    }

    fn learn(&self, token: Address) {
        self.0
            .write()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .insert(token);
    }
}

/// The `exact` checks against one chain's node, with what they keep between payments: the
/// tokens known to speak EIP-3009 and, where the chain has Multicall3, the queue that coalesces
/// concurrent simulations into one call.
pub struct ExactVerifier {
    provider: DynProvider,
    relayer: Address,
    tokens: Eip3009Tokens,
    simulations: Option<Simulations>,
    /// Signatures found to recover to their payer, by the hash they sign (see
    /// [`Self::signed_by_payer`]).
    payer_signatures: quick_cache::sync::Cache<B256, Bytes>,
}

/// Payer signatures remembered between a payment's verification and its settlement: the
/// payments in flight on one gateway, with room to spare.
const PAYER_SIGNATURES: usize = 4_096;

impl std::fmt::Debug for ExactVerifier {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ExactVerifier")
            .field("relayer", &self.relayer)
            .field("tokens", &self.tokens)
            .field("coalesces", &self.simulations.is_some())
            .finish_non_exhaustive()
    }
}

impl ExactVerifier {
    /// Checks payments on `provider`'s chain, simulating transfers from `relayer`; with
    /// `multicall` (an address with Multicall3's code), concurrent simulations share calls.
    /// Must be called within a Tokio runtime when `multicall` is given.
    #[must_use]
    pub fn new(provider: DynProvider, relayer: Address, multicall: Option<Address>) -> Self {
        let simulations =
            multicall.map(|multicall| Simulations::start(provider.clone(), relayer, multicall));
        Self {
            provider,
            relayer,
            tokens: Eip3009Tokens::default(),
            simulations,
            payer_signatures: quick_cache::sync::Cache::new(PAYER_SIGNATURES),
        }
    }

    /// Whether the payment's signature is a canonical ECDSA signature by the payer itself,
    /// remembered from the payment's verification for its settlement. Recovering the signer is
    /// most of a plain payment's CPU in verify and again in settle: 5.2 % of the gateway
    /// process's samples for both in a paid hire at c=8 (perf). The memo is exact: the key is
    /// the signed hash (which commits to the payer), and a signature is taken only if it is the
    /// very bytes that recovered.
    fn signed_by_payer(&self, payment: &ExactPayment) -> bool {
        let hash = payment.signing_hash();
        let signature = &payment.payload.signature;
        if self
            .payer_signatures
            .get(&hash)
            .is_some_and(|known| known == *signature)
        {
            return true;
        }
        let signed = recovers_to_payer(payment, &hash);
        if signed {
            self.payer_signatures.insert(hash, signature.clone());
        }
        signed
    }

    /// What settlement may take as verified without asking the node: a plain key's payment
    /// (its signature recovers to the payer) on a token already seen to speak EIP-3009. Its one
    /// check that needs the node, the transfer's simulation from the relayer, is what the
    /// relayer's gas measurement (`eth_createAccessList` of that very call) does anyway, so
    /// settlement sends after one node call instead of two. `None`: run [`Self::verify`].
    #[must_use]
    pub fn known_plain_payer(&self, payment: &ExactPayment) -> Option<PayerFacts> {
        (self.tokens.knows(payment.asset) && self.signed_by_payer(payment))
            .then_some(PayerFacts { has_code: false })
    }

    /// Runs the checks that need a node, in the reference order: asset deployed, signature
    /// (ECDSA for an account without code, EIP-1271 `isValidSignature` for a contract), nonce
    /// unused, balance, and an `eth_call` simulation of the transfer from the relayer.
    ///
    /// `Ok(Err(refusal))` is a verdict; `Err` means the node could not be asked.
    pub async fn verify(
        &self,
        payment: &ExactPayment,
    ) -> Result<Result<PayerFacts, Refusal>, TransportError> {
        let provider = &self.provider;
        let authorization = &payment.payload.authorization;
        let payer = authorization.from;
        // The common case, a plain key's signature, is settled without asking the node
        // anything but the facts below. The simulation is authoritative either way (a payer
        // with code, e.g. a 7702 account, whose token insists on EIP-1271 fails it), so
        // skipping the code lookup costs no correctness.
        let facts = if self.signed_by_payer(payment) {
            PayerFacts { has_code: false }
        } else {
            let (asset_code, payer_code) =
                tokio::try_join!(async { provider.get_code_at(payment.asset).await }, async {
                    provider.get_code_at(payer).await
                },)?;
            if asset_code.is_empty() {
                return Ok(Err(Reason::AssetNotDeployed.into()));
            }
            let facts = PayerFacts {
                has_code: !payer_code.is_empty(),
            };
            if let Err(refusal) = check_signature(provider, payment, facts).await? {
                return Ok(Err(refusal));
            }
            facts
        };

        let calldata = transfer_calldata(payment, facts.has_code);
        let (state, balance, simulated) = if !facts.has_code && self.tokens.knows(payment.asset) {
            // A transfer that would succeed from the relayer proves the nonce unused and the
            // balance enough: one round trip for a valid payment, shared with concurrent
            // ones. The nonce and balance are asked only to name why it would not.
            let simulated = match &self.simulations {
                Some(simulations) => {
                    simulations
                        .simulate(payment.asset, payer, authorization.to, calldata)
                        .await?
                }
                None => simulate_transfer(provider, self.relayer, payment.asset, calldata).await?,
            };
            match simulated {
                CallOutcome::Returned(_) => return Ok(Ok(facts)),
                reverted @ CallOutcome::Reverted(_) => {
                    let (state, balance) = payer_state(provider, payment).await?;
                    (state, balance, reverted)
                }
            }
        } else {
            let ((state, balance), simulated) = tokio::try_join!(
                payer_state(provider, payment),
                simulate_transfer(provider, self.relayer, payment.asset, calldata)
            )?;
            (state, balance, simulated)
        };
        if let CallOutcome::Returned(bytes) = &state
            && bytes.is_empty()
            && provider.get_code_at(payment.asset).await?.is_empty()
        {
            return Ok(Err(Reason::AssetNotDeployed.into()));
        }
        let message = match simulated {
            CallOutcome::Returned(_) => None,
            CallOutcome::Reverted(message) => Some(message),
        };
        match judge(state, balance, payment, message) {
            Some(refusal) => Ok(Err(refusal)),
            None => {
                self.tokens.learn(payment.asset);
                Ok(Ok(facts))
            }
        }
    }
}

/// The transfer `calldata` on `asset` as the relayer would send it, at the latest block.
async fn simulate_transfer(
    provider: &DynProvider,
    relayer: Address,
    asset: Address,
    calldata: impl Into<Bytes>,
) -> Result<CallOutcome, TransportError> {
    eth_call(provider, call_request(asset, Some(relayer), calldata)).await
}

/// The payer's nonce state and balance, asked at once.
async fn payer_state(
    provider: &DynProvider,
    payment: &ExactPayment,
) -> Result<(CallOutcome, CallOutcome), TransportError> {
    let authorization = &payment.payload.authorization;
    let state_call = IEip3009Token::authorizationStateCall {
        authorizer: authorization.from,
        nonce: authorization.nonce,
    };
    let balance_call = IEip3009Token::balanceOfCall {
        account: authorization.from,
    };
    tokio::try_join!(
        eth_call(
            provider,
            call_request(payment.asset, None, state_call.abi_encode())
        ),
        eth_call(
            provider,
            call_request(payment.asset, None, balance_call.abi_encode())
        ),
    )
}

/// The refusal the answers call for, in the reference order (EIP-3009 support, nonce, balance,
/// then the simulation's revert `message`); none for a token that would carry the payment out.
fn judge(
    state: CallOutcome,
    balance: CallOutcome,
    payment: &ExactPayment,
    message: Option<String>,
) -> Option<Refusal> {
    let used = match state {
        CallOutcome::Returned(bytes) => {
            IEip3009Token::authorizationStateCall::abi_decode_returns(&bytes).ok()
        }
        CallOutcome::Reverted(_) => None,
    };
    let Some(used) = used else {
        return Some(Reason::Eip3009NotSupported.into());
    };
    if used {
        return Some(Reason::NonceAlreadyUsed.into());
    }
    let balance = match balance {
        CallOutcome::Returned(bytes) => {
            IEip3009Token::balanceOfCall::abi_decode_returns(&bytes).ok()
        }
        CallOutcome::Reverted(_) => None,
    };
    let Some(balance) = balance else {
        return Some(Reason::Eip3009NotSupported.into());
    };
    if balance < payment.payload.authorization.value.get() {
        return Some(Reason::InsufficientBalance.into());
    }
    message.map(|message| Refusal {
        reason: Reason::SimulationFailed,
        message: Some(message),
    })
}

/// Whether the signature is a canonical (low-s) ECDSA signature of `hash` (the payment's) by the
/// payer itself.
fn recovers_to_payer(payment: &ExactPayment, hash: &B256) -> bool {
    let signature = &payment.payload.signature;
    signature.len() == 65
        && alloy::primitives::Signature::from_raw(signature)
            .ok()
            .filter(|parsed| parsed.normalize_s().is_none())
            .and_then(|parsed| parsed.recover_address_from_prehash(hash).ok())
            == Some(payment.payer())
}

async fn check_signature(
    provider: &DynProvider,
    payment: &ExactPayment,
    facts: PayerFacts,
) -> Result<Result<(), Refusal>, TransportError> {
    let signature = &payment.payload.signature;
    let hash = payment.signing_hash();
    let payer = payment.payer();
    if !facts.has_code {
        if signature.len() > 65 && signature.ends_with(&ERC6492_SUFFIX) {
            return Ok(Err(Reason::UndeployedSmartWallet.into()));
        }
        // High-s signatures are the malleable twin of a valid one; EIP-3009 tokens (USDC's
        // ECRecover, the devnet token) reject them, so a verdict of "valid" would be a lie.
        let recovered = alloy::primitives::Signature::from_raw(signature)
            .ok()
            .filter(|parsed| parsed.normalize_s().is_none())
            .and_then(|parsed| parsed.recover_address_from_prehash(&hash).ok());
        return Ok(if recovered == Some(payer) {
            Ok(())
        } else {
            Err(Reason::Signature.into())
        });
    }
    let call = IErc1271::isValidSignatureCall {
        hash,
        signature: signature.clone(),
    };
    let valid = match eth_call(provider, call_request(payer, None, call.abi_encode())).await? {
        CallOutcome::Returned(bytes) => {
            IErc1271::isValidSignatureCall::abi_decode_returns(&bytes).ok() == Some(ERC1271_MAGIC)
        }
        CallOutcome::Reverted(_) => false,
    };
    Ok(if valid {
        Ok(())
    } else {
        Err(Reason::Signature.into())
    })
}

/// Whether the payment's nonce is used or cancelled on chain.
pub async fn nonce_used(
    provider: &DynProvider,
    payment: &ExactPayment,
) -> Result<bool, TransportError> {
    let call = IEip3009Token::authorizationStateCall {
        authorizer: payment.payer(),
        nonce: payment.payload.authorization.nonce,
    };
    match eth_call(
        provider,
        call_request(payment.asset, None, call.abi_encode()),
    )
    .await?
    {
        CallOutcome::Returned(bytes) => {
            Ok(IEip3009Token::authorizationStateCall::abi_decode_returns(&bytes).unwrap_or(false))
        }
        CallOutcome::Reverted(_) => Ok(false),
    }
}

/// What a mined transaction did with one payment's authorization.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AuthorizationInReceipt {
    /// The token used the authorization and moved exactly its `value` from `from` to `to`.
    Moved,
    /// The token used the authorization's nonce, but the transfer that followed is not this
    /// payment's (another authorization signed under the same nonce).
    UsedOtherwise,
    /// The authorization was not used here: the transaction reverted, or its call of
    /// `transferWithAuthorization` failed inside a batch.
    Untouched,
}

/// Reads the token's logs of `receipt` for this payment: its `AuthorizationUsed(from, nonce)`
/// and the `Transfer` emitted with it.
///
/// A reverted inner call leaves no logs, so the `AuthorizationUsed` log is present exactly when
/// this authorization's call went through, even inside a batch whose other calls failed.
#[must_use]
pub fn authorization_in_receipt(
    receipt: &TransactionReceipt,
    payment: &ExactPayment,
) -> AuthorizationInReceipt {
    if !receipt.status() {
        return AuthorizationInReceipt::Untouched;
    }
    let authorization = &payment.payload.authorization;
    match authorization_transfer(
        receipt,
        payment.asset,
        authorization.from,
        authorization.nonce,
    ) {
        None => AuthorizationInReceipt::Untouched,
        Some(Some(transfer))
            if transfer.to == authorization.to && transfer.value == authorization.value.get() =>
        {
            AuthorizationInReceipt::Moved
        }
        Some(_) => AuthorizationInReceipt::UsedOtherwise,
    }
}

/// In `receipt`, the `asset` token's use of `payer`'s authorization `nonce`: `None` when it is
/// not used there; otherwise the payer's `Transfer` the token emitted with it, if any.
///
/// The pairing matters in a batch: one payer's several payments can share a transaction, and a
/// `Transfer` from the payer may belong to a sibling authorization. The token emits an
/// authorization's `Transfer` next to its `AuthorizationUsed` (after it in FiatToken and the
/// devnet token; before it in some other implementations), so the neighbouring token logs
/// decide.
pub(crate) fn authorization_transfer(
    receipt: &TransactionReceipt,
    asset: Address,
    payer: Address,
    nonce: B256,
) -> Option<Option<IEip3009Token::Transfer>> {
    let token_logs: Vec<_> = receipt
        .logs()
        .iter()
        .filter(|log| log.address() == asset)
        .collect();
    let used_at = token_logs.iter().position(|log| {
        IEip3009Token::AuthorizationUsed::decode_log(&log.inner)
            .is_ok_and(|used| used.authorizer == payer && used.nonce == nonce)
    })?;
    let payer_transfer_at = |index: Option<usize>| {
        let log = token_logs.get(index?)?;
        IEip3009Token::Transfer::decode_log(&log.inner)
            .ok()
            .filter(|transfer| transfer.from == payer)
            .map(|transfer| transfer.data)
    };
    Some(
        payer_transfer_at(used_at.checked_add(1))
            .or_else(|| payer_transfer_at(used_at.checked_sub(1))),
    )
}

/// The transaction that already settled this payment, if any: the token's
/// `AuthorizationUsed(from, nonce)` log whose transaction also holds the matching `Transfer`.
///
/// `None` when the nonce is unused, was cancelled, or was used for another transfer.
/// `lookback_blocks` bounds the log search (`None` searches from genesis).
pub async fn find_settlement(
    provider: &DynProvider,
    payment: &ExactPayment,
    lookback_blocks: Option<u64>,
) -> Result<Option<TxHash>, TransportError> {
    if !nonce_used(provider, payment).await? {
        return Ok(None);
    }
    let from_block = match lookback_blocks {
        Some(lookback) => provider.get_block_number().await?.saturating_sub(lookback),
        None => 0,
    };
    let filter = Filter::new()
        .address(payment.asset)
        .event_signature(IEip3009Token::AuthorizationUsed::SIGNATURE_HASH)
        .topic1(B256::from(payment.payer().into_word()))
        .topic2(payment.payload.authorization.nonce)
        .from_block(from_block);
    for log in provider.get_logs(&filter).await? {
        let Some(tx_hash) = log.transaction_hash else {
            continue;
        };
        let Some(receipt) = provider.get_transaction_receipt(tx_hash).await? else {
            continue;
        };
        if authorization_in_receipt(&receipt, payment) == AuthorizationInReceipt::Moved {
            return Ok(Some(tx_hash));
        }
    }
    Ok(None)
}
