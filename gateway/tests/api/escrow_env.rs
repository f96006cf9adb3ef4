//! Harness for escrowed (`auth-capture`) hires: a gateway that is the escrow's operator on an
//! anvil devnet (operator key, treasury, gas for the operator), a listing that accepts the
//! scheme, and the seeker's side (the payments crate's `auth-capture` client).

use alloy::{primitives::Address, signers::local::PrivateKeySigner};
use hiregate_payments::devnet::Devnet;
use serde_json::Value;

use crate::{
    helpers::{TestDatabase, spawn_app_on},
    hire_env::{HireEnv, PRICE, WorkerKind, hire_listing, listed_env, now, start_worker},
};

/// A hire environment whose gateway operates the devnet's escrow.
pub struct EscrowEnv {
    /// The chain, gateway, worker and funded seeker.
    pub env: HireEnv,
    /// The gateway's escrow operator (`captureAuthorizer`).
    pub operator: Address,
    /// The fee recipient of escrowed contracts.
    pub treasury: Address,
}

/// A gateway whose devnet chain has an escrow operator key and a treasury, and a worker
/// listing that accepts `schemes` with `fee_policy`.
pub async fn escrow_env(database: TestDatabase, schemes: Value, fee_policy: Value) -> EscrowEnv {
    escrow_env_with(database, WorkerKind::Echo, schemes, fee_policy).await
}

/// [`escrow_env`] with a `kind` worker.
pub async fn escrow_env_with(
    database: TestDatabase,
    kind: WorkerKind,
    schemes: Value,
    fee_policy: Value,
) -> EscrowEnv {
    let gateway = escrow_gateway(database).await;
    let worker = start_worker(kind, &gateway.app.address).await;
    let mut listing = hire_listing(&worker.endpoint, Address::ZERO, &gateway.devnet, 4);
    listing["payment_schemes"] = schemes;
    if !fee_policy.is_null() {
        listing["fee_policy"] = fee_policy;
    }
    gateway.listed(worker, listing).await
}

/// A gateway on a fresh devnet whose chain has an escrow operator key (funded with gas) and a
/// treasury; no worker listed yet.
pub struct EscrowGateway {
    /// The chain.
    pub devnet: Devnet,
    /// The gateway.
    pub app: crate::helpers::TestApp,
    operator: Address,
    treasury: Address,
}

impl EscrowGateway {
    /// `worker` registered with `listing`, and a funded seeker.
    pub async fn listed(self, worker: crate::hire_env::RunningWorker, listing: Value) -> EscrowEnv {
        EscrowEnv {
            env: listed_env(self.devnet, self.app, worker, listing).await,
            operator: self.operator,
            treasury: self.treasury,
        }
    }
}

/// See [`EscrowGateway`].
pub async fn escrow_gateway(database: TestDatabase) -> EscrowGateway {
    let devnet = Devnet::start().await.expect("anvil devnet starts");
    let operator = PrivateKeySigner::random();
    let treasury = PrivateKeySigner::random().address();
    let settings = format!(
        r#"
        [chains.devnet]
        network = "{network}"
        rpc_url = "{rpc}"
        relayer_private_key = "{relayer}"
        operator_private_key = "{operator}"
        [outbound]
        request_timeout_ms = 10000
        [escrow]
        treasury = "{treasury}"
        max_fee_bps = 500
        "#,
        network = devnet.network(),
        rpc = devnet.rpc_url(),
        relayer = devnet.relayer().to_bytes(),
        operator = operator.to_bytes(),
    );
    let app = spawn_app_on(database, &settings).await;
    // The operator pays gas for authorize, capture and void.
    devnet
        .set_eth_balance(
            operator.address(),
            alloy::primitives::U256::from(10u128.pow(19)),
        )
        .await
        .unwrap();
    EscrowGateway {
        devnet,
        app,
        operator: operator.address(),
        treasury,
    }
}

/// `getTokenStore(operator)`: where the escrow keeps an operator's authorized funds.
pub async fn token_store(env: &HireEnv, operator: Address) -> Address {
    use alloy::{
        providers::Provider as _,
        rpc::types::{TransactionInput, TransactionRequest},
        sol_types::SolCall as _,
    };
    use hiregate_payments::auth_capture::abi::IAuthCaptureEscrow;
    let call = IAuthCaptureEscrow::getTokenStoreCall { operator };
    let request = TransactionRequest::default()
        .to(env.devnet.auth_capture_escrow())
        .input(TransactionInput::new(call.abi_encode().into()));
    let bytes = env.devnet.provider().call(request).await.unwrap();
    IAuthCaptureEscrow::getTokenStoreCall::abi_decode_returns(&bytes).unwrap()
}

/// The seeker's escrowed payment of `contract_id`'s 402, signed by the payments crate's client
/// (which mirrors the official `@x402/evm` one; the official client itself pays in the
/// integration tests).
pub async fn escrowed_payment(
    env: &HireEnv,
    contract_id: &str,
) -> hiregate_payments::PaymentPayload {
    escrowed_offer_and_payment(env, contract_id).await.1
}

/// The 402's offer of `contract_id` and the seeker's escrowed payment of it.
pub async fn escrowed_offer_and_payment(
    env: &HireEnv,
    contract_id: &str,
) -> (
    hiregate_payments::PaymentRequirements,
    hiregate_payments::PaymentPayload,
) {
    use hiregate_payments::{AuthCaptureSignOptions, sign_auth_capture_payment};
    let challenge = env.challenge(contract_id).await;
    let payload = sign_auth_capture_payment(
        &env.wallet,
        &challenge.accepts[0],
        Some(challenge.resource.clone()),
        now(),
        &AuthCaptureSignOptions::default(),
    )
    .await
    .unwrap();
    (challenge.accepts[0].clone(), payload)
}

/// [`PRICE`] as a `U256`.
pub fn price() -> alloy::primitives::U256 {
    alloy::primitives::U256::from(PRICE)
}
