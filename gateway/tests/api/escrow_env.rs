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
    let worker = start_worker(kind, &app.address).await;
    // The operator pays gas for authorize, capture and void.
    devnet
        .set_eth_balance(
            operator.address(),
            alloy::primitives::U256::from(10u128.pow(19)),
        )
        .await
        .unwrap();
    let mut listing = hire_listing(&worker.endpoint, Address::ZERO, &devnet, 4);
    listing["payment_schemes"] = schemes;
    if !fee_policy.is_null() {
        listing["fee_policy"] = fee_policy;
    }
    EscrowEnv {
        env: listed_env(devnet, app, worker, listing).await,
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
