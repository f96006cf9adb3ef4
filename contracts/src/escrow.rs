//! What the signed terms of an escrowed (`auth-capture`) contract pin: the escrow and its
//! capture authorizer, the capture and refund deadlines, the fee bounds and the fee recipient.
//!
//! | item | role |
//! |---|---|
//! | [`EscrowPolicy`] | the gateway's side, passed in [`crate::terms::OfferContext`]: addresses, fee, and the reserves the deadlines are sized from |
//! | [`EscrowTerms`] | the part of [`crate::terms::ContractTerms`] the payer signs for (through the x402 offer's `extra`) |
//!
//! These values end up in the on-chain `PaymentInfo` (`operator`, `authorizationExpiry`,
//! `refundExpiry`, `minFeeBps`, `maxFeeBps`, `feeReceiver`): the payer signs a nonce derived
//! from them, so the terms and the escrow always agree on what may happen to the money.
//! `exact` contracts have no escrow terms (the field is absent from their terms, which keeps
//! their `terms_hash` unchanged).

use serde::{Deserialize, Serialize};

use crate::money::EvmAddress;
use crate::time::{Timestamp, TimestampError};

/// 100 % in basis points: the escrow's upper bound for a fee.
pub const MAX_FEE_BPS: u16 = 10_000;

/// Why escrow terms were refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum EscrowError {
    /// The escrow or the capture authorizer is the zero address.
    #[error("escrow.{0} must not be the zero address")]
    ZeroAddress(&'static str),
    /// Fee bounds out of `0..=10000` or inverted.
    #[error("escrow fee bounds must satisfy 0 <= min_fee_bps <= max_fee_bps <= 10000")]
    FeeBounds,
    /// The refund deadline is before the capture deadline.
    #[error("escrow.refund_deadline must not be before escrow.capture_deadline")]
    DeadlineOrder,
    /// A deadline is not a whole second (the chain keeps `uint48` seconds).
    #[error("escrow deadlines must be whole seconds")]
    FractionalDeadline,
    /// A deadline does not fit the escrow's `uint48`.
    #[error("escrow deadline out of range")]
    DeadlineOutOfRange,
    /// A deadline computation overflowed.
    #[error(transparent)]
    Timestamp(#[from] TimestampError),
}

/// The escrow part of signed terms. Valid by construction.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(try_from = "EscrowTermsWire")]
pub struct EscrowTerms {
    escrow: EvmAddress,
    capture_authorizer: EvmAddress,
    capture_deadline: Timestamp,
    refund_deadline: Timestamp,
    min_fee_bps: u16,
    max_fee_bps: u16,
    fee_recipient: EvmAddress,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct EscrowTermsWire {
    escrow: EvmAddress,
    capture_authorizer: EvmAddress,
    capture_deadline: Timestamp,
    refund_deadline: Timestamp,
    min_fee_bps: u16,
    max_fee_bps: u16,
    fee_recipient: EvmAddress,
}

impl TryFrom<EscrowTermsWire> for EscrowTerms {
    type Error = EscrowError;
    fn try_from(wire: EscrowTermsWire) -> Result<Self, Self::Error> {
        Self::new(
            wire.escrow,
            wire.capture_authorizer,
            wire.capture_deadline,
            wire.refund_deadline,
            (wire.min_fee_bps, wire.max_fee_bps),
            wire.fee_recipient,
        )
    }
}

/// Largest value of the escrow's `uint48` deadlines.
const UINT48_MAX: i64 = (1 << 48) - 1;

fn whole_seconds(at: Timestamp) -> Result<u64, EscrowError> {
    if at.unix_millis() % 1000 != 0 {
        return Err(EscrowError::FractionalDeadline);
    }
    let seconds = at.unix_seconds();
    if !(0..=UINT48_MAX).contains(&seconds) {
        return Err(EscrowError::DeadlineOutOfRange);
    }
    Ok(seconds.unsigned_abs())
}

impl EscrowTerms {
    /// Escrow terms; checks addresses, fee bounds and deadline order.
    pub fn new(
        escrow: EvmAddress,
        capture_authorizer: EvmAddress,
        capture_deadline: Timestamp,
        refund_deadline: Timestamp,
        (min_fee_bps, max_fee_bps): (u16, u16),
        fee_recipient: EvmAddress,
    ) -> Result<Self, EscrowError> {
        if escrow.is_zero() {
            return Err(EscrowError::ZeroAddress("escrow"));
        }
        if capture_authorizer.is_zero() {
            return Err(EscrowError::ZeroAddress("capture_authorizer"));
        }
        if min_fee_bps > max_fee_bps || max_fee_bps > MAX_FEE_BPS {
            return Err(EscrowError::FeeBounds);
        }
        whole_seconds(capture_deadline)?;
        whole_seconds(refund_deadline)?;
        if refund_deadline < capture_deadline {
            return Err(EscrowError::DeadlineOrder);
        }
        Ok(Self {
            escrow,
            capture_authorizer,
            capture_deadline,
            refund_deadline,
            min_fee_bps,
            max_fee_bps,
            fee_recipient,
        })
    }

    /// The `AuthCaptureEscrow` contract.
    #[must_use]
    pub const fn escrow(&self) -> EvmAddress {
        self.escrow
    }
    /// The gateway's operator address (x402 `captureAuthorizer`, on chain `operator`).
    #[must_use]
    pub const fn capture_authorizer(&self) -> EvmAddress {
        self.capture_authorizer
    }
    /// Capture must happen strictly before this instant (on chain `authorizationExpiry`);
    /// after it the payer may reclaim.
    #[must_use]
    pub const fn capture_deadline(&self) -> Timestamp {
        self.capture_deadline
    }
    /// Refunds are possible until this instant (on chain `refundExpiry`).
    #[must_use]
    pub const fn refund_deadline(&self) -> Timestamp {
        self.refund_deadline
    }
    /// `captureDeadline` as the escrow's unix seconds.
    #[must_use]
    pub fn capture_deadline_unix(&self) -> u64 {
        self.capture_deadline.unix_seconds().unsigned_abs()
    }
    /// `refundDeadline` as the escrow's unix seconds.
    #[must_use]
    pub fn refund_deadline_unix(&self) -> u64 {
        self.refund_deadline.unix_seconds().unsigned_abs()
    }
    /// Smallest fee the capture may take, basis points.
    #[must_use]
    pub const fn min_fee_bps(&self) -> u16 {
        self.min_fee_bps
    }
    /// Largest fee the capture may take, basis points.
    #[must_use]
    pub const fn max_fee_bps(&self) -> u16 {
        self.max_fee_bps
    }
    /// The fee the gateway captures with: the floor the payer agreed to. hiregate pins one
    /// fee (`min = max`) when it signs, so this is the marketplace fee of the contract.
    #[must_use]
    pub const fn capture_fee_bps(&self) -> u16 {
        self.min_fee_bps
    }
    /// Who receives the fee (on chain `feeReceiver`); it must be passed exactly at capture.
    #[must_use]
    pub const fn fee_recipient(&self) -> EvmAddress {
        self.fee_recipient
    }
}

/// What the gateway brings to an escrowed contract when it signs it; the deadlines are
/// computed from the terms with [`EscrowPolicy::terms_for`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct EscrowPolicy {
    /// The `AuthCaptureEscrow` on the contract's chain.
    pub escrow: EvmAddress,
    /// The gateway's operator address on that chain.
    pub capture_authorizer: EvmAddress,
    /// The marketplace fee, basis points (pinned as both bounds).
    pub fee_bps: u16,
    /// The gateway's treasury.
    pub fee_recipient: EvmAddress,
    /// Seconds between the offer's expiry and the start of the work: the longest a payment
    /// signed at the last moment may take to be authorized on chain.
    pub payment_window_s: u64,
    /// Seconds for verification and the capture transaction (plus clock skew).
    pub reserve_s: u64,
    /// Seconds after the capture deadline during which an arbiter may still refund.
    pub refund_window_s: u64,
}

impl EscrowPolicy {
    /// Escrow terms for a contract whose unpaid offer lapses at `offer_expires_at`, whose work
    /// takes at most `work_s` and whose acceptance window is `acceptance_window_s`: the capture
    /// deadline covers a payment at the last moment, every attempt and poll window, verification,
    /// the acceptance window and the capture; the refund deadline follows by `refund_window_s`.
    pub fn terms_for(
        &self,
        offer_expires_at: Timestamp,
        work_s: u64,
        acceptance_window_s: u64,
    ) -> Result<EscrowTerms, EscrowError> {
        let span = self
            .payment_window_s
            .saturating_add(work_s)
            .saturating_add(acceptance_window_s)
            .saturating_add(self.reserve_s);
        // Rounded up to a whole second: the chain keeps seconds, and rounding down would cut
        // the window the terms promise.
        let capture_deadline =
            Timestamp::from_unix_seconds(offer_expires_at.unix_millis().div_euclid(1000) + 1)?
                .plus_seconds(span)?;
        let refund_deadline = capture_deadline.plus_seconds(self.refund_window_s)?;
        EscrowTerms::new(
            self.escrow,
            self.capture_authorizer,
            capture_deadline,
            refund_deadline,
            (self.fee_bps, self.fee_bps),
            self.fee_recipient,
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn address(byte: u8) -> EvmAddress {
        EvmAddress::from_bytes([byte; 20])
    }

    fn policy() -> EscrowPolicy {
        EscrowPolicy {
            escrow: address(1),
            capture_authorizer: address(2),
            fee_bps: 250,
            fee_recipient: address(3),
            payment_window_s: 300,
            reserve_s: 150,
            refund_window_s: 7 * 86_400,
        }
    }

    #[test]
    fn deadlines_cover_payment_work_acceptance_and_reserve() {
        let expiry: Timestamp = "2025-01-30T12:15:00.250Z".parse().unwrap();
        let terms = policy().terms_for(expiry, 3_600, 600).unwrap();
        // 12:15:01 (rounded up) + 300 + 3600 + 600 + 150 s.
        assert_eq!(
            terms.capture_deadline().to_string(),
            "2025-01-30T13:32:31.000Z"
        );
        assert_eq!(
            terms.refund_deadline_unix() - terms.capture_deadline_unix(),
            7 * 86_400
        );
        assert_eq!(terms.capture_fee_bps(), 250);
        assert_eq!((terms.min_fee_bps(), terms.max_fee_bps()), (250, 250));
        assert_eq!(terms.fee_recipient(), address(3));
        assert_eq!(terms.capture_authorizer(), address(2));
    }

    #[test]
    fn invalid_escrow_terms_are_refused() {
        let at: Timestamp = "2025-01-30T12:00:00Z".parse().unwrap();
        let later = at.plus_seconds(10).unwrap();
        let ok =
            |min, max| EscrowTerms::new(address(1), address(2), at, later, (min, max), address(3));
        assert!(ok(0, 10_000).is_ok());
        assert_eq!(ok(11, 10), Err(EscrowError::FeeBounds));
        assert_eq!(ok(0, 10_001), Err(EscrowError::FeeBounds));
        assert_eq!(
            EscrowTerms::new(address(1), address(2), later, at, (0, 0), address(3)),
            Err(EscrowError::DeadlineOrder)
        );
        assert_eq!(
            EscrowTerms::new(address(0), address(2), at, later, (0, 0), address(3)),
            Err(EscrowError::ZeroAddress("escrow"))
        );
        assert_eq!(
            EscrowTerms::new(address(1), address(0), at, later, (0, 0), address(3)),
            Err(EscrowError::ZeroAddress("capture_authorizer"))
        );
        let fractional: Timestamp = "2025-01-30T12:00:00.5Z".parse().unwrap();
        assert_eq!(
            EscrowTerms::new(
                address(1),
                address(2),
                fractional,
                later,
                (0, 0),
                address(3)
            ),
            Err(EscrowError::FractionalDeadline)
        );
    }

    #[test]
    fn escrow_terms_round_trip_and_refuse_unknown_fields() {
        let terms = policy()
            .terms_for("2025-01-30T12:15:00Z".parse().unwrap(), 60, 0)
            .unwrap();
        let json = serde_json::to_value(terms).unwrap();
        assert_eq!(
            serde_json::from_value::<EscrowTerms>(json.clone()).unwrap(),
            terms
        );
        let mut extra = json.clone();
        extra["surprise"] = serde_json::json!(1);
        assert!(serde_json::from_value::<EscrowTerms>(extra).is_err());
        let mut inverted = json;
        inverted["min_fee_bps"] = serde_json::json!(9_000);
        assert!(serde_json::from_value::<EscrowTerms>(inverted).is_err());
    }
}
