//! Shared set-up of the on-chain tests: a devnet (real anvil, real EIP-3009 token), a local
//! facilitator settling on it with the devnet relayer, and helpers to sign and count.

#![allow(dead_code)] // each test binary uses a different subset

use std::time::{SystemTime, UNIX_EPOCH};

use alloy::primitives::{Address, TxHash, U256};
use alloy::providers::{DynProvider, Provider, ProviderBuilder};
use alloy::rpc::types::Filter;
use alloy::signers::local::PrivateKeySigner;
use alloy::sol_types::SolEvent;
use hiregate_payments::devnet::{Devnet, DevnetOptions};
use hiregate_payments::exact::onchain::IEip3009Token;
use hiregate_payments::{
    ChainConfig, FacilitatorConfig, LocalFacilitator, Network, PaymentPayload, PaymentRequirements,
    RelayerKey, SignOptions, TokenDomain, VerifyRequest, sign_exact_payment_with,
};

/// The price every test charges: 1.25 units of a 6-decimal token.
pub const AMOUNT: u64 = 1_250_000;

pub fn unix_now() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_secs()
}

pub struct Harness {
    pub devnet: Devnet,
    pub network: Network,
    pub pay_to: Address,
    /// The server's own offer: what every request sends as `paymentRequirements`.
    pub requirements: PaymentRequirements,
}

impl Harness {
    pub async fn start() -> Self {
        Self::start_with(DevnetOptions::default()).await
    }

    pub async fn start_with(options: DevnetOptions) -> Self {
        let devnet = Devnet::start_with(options)
            .await
            .expect("devnet starts (scripts/install-tools.sh)");
        let network: Network = devnet.network().parse().unwrap();
        let pay_to = PrivateKeySigner::random().address();
        let requirements = PaymentRequirements::exact_evm(
            network,
            U256::from(AMOUNT),
            devnet.token(),
            pay_to,
            300,
            &TokenDomain {
                name: devnet.token_name().to_owned(),
                version: devnet.token_version().to_owned(),
            },
        );
        Self {
            devnet,
            network,
            pay_to,
            requirements,
        }
    }

    pub fn config(&self) -> FacilitatorConfig {
        self.config_with(|_| {})
    }

    pub fn config_with(&self, edit: impl FnOnce(&mut ChainConfig)) -> FacilitatorConfig {
        let mut chain = ChainConfig::new(
            self.network,
            self.devnet.rpc_url().clone(),
            RelayerKey::new(self.devnet.relayer()),
        );
        edit(&mut chain);
        FacilitatorConfig {
            chains: vec![chain],
        }
    }

    pub async fn facilitator(&self) -> LocalFacilitator {
        LocalFacilitator::connect(self.config()).await.unwrap()
    }

    /// A fresh payer holding `balance` atomic units (and ETH for its own transactions).
    pub async fn payer(&self, balance: u64) -> PrivateKeySigner {
        self.devnet
            .funded_account(U256::from(balance))
            .await
            .unwrap()
    }

    /// A payment signed against `requirements` (which a test may have altered).
    pub async fn sign(
        &self,
        payer: &PrivateKeySigner,
        requirements: &PaymentRequirements,
        options: &SignOptions,
    ) -> PaymentPayload {
        sign_exact_payment_with(payer, requirements, None, unix_now(), options)
            .await
            .unwrap()
    }

    /// A request checking `payload` against the server's own offer.
    pub fn request(&self, payload: PaymentPayload) -> VerifyRequest {
        VerifyRequest::new(payload, self.requirements.clone())
    }

    pub async fn balance(&self, who: Address) -> U256 {
        self.devnet.balance_of(who).await.unwrap()
    }

    /// Token `Transfer` events from `from` on the whole chain.
    pub async fn transfers_from(&self, from: Address) -> Vec<TxHash> {
        let filter = Filter::new()
            .address(self.devnet.token())
            .event_signature(IEip3009Token::Transfer::SIGNATURE_HASH)
            .topic1(from.into_word())
            .from_block(0);
        self.devnet
            .provider()
            .get_logs(&filter)
            .await
            .unwrap()
            .into_iter()
            .map(|log| log.transaction_hash.unwrap())
            .collect()
    }

    /// A provider that signs as `signer` (for payers sending their own transactions).
    pub fn provider_as(&self, signer: PrivateKeySigner) -> DynProvider {
        ProviderBuilder::new()
            .wallet(signer)
            .connect_http(self.devnet.rpc_url().clone())
            .erased()
    }
}
