//! Facilitator wiring: which x402 facilitator verifies and settles payments, per
//! `facilitator.mode`.
//!
//! - `embedded`: a [`LocalFacilitator`] over the `[chains]` (one relayer key per chain), in
//!   process. With no chain configured there is no facilitator: execute answers 503 and
//!   `/readyz` says why.
//! - `http`: an [`HttpFacilitatorClient`] for `facilitator.url`, sending
//!   `auth_header_name: auth_header_value` on every call when a value is configured.
//!
//! [`bundled_facilitator_config`] is also what `hiregate facilitator` serves standalone.
//! [`MeteredFacilitator`] wraps whichever one is used, for latency and error metrics.

use std::{
    sync::Arc,
    time::{Duration, Instant},
};

use async_trait::async_trait;
use hiregate_payments::{
    ChainConfig, Facilitator, FacilitatorConfig, FacilitatorError, HttpFacilitatorClient,
    LocalFacilitator, Reason, SettleRequest, SettleResponse, SupportedResponse, Timeouts,
    VerifyRequest, VerifyResponse, facilitator::http_client::StaticHeaders,
    facilitator::local::LocalFacilitatorError, facilitator::turns::KeyTurns,
};
use reqwest::header::{HeaderMap, HeaderName, HeaderValue};
use secrecy::ExposeSecret as _;

use crate::{
    assets::AssetDirectory,
    metrics::{
        FacilitatorCallLabels, FacilitatorCallOutcome, FacilitatorErrorKind,
        FacilitatorErrorLabels, FacilitatorLabels, FacilitatorOperation, Metrics,
    },
    readiness::ReadinessCheck,
    settings::{FacilitatorMode, Settings},
};

/// The facilitator could not be set up. Never carries keys or URLs with credentials.
#[derive(Debug, thiserror::Error)]
pub enum FacilitatorSetupError {
    /// A `[chains]` entry cannot be used by the bundled facilitator.
    #[error("chains.{chain}: {reason}")]
    Chain {
        /// The `[chains]` table name.
        chain: String,
        /// What is wrong.
        reason: String,
    },
    /// `hiregate facilitator` (or embedded mode) needs at least one chain.
    #[error("no [chains] configured: the bundled facilitator has nothing to settle on")]
    NoChains,
    /// The embedded facilitator could not reach or check a chain.
    #[error("embedded facilitator could not start")]
    Local(#[from] LocalFacilitatorError),
    /// The HTTP facilitator client could not be built.
    #[error("facilitator client: {0}")]
    Http(String),
}

/// The bundled facilitator's configuration from `[chains]`: every chain with its relayer key.
pub fn bundled_facilitator_config(
    settings: &Settings,
) -> Result<FacilitatorConfig, FacilitatorSetupError> {
    let mut chains = Vec::new();
    for (name, chain) in &settings.chains {
        let problem = |reason: &str| FacilitatorSetupError::Chain {
            chain: name.clone(),
            reason: reason.to_owned(),
        };
        let relayer_key = chain
            .relayer_private_key
            .clone()
            .ok_or_else(|| problem("relayer_private_key is required to settle"))?;
        let mut config = ChainConfig::new(chain.network, chain.rpc_url.clone(), relayer_key);
        config.settlement_lookback_blocks = chain.settlement_lookback_blocks;
        config.sync_send = chain.sync_send;
        // The escrow stack `auth-capture` offers name (canonical v1.0 unless configured), so the
        // embedded facilitator verifies and authorizes against the same contracts.
        config.escrow = Some(chain.auth_capture_escrow);
        config.erc3009_collector = Some(chain.erc3009_token_collector);
        config.operator_refund_collector = Some(chain.operator_refund_collector);
        chains.push(config);
    }
    if chains.is_empty() {
        return Err(FacilitatorSetupError::NoChains);
    }
    Ok(FacilitatorConfig { chains })
}

/// The facilitator `settings` ask for; `None` in embedded mode without chains. Embedded, its
/// relayers take turns on their keys from `turns` (instances sharing a relayer key).
pub async fn build_facilitator(
    settings: &Settings,
    turns: Option<&dyn KeyTurns>,
) -> Result<Option<Arc<dyn Facilitator>>, FacilitatorSetupError> {
    let facilitator = &settings.facilitator;
    match facilitator.mode {
        FacilitatorMode::Embedded => {
            if settings.chains.is_empty() {
                return Ok(None);
            }
            let config = bundled_facilitator_config(settings)?;
            let local = LocalFacilitator::connect_with_turns(config, turns).await?;
            Ok(Some(Arc::new(local)))
        }
        FacilitatorMode::Http => {
            let url = facilitator.url.clone().ok_or_else(|| {
                FacilitatorSetupError::Http("facilitator.url is required".to_owned())
            })?;
            let auth = match &facilitator.auth_header_value {
                Some(value) => {
                    let name = HeaderName::from_bytes(facilitator.auth_header_name.as_bytes())
                        .map_err(|_| {
                            FacilitatorSetupError::Http("auth_header_name is invalid".to_owned())
                        })?;
                    let mut value = HeaderValue::from_str(value.expose_secret()).map_err(|_| {
                        FacilitatorSetupError::Http("auth_header_value is invalid".to_owned())
                    })?;
                    value.set_sensitive(true);
                    let mut headers = HeaderMap::new();
                    headers.insert(name, value);
                    Some(Arc::new(StaticHeaders(headers)) as Arc<dyn hiregate_payments::AuthHeaders>)
                }
                None => None,
            };
            let timeouts = Timeouts {
                connect: Duration::from_secs(5),
                verify: facilitator.verify_timeout(),
                settle: facilitator.settle_timeout(),
                supported: facilitator.verify_timeout(),
            };
            let client = HttpFacilitatorClient::new(url, timeouts, auth)
                .map_err(|e| FacilitatorSetupError::Http(e.to_string()))?;
            Ok(Some(Arc::new(client)))
        }
    }
}

/// A facilitator that records each `/verify` and `/settle` in the app's metrics: latency
/// whatever the outcome, and errors by kind: `unknown` (no verdict, or a settlement still
/// pending) and `refused` (a verdict against the payment). `/supported` passes through.
pub struct MeteredFacilitator {
    inner: Arc<dyn Facilitator>,
    metrics: Arc<Metrics>,
}

impl std::fmt::Debug for MeteredFacilitator {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MeteredFacilitator").finish_non_exhaustive()
    }
}

impl MeteredFacilitator {
    /// Wrap `inner`.
    pub fn wrap(inner: Arc<dyn Facilitator>, metrics: Arc<Metrics>) -> Arc<dyn Facilitator> {
        Arc::new(Self { inner, metrics })
    }

    fn observe(
        &self,
        operation: FacilitatorOperation,
        started: Instant,
        error: Option<FacilitatorErrorKind>,
    ) {
        self.metrics
            .facilitator_duration
            .get_or_create(&FacilitatorLabels { operation })
            .observe(started.elapsed().as_secs_f64());
        let outcome = match error {
            None => FacilitatorCallOutcome::Ok,
            Some(FacilitatorErrorKind::Refused) => FacilitatorCallOutcome::Refused,
            Some(FacilitatorErrorKind::Unknown) => FacilitatorCallOutcome::Unknown,
        };
        self.metrics
            .facilitator_calls
            .get_or_create(&FacilitatorCallLabels { operation, outcome })
            .inc();
        if let Some(kind) = error {
            self.metrics
                .facilitator_errors
                .get_or_create(&FacilitatorErrorLabels { operation, kind })
                .inc();
        }
    }
}

#[async_trait]
impl Facilitator for MeteredFacilitator {
    async fn verify(&self, request: &VerifyRequest) -> Result<VerifyResponse, FacilitatorError> {
        let started = Instant::now();
        let outcome = self.inner.verify(request).await;
        let error = match &outcome {
            Ok(verdict) if verdict.is_valid => None,
            Ok(_) => Some(FacilitatorErrorKind::Refused),
            Err(_) => Some(FacilitatorErrorKind::Unknown),
        };
        self.observe(FacilitatorOperation::Verify, started, error);
        outcome
    }

    async fn settle(&self, request: &SettleRequest) -> Result<SettleResponse, FacilitatorError> {
        let started = Instant::now();
        let outcome = self.inner.settle(request).await;
        let error = match &outcome {
            Ok(settled) if settled.success => None,
            // "Pending" is no verdict: the transfer may still happen.
            Ok(pending) if pending.error_reason == Some(Reason::SettlementPending) => {
                Some(FacilitatorErrorKind::Unknown)
            }
            Ok(_) => Some(FacilitatorErrorKind::Refused),
            Err(_) => Some(FacilitatorErrorKind::Unknown),
        };
        self.observe(FacilitatorOperation::Settle, started, error);
        outcome
    }

    async fn supported(&self) -> Result<SupportedResponse, FacilitatorError> {
        self.inner.supported().await
    }

    fn prepare_settle(&self, request: &SettleRequest) {
        self.inner.prepare_settle(request);
    }

    fn mined_receipt(
        &self,
        transaction: alloy::primitives::TxHash,
    ) -> Option<Arc<alloy::rpc::types::TransactionReceipt>> {
        self.inner.mined_receipt(transaction)
    }
}

/// `/readyz` check `facilitator`: in embedded mode every chain's node answers with the right
/// chain id; in HTTP mode the facilitator answers `GET /supported`.
pub struct FacilitatorReadiness {
    mode: FacilitatorMode,
    facilitator: Option<Arc<dyn Facilitator>>,
    assets: AssetDirectory,
}

impl std::fmt::Debug for FacilitatorReadiness {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FacilitatorReadiness")
            .field("mode", &self.mode)
            .field("configured", &self.facilitator.is_some())
            .finish_non_exhaustive()
    }
}

impl FacilitatorReadiness {
    /// The check for the facilitator built from `settings`.
    pub fn new(
        settings: &Settings,
        facilitator: Option<Arc<dyn Facilitator>>,
        assets: AssetDirectory,
    ) -> Self {
        Self {
            mode: settings.facilitator.mode,
            facilitator,
            assets,
        }
    }
}

#[async_trait]
impl ReadinessCheck for FacilitatorReadiness {
    fn name(&self) -> &'static str {
        "facilitator"
    }

    async fn check(&self) -> Result<(), String> {
        let Some(facilitator) = &self.facilitator else {
            return Err(
                "no facilitator: facilitator.mode = \"embedded\" with no [chains] configured"
                    .to_owned(),
            );
        };
        match self.mode {
            FacilitatorMode::Embedded => self.assets.ping().await,
            FacilitatorMode::Http => match facilitator.supported().await {
                Ok(_) => Ok(()),
                Err(error) => Err(format!("facilitator /supported failed: {error}")),
            },
        }
    }
}
