//! `hiregate demo`: a real hire with real settlement on a local chain, on the embedded defaults.
//!
//! Starts anvil with the devnet token and escrow, the gateway (SQLite in a temp folder, the
//! bundled facilitator in-process, an escrow operator key and a treasury) and example workers,
//! then walks a seeker through discover → contract → 402 → pay → execute → verified → settled,
//! and a schema-invalid delivery that is rejected; then the same two with the money escrowed
//! (x402 `auth-capture`): lock → verified → capture with a 2.5 % fee to the treasury, and lock →
//! rejected → void with the payer made whole. Every step is checked, balances on chain included:
//! the demo is also a smoke test, so it fails (non-zero exit) as soon as anything misbehaves.

use std::sync::Arc;
use std::time::{Duration, Instant};

use alloy::primitives::{Address, U256};
use alloy::signers::local::PrivateKeySigner;
use anyhow::{Context, bail, ensure};
use hiregate_payments::devnet::Devnet;
use hiregate_worker_sdk::example_workers::{
    FaultyBehaviour, FaultyMode, SUMMARIZE, echo_builder, echo_handler, faulty_builder,
    faulty_handler, summary_output_schema,
};
use hiregate_worker_sdk::seeker::{DiscoveryFilter, SeekerClient};
use hiregate_worker_sdk::{GatewayKeys, RunningServer};
use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;
use url::Url;

use crate::config::Settings;
use crate::startup::App;

/// Price of one summary: 1.25 tokens of 6 decimals.
const PRICE: u64 = 1_250_000;
/// What the seeker's wallet starts with: 10 tokens.
const SEEKER_FUNDS: u64 = 10_000_000;
/// The marketplace fee of the escrowed listings: 2.5 %.
const FEE_BPS: u16 = 250;
/// How long the escrowed hire's seeker may dispute before the capture: long enough to see the
/// money locked, short enough to wait for.
const ACCEPTANCE_WINDOW_S: u64 = 2;

/// Runs the demo; `Ok` only if every step behaved.
pub async fn run() -> anyhow::Result<()> {
    let started = Instant::now();
    let shutdown = CancellationToken::new();
    let result = walk_through(&shutdown).await;
    shutdown.cancel();
    match &result {
        Ok(()) => say(&format!(
            "demo finished: every step behaved ({:.1} s)",
            started.elapsed().as_secs_f64()
        )),
        Err(error) => eprintln!("\ndemo FAILED: {error:#}"),
    }
    result
}

async fn walk_through(shutdown: &CancellationToken) -> anyhow::Result<()> {
    step("1. local chain");
    let devnet = Devnet::start()
        .await
        .context("starting anvil with the devnet token (run scripts/install-tools.sh)")?;
    say(&format!(
        "anvil at {} ({}), token {} \"{}\" v{}",
        devnet.rpc_url(),
        devnet.network(),
        devnet.token(),
        devnet.token_name(),
        devnet.token_version()
    ));

    step("2. gateway (SQLite in a temp folder, bundled facilitator, escrow operator)");
    let data_dir = tempfile::tempdir().context("temp folder for the database")?;
    let admin_key = format!("hg_admin_{}", hex::encode(rand::random::<[u8; 24]>()));
    let escrow = EscrowParties {
        operator: PrivateKeySigner::random(),
        treasury: PrivateKeySigner::random().address(),
    };
    // The operator sends authorize, capture and void: it pays their gas.
    devnet
        .set_eth_balance(escrow.operator.address(), U256::from(10u128.pow(19)))
        .await
        .context("funding the escrow operator with gas")?;
    let settings = demo_settings(&devnet, data_dir.path(), &admin_key, &escrow)?;
    let app = App::build(settings).await.context("building the gateway")?;
    let gateway = app.base_url().clone();
    tokio::spawn(app.run_until_stopped(shutdown.child_token()));
    say(&format!("gateway at {gateway}"));
    say(&format!(
        "escrow operator {} (captureAuthorizer), treasury {}",
        escrow.operator.address(),
        escrow.treasury
    ));

    step("3. two workers: one that answers well, one that answers schema-invalid JSON");
    let jwks = gateway.join(".well-known/jwks.json")?;
    let good_worker = spawn_worker(false, &jwks, shutdown).await?;
    let bad_worker = spawn_worker(true, &jwks, shutdown).await?;
    say(&format!(
        "good worker at {}, faulty worker at {}",
        good_worker.base_url(),
        bad_worker.base_url()
    ));

    let http = reqwest::Client::new();
    let operator_key = create_key(&http, &gateway, &admin_key, "operator").await?;
    let seeker_key = create_key(&http, &gateway, &admin_key, "seeker").await?;
    let good_payout = PrivateKeySigner::random().address();
    let bad_payout = PrivateKeySigner::random().address();
    let good_id = register_worker(
        &http,
        &gateway,
        &operator_key,
        &good_worker,
        good_payout,
        &devnet,
        &json!({}),
    )
    .await?;
    let bad_id = register_worker(
        &http,
        &gateway,
        &operator_key,
        &bad_worker,
        bad_payout,
        &devnet,
        &json!({}),
    )
    .await?;
    say(&format!(
        "operator listed {good_id} and {bad_id} (probed /health and /capabilities first)"
    ));

    let wallet = devnet
        .funded_account(U256::from(SEEKER_FUNDS))
        .await
        .context("funding the seeker")?;
    let payer = wallet.address();
    let seeker = SeekerClient::new(gateway.clone(), seeker_key.clone(), Arc::new(wallet));
    say(&format!(
        "seeker wallet {payer} holds {}",
        units(U256::from(SEEKER_FUNDS))
    ));

    step("4. discover");
    let found = seeker
        .discover(&DiscoveryFilter {
            task_type: Some(SUMMARIZE.into()),
            healthy: Some(true),
            ..DiscoveryFilter::default()
        })
        .await?;
    ensure!(
        found.iter().any(|worker| worker.id == good_id),
        "discovery did not list the good worker"
    );
    say(&format!(
        "{} healthy worker(s) offer `{SUMMARIZE}`",
        found.len()
    ));

    step("5. contract");
    let contract = seeker
        .propose(&proposal(
            &good_id,
            &json!({"text": "hiregate pays agents only for verified work."}),
        ))
        .await?;
    ensure!(
        contract.state == "offered",
        "new contract is {}, not offered",
        contract.state
    );
    say(&format!(
        "{} offered, terms_hash {}",
        contract.id,
        contract.body["terms_hash"].as_str().unwrap_or("?")
    ));

    step("6. execute without payment → 402");
    let challenge = seeker.challenge(&contract.id).await?;
    let offer = challenge
        .accepts
        .first()
        .context("the 402 offers no way to pay")?;
    ensure!(
        offer.amount.to_string() == PRICE.to_string(),
        "402 asks {} instead of {PRICE}",
        offer.amount
    );
    say(&format!(
        "PAYMENT-REQUIRED: {} {} of {} to {} on {} (valid {} s)",
        offer.scheme,
        offer.amount,
        offer.asset,
        offer.pay_to,
        offer.network,
        offer.max_timeout_seconds
    ));

    step("7. pay (EIP-3009 authorization signed by the seeker) → verify → work → verify → settle");
    let before = Balances::read(&devnet, payer, good_payout).await?;
    let outcome = seeker.execute(&contract.id).await?;
    ensure!(
        outcome.status == 200,
        "paid execute answered {}: {}",
        outcome.status,
        outcome.body
    );
    let settlement = outcome
        .payment_response
        .context("settled response carries no PAYMENT-RESPONSE")?;
    ensure!(settlement.success, "settlement failed: {settlement:?}");
    say(&format!(
        "deliverable: {}",
        compact(&outcome.body["deliverable"])
    ));
    say(&format!(
        "settled on chain: transaction {}",
        settlement.transaction
    ));
    let after = Balances::read(&devnet, payer, good_payout).await?;
    before.print_change(&after);
    ensure!(
        before.payer - after.payer == U256::from(PRICE)
            && after.payee - before.payee == U256::from(PRICE),
        "balances moved by the wrong amount"
    );
    let settled = seeker.contract(&contract.id).await?;
    ensure!(
        settled.state == "settled",
        "contract ended {}, not settled",
        settled.state
    );
    say(&format!("{} is settled", contract.id));

    step("8. a schema-invalid delivery → rejected, nothing settled");
    let rejected = seeker
        .propose(&proposal(
            &bad_id,
            &json!({"text": "anything", "mode": "invalid"}),
        ))
        .await?;
    let before = Balances::read(&devnet, payer, bad_payout).await?;
    let outcome = seeker.execute(&rejected.id).await?;
    ensure!(
        outcome.status == 422,
        "schema-invalid delivery answered {}, not 422: {}",
        outcome.status,
        outcome.body
    );
    ensure!(
        outcome.payment_response.is_none(),
        "a rejected delivery carried PAYMENT-RESPONSE"
    );
    say(&format!(
        "422 verification failed: {}",
        compact(&outcome.body["error"]["details"]["verification"]["reason_codes"])
    ));
    let after = Balances::read(&devnet, payer, bad_payout).await?;
    before.print_change(&after);
    ensure!(before == after, "balances moved for a rejected delivery");
    let final_state = seeker.contract(&rejected.id).await?.state;
    if final_state != "rejected" {
        bail!("rejected contract ended {final_state}");
    }
    say(&format!(
        "{} is rejected; the seeker kept the money",
        rejected.id
    ));

    let demo = EscrowDemo {
        http: &http,
        gateway: &gateway,
        seeker_key: &seeker_key,
        seeker: &seeker,
        devnet: &devnet,
        escrow: &escrow,
        store: token_store(&devnet, escrow.operator.address()).await?,
    };
    step("9. two escrowed listings (x402 auth-capture, 2.5 % marketplace fee)");
    let escrow_options =
        json!({"payment_schemes": ["auth-capture"], "fee_policy": {"fee_bps": FEE_BPS}});
    let escrow_good_worker = spawn_worker(false, &jwks, shutdown).await?;
    let escrow_bad_worker = spawn_worker(true, &jwks, shutdown).await?;
    let escrow_good_payout = PrivateKeySigner::random().address();
    let escrow_bad_payout = PrivateKeySigner::random().address();
    let escrow_good_id = register_worker(
        &http,
        &gateway,
        &operator_key,
        &escrow_good_worker,
        escrow_good_payout,
        &devnet,
        &escrow_options,
    )
    .await?;
    let escrow_bad_id = register_worker(
        &http,
        &gateway,
        &operator_key,
        &escrow_bad_worker,
        escrow_bad_payout,
        &devnet,
        &escrow_options,
    )
    .await?;
    say(&format!(
        "operator listed {escrow_good_id} (answers well) and {escrow_bad_id} (schema-invalid), both auth-capture only at {FEE_BPS} bps"
    ));
    say(&format!(
        "escrowed funds sit in the operator's token store {} (getTokenStore(operator))",
        demo.store
    ));
    demo.captured(&escrow_good_id, escrow_good_payout).await?;
    demo.voided(&escrow_bad_id, escrow_bad_payout).await?;

    step("12. money truth: the store against the chain (GET /v1/admin/reconcile)");
    let response = http
        .get(gateway.join("v1/admin/reconcile")?)
        .bearer_auth(&admin_key)
        .send()
        .await?;
    let report = checked_json(response).await?;
    for total in report["totals"].as_array().into_iter().flatten() {
        say(&format!(
            "exact: store {} settled = {}, chain {} transfers = {}",
            total["store"]["count"],
            plain(&total["store"]["amount"]),
            total["chain"]["count"],
            plain(&total["chain"]["amount"])
        ));
    }
    for total in report["escrow"]["totals"].as_array().into_iter().flatten() {
        for side in ["store", "chain"] {
            let tally = &total[side];
            say(&format!(
                "escrow {side}: authorized {} = {}, captured {} = {} (fees {}), voided {} = {}, held {}",
                tally["authorized"]["count"],
                plain(&tally["authorized"]["amount"]),
                tally["captured"]["count"],
                plain(&tally["captured"]["amount"]),
                plain(&tally["fees"]),
                tally["voided"]["count"],
                plain(&tally["voided"]["amount"]),
                plain(&tally["held"]["amount"])
            ));
        }
    }
    ensure!(
        report["ok"] == true,
        "the store and the chain disagree: {}",
        report["mismatches"]
    );
    ensure!(
        report["escrow"]["matched"].as_array().map(Vec::len) == Some(2),
        "reconcile should prove both escrowed payments: {}",
        report["escrow"]
    );
    say("ok: every settlement, lock, capture and void is on chain, to the atomic unit");
    Ok(())
}

/// A JSON value as text, strings without their quotes.
fn plain(value: &Value) -> String {
    value
        .as_str()
        .map_or_else(|| value.to_string(), str::to_owned)
}

/// The gateway's escrow operator key and treasury.
struct EscrowParties {
    operator: PrivateKeySigner,
    treasury: Address,
}

/// What the escrowed steps of the demo share.
struct EscrowDemo<'a> {
    http: &'a reqwest::Client,
    gateway: &'a Url,
    seeker_key: &'a str,
    seeker: &'a SeekerClient,
    devnet: &'a Devnet,
    escrow: &'a EscrowParties,
    /// `getTokenStore(operator)`: where the escrow keeps the operator's locked funds.
    store: Address,
}

impl EscrowDemo<'_> {
    /// Lock → verified → (acceptance window) → capture with the fee.
    async fn captured(&self, worker_id: &str, payout: Address) -> anyhow::Result<()> {
        step("10. escrowed hire: lock → verified → capture with the fee");
        let mut proposal = proposal(
            worker_id,
            &json!({"text": "the escrow holds the money until the work is verified."}),
        );
        proposal["payment_scheme"] = json!("auth-capture");
        proposal["acceptance_window_s"] = json!(ACCEPTANCE_WINDOW_S);
        let contract = self.seeker.propose(&proposal).await?;
        let challenge = self.seeker.challenge(&contract.id).await?;
        let offer = challenge
            .accepts
            .first()
            .context("the 402 offers no way to pay")?;
        ensure!(
            offer.scheme == "auth-capture",
            "the escrowed contract's 402 offers {}",
            offer.scheme
        );
        say(&format!(
            "PAYMENT-REQUIRED: auth-capture {} to {}, captureAuthorizer {}, feeRecipient {}, fee {}–{} bps, captureDeadline {}",
            offer.amount,
            offer.pay_to,
            plain(&offer.extra["captureAuthorizer"]),
            plain(&offer.extra["feeRecipient"]),
            plain(&offer.extra["minFeeBps"]),
            plain(&offer.extra["maxFeeBps"]),
            plain(&offer.extra["captureDeadline"])
        ));
        let before = self.balances(payout).await?;
        before.print("before");

        let outcome = self.seeker.execute(&contract.id).await?;
        ensure!(
            outcome.status == 200,
            "escrowed execute answered {}: {}",
            outcome.status,
            outcome.body
        );
        say(&format!(
            "deliverable released at once (the money is locked): {}",
            compact(&outcome.body["deliverable"])
        ));
        let state = self.seeker.contract(&contract.id).await?.state;
        ensure!(
            state == "accepted",
            "verified escrowed contract is {state}, not accepted"
        );
        let locked = self.balances(payout).await?;
        locked.print("locked");
        let price = U256::from(PRICE);
        ensure!(
            before.payer - locked.payer == price
                && locked.store - before.store == price
                && locked.worker == before.worker
                && locked.treasury == before.treasury,
            "while locked the escrow should hold the price and nobody else move: {before:?} → {locked:?}"
        );
        say(&format!(
            "{} is accepted; capture when its {ACCEPTANCE_WINDOW_S} s acceptance window ends",
            contract.id
        ));
        self.wait_for(&contract.id, "settled").await?;
        let after = self.balances(payout).await?;
        after.print("captured");
        let fee = price * U256::from(FEE_BPS) / U256::from(10_000u32);
        ensure!(
            before.payer - after.payer == price
                && after.store == before.store
                && after.worker - before.worker == price - fee
                && after.treasury - before.treasury == fee,
            "capture moved the wrong amounts: {before:?} → {after:?} (fee {fee})"
        );
        self.print_trail(
            &contract.id,
            &[
                "authorization_sent",
                "payment_authorized",
                "verification_passed",
                "acceptance_window_closed",
                "settlement_succeeded",
            ],
        )
        .await?;
        say(&format!(
            "{} is settled: the worker got {} and the treasury the fee {}",
            contract.id,
            units(price - fee),
            units(fee)
        ));
        Ok(())
    }

    /// Lock → rejected → void: the payer is made whole.
    async fn voided(&self, worker_id: &str, payout: Address) -> anyhow::Result<()> {
        step("11. escrowed rejection: lock → rejected → void");
        let mut proposal = proposal(worker_id, &json!({"text": "anything", "mode": "invalid"}));
        proposal["payment_scheme"] = json!("auth-capture");
        let contract = self.seeker.propose(&proposal).await?;
        let before = self.balances(payout).await?;
        before.print("before");
        let outcome = self.seeker.execute(&contract.id).await?;
        ensure!(
            outcome.status == 422,
            "schema-invalid escrowed delivery answered {}, not 422: {}",
            outcome.status,
            outcome.body
        );
        say(&format!(
            "422 verification failed: {}",
            compact(&outcome.body["error"]["details"]["verification"]["reason_codes"])
        ));
        self.wait_for(&contract.id, "voided").await?;
        let after = self.balances(payout).await?;
        after.print("voided");
        ensure!(
            after == before,
            "the payer was not made whole: {before:?} → {after:?}"
        );
        self.print_trail(
            &contract.id,
            &[
                "authorization_sent",
                "payment_authorized",
                "verification_failed",
                "payment_voided",
            ],
        )
        .await?;
        say(&format!(
            "{} is voided: the escrow returned every atomic unit to the payer",
            contract.id
        ));
        Ok(())
    }

    async fn balances(&self, worker: Address) -> anyhow::Result<EscrowBalances> {
        Ok(EscrowBalances {
            payer: self
                .devnet
                .balance_of(self.seeker.payer().expect("the demo seeker has a wallet"))
                .await?,
            store: self.devnet.balance_of(self.store).await?,
            worker: self.devnet.balance_of(worker).await?,
            treasury: self.devnet.balance_of(self.escrow.treasury).await?,
        })
    }

    /// Polls the contract until it is `wanted`; a state that never comes fails the demo.
    async fn wait_for(&self, contract_id: &str, wanted: &str) -> anyhow::Result<()> {
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            let state = self.seeker.contract(contract_id).await?.state;
            if state == wanted {
                return Ok(());
            }
            if Instant::now() >= deadline {
                bail!("{contract_id} stayed {state}, never {wanted}");
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }

    /// Prints the contract's event log entries of `kinds` in order, with their transactions;
    /// a missing one fails the demo.
    async fn print_trail(&self, contract_id: &str, kinds: &[&str]) -> anyhow::Result<()> {
        let response = self
            .http
            .get(
                self.gateway
                    .join(&format!("v1/contracts/{contract_id}/events.jsonl"))?,
            )
            .bearer_auth(self.seeker_key)
            .send()
            .await?;
        let status = response.status();
        let text = response.text().await?;
        ensure!(status.is_success(), "event log answered {status}: {text}");
        let events: Vec<Value> = text
            .lines()
            .filter(|line| !line.trim().is_empty())
            .map(serde_json::from_str)
            .collect::<Result<_, _>>()
            .context("event log line is not JSON")?;
        let mut trail = Vec::new();
        for kind in kinds {
            let event = events
                .iter()
                .find(|event| event["kind"] == *kind)
                .with_context(|| format!("{contract_id} has no {kind} event"))?;
            trail.push(match event["details"]["transaction"].as_str() {
                Some(tx) => format!("{kind} (tx {tx})"),
                None => (*kind).to_owned(),
            });
        }
        say(&format!("events: {}", trail.join(" → ")));
        Ok(())
    }
}

/// Token balances around an escrowed payment.
#[derive(Debug, PartialEq, Eq)]
struct EscrowBalances {
    payer: U256,
    store: U256,
    worker: U256,
    treasury: U256,
}

impl EscrowBalances {
    fn print(&self, when: &str) {
        say(&format!(
            "{when:>8}: payer {}  escrow {}  worker {}  treasury {}",
            units(self.payer),
            units(self.store),
            units(self.worker),
            units(self.treasury)
        ));
    }
}

/// `getTokenStore(operator)` of the devnet escrow.
async fn token_store(devnet: &Devnet, operator: Address) -> anyhow::Result<Address> {
    use alloy::providers::Provider as _;
    use alloy::rpc::types::{TransactionInput, TransactionRequest};
    use alloy::sol_types::SolCall as _;
    use hiregate_payments::auth_capture::abi::IAuthCaptureEscrow;
    let call = IAuthCaptureEscrow::getTokenStoreCall { operator };
    let request = TransactionRequest::default()
        .to(devnet.auth_capture_escrow())
        .input(TransactionInput::new(call.abi_encode().into()));
    let bytes = devnet
        .provider()
        .call(request)
        .await
        .context("asking the escrow for the operator's token store")?;
    Ok(IAuthCaptureEscrow::getTokenStoreCall::abi_decode_returns(
        &bytes,
    )?)
}

fn demo_settings(
    devnet: &Devnet,
    data_dir: &std::path::Path,
    admin_key: &str,
    escrow: &EscrowParties,
) -> anyhow::Result<Settings> {
    let relayer_key = hex::encode(devnet.relayer().to_bytes());
    let operator_key = hex::encode(escrow.operator.to_bytes());
    let database = data_dir.join("hiregate.db");
    let overrides = format!(
        r#"
[http]
listen_address = "127.0.0.1:0"
[database]
url = "sqlite://{database}"
[log]
level = "warn"
[admin]
api_key = "{admin_key}"
[outbound]
# The demo's workers run on this machine, on plain http.
allow_private_targets = true
require_https = false
[health]
interval_ms = 2000
[contracts]
# The escrowed hire's capture waits for its short acceptance window: look often.
sweep_interval_ms = 250
[escrow]
treasury = "{treasury}"
[chains.devnet]
network = "{network}"
rpc_url = "{rpc}"
relayer_private_key = "0x{relayer_key}"
operator_private_key = "0x{operator_key}"
# anvil mines each transaction as it arrives: the send's answer is the receipt.
sync_send = true
"#,
        database = database.display(),
        network = devnet.network(),
        rpc = devnet.rpc_url(),
        treasury = escrow.treasury,
    );
    Settings::from_defaults_and(&overrides).context("demo settings")
}

async fn spawn_worker(
    schema_invalid: bool,
    jwks: &Url,
    shutdown: &CancellationToken,
) -> anyhow::Result<RunningServer> {
    let keys = GatewayKeys::remote(jwks.clone());
    let worker = if schema_invalid {
        faulty_builder()
            .gateway_keys(keys)
            .build(faulty_handler(FaultyBehaviour::new(FaultyMode::Invalid)))?
    } else {
        echo_builder().gateway_keys(keys).build(echo_handler())?
    };
    let stop = shutdown.clone();
    let server = hiregate_worker_sdk::serve(worker.router(), "127.0.0.1:0".parse()?, async move {
        stop.cancelled().await
    })
    .await?;
    Ok(server)
}

async fn create_key(
    http: &reqwest::Client,
    gateway: &Url,
    admin_key: &str,
    role: &str,
) -> anyhow::Result<String> {
    let response = http
        .post(gateway.join("v1/admin/keys")?)
        .bearer_auth(admin_key)
        .json(&json!({"role": role, "label": "demo"}))
        .send()
        .await?;
    let body = checked_json(response).await?;
    body["api_key"]
        .as_str()
        .map(str::to_owned)
        .context("key response without api_key")
}

async fn register_worker(
    http: &reqwest::Client,
    gateway: &Url,
    operator_key: &str,
    worker: &RunningServer,
    pay_to: Address,
    devnet: &Devnet,
    options: &Value,
) -> anyhow::Result<String> {
    let mut listing = json!({
        "endpoint": worker.base_url().to_string(),
        "protocol": "hire",
        "pay_to": pay_to.to_string(),
        "network": devnet.network(),
        "asset": devnet.token().to_string(),
        "tasks": {SUMMARIZE: {"price": PRICE.to_string(), "output_schema": summary_output_schema()}},
        "max_parallel": 4
    });
    if let (Some(listing), Some(options)) = (listing.as_object_mut(), options.as_object()) {
        listing.extend(options.clone());
    }
    let response = http
        .post(gateway.join("v1/workers")?)
        .bearer_auth(operator_key)
        .json(&listing)
        .send()
        .await?;
    let body = checked_json(response).await?;
    body["id"]
        .as_str()
        .map(str::to_owned)
        .context("worker response without id")
}

fn proposal(worker_id: &str, input: &Value) -> Value {
    json!({
        "worker_id": worker_id,
        "task_type": SUMMARIZE,
        "input": input,
        "verification": {"policy_id": "vp.schema_only.v1", "policy_params": {}},
        "sla": {"max_latency_ms": 10_000},
        "retry_policy": {"max_attempts": 1},
        "acceptance_window_s": 0
    })
}

async fn checked_json(response: reqwest::Response) -> anyhow::Result<Value> {
    let status = response.status();
    let body: Value = response.json().await.unwrap_or(Value::Null);
    ensure!(status.is_success(), "gateway answered {status}: {body}");
    Ok(body)
}

/// Token balances of the two parties of a payment.
#[derive(Debug, PartialEq, Eq)]
struct Balances {
    payer: U256,
    payee: U256,
}

impl Balances {
    async fn read(devnet: &Devnet, payer: Address, payee: Address) -> anyhow::Result<Self> {
        Ok(Self {
            payer: devnet.balance_of(payer).await?,
            payee: devnet.balance_of(payee).await?,
        })
    }

    fn print_change(&self, after: &Self) {
        say(&format!(
            "seeker balance {} → {}; worker payout {} → {}",
            units(self.payer),
            units(after.payer),
            units(self.payee),
            units(after.payee)
        ));
    }
}

/// Atomic units of a 6-decimal token as whole tokens.
fn units(atomic: U256) -> String {
    let scale = U256::from(1_000_000u64);
    format!("{}.{:06}", atomic / scale, atomic % scale)
}

fn compact(value: &Value) -> String {
    let text = value.to_string();
    if text.chars().count() > 160 {
        format!("{}…", text.chars().take(160).collect::<String>())
    } else {
        text
    }
}

fn step(title: &str) {
    println!("\n== {title}");
}

fn say(line: &str) {
    println!("   {line}");
}
