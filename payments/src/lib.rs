//! x402 v2 payments for hiregate: wire types, the `exact` scheme (EIP-3009, or Permit2 for any
//! ERC-20), the `upto` scheme (pay up to a signed maximum, settle what was verified) and the
//! escrowed `auth-capture` scheme on EVM chains, and facilitators (in-process, over HTTP, and
//! served over HTTP).
//!
//! | module | what |
//! |---|---|
//! | [`wire`] | `PaymentRequired`, `PaymentRequirements` (the seven fields), `ResourceInfo`, `PaymentPayload`, verify/settle requests and responses, `/supported`; unknown keys and extensions survive a round trip |
//! | [`header`] | `PAYMENT-REQUIRED` / `PAYMENT-SIGNATURE` / `PAYMENT-RESPONSE` codec (standard padded base64 of the JSON) with typed errors |
//! | [`extension`] | the `payment-identifier` extension (idempotency key) |
//! | [`flow`] | `extra.paymentFlow` (`authorization`, `upfront`, `escrow`): when a payment settles relative to the work |
//! | [`offer_receipt`] | the `offer-receipt` extension: signed offers and receipts (EIP-712 signed and verified here; JWS parts for any key) |
//! | [`extension_responses`] | the `EXTENSION-RESPONSES` header a facilitator answers with |
//! | [`key`] | [`PrivateKey`]: an EVM account's key (relayer, escrow operator, paying wallet), parsed once and never printed |
//! | [`reason`] | the verdict reason vocabulary (`@x402/evm` spellings, x402-rs and Permit2 spellings read as the same codes), open to unknown strings |
//! | [`clock`] | which clock judges a payment's times ([`Now`]: the chain's block time for `validAfter`, the later clock for deadlines) and [`ChainClock`], a chain's latest block time cached for hot paths |
//! | [`exact`] | EIP-3009 payload, EIP-712 domain, [`exact::precheck`] (chain-free checks), [`exact::sign`] (client), [`exact::onchain`] (facilitator checks against a node; concurrent verifications share Multicall3 calls) |
//! | [`permit2`] | `exact` over Permit2 for any ERC-20 and the `upto` scheme: payload, checks, the `eip2612GasSponsoring` extension, the proxies' settlement calls, client signing, what the chain says a permit moved ([`permit2::ledger`]), and [`permit2::upto::settle_request`] for settling a verified amount |
//! | [`auth_capture`] | the `auth-capture` scheme on base/commerce-payments' `AuthCaptureEscrow` v1.0: `extra` ([`AuthCaptureExtra`]), payload with salt, [`PaymentInfo`] and its hashes (signed nonce, `getHash`), client signing, the spec's verification order, the operator's escrow calls ([`EscrowOperator`]: capture, void, refund…) and the chain's view of a payment (`paymentState`, events) |
//! | [`facilitator`] | the [`Facilitator`] trait; [`LocalFacilitator`] (alloy + relayer key per chain; `exact` over EIP-3009 or Permit2, `upto`, `auth-capture`, routed by scheme and payload shape); [`HttpFacilitatorClient`]; the axum `router` and `serve` behind `hiregate facilitator` (feature `server`); [`FacilitatorConfig`] |
//! | `devnet` (feature `devnet`) | anvil plus the project's EIP-3009 token, a plain ERC-20, and look-alikes of Permit2, the x402 Permit2 proxies and the escrow at their canonical addresses, for tests and the demo |
//!
//! # Main flow
//!
//! 1. The resource server (gateway) builds [`PaymentRequirements::exact_evm`], wraps them in a
//!    [`PaymentRequired`] and sends [`encode_header`] of it with a 402.
//! 2. The client picks an entry and calls [`sign_exact_payment`]; it sends
//!    [`encode_header`] of the [`PaymentPayload`] as `PAYMENT-SIGNATURE`.
//! 3. The server [`decode_header`]s it, compares `accepted` with its own offer
//!    ([`PaymentRequirements::mismatched_fields`]), runs [`precheck`], reads the
//!    [`PaymentKey`] (network, asset, payer, nonce) for its replay store, and calls
//!    [`Facilitator::verify`] with its own requirements.
//! 4. After delivery it calls [`Facilitator::settle`]; the [`SettleResponse`] goes back as
//!    `PAYMENT-RESPONSE`. [`FacilitatorError::Unknown`] means "retry later", never "refused".
//!
//! With `upto` the server offers [`PaymentRequirements::upto_evm`] (a maximum, and the
//! facilitator address its `/supported` advertises); the client signs a Permit2 authorization for
//! that maximum ([`sign_permit2_payment`]); `/verify` checks it against the maximum; after the work
//! the server settles the amount it verified with [`permit2::upto::settle_request`] (0 moves
//! nothing). `exact` over Permit2 ([`PaymentRequirements::exact_permit2_evm`]) follows the
//! `exact` flow with a Permit2 payload.
//!
//! With `auth-capture` the server offers [`PaymentRequirements::auth_capture_evm`] (its `extra`
//! always names the escrow: the official client signs for v1.1 otherwise); the client signs with
//! [`sign_auth_capture_payment`]; the facilitator's settle is the escrow's `authorize` (funds
//! locked in the operator's token store), after which the server, as `captureAuthorizer`,
//! finishes the payment with [`EscrowOperator`] (`capture`, `void`, `refund`) and decides outcomes
//! from [`EscrowOperator::events`], since `paymentState` never resets.
//!
//! # Why not the x402-rs crates
//!
//! `x402-types` / `x402-chain-eip155` 2.0.2 build on our alloy 2.5, and were evaluated first.
//! They do not fit hiregate's rules, and wrapping them would have meant re-doing most of them:
//! - their v2 types have no catch-all for unknown keys (`ResourceInfo` drops `serviceName`,
//!   `tags`, `iconUrl`; payloads drop anything unknown), and we must re-emit what clients send;
//! - their verification accepts `value >= amount`; x402 and hiregate require exact equality;
//! - refusals are Rust errors that their handlers turn into 400/412/500, a replayed nonce ends as
//!   a 500 `unexpected_error`, and reasons use their own vocabulary (`invalid_payment_early`…),
//!   while we answer verdicts in the `@x402/evm` vocabulary with status 200;
//! - settlement keeps no memory of settled payments and does not dedupe concurrent settles of
//!   one payment, which hiregate's "never pay twice, retry safely" rule needs;
//! - the facilitator feature pulls `rand` 0.10 and `dashmap` next to our `rand` 0.9.
//!
//! So this crate implements the protocol on alloy directly (`sol!` bindings, EIP-712 hashing,
//! local signers, providers), following the reference facilitator's check order; only facts
//! (selectors, typehash, reason strings, the 6 s buffer) were taken from the references.

pub mod auth_capture;
pub mod clock;
pub mod exact;
pub mod extension;
pub mod extension_responses;
pub mod facilitator;
pub mod flow;
pub mod header;
pub mod key;
mod multicall;
pub mod offer_receipt;
pub mod permit2;
pub mod reason;
pub mod wire;

#[cfg(feature = "devnet")]
pub mod devnet;

pub use auth_capture::escrow::{
    EscrowError, EscrowEvent, EscrowEventKind, EscrowOperator, EscrowReceipt, EscrowTotals,
    FinalizeError, Finalized, PaymentState, TokenTransfer,
};
pub use auth_capture::sign::{AuthCaptureSignOptions, sign_auth_capture_payment};
pub use auth_capture::{
    AUTH_CAPTURE_SCHEME, AuthCaptureExtra, AuthCapturePayload, AuthCapturePayment, EscrowAddresses,
    PaymentInfo,
};
pub use clock::{ChainClock, Now};
pub use exact::sign::{SignError, SignOptions, sign_exact_payment, sign_exact_payment_with};
pub use exact::{ExactEvmPayload, ExactPayment, PaymentKey, precheck};
pub use extension::{PaymentIdentifier, PaymentIdentifierError};
pub use facilitator::config::{ChainConfig, FacilitatorConfig, RelayerKey, SyncSendMode};
pub use facilitator::http_client::{AuthHeaders, HttpFacilitatorClient, Timeouts};
pub use facilitator::local::LocalFacilitator;
#[cfg(feature = "server")]
pub use facilitator::server::{router, serve};
pub use facilitator::{Facilitator, FacilitatorError, UnknownOutcome};
pub use flow::PaymentFlow;
pub use header::{HeaderError, decode_header, encode_header};
pub use key::{InvalidPrivateKey, PrivateKey};
pub use permit2::sign::{Permit2SignOptions, sign_permit2_payment};
pub use permit2::{Permit2Payload, Permit2Payment, Permit2Scheme, UPTO_SCHEME};
pub use reason::Reason;
pub use wire::{
    Network, NetworkError, PaymentPayload, PaymentRequired, PaymentRequirements, ResourceInfo,
    SettleRequest, SettleResponse, SupportedResponse, TokenDomain, VerifyRequest, VerifyResponse,
};

/// The replay key of any EVM payload, whichever way it moves the token: the one place that
/// knows both the EIP-3009 (`exact`) and the Permit2 (`exact` over Permit2, `upto`) shapes.
impl PaymentPayload {
    /// (network, asset, payer, nonce) of this payment, read from the client's `accepted` and
    /// the signed authorization. Compare `accepted` with your own offer before trusting it.
    ///
    /// A Permit2 payload (`exact` over Permit2, `upto`) has a key too: its Permit2 nonce.
    pub fn payment_key(&self) -> Result<PaymentKey, Reason> {
        if permit2::is_permit2_shaped(&self.payload) {
            return permit2::payment_key(self);
        }
        let payload = self.exact_evm()?;
        Ok(PaymentKey {
            network: self.accepted.network,
            asset: self
                .accepted
                .asset
                .parse()
                .map_err(|_| Reason::InvalidPayload)?,
            payer: payload.authorization.from,
            nonce: payload.authorization.nonce,
        })
    }
}
