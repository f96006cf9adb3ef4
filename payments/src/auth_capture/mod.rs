//! The x402 `auth-capture` scheme on EVM chains (`scheme_auth_capture_evm.md`): the payer signs
//! one ERC-3009 `ReceiveWithAuthorization` to the escrow's token collector, whose nonce commits
//! to the whole [`PaymentInfo`]; the `captureAuthorizer` (on chain: `operator`) then drives the
//! base/commerce-payments v1.0 `AuthCaptureEscrow`.
//!
//! | module | what |
//! |---|---|
//! | this module | scheme constants and canonical v1.0 addresses, [`AuthCaptureExtra`] (`PaymentRequirements.extra`), [`AuthCapturePayload`], [`AuthCapturePayment::parse`]: the spec's verification steps 1–12 that need no node |
//! | [`payment_info`] | [`PaymentInfo`] (`sol!`), [`PAYMENT_INFO_TYPEHASH`], `getHash` and the payer-agnostic hash (the signed nonce) |
//! | [`sign`] | the client: [`sign::sign_auth_capture_payment`] |
//! | [`escrow`] | the escrow ABI, revert → [`Reason`] mapping, the operator's calls (`authorize`, `charge`, `capture`, `void`, `refund`) and readers (`paymentState`, the payment's events) |
//! | [`charge`] | the server's completion of a v1.1 `charge`: amount, fee, and the receiver authorizer's EIP-712 signature |
//! | [`verify`] | the facilitator's on-chain half: EIP-1271 signatures, escrow state, balance, step 13's simulation |
//!
//! Two hashes name one payment and they differ: the nonce the payer signs is the payer-agnostic
//! hash (payer zeroed, [`PaymentInfo::hash_payer_agnostic`]); `paymentState` and the escrow's
//! events are keyed by [`PaymentInfo::get_hash`] with the real payer.

pub mod abi;
pub mod charge;
pub mod escrow;
pub mod payment_info;
pub mod sign;
pub mod verify;

use std::fmt;

use alloy::primitives::{Address, B256, Bytes, U256, address, keccak256};
use alloy::sol_types::SolValue;
use alloy::sol_types::{Eip712Domain, SolStruct};
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

pub use payment_info::{PAYMENT_INFO_TYPEHASH, PaymentInfo};

use crate::clock::Now;
use crate::exact::{Eip3009Authorization, PaymentKey, VALID_BEFORE_BUFFER_SECS};
use crate::flow::PaymentFlow;
use crate::reason::Reason;
use crate::wire::{
    Network, PaymentPayload, PaymentRequirements, TokenDomain, UnknownFields, same_address,
};

/// The scheme's name in `PaymentRequirements.scheme`.
pub const AUTH_CAPTURE_SCHEME: &str = "auth-capture";

/// `AuthCaptureEscrow` v1.0 (base/commerce-payments tag v1.0.0), same address on every chain.
pub const AUTH_CAPTURE_ESCROW_V1_0: Address = address!("BdEA0D1bcC5966192B070Fdf62aB4EF5b4420cff");
/// `ERC3009PaymentCollector` of the v1.0 escrow.
pub const ERC3009_TOKEN_COLLECTOR_V1_0: Address =
    address!("0E3dF9510de65469C4518D7843919c0b8C7A7757");
/// `OperatorRefundCollector` of the v1.0 escrow: refunds pulled from the operator's wallet.
pub const OPERATOR_REFUND_COLLECTOR_V1_0: Address =
    address!("934907bffd0901b6A21e398B9C53A4A38F02fa5d");

pub use crate::wire::{METHOD_EIP3009, METHOD_PERMIT2};

alloy::sol! {
    /// The ERC-3009 typed-data struct the payer signs: only the token collector (`to`) may
    /// submit it, which is what keeps a front-runner from moving the funds elsewhere.
    #[derive(Debug)]
    struct ReceiveWithAuthorization {
        address from;
        address to;
        uint256 value;
        uint256 validAfter;
        uint256 validBefore;
        bytes32 nonce;
    }
}

/// The EIP-712 digest of `authorization` as a `ReceiveWithAuthorization` under `domain`.
#[must_use]
pub fn receive_signing_hash(authorization: &Eip3009Authorization, domain: &Eip712Domain) -> B256 {
    ReceiveWithAuthorization {
        from: authorization.from,
        to: authorization.to,
        value: authorization.value.get(),
        validAfter: authorization.valid_after.get(),
        validBefore: authorization.valid_before.get(),
        nonce: authorization.nonce,
    }
    .eip712_signing_hash(domain)
}

/// The `SALT_BINDING_TYPEHASH` of the auth-capture v1.1 binding: the domain tag of a bound salt.
#[must_use]
pub fn salt_binding_typehash() -> B256 {
    keccak256(
        "x402AuthCaptureSaltBinding(address receiverAuthorizer,address policy,uint256 saltNonce)",
    )
}

/// A bound `PaymentInfo.salt` (v1.1): `keccak256(abi.encode(SALT_BINDING_TYPEHASH,
/// receiverAuthorizer, policy, saltNonce))`, committing the payment to the two addresses that
/// govern facilitator-relayed operations.
#[must_use]
pub fn bound_salt(receiver_authorizer: Address, policy: Address, salt_nonce: B256) -> B256 {
    keccak256(
        (
            salt_binding_typehash(),
            receiver_authorizer,
            policy,
            U256::from_be_bytes(salt_nonce.0),
        )
            .abi_encode(),
    )
}

/// `extra.captureMode` (v1.1, `escrow` flow only): whether the after-work finalize is relayed
/// during the paid request (`sync`) or done later by the server from durable state (`deferred`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum CaptureMode {
    /// The after-work `/settle` relays `capture` or `void` (the default).
    Sync,
    /// The server captures or voids later, outside the request.
    Deferred,
}

impl CaptureMode {
    /// The wire name.
    #[must_use]
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Sync => "sync",
            Self::Deferred => "deferred",
        }
    }
}

/// `extra.operatorType` (v1.1): what `captureAuthorizer` is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum OperatorType {
    /// An address the facilitator submits from (the default; hiregate's gateway key).
    Delegated,
    /// A contract with permissionless collect entry points and its own lifecycle.
    Custom,
    /// Reserved by the spec for policy-checked operator contracts.
    Policy,
}

impl OperatorType {
    /// The wire name.
    #[must_use]
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Delegated => "delegated",
            Self::Custom => "custom",
            Self::Policy => "policy",
        }
    }
}

/// `PaymentRequirements.extra` of an `auth-capture` offer, in either wire:
///
/// - scheme v1.0: `autoCapture` picks `charge` (true) or `authorize` (false, the default);
/// - scheme v1.1 (what the official 2.27 `AuthCaptureEvmScheme` reads): `paymentFlow`
///   (`escrow` → `authorize`, the default; `authorization` → `charge`), `captureMode`,
///   `operatorType`, and `receiverAuthorizer` / `policy`, which when non-zero bind the salt
///   ([`bound_salt`]). `autoCapture: true` next to `paymentFlow` is refused, as the v1.1 spec
///   requires.
///
/// Read with [`Self::from_requirements`] and written with [`Self::write_into`]; keys this type
/// does not know are left untouched in the map.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AuthCaptureExtra {
    /// The token's EIP-712 domain (`name`, `version`).
    pub domain: TokenDomain,
    /// `captureAuthorizer`: the on-chain `operator`, the only sender of authorize, capture,
    /// void, refund and charge.
    pub capture_authorizer: Address,
    /// `captureDeadline` (unix seconds, uint48): capture strictly before; reclaim from then.
    pub capture_deadline: u64,
    /// `refundDeadline` (unix seconds, uint48): refunds strictly before.
    pub refund_deadline: u64,
    /// `minFeeBps`.
    pub min_fee_bps: u16,
    /// `maxFeeBps`.
    pub max_fee_bps: u16,
    /// `feeRecipient`; zero lets the operator name any receiver at capture.
    pub fee_recipient: Address,
    /// `autoCapture`: `charge` at settlement instead of `authorize`.
    pub auto_capture: bool,
    /// `assetTransferMethod`, `"eip3009"` when absent.
    pub asset_transfer_method: String,
    /// `authCaptureEscrow`: the escrow the payer signs for. The official client signs for the
    /// v1.1 deployment when this is absent, so hiregate's offers always name it.
    pub auth_capture_escrow: Option<Address>,
    /// `paymentFlow` (v1.1); `None` on the v1.0 wire, where `autoCapture` decides.
    pub payment_flow: Option<PaymentFlow>,
    /// `captureMode` (v1.1, `escrow` only).
    pub capture_mode: Option<CaptureMode>,
    /// `operatorType` (v1.1); `None` reads as delegated.
    pub operator_type: Option<OperatorType>,
    /// `receiverAuthorizer` (v1.1); `None` for absent or the zero address.
    pub receiver_authorizer: Option<Address>,
    /// `policy` (v1.1); `None` for absent or the zero address.
    pub policy: Option<Address>,
}

const REQUIRED_KEYS: [&str; 8] = [
    "name",
    "version",
    "captureAuthorizer",
    "captureDeadline",
    "refundDeadline",
    "minFeeBps",
    "maxFeeBps",
    "feeRecipient",
];

impl AuthCaptureExtra {
    /// Reads the auth-capture fields of `requirements.extra`.
    pub fn from_requirements(requirements: &PaymentRequirements) -> Result<Self, Reason> {
        Self::from_map(&requirements.extra)
    }

    /// Reads the auth-capture fields of an `extra` map: every required key present with the
    /// spec's JSON type (numbers for deadlines and fees, address strings), in range.
    pub fn from_map(extra: &Map<String, Value>) -> Result<Self, Reason> {
        let bad = || Reason::InvalidAuthCaptureExtra;
        if REQUIRED_KEYS.iter().any(|key| !extra.contains_key(*key)) {
            return Err(bad());
        }
        let string = |key: &str| extra.get(key).and_then(Value::as_str).ok_or_else(bad);
        let address = |key: &str| string(key)?.parse::<Address>().map_err(|_| bad());
        let number = |key: &str, max: u64| {
            extra
                .get(key)
                .and_then(Value::as_u64)
                .filter(|value| *value <= max)
                .ok_or_else(bad)
        };
        const U48_MAX: u64 = (1 << 48) - 1;
        let auto_capture = match extra.get("autoCapture") {
            None | Some(Value::Null) => false,
            Some(Value::Bool(value)) => *value,
            Some(_) => return Err(bad()),
        };
        let asset_transfer_method = match extra.get("assetTransferMethod") {
            None | Some(Value::Null) => METHOD_EIP3009.to_owned(),
            Some(Value::String(method)) => method.clone(),
            Some(_) => return Err(bad()),
        };
        let auth_capture_escrow = match extra.get("authCaptureEscrow") {
            None | Some(Value::Null) => None,
            Some(Value::String(escrow)) if escrow.is_empty() => None,
            Some(Value::String(escrow)) => Some(escrow.parse().map_err(|_| bad())?),
            Some(_) => return Err(bad()),
        };
        let optional_address = |key: &str| -> Result<Option<Address>, Reason> {
            match extra.get(key) {
                None | Some(Value::Null) => Ok(None),
                Some(Value::String(raw)) => {
                    let address: Address = raw.parse().map_err(|_| bad())?;
                    Ok((address != Address::ZERO).then_some(address))
                }
                Some(_) => Err(bad()),
            }
        };
        let flow_error = || Reason::UnsupportedPaymentFlow;
        let payment_flow = match extra.get(crate::flow::PAYMENT_FLOW_KEY) {
            None | Some(Value::Null) => None,
            Some(Value::String(flow)) => match flow.parse().map_err(|_| flow_error())? {
                PaymentFlow::Upfront => return Err(flow_error()),
                flow => Some(flow),
            },
            Some(_) => return Err(flow_error()),
        };
        // v1.1 removed `autoCapture`; `true` beside a flow would settle a hold where a charge
        // was asked for (or the reverse), so it is refused rather than guessed.
        if payment_flow.is_some() && auto_capture {
            return Err(flow_error());
        }
        let capture_mode = match extra.get("captureMode") {
            None | Some(Value::Null) => None,
            Some(Value::String(mode)) => Some(match mode.as_str() {
                "sync" => CaptureMode::Sync,
                "deferred" => CaptureMode::Deferred,
                _ => return Err(flow_error()),
            }),
            Some(_) => return Err(flow_error()),
        };
        if capture_mode.is_some() && payment_flow == Some(PaymentFlow::Authorization) {
            return Err(flow_error());
        }
        let operator_type = match extra.get("operatorType") {
            None | Some(Value::Null) => None,
            Some(Value::String(kind)) => Some(match kind.as_str() {
                "delegated" => OperatorType::Delegated,
                "custom" => OperatorType::Custom,
                "policy" => OperatorType::Policy,
                _ => return Err(Reason::UnsupportedOperatorType),
            }),
            Some(_) => return Err(Reason::UnsupportedOperatorType),
        };
        Ok(Self {
            domain: TokenDomain {
                name: string("name")?.to_owned(),
                version: string("version")?.to_owned(),
            },
            capture_authorizer: address("captureAuthorizer")?,
            capture_deadline: number("captureDeadline", U48_MAX)?,
            refund_deadline: number("refundDeadline", U48_MAX)?,
            min_fee_bps: u16::try_from(number("minFeeBps", u64::from(u16::MAX))?)
                .map_err(|_| bad())?,
            max_fee_bps: u16::try_from(number("maxFeeBps", u64::from(u16::MAX))?)
                .map_err(|_| bad())?,
            fee_recipient: address("feeRecipient")?,
            auto_capture,
            asset_transfer_method,
            auth_capture_escrow,
            payment_flow,
            capture_mode,
            operator_type,
            receiver_authorizer: optional_address("receiverAuthorizer")?,
            policy: optional_address("policy")?,
        })
    }

    /// Whether settling the client's payload is `charge` (`paymentFlow: authorization`, or the
    /// v1.0 `autoCapture: true`) rather than `authorize`.
    #[must_use]
    pub fn settles_by_charge(&self) -> bool {
        match self.payment_flow {
            Some(flow) => flow == PaymentFlow::Authorization,
            None => self.auto_capture,
        }
    }

    /// Whether the salt is bound (v1.1): a non-zero `receiverAuthorizer` or `policy`.
    #[must_use]
    pub fn salt_bound(&self) -> bool {
        self.receiver_authorizer.is_some() || self.policy.is_some()
    }

    /// Writes these fields into `extra`, replacing theirs and keeping every other key.
    pub fn write_into(&self, extra: &mut Map<String, Value>) {
        // `None` removes the key: a field this offer leaves out must not survive from another.
        let mut set = |key: &str, value: Option<Value>| match value {
            Some(value) => {
                extra.insert(key.to_owned(), value);
            }
            None => {
                extra.remove(key);
            }
        };
        let address = |address: Address| Value::String(address.to_checksum(None));
        set("name", Some(Value::String(self.domain.name.clone())));
        set("version", Some(Value::String(self.domain.version.clone())));
        set("captureAuthorizer", Some(address(self.capture_authorizer)));
        set("captureDeadline", Some(Value::from(self.capture_deadline)));
        set("refundDeadline", Some(Value::from(self.refund_deadline)));
        set("minFeeBps", Some(Value::from(self.min_fee_bps)));
        set("maxFeeBps", Some(Value::from(self.max_fee_bps)));
        set("feeRecipient", Some(address(self.fee_recipient)));
        set(
            "assetTransferMethod",
            Some(Value::String(self.asset_transfer_method.clone())),
        );
        set("authCaptureEscrow", self.auth_capture_escrow.map(address));
        // The v1.0 wire names the flow with `autoCapture`; v1.1 with `paymentFlow` only.
        set(
            "autoCapture",
            self.payment_flow
                .is_none()
                .then_some(Value::Bool(self.auto_capture)),
        );
        set(
            crate::flow::PAYMENT_FLOW_KEY,
            self.payment_flow
                .map(|flow| Value::String(flow.as_str().into())),
        );
        set(
            "captureMode",
            self.capture_mode
                .map(|mode| Value::String(mode.as_str().into())),
        );
        set(
            "operatorType",
            self.operator_type
                .map(|kind| Value::String(kind.as_str().into())),
        );
        set("receiverAuthorizer", self.receiver_authorizer.map(address));
        set("policy", self.policy.map(address));
    }
}

impl PaymentRequirements {
    /// The requirements of an `auth-capture` payment with ERC-3009 on an EVM chain, addresses
    /// checksummed.
    #[must_use]
    pub fn auth_capture_evm(
        network: Network,
        amount: U256,
        asset: Address,
        pay_to: Address,
        max_timeout_seconds: u64,
        extra: &AuthCaptureExtra,
    ) -> Self {
        let mut requirements = Self::exact_evm(
            network,
            amount,
            asset,
            pay_to,
            max_timeout_seconds,
            &extra.domain,
        );
        requirements.scheme = AUTH_CAPTURE_SCHEME.to_owned();
        extra.write_into(&mut requirements.extra);
        requirements
    }
}

/// `PaymentPayload.payload` of `auth-capture` with ERC-3009.
#[derive(Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct AuthCapturePayload {
    /// The signed `ReceiveWithAuthorization`: `to` is the token collector, `nonce` the
    /// payer-agnostic PaymentInfo hash.
    pub authorization: Eip3009Authorization,
    /// The payer's signature (65 bytes for an EOA); the escrow passes it as `collectorData`.
    pub signature: Bytes,
    /// `PaymentInfo.salt = uint256(salt)`: fresh per payment, or (bound, v1.1) the commitment
    /// [`bound_salt`] to the offer's authorizer and policy and [`Self::salt_nonce`].
    pub salt: B256,
    /// v1.1, bound salt only: the client's fresh 32 bytes inside the commitment.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub salt_nonce: Option<B256>,
    /// Other keys (e.g. the client's `saltNonce`), kept for the round trip.
    #[serde(flatten)]
    pub unknown: UnknownFields,
}

impl fmt::Debug for AuthCapturePayload {
    // A signed authorization can be submitted by anyone holding it: keep it out of logs.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("AuthCapturePayload")
            .field("authorization", &self.authorization)
            .field("signature", &"<redacted>")
            .field("salt", &self.salt)
            .finish_non_exhaustive()
    }
}

impl PaymentPayload {
    /// The payload as an `auth-capture` ERC-3009 payment (spec step 1, type guard).
    pub fn auth_capture_evm(&self) -> Result<AuthCapturePayload, Reason> {
        AuthCapturePayload::deserialize(&self.payload).map_err(|_| Reason::InvalidPayload)
    }
}

/// The escrow deployment a facilitator or operator talks to on one chain.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct EscrowAddresses {
    /// `AuthCaptureEscrow`.
    pub escrow: Address,
    /// Its `ERC3009PaymentCollector`.
    pub erc3009_collector: Address,
    /// Its `OperatorRefundCollector`.
    pub operator_refund_collector: Address,
}

impl Default for EscrowAddresses {
    /// The canonical v1.0 deployment.
    fn default() -> Self {
        Self {
            escrow: AUTH_CAPTURE_ESCROW_V1_0,
            erc3009_collector: ERC3009_TOKEN_COLLECTOR_V1_0,
            operator_refund_collector: OPERATOR_REFUND_COLLECTOR_V1_0,
        }
    }
}

/// A refusal with free-text detail for `invalidMessage` / `errorMessage`.
pub use crate::exact::onchain::Refusal;

/// An `auth-capture` payment that passed the spec's shape checks (steps 1–5 and 8), with its
/// PaymentInfo reconstructed. The remaining steps are methods, run in the spec's order by the
/// facilitator: [`Self::check_times`] (6, 7), the signature (10:
/// [`Self::signature_recovers`] for an EOA, EIP-1271 through [`verify`]),
/// [`Self::check_amount_and_nonce`] (11, 12), then the simulation (13).
#[derive(Debug, Clone)]
pub struct AuthCapturePayment {
    /// The requirements' network.
    pub network: Network,
    /// Its chain id.
    pub chain_id: u64,
    /// The escrow deployment in use.
    pub addresses: EscrowAddresses,
    /// The offer's `extra`.
    pub extra: AuthCaptureExtra,
    /// The token's EIP-712 domain.
    pub domain: Eip712Domain,
    /// The signed payload.
    pub payload: AuthCapturePayload,
    /// The reconstructed PaymentInfo, with the real payer.
    pub info: PaymentInfo,
    /// The server's completion of a v1.1 `charge` (amount, fee, authorizer signature), when
    /// the payload carries it.
    pub completion: Option<charge::ChargeCompletion>,
}

impl AuthCapturePayment {
    /// Spec steps 1–5 and 8 against the server's `requirements` on a chain whose escrow
    /// deployment is `addresses`: payload shape, scheme, network, `extra`, transfer method,
    /// collector. An `extra.authCaptureEscrow` other than `addresses.escrow`
    /// is refused: the payer signed for an escrow this party does not drive.
    pub fn parse(
        payload: &PaymentPayload,
        requirements: &PaymentRequirements,
        addresses: EscrowAddresses,
    ) -> Result<Self, Refusal> {
        // 1. Type guard (the Permit2 shape is recognised to name the refusal precisely).
        let permit2_shaped = payload.payload.get("permit2Authorization").is_some();
        let parsed = payload.auth_capture_evm();
        if parsed.is_err() && !permit2_shaped {
            return Err(Reason::InvalidPayload.into());
        }
        // 2. Scheme.
        if requirements.scheme != AUTH_CAPTURE_SCHEME
            || payload.accepted.scheme != AUTH_CAPTURE_SCHEME
        {
            return Err(Reason::InvalidScheme.into());
        }
        // 3. Network.
        let chain_id = requirements
            .network
            .chain_id()
            .ok_or(Reason::InvalidNetwork)?;
        if payload.accepted.network != requirements.network {
            return Err(Reason::NetworkMismatch.into());
        }
        // 4. Extra.
        let extra = AuthCaptureExtra::from_requirements(requirements)?;
        // 5 (v1.1). Operator: this facilitator submits from its own key (`delegated`); it has no
        // contract operators to relay for, and a policy belongs to those.
        if extra
            .operator_type
            .is_some_and(|kind| kind != OperatorType::Delegated)
        {
            return Err(Reason::UnsupportedOperatorType.into());
        }
        if extra.policy.is_some() {
            return Err(Reason::InvalidPolicy.into());
        }
        // 5. Method routing.
        match extra.asset_transfer_method.as_str() {
            METHOD_EIP3009 if permit2_shaped => return Err(Reason::PayloadMethodMismatch.into()),
            METHOD_EIP3009 => {}
            METHOD_PERMIT2 => {
                return Err(Refusal {
                    reason: Reason::UnsupportedAssetTransferMethod,
                    message: Some("assetTransferMethod permit2 is not supported yet".into()),
                });
            }
            _ => return Err(Reason::UnsupportedAssetTransferMethod.into()),
        }
        let payload_data = parsed?;
        // v1.1: a charge is the server's to complete and needs its receiver authorizer; an
        // authorize carries no completion.
        let completion = charge::ChargeCompletion::from_payload(&payload.payload)?;
        if completion.is_some() && !extra.settles_by_charge() {
            return Err(Refusal {
                reason: Reason::InvalidPayload,
                message: Some("an authorize carries no charge completion".into()),
            });
        }
        if extra.payment_flow == Some(PaymentFlow::Authorization)
            && extra.receiver_authorizer.is_none()
        {
            return Err(Reason::MissingReceiverAuthorizer.into());
        }
        // v1.1 salt binding: a bound salt must open to the offer's authorizer and policy with
        // the payload's `saltNonce`; an unbound one carries no `saltNonce`.
        match (extra.salt_bound(), payload_data.salt_nonce) {
            (true, Some(salt_nonce)) => {
                let expected = bound_salt(
                    extra.receiver_authorizer.unwrap_or_default(),
                    extra.policy.unwrap_or_default(),
                    salt_nonce,
                );
                if expected != payload_data.salt {
                    return Err(Reason::SaltBindingMismatch.into());
                }
            }
            (false, None) => {}
            _ => return Err(Reason::SaltBindingMismatch.into()),
        }
        if let Some(named) = extra.auth_capture_escrow
            && named != addresses.escrow
        {
            return Err(Refusal {
                reason: Reason::InvalidAuthCaptureExtra,
                message: Some(format!(
                    "authCaptureEscrow {named} is not the escrow in use here ({})",
                    addresses.escrow
                )),
            });
        }
        let asset = requirements.evm_asset()?;
        if !same_address(&payload.accepted.asset, &requirements.asset) {
            return Err(Reason::AssetMismatch.into());
        }
        let receiver = requirements.evm_pay_to()?;
        let authorization = &payload_data.authorization;
        // 8. Collector.
        if authorization.to != addresses.erc3009_collector {
            return Err(Reason::TokenCollectorMismatch.into());
        }
        // The PaymentInfo is built from the offer, not from the authorization, so that step 12
        // compares what the payer signed with what the server asked for.
        let max_amount =
            payment_info::u120(requirements.amount.get()).ok_or(Reason::AmountOverflow)?;
        // preApprovalExpiry is a uint48: a validBefore beyond it cannot name a PaymentInfo.
        let pre_approval_expiry = u64::try_from(authorization.valid_before.get())
            .ok()
            .filter(|expiry| *expiry < (1 << 48))
            .ok_or(Reason::InvalidDeadlineOrdering)?;
        let info = PaymentInfo {
            operator: extra.capture_authorizer,
            payer: authorization.from,
            receiver,
            token: asset,
            maxAmount: max_amount,
            preApprovalExpiry: payment_info::u48(pre_approval_expiry),
            authorizationExpiry: payment_info::u48(extra.capture_deadline),
            refundExpiry: payment_info::u48(extra.refund_deadline),
            minFeeBps: extra.min_fee_bps,
            maxFeeBps: extra.max_fee_bps,
            feeReceiver: extra.fee_recipient,
            salt: U256::from_be_bytes(payload_data.salt.0),
        };
        let domain = Eip712Domain::new(
            Some(extra.domain.name.clone().into()),
            Some(extra.domain.version.clone().into()),
            Some(U256::from(chain_id)),
            Some(asset),
            None,
        );
        Ok(Self {
            network: requirements.network,
            chain_id,
            addresses,
            extra,
            domain,
            payload: payload_data,
            info,
            completion,
        })
    }

    /// Spec steps 11 and 12: `value == amount` exactly, and the signed nonce is the
    /// payer-agnostic hash of the reconstructed PaymentInfo, which binds every field of it
    /// (operator, receiver, token, deadlines, fee bounds, fee receiver, salt).
    pub fn check_amount_and_nonce(&self) -> Result<(), Reason> {
        let authorization = &self.payload.authorization;
        if authorization.value.get() != self.info.max_amount() {
            return Err(Reason::ValueMismatch);
        }
        let expected = self
            .info
            .hash_payer_agnostic(self.chain_id, self.addresses.escrow);
        if authorization.nonce != expected {
            return Err(Reason::NonceMismatch);
        }
        Ok(())
    }

    /// Spec steps 6 and 7 at `now` (see [`crate::clock`] for which clock judges what):
    /// `refundDeadline >= captureDeadline`, `captureDeadline > now + 6`,
    /// `validBefore <= captureDeadline`, `validBefore > now + 6` (by the later clock),
    /// `validAfter <= now` (by the chain's latest block).
    pub fn check_times(&self, now: impl Into<Now>) -> Result<(), Reason> {
        let now = now.into();
        let extra = &self.extra;
        let authorization = &self.payload.authorization;
        let soonest = now.latest().saturating_add(VALID_BEFORE_BUFFER_SECS);
        if extra.refund_deadline < extra.capture_deadline {
            return Err(Reason::InvalidDeadlineOrdering);
        }
        if extra.capture_deadline <= soonest {
            return Err(Reason::CaptureDeadlineExpired);
        }
        if authorization.valid_before.get() > U256::from(extra.capture_deadline) {
            return Err(Reason::InvalidDeadlineOrdering);
        }
        if authorization.valid_before.get() <= U256::from(soonest) {
            return Err(Reason::ValidBefore);
        }
        if authorization.valid_after.get() > U256::from(now.block_time()) {
            return Err(Reason::ValidAfter);
        }
        Ok(())
    }

    /// The payer.
    #[must_use]
    pub fn payer(&self) -> Address {
        self.payload.authorization.from
    }

    /// The EIP-712 digest the payer signed.
    #[must_use]
    pub fn signing_hash(&self) -> B256 {
        receive_signing_hash(&self.payload.authorization, &self.domain)
    }

    /// Spec step 10 for an EOA: the 65-byte, low-s signature recovers to the payer.
    #[must_use]
    pub fn signature_recovers(&self) -> bool {
        alloy::primitives::Signature::from_raw(&self.payload.signature)
            .ok()
            .filter(|parsed| parsed.normalize_s().is_none())
            .and_then(|parsed| {
                parsed
                    .recover_address_from_prehash(&self.signing_hash())
                    .ok()
            })
            == Some(self.payer())
    }

    /// `getHash(paymentInfo)` on this chain's escrow: the key of `paymentState` and events.
    #[must_use]
    pub fn payment_hash(&self) -> B256 {
        self.info.get_hash(self.chain_id, self.addresses.escrow)
    }

    /// (network, asset, payer, nonce): unique per payment, as for `exact`.
    #[must_use]
    pub fn key(&self) -> PaymentKey {
        PaymentKey {
            network: self.network,
            asset: self.info.token,
            payer: self.payer(),
            nonce: self.payload.authorization.nonce,
        }
    }
}

/// The checks a resource server can run before calling the facilitator, with no node: steps
/// 1–8, 11 and 12. The signature (step 10) is left to the facilitator, as a contract wallet's
/// needs a node; [`AuthCapturePayment::signature_recovers`] checks an EOA's.
pub fn precheck(
    payload: &PaymentPayload,
    requirements: &PaymentRequirements,
    addresses: EscrowAddresses,
    now: impl Into<Now>,
) -> Result<AuthCapturePayment, Refusal> {
    let payment = AuthCapturePayment::parse(payload, requirements, addresses)?;
    payment.check_times(now)?;
    payment.check_amount_and_nonce()?;
    Ok(payment)
}

#[cfg(test)]
mod tests;
