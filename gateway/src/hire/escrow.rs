//! The gateway as escrow operator (`captureAuthorizer`) of escrowed (`auth-capture`) contracts:
//! one [`EscrowOperator`] per chain that has an `operator_private_key`, and the arithmetic that
//! ties a contract's signed terms to the escrow calls.
//!
//! | item | role |
//! |---|---|
//! | [`EscrowOperators`] | per chain id: the operator (wallet provider + the configured escrow, collectors) |
//! | [`payment_info`] | the on-chain `PaymentInfo` of a stored escrowed payment, rebuilt from the contract's own offer (never the client's copy) |
//! | [`CaptureOrder`] | what a capture of a contract sends: the full price, the terms' fee bps and the treasury |
//!
//! The lifecycle that drives these (authorize on payment, capture after the acceptance window,
//! void on rejection, refund by an arbiter, the payer's reclaim) decides every outcome from
//! `paymentState` and the escrow's events, as settlement does for `exact`.

use std::collections::HashMap;
use std::str::FromStr as _;

use alloy::{
    primitives::{Address, U256},
    providers::{Provider as _, ProviderBuilder},
    signers::local::PrivateKeySigner,
};
use hiregate_contracts::terms::ContractTerms;
use hiregate_payments::{
    AuthCapturePayment, EscrowAddresses, EscrowOperator, PaymentInfo, PaymentPayload,
    PaymentRequirements, auth_capture::Refusal,
};
use secrecy::ExposeSecret as _;

use crate::config::Settings;

/// The escrow operators of the configured chains, by chain id.
#[derive(Debug, Clone, Default)]
pub struct EscrowOperators {
    by_chain: HashMap<u64, std::sync::Arc<EscrowOperator>>,
}

/// Why the operators could not be built.
#[derive(Debug, thiserror::Error)]
pub enum EscrowSetupError {
    /// A key that passed validation does not parse (cannot happen after `Settings::load`).
    #[error("chains.{chain}.operator_private_key is not a valid secp256k1 key")]
    BadKey {
        /// The `[chains.<name>]` table.
        chain: String,
    },
}

impl EscrowOperators {
    /// An operator for every chain of `settings` with an `operator_private_key`. Building one
    /// makes no network call (the chain id comes from the validated config).
    pub fn from_settings(settings: &Settings) -> Result<Self, EscrowSetupError> {
        let mut by_chain = HashMap::new();
        for (name, chain) in &settings.chains {
            let (Some(key), Some(chain_id)) = (&chain.operator_private_key, chain.chain_id())
            else {
                continue;
            };
            let signer = PrivateKeySigner::from_str(key.expose_secret()).map_err(|_| {
                EscrowSetupError::BadKey {
                    chain: name.clone(),
                }
            })?;
            let operator = signer.address();
            let provider = ProviderBuilder::new()
                .wallet(signer)
                .connect_http(chain.rpc_url.clone())
                .erased();
            let addresses = EscrowAddresses {
                escrow: chain.auth_capture_escrow,
                erc3009_collector: chain.erc3009_token_collector,
                operator_refund_collector: chain.operator_refund_collector,
            };
            by_chain.insert(
                chain_id,
                std::sync::Arc::new(EscrowOperator::new(provider, chain_id, addresses, operator)),
            );
        }
        Ok(Self { by_chain })
    }

    /// The operator of `chain_id`, if the gateway has a key there.
    pub fn get(&self, chain_id: u64) -> Option<&EscrowOperator> {
        self.by_chain.get(&chain_id).map(AsRef::as_ref)
    }
}

/// The `PaymentInfo` of an escrowed payment, rebuilt from `payload` against the contract's own
/// offer `requirements` on `addresses`: what `authorize`, `capture`, `void` and `refund` take
/// and whose `getHash` keys `paymentState` and the events.
pub fn payment_info(
    payload: &PaymentPayload,
    requirements: &PaymentRequirements,
    addresses: EscrowAddresses,
) -> Result<PaymentInfo, Refusal> {
    AuthCapturePayment::parse(payload, requirements, addresses).map(|payment| payment.info)
}

/// What capturing an escrowed contract sends: everything authorized, at the fee the terms pin,
/// to the fee recipient the terms (and the payer's signature) name.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CaptureOrder {
    /// The contract's price, all of which was authorized.
    pub amount: U256,
    /// The terms' fee, basis points.
    pub fee_bps: u16,
    /// The treasury named in the terms.
    pub fee_receiver: Address,
}

impl CaptureOrder {
    /// The capture of `terms`; `None` for an `exact` contract.
    pub fn of(terms: &ContractTerms) -> Option<Self> {
        let escrow = terms.escrow()?;
        Some(Self {
            amount: U256::from(terms.price().amount().units()),
            fee_bps: escrow.capture_fee_bps(),
            fee_receiver: Address::from(*escrow.fee_recipient().as_bytes()),
        })
    }

    /// The fee the escrow takes (rounded down, as the escrow does).
    pub fn fee(&self) -> U256 {
        self.amount * U256::from(self.fee_bps) / U256::from(10_000u32)
    }

    /// What reaches the worker's payout address.
    pub fn to_worker(&self) -> U256 {
        self.amount - self.fee()
    }
}
