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

mod escrow;

use escrow::{EscrowDemo, EscrowParties, token_store};

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
    let devnet = start_chain().await?;
    let gateway = start_gateway(&devnet, shutdown).await?;
    let cast = Cast::enter(&devnet, &gateway, shutdown).await?;
    cast.discover().await?;
    cast.paid_hire().await?;
    cast.rejected_hire().await?;
    cast.escrowed_hires().await?;
    cast.reconcile().await
}

/// Step 1: anvil with the devnet token, Permit2 and the escrow.
async fn start_chain() -> anyhow::Result<Devnet> {
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
    Ok(devnet)
}

/// The running gateway, and what the demo needs of it.
struct DemoGateway {
    url: Url,
    admin_key: String,
    escrow: EscrowParties,
    /// Holds the SQLite database until the demo ends.
    _data_dir: tempfile::TempDir,
}

/// Step 2: the gateway on SQLite in a temp folder, with the bundled facilitator and an escrow
/// operator whose gas is paid.
async fn start_gateway(
    devnet: &Devnet,
    shutdown: &CancellationToken,
) -> anyhow::Result<DemoGateway> {
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
    let settings = demo_settings(devnet, data_dir.path(), &admin_key, &escrow)?;
    let app = App::build(settings).await.context("building the gateway")?;
    let url = app.base_url().clone();
    tokio::spawn(app.run_until_stopped(shutdown.child_token()));
    say(&format!("gateway at {url}"));
    say(&format!(
        "escrow operator {} (captureAuthorizer), treasury {}",
        escrow.operator.address(),
        escrow.treasury
    ));
    Ok(DemoGateway {
        url,
        admin_key,
        escrow,
        _data_dir: data_dir,
    })
}

/// Who takes part after step 3: the operator's two listings, the seeker and its wallet.
struct Cast<'a> {
    devnet: &'a Devnet,
    gateway: &'a DemoGateway,
    shutdown: &'a CancellationToken,
    http: reqwest::Client,
    jwks: Url,
    operator_key: String,
    seeker_key: String,
    seeker: SeekerClient,
    payer: Address,
    good_id: String,
    good_payout: Address,
    bad_id: String,
    bad_payout: Address,
    /// The two workers keep serving until the demo ends.
    _workers: [RunningServer; 2],
}

impl<'a> Cast<'a> {
    /// Step 3: two workers (one answers well, one answers schema-invalid JSON) listed by an
    /// operator, and a funded seeker.
    async fn enter(
        devnet: &'a Devnet,
        gateway: &'a DemoGateway,
        shutdown: &'a CancellationToken,
    ) -> anyhow::Result<Self> {
        step("3. two workers: one that answers well, one that answers schema-invalid JSON");
        let url = &gateway.url;
        let jwks = url.join(".well-known/jwks.json")?;
        let good_worker = spawn_worker(false, &jwks, shutdown).await?;
        let bad_worker = spawn_worker(true, &jwks, shutdown).await?;
        say(&format!(
            "good worker at {}, faulty worker at {}",
            good_worker.base_url(),
            bad_worker.base_url()
        ));

        let http = reqwest::Client::new();
        let operator_key = create_key(&http, url, &gateway.admin_key, "operator").await?;
        let seeker_key = create_key(&http, url, &gateway.admin_key, "seeker").await?;
        let good_payout = PrivateKeySigner::random().address();
        let bad_payout = PrivateKeySigner::random().address();
        let no_options = json!({});
        let listing = |worker, payout| {
            register_worker(
                &http,
                url,
                &operator_key,
                worker,
                payout,
                devnet,
                &no_options,
            )
        };
        let good_id = listing(&good_worker, good_payout).await?;
        let bad_id = listing(&bad_worker, bad_payout).await?;
        say(&format!(
            "operator listed {good_id} and {bad_id} (probed /health and /capabilities first)"
        ));

        let wallet = devnet
            .funded_account(U256::from(SEEKER_FUNDS))
            .await
            .context("funding the seeker")?;
        let payer = wallet.address();
        let seeker = SeekerClient::new(url.clone(), seeker_key.clone(), Arc::new(wallet));
        say(&format!(
            "seeker wallet {payer} holds {}",
            units(U256::from(SEEKER_FUNDS))
        ));
        Ok(Self {
            devnet,
            gateway,
            shutdown,
            http,
            jwks,
            operator_key,
            seeker_key,
            seeker,
            payer,
            good_id,
            good_payout,
            bad_id,
            bad_payout,
            _workers: [good_worker, bad_worker],
        })
    }

    /// Step 4: discovery lists the good worker.
    async fn discover(&self) -> anyhow::Result<()> {
        step("4. discover");
        let found = self
            .seeker
            .discover(&DiscoveryFilter {
                task_type: Some(SUMMARIZE.into()),
                healthy: Some(true),
                ..DiscoveryFilter::default()
            })
            .await?;
        ensure!(
            found.iter().any(|worker| worker.id == self.good_id),
            "discovery did not list the good worker"
        );
        say(&format!(
            "{} healthy worker(s) offer `{SUMMARIZE}`",
            found.len()
        ));
        Ok(())
    }

    /// Steps 5–7: a contract, its 402, then the paid execute settled on chain.
    async fn paid_hire(&self) -> anyhow::Result<()> {
        let seeker = &self.seeker;
        step("5. contract");
        let contract = seeker
            .propose(&proposal(
                &self.good_id,
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

        step(
            "7. pay (EIP-3009 authorization signed by the seeker) → verify → work → verify → settle",
        );
        let before = Balances::read(self.devnet, self.payer, self.good_payout).await?;
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
        let after = Balances::read(self.devnet, self.payer, self.good_payout).await?;
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
        Ok(())
    }

    /// Step 8: a schema-invalid delivery is rejected and nothing moves.
    async fn rejected_hire(&self) -> anyhow::Result<()> {
        step("8. a schema-invalid delivery → rejected, nothing settled");
        let seeker = &self.seeker;
        let rejected = seeker
            .propose(&proposal(
                &self.bad_id,
                &json!({"text": "anything", "mode": "invalid"}),
            ))
            .await?;
        let before = Balances::read(self.devnet, self.payer, self.bad_payout).await?;
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
        let after = Balances::read(self.devnet, self.payer, self.bad_payout).await?;
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
        Ok(())
    }

    /// Steps 9–11: two auth-capture listings; one hire captured with the fee, one voided.
    async fn escrowed_hires(&self) -> anyhow::Result<()> {
        let gateway = &self.gateway.url;
        let escrow = &self.gateway.escrow;
        let demo = EscrowDemo {
            http: &self.http,
            gateway,
            seeker_key: &self.seeker_key,
            seeker: &self.seeker,
            devnet: self.devnet,
            escrow,
            store: token_store(self.devnet, escrow.operator.address()).await?,
        };
        step("9. two escrowed listings (x402 auth-capture, 2.5 % marketplace fee)");
        let escrow_options =
            json!({"payment_schemes": ["auth-capture"], "fee_policy": {"fee_bps": FEE_BPS}});
        let good_worker = spawn_worker(false, &self.jwks, self.shutdown).await?;
        let bad_worker = spawn_worker(true, &self.jwks, self.shutdown).await?;
        let good_payout = PrivateKeySigner::random().address();
        let bad_payout = PrivateKeySigner::random().address();
        let listing = |worker, payout| {
            register_worker(
                &self.http,
                gateway,
                &self.operator_key,
                worker,
                payout,
                self.devnet,
                &escrow_options,
            )
        };
        let good_id = listing(&good_worker, good_payout).await?;
        let bad_id = listing(&bad_worker, bad_payout).await?;
        say(&format!(
            "operator listed {good_id} (answers well) and {bad_id} (schema-invalid), both auth-capture only at {FEE_BPS} bps"
        ));
        say(&format!(
            "escrowed funds sit in the operator's token store {} (getTokenStore(operator))",
            demo.store
        ));
        demo.captured(&good_id, good_payout).await?;
        demo.voided(&bad_id, bad_payout).await
    }

    /// Step 12: the store against the chain, to the atomic unit.
    async fn reconcile(&self) -> anyhow::Result<()> {
        step("12. money truth: the store against the chain (GET /v1/admin/reconcile)");
        let response = self
            .http
            .get(self.gateway.url.join("v1/admin/reconcile")?)
            .bearer_auth(&self.gateway.admin_key)
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
}

/// A JSON value as text, strings without their quotes.
fn plain(value: &Value) -> String {
    value
        .as_str()
        .map_or_else(|| value.to_string(), str::to_owned)
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
