//! The ledger you can audit, on real parts (anvil + the devnet EIP-3009 token, the embedded
//! facilitator, a worker-sdk worker): `GET /v1/admin/reconcile` and `hiregate reconcile` agree
//! with a real settled hire, and report each kind of mismatch once it is made for real — an
//! authorization settled on chain behind the gateway's back, a transfer nobody paid for, a
//! tampered stored amount. `/metrics` counts settlements, settled amounts and facilitator calls.
//! Escrowed (`auth-capture`) payments reconcile against the devnet escrow's events: capture with
//! the fee, void, refund and the payer's reclaim, and corrupted rows reported by kind.

use std::{str::FromStr, time::Duration};

use crate::{
    escrow_env::{EscrowEnv, escrow_env_with, escrowed_offer_and_payment, escrowed_payment, price},
    helpers::{ADMIN_KEY, TestDatabase, eventually, tamper},
    hire_env::{HireEnv, PRICE, WorkerKind, chain_settings, hire_env, now},
};
use alloy::{primitives::U256, signers::local::PrivateKeySigner};
use hiregate_payments::{
    ChainConfig, Facilitator, FacilitatorConfig, LocalFacilitator, Network, PaymentPayload,
    PaymentRequirements, RelayerKey, SettleRequest, encode_header, sign_exact_payment,
};
use hiregate_store::states::PaymentState;
use serde_json::{Value, json};

/// `GET /v1/admin/reconcile?<query>` as the admin: (status, body).
async fn reconcile(env: &HireEnv, query: &str) -> (u16, Value) {
    let response = env
        .app
        .get(&format!("/v1/admin/reconcile?{query}"), Some(ADMIN_KEY))
        .await;
    let status = response.status().as_u16();
    (status, response.json().await.expect("JSON body"))
}

/// A paid, settled hire; returns (contract id, settlement transaction).
async fn settled_hire(env: &HireEnv, text: &str) -> (String, String) {
    let contract_id = env.contract(HireEnv::input(text), json!({})).await;
    let challenge = env.challenge(&contract_id).await;
    let answer = env
        .execute(&contract_id, Some(&env.pay(&challenge).await), None)
        .await;
    assert_eq!(answer.status, 200, "{:?}", answer.body);
    assert_eq!(answer.body["state"], "settled");
    (contract_id, answer.payment_response().transaction)
}

fn mismatches_of_kind<'a>(report: &'a Value, kind: &str) -> Vec<&'a Value> {
    report["mismatches"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|m| m["kind"] == kind)
        .collect()
}

async fn reconcile_agrees_then_reports_each_mismatch(database: TestDatabase) {
    let database_url = database.url();
    let env = hire_env(database, WorkerKind::Echo, 4, "").await;
    let token = env.devnet.token().to_checksum(None);
    let network = env.devnet.network();

    // A real settled hire: both sides count it, to the atomic unit, and nothing disagrees.
    let (contract_a, tx_a) = settled_hire(&env, "audited").await;
    let payment_a = env
        .app
        .store
        .payment_of_contract(&contract_a)
        .await
        .unwrap()
        .unwrap();
    let (status, report) = reconcile(&env, "").await;
    assert_eq!(status, 200, "{report}");
    assert_eq!(report["ok"], true, "{report:#}");
    assert_eq!(report["networks"][0]["network"], network);
    assert_eq!(report["networks"][0]["from_block"], 0);
    assert_eq!(
        report["totals"],
        json!([{
            "network": network,
            "asset": token,
            "store": {"count": 1, "amount": PRICE.to_string()},
            "chain": {"count": 1, "amount": PRICE.to_string()},
        }])
    );
    let matched = report["matched"].as_array().unwrap();
    assert_eq!(matched.len(), 1);
    assert_eq!(matched[0]["payment_id"], payment_a.payment_id.as_str());
    assert_eq!(matched[0]["contract_id"], contract_a);
    assert_eq!(matched[0]["transaction"], tx_a);
    assert_eq!(matched[0]["pay_to"], env.pay_to.to_checksum(None));
    assert_eq!(matched[0]["amount"], PRICE.to_string());
    let block = matched[0]["block"].as_u64().unwrap();
    assert_eq!(report["mismatch_counts"]["used_not_recorded_settled"], 0);

    // The range decides membership by the settlement's block.
    let (_, before) = reconcile(&env, &format!("to_block={}", block - 1)).await;
    assert_eq!(before["ok"], true);
    assert_eq!(before["matched"], json!([]));
    assert_eq!(before["totals"], json!([]));
    let (_, from) = reconcile(&env, &format!("from_block={block}&network={network}")).await;
    assert_eq!(from["matched"].as_array().unwrap().len(), 1);

    // Bad input: clear errors, nothing run.
    let (status, body) = reconcile(&env, "from_block=9&to_block=3").await;
    assert_eq!(
        (status, body["error"]["code"].as_str()),
        (422, Some("validation_failed"))
    );
    let (status, body) = reconcile(&env, "network=eip155:1").await;
    assert_eq!(
        (status, body["error"]["code"].as_str()),
        (422, Some("network_not_configured"))
    );
    let (status, body) = reconcile(&env, "from_block=abc").await;
    assert_eq!(
        (status, body["error"]["code"].as_str()),
        (400, Some("invalid_query"))
    );
    let seeker = env
        .app
        .get("/v1/admin/reconcile", Some(&env.seeker_key))
        .await;
    assert_eq!(seeker.status(), 403);
    assert_eq!(env.app.get("/v1/admin/reconcile", None).await.status(), 401);

    // (b) Money moved that the store does not show settled: a contract whose settlement waits
    // for its acceptance window, its held authorization settled on chain by someone else (a
    // second, independent bundled facilitator with its own relayer).
    let contract_b = env
        .contract(HireEnv::input("held"), json!({"acceptance_window_s": 600}))
        .await;
    let challenge = env.challenge(&contract_b).await;
    let payload: PaymentPayload = env.sign(&challenge).await;
    let answer = env
        .execute(&contract_b, Some(&encode_header(&payload)), None)
        .await;
    assert_eq!(answer.status, 200, "{:?}", answer.body);
    assert_eq!(env.state(&contract_b).await, "accepted");
    let payment_b = env
        .app
        .store
        .payment_of_contract(&contract_b)
        .await
        .unwrap()
        .unwrap();
    let outsider = LocalFacilitator::connect(FacilitatorConfig {
        chains: vec![ChainConfig::new(
            Network::from_str(&network).unwrap(),
            env.devnet.rpc_url().clone(),
            RelayerKey::new(env.devnet.fresh_relayer().await.unwrap()),
        )],
    })
    .await
    .unwrap();
    let behind_the_back = outsider
        .settle(&SettleRequest::new(
            payload.clone(),
            challenge.accepts[0].clone(),
        ))
        .await
        .unwrap();
    assert!(behind_the_back.success, "{behind_the_back:?}");
    let (status, report) = reconcile(&env, "").await;
    assert_eq!(status, 200);
    assert_eq!(report["ok"], false, "{report:#}");
    let used = mismatches_of_kind(&report, "used_not_recorded_settled");
    assert_eq!(used.len(), 1, "{report:#}");
    assert_eq!(used[0]["payment_id"], payment_b.payment_id.as_str());
    assert_eq!(used[0]["contract_id"], contract_b);
    assert_eq!(used[0]["transaction"], behind_the_back.transaction);
    assert_eq!(used[0]["amount"], PRICE.to_string());
    assert_eq!(
        report["mismatches"].as_array().unwrap().len(),
        1,
        "{report:#}"
    );
    // The chain saw two transfers to the payout address; the store settled one.
    assert_eq!(report["totals"][0]["chain"]["count"], 2);
    assert_eq!(report["totals"][0]["store"]["count"], 1);

    // (c) A transfer to a payout address that no payment explains.
    env.devnet.mint(env.pay_to, U256::from(7u64)).await.unwrap();
    let (_, report) = reconcile(&env, "").await;
    let orphans = mismatches_of_kind(&report, "orphan_transfer");
    assert_eq!(orphans.len(), 1, "{report:#}");
    assert_eq!(orphans[0]["amount"], "7");
    assert_eq!(orphans[0]["pay_to"], env.pay_to.to_checksum(None));
    assert_eq!(orphans[0]["payment_id"], Value::Null);

    // (a) A settled record whose transaction does not carry its amount.
    tamper(
        &database_url,
        &format!(
            "update payment set amount = '{}' where payment_id = '{}'",
            PRICE + 1,
            payment_a.payment_id
        ),
    )
    .await;
    let (_, report) = reconcile(&env, "").await;
    let without = mismatches_of_kind(&report, "settled_without_transfer");
    assert_eq!(without.len(), 1, "{report:#}");
    assert_eq!(without[0]["payment_id"], payment_a.payment_id.as_str());
    assert_eq!(without[0]["transaction"], tx_a);
    assert_eq!(report["mismatch_counts"]["settled_without_transfer"], 1);
    assert_eq!(report["mismatch_counts"]["used_not_recorded_settled"], 1);
    assert!(report["matched"].as_array().unwrap().is_empty());

    // The latest run's mismatches are in the metrics.
    let metrics = env.app.get("/metrics", None).await.text().await.unwrap();
    for (kind, count) in [
        ("settled_without_transfer", 1),
        ("used_not_recorded_settled", 1),
    ] {
        let line = format!("hiregate_reconciliation_mismatches{{kind=\"{kind}\"}} {count}");
        assert!(metrics.contains(&line), "{line} in {metrics}");
    }
    // The real transfer of the tampered record is unexplained now as well.
    assert!(
        metrics.contains("hiregate_reconciliation_mismatches{kind=\"orphan_transfer\"} 2"),
        "{metrics}"
    );
    assert!(
        metrics.contains("hiregate_reconciliations_total{result=\"ok\"} 3"),
        "{metrics}"
    );
}

#[tokio::test]
async fn reconcile_agrees_with_a_real_settlement_and_reports_each_mismatch() {
    reconcile_agrees_then_reports_each_mismatch(TestDatabase::sqlite()).await;
}

#[tokio::test]
async fn reconcile_agrees_with_a_real_settlement_and_reports_each_mismatch_on_postgres() {
    let Some(database) = TestDatabase::postgres().await else {
        return;
    };
    reconcile_agrees_then_reports_each_mismatch(database).await;
}

/// `hiregate reconcile --json` on `env`'s own configuration (its database and chain): it exits 0
/// with an `ok` report, which is returned.
pub(crate) async fn reconcile_cli_ok(env: &HireEnv) -> Value {
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("hiregate.toml");
    std::fs::write(
        &config,
        format!(
            "[database]\nurl = \"{}\"\n{}",
            env.app.database_url,
            chain_settings(&env.devnet, "")
        ),
    )
    .unwrap();
    let (code, stdout, stderr) = hiregate_reconcile(&config, &["--json"]).await;
    assert_eq!(code, 0, "{stdout}\n{stderr}");
    let cli: Value = serde_json::from_str(&stdout).expect("JSON report on stdout");
    assert_eq!(cli["ok"], true, "{cli:#}");
    cli
}

/// `hiregate reconcile` with a config file; returns (exit code, stdout, stderr).
pub(crate) async fn hiregate_reconcile(
    config: &std::path::Path,
    args: &[&str],
) -> (i32, String, String) {
    let mut command = tokio::process::Command::new(env!("CARGO_BIN_EXE_hiregate"));
    command
        .arg("reconcile")
        .arg("--config")
        .arg(config)
        .args(args);
    // Only the file configures it: nothing inherited may change the configuration.
    for (name, _) in std::env::vars() {
        if name.starts_with("HIREGATE_") {
            command.env_remove(name);
        }
    }
    let output = tokio::time::timeout(Duration::from_secs(60), command.output())
        .await
        .expect("hiregate reconcile finishes")
        .expect("run hiregate");
    (
        output.status.code().expect("exit code"),
        String::from_utf8_lossy(&output.stdout).into_owned(),
        String::from_utf8_lossy(&output.stderr).into_owned(),
    )
}

async fn the_cli_exits_non_zero_on_a_mismatch(database: TestDatabase) {
    let database_url = database.url();
    let env = hire_env(database, WorkerKind::Echo, 4, "").await;
    let (_, tx) = settled_hire(&env, "for the command line").await;
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("hiregate.toml");
    // The gateway's own configuration: what `serve` reads, `reconcile` reads.
    std::fs::write(
        &config,
        format!(
            "[database]\nurl = \"{database_url}\"\n{}",
            chain_settings(&env.devnet, "")
        ),
    )
    .unwrap();

    let (code, stdout, stderr) = hiregate_reconcile(&config, &["--json"]).await;
    assert_eq!(code, 0, "{stdout}\n{stderr}");
    let report: Value = serde_json::from_str(&stdout).expect("JSON report on stdout");
    assert_eq!(report["ok"], true);
    assert_eq!(report["matched"][0]["transaction"], tx);
    assert_eq!(report["totals"][0]["store"]["amount"], PRICE.to_string());
    assert_eq!(report["totals"][0]["chain"]["amount"], PRICE.to_string());
    // One block per log request: the chunking walks the whole range and finds the same.
    let (code, stdout, _) = hiregate_reconcile(&config, &["--json", "--chunk-blocks", "1"]).await;
    assert_eq!(code, 0, "{stdout}");
    let chunked: Value = serde_json::from_str(&stdout).unwrap();
    assert_eq!(chunked["matched"], report["matched"]);
    let (code, text, _) = hiregate_reconcile(&config, &[]).await;
    assert_eq!(code, 0, "{text}");
    assert!(text.contains("matched settlements: 1"), "{text}");
    assert!(text.contains("OK"), "{text}");

    // Money to the worker that no payment explains: exit 1, and the report says which.
    env.devnet
        .mint(env.pay_to, U256::from(42u64))
        .await
        .unwrap();
    let (code, stdout, stderr) = hiregate_reconcile(&config, &["--json"]).await;
    assert_eq!(code, 1, "{stdout}\n{stderr}");
    let report: Value = serde_json::from_str(&stdout).unwrap();
    assert_eq!(report["ok"], false);
    assert_eq!(report["mismatches"][0]["kind"], "orphan_transfer");
    assert_eq!(report["mismatches"][0]["amount"], "42");
    let (code, text, _) = hiregate_reconcile(&config, &[]).await;
    assert_eq!(code, 1);
    assert!(text.contains("orphan_transfer"), "{text}");
    assert!(text.contains("MISMATCH"), "{text}");

    // Could not compare: exit 2, never mistaken for "agrees" or "mismatch".
    let (code, _, stderr) = hiregate_reconcile(&config, &["--network", "eip155:1"]).await;
    assert_eq!(code, 2, "{stderr}");
    assert!(stderr.contains("not configured"), "{stderr}");
    let (code, _, stderr) = hiregate_reconcile(&dir.path().join("missing.toml"), &[]).await;
    assert_eq!(code, 2, "{stderr}");
}

#[tokio::test]
async fn the_reconcile_command_exits_non_zero_on_a_mismatch() {
    the_cli_exits_non_zero_on_a_mismatch(TestDatabase::sqlite()).await;
}

#[tokio::test]
async fn the_reconcile_command_exits_non_zero_on_a_mismatch_on_postgres() {
    let Some(database) = TestDatabase::postgres().await else {
        return;
    };
    the_cli_exits_non_zero_on_a_mismatch(database).await;
}

/// A metric's value from the OpenMetrics text, by its full series name with labels.
fn metric(text: &str, series: &str) -> Option<f64> {
    text.lines()
        .find_map(|line| line.strip_prefix(series)?.trim().parse().ok())
}

async fn metrics_count_settlements(database: TestDatabase) {
    let env = hire_env(database, WorkerKind::Echo, 4, "").await;
    settled_hire(&env, "counted").await;

    // A payer without funds: the facilitator refuses at /verify.
    let contract_id = env.contract(HireEnv::input("broke"), json!({})).await;
    let challenge = env.challenge(&contract_id).await;
    let broke = PrivateKeySigner::random();
    let payment = sign_exact_payment(
        &broke,
        &challenge.accepts[0],
        Some(challenge.resource.clone()),
        now(),
    )
    .await
    .unwrap();
    let refused = env
        .execute(&contract_id, Some(&encode_header(&payment)), None)
        .await;
    assert_eq!(refused.status, 402, "{:?}", refused.body);

    let network = env.devnet.network();
    let token = env.devnet.token().to_checksum(None);
    let text = eventually(Duration::from_secs(5), "settlement metrics", || async {
        let text = env.app.get("/metrics", None).await.text().await.unwrap();
        metric(&text, r#"hiregate_settlements_total{outcome="settled"}"#)
            .is_some()
            .then_some(text)
    })
    .await;
    assert_eq!(
        metric(&text, r#"hiregate_settlements_total{outcome="settled"}"#),
        Some(1.0),
        "{text}"
    );
    assert_eq!(
        metric(
            &text,
            &format!(
                r#"hiregate_settled_amount_atomic_total{{network="{network}",asset="{token}"}}"#
            )
        ),
        Some(PRICE as f64),
        "{text}"
    );
    assert_eq!(
        metric(
            &text,
            r#"hiregate_facilitator_request_duration_seconds_count{operation="verify"}"#
        ),
        Some(2.0),
        "{text}"
    );
    assert_eq!(
        metric(
            &text,
            r#"hiregate_facilitator_request_duration_seconds_count{operation="settle"}"#
        ),
        Some(1.0),
        "{text}"
    );
    let settle_seconds = metric(
        &text,
        r#"hiregate_facilitator_request_duration_seconds_sum{operation="settle"}"#,
    )
    .unwrap();
    assert!(settle_seconds > 0.0, "{text}");
    assert_eq!(
        metric(
            &text,
            r#"hiregate_facilitator_errors_total{operation="verify",kind="refused"}"#
        ),
        Some(1.0),
        "{text}"
    );
    assert_eq!(
        metric(
            &text,
            r#"hiregate_facilitator_errors_total{operation="settle",kind="refused"}"#
        ),
        // Present from the start, at 0: no settle was refused.
        Some(0.0),
        "{text}"
    );
}

#[tokio::test]
async fn metrics_count_settlements_amounts_and_facilitator_calls() {
    metrics_count_settlements(TestDatabase::sqlite()).await;
}

#[tokio::test]
async fn metrics_count_settlements_amounts_and_facilitator_calls_on_postgres() {
    let Some(database) = TestDatabase::postgres().await else {
        return;
    };
    metrics_count_settlements(database).await;
}

/// An escrowed hire paid with the payments crate's `auth-capture` client, answered `status`.
async fn escrowed_hire(env: &HireEnv, input: Value, extra: Value, status: u16) -> String {
    let contract_id = env.contract(input, extra).await;
    let payload = escrowed_payment(env, &contract_id).await;
    let answer = env
        .execute(&contract_id, Some(&encode_header(&payload)), None)
        .await;
    assert_eq!(answer.status, status, "{:?}", answer.body);
    contract_id
}

async fn wait_for_state(env: &HireEnv, contract_id: &str, wanted: &str) {
    eventually(Duration::from_secs(30), wanted, || async {
        (env.state(contract_id).await == wanted).then_some(())
    })
    .await;
}

/// The payer's own `reclaim` of `contract_id`'s escrowed payment (after the capture deadline).
async fn reclaim(env: &HireEnv, offer: &PaymentRequirements, payload: &PaymentPayload) -> String {
    use alloy::{
        network::TransactionBuilder as _,
        providers::{Provider as _, ProviderBuilder},
        rpc::types::{TransactionInput, TransactionRequest},
        sol_types::SolCall as _,
    };
    use hiregate_payments::{EscrowAddresses, auth_capture::abi::IAuthCaptureEscrow};
    let info =
        hiregate_engine::hire::escrow::payment_info(payload, offer, EscrowAddresses::default())
            .unwrap();
    let call = IAuthCaptureEscrow::reclaimCall { paymentInfo: info };
    let wallet = ProviderBuilder::new()
        .wallet(env.wallet.clone())
        .connect_http(env.devnet.rpc_url().clone());
    let receipt = wallet
        .send_transaction(
            TransactionRequest::default()
                .with_to(env.devnet.auth_capture_escrow())
                .input(TransactionInput::new(call.abi_encode().into())),
        )
        .await
        .unwrap()
        .get_receipt()
        .await
        .unwrap();
    assert!(receipt.status());
    receipt.transaction_hash.to_string()
}

fn tally(count: u64, amount: U256) -> Value {
    json!({"count": count, "amount": amount.to_string()})
}

/// Escrowed money to the atomic unit: a capture with the fee, a void, a refund and a payer's
/// reclaim, all on the real devnet escrow, reconcile clean with both sides' totals equal and
/// every payment proven step by step; the metrics count each outcome and its amount. Then
/// rows are corrupted behind the gateway's back (a voided payment set back to `authorized`, a
/// captured one claimed voided) and each disagreement is reported by kind and payment.
async fn escrow_reconciles_then_reports_corruption(database: TestDatabase) {
    let database_url = database.url();
    let EscrowEnv {
        env,
        operator,
        treasury,
    } = escrow_env_with(
        database,
        WorkerKind::Faulty,
        json!(["auth-capture"]),
        json!({"fee_bps": 250}),
    )
    .await;
    let token = env.devnet.token().to_checksum(None);
    let network = env.devnet.network();
    let fee = price() * U256::from(250) / U256::from(10_000);

    let captured = escrowed_hire(&env, HireEnv::input("captured"), json!({}), 200).await;
    assert_eq!(env.state(&captured).await, "settled");
    let voided = escrowed_hire(
        &env,
        json!({"text": "x", "mode": "invalid"}),
        json!({}),
        422,
    )
    .await;
    assert_eq!(env.state(&voided).await, "voided");
    let refunded = escrowed_hire(&env, HireEnv::input("refunded"), json!({}), 200).await;
    env.devnet.mint(operator, price()).await.unwrap();
    let response = env
        .app
        .send_json(
            reqwest::Method::POST,
            &format!("/v1/contracts/{refunded}/refund"),
            Some(ADMIN_KEY),
            &json!({"reason": "arbiter decided for the seeker"}),
        )
        .await;
    assert_eq!(response.status(), 200, "{}", response.text().await.unwrap());
    // Held through a long acceptance window until the payer reclaims after the deadline.
    let held = env
        .contract(HireEnv::input("held"), json!({"acceptance_window_s": 3600}))
        .await;
    let (offer, payload) = escrowed_offer_and_payment(&env, &held).await;
    let answer = env
        .execute(&held, Some(&encode_header(&payload)), None)
        .await;
    assert_eq!(answer.status, 200, "{:?}", answer.body);
    assert_eq!(env.state(&held).await, "accepted");

    // While it is held, the escrow section says so on both sides.
    let (status, report) = reconcile(&env, "").await;
    assert_eq!(status, 200, "{report}");
    assert_eq!(report["ok"], true, "{report:#}");
    assert_eq!(
        report["escrow"]["totals"][0]["store"]["held"],
        tally(1, price())
    );
    assert_eq!(
        report["escrow"]["totals"][0]["chain"]["held"],
        tally(1, price())
    );

    let capture_deadline = offer.extra["captureDeadline"].as_u64().unwrap();
    env.devnet
        .advance_time(capture_deadline - now() + 10)
        .await
        .unwrap();
    let reclaim_tx = reclaim(&env, &offer, &payload).await;
    eventually(Duration::from_secs(30), "reclaim recorded", || async {
        let payment = env
            .app
            .store
            .payment_of_contract(&held)
            .await
            .unwrap()
            .unwrap();
        (payment.state == PaymentState::Reclaimed).then_some(())
    })
    .await;
    wait_for_state(&env, &held, "voided").await;

    // Clean: both sides agree to the atomic unit, and nothing leaks into the exact section.
    let (status, report) = reconcile(&env, "").await;
    assert_eq!(status, 200, "{report}");
    assert_eq!(report["ok"], true, "{report:#}");
    let side = json!({
        "authorized": tally(4, price() * U256::from(4)),
        "captured": tally(2, price() * U256::from(2)),
        "fees": (fee * U256::from(2)).to_string(),
        "voided": tally(1, price()),
        "refunded": tally(1, price()),
        "reclaimed": tally(1, price()),
        "held": tally(0, U256::ZERO),
    });
    assert_eq!(
        report["escrow"]["totals"],
        json!([{"network": network, "asset": token, "store": side, "chain": side}]),
        "{report:#}"
    );
    assert_eq!(report["totals"], json!([]), "{report:#}");
    assert_eq!(report["matched"], json!([]));
    let matched = report["escrow"]["matched"].as_array().unwrap();
    assert_eq!(matched.len(), 4, "{report:#}");
    let steps_of = |contract_id: &str| -> Vec<String> {
        let payment = matched
            .iter()
            .find(|m| m["contract_id"] == contract_id)
            .unwrap_or_else(|| panic!("{contract_id} matched: {report:#}"));
        payment["steps"]
            .as_array()
            .unwrap()
            .iter()
            .map(|s| s["step"].as_str().unwrap().to_owned())
            .collect()
    };
    assert_eq!(steps_of(&captured), ["authorize", "capture"]);
    assert_eq!(steps_of(&voided), ["authorize", "void"]);
    assert_eq!(steps_of(&refunded), ["authorize", "capture", "refund"]);
    assert_eq!(steps_of(&held), ["authorize", "reclaim"]);
    let capture = matched
        .iter()
        .find(|m| m["contract_id"] == captured)
        .unwrap();
    assert_eq!(capture["steps"][1]["fee"], fee.to_string());
    assert_eq!(capture["pay_to"], env.pay_to.to_checksum(None));
    assert_eq!(
        matched.iter().find(|m| m["contract_id"] == held).unwrap()["steps"][1]["transaction"],
        reclaim_tx
    );
    // The treasury and the worker really hold what the totals say.
    assert_eq!(env.balance(treasury).await, fee * U256::from(2));
    assert_eq!(
        env.balance(env.pay_to).await,
        (price() - fee) * U256::from(2)
    );

    // The metrics count each outcome with its amount and the fees. They are counted from the
    // event bus in order, so once the last event (the reclaim) is counted all the others are.
    let reclaimed = format!(
        r#"hiregate_escrow_outcomes_total{{outcome="reclaimed",network="{network}",asset="{token}"}}"#
    );
    let text = eventually(Duration::from_secs(10), "escrow metrics", || async {
        let text = env.app.get("/metrics", None).await.text().await.unwrap();
        metric(&text, &reclaimed).is_some().then_some(text)
    })
    .await;
    for (outcome, count) in [
        ("authorized", 4u64),
        ("captured", 2),
        ("voided", 1),
        ("refunded", 1),
        ("reclaimed", 1),
    ] {
        let labels = format!(r#"{{outcome="{outcome}",network="{network}",asset="{token}"}}"#);
        assert_eq!(
            metric(&text, &format!("hiregate_escrow_outcomes_total{labels}")),
            Some(count as f64),
            "{outcome}: {text}"
        );
        assert_eq!(
            metric(
                &text,
                &format!("hiregate_escrow_amount_atomic_total{labels}")
            ),
            Some((count * PRICE) as f64),
            "{outcome}: {text}"
        );
    }
    assert_eq!(
        metric(
            &text,
            &format!(r#"hiregate_escrow_fees_atomic_total{{network="{network}",asset="{token}"}}"#)
        ),
        Some(f64::from(fee * U256::from(2))),
        "{text}"
    );

    // Corrupted: the voided payment set back to `authorized`. The chain's void is unrecorded,
    // and the store now holds money the escrow does not.
    let voided_payment = env
        .app
        .store
        .payment_of_contract(&voided)
        .await
        .unwrap()
        .unwrap();
    tamper(
        &database_url,
        &format!(
            "update payment set state = 'authorized' where payment_id = '{}'",
            voided_payment.payment_id
        ),
    )
    .await;
    let (_, report) = reconcile(&env, "").await;
    assert_eq!(report["ok"], false, "{report:#}");
    let unrecorded = mismatches_of_kind(&report, "escrow_event_not_recorded");
    assert_eq!(unrecorded.len(), 1, "{report:#}");
    assert_eq!(
        unrecorded[0]["payment_id"],
        voided_payment.payment_id.as_str()
    );
    assert_eq!(unrecorded[0]["payment_state"], "authorized");
    assert_eq!(
        unrecorded[0]["transaction"].as_str(),
        voided_payment.release_tx.as_deref()
    );
    assert_eq!(unrecorded[0]["amount"], PRICE.to_string());
    assert!(
        unrecorded[0]["detail"].as_str().unwrap().contains("void"),
        "{report:#}"
    );
    assert_eq!(report["mismatches"].as_array().unwrap().len(), 1);
    let totals = &report["escrow"]["totals"][0];
    assert_eq!(totals["store"]["held"], tally(1, price()));
    assert_eq!(totals["chain"]["held"], tally(0, U256::ZERO));
    assert_eq!(totals["store"]["voided"], tally(0, U256::ZERO));
    assert_eq!(totals["chain"]["voided"], tally(1, price()));

    // Corrupted: the captured payment claimed voided in its capture transaction. The store's
    // void has no event, the chain's capture no record; no payout becomes an orphan.
    let captured_payment = env
        .app
        .store
        .payment_of_contract(&captured)
        .await
        .unwrap()
        .unwrap();
    tamper(
        &database_url,
        &format!(
            "update payment set state = 'voided', release_tx = settle_tx where payment_id = '{}'",
            captured_payment.payment_id
        ),
    )
    .await;
    let (_, report) = reconcile(&env, "").await;
    let without = mismatches_of_kind(&report, "escrow_recorded_without_event");
    assert_eq!(without.len(), 1, "{report:#}");
    assert_eq!(
        without[0]["payment_id"],
        captured_payment.payment_id.as_str()
    );
    assert_eq!(
        without[0]["transaction"].as_str(),
        captured_payment.settle_tx.as_deref()
    );
    let unrecorded = mismatches_of_kind(&report, "escrow_event_not_recorded");
    assert_eq!(unrecorded.len(), 2, "{report:#}");
    assert!(
        unrecorded
            .iter()
            .any(|m| m["payment_id"] == captured_payment.payment_id.as_str()
                && m["detail"].as_str().unwrap().contains("capture")),
        "{report:#}"
    );
    assert_eq!(
        report["mismatch_counts"]["orphan_transfer"], 0,
        "{report:#}"
    );
    assert_eq!(
        report["mismatch_counts"]["escrow_recorded_without_event"],
        1
    );
    assert_eq!(report["mismatch_counts"]["escrow_event_not_recorded"], 2);

    // The command line says the same, in text.
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("hiregate.toml");
    std::fs::write(
        &config,
        format!(
            "[database]\nurl = \"{database_url}\"\n{}",
            chain_settings(&env.devnet, "")
        ),
    )
    .unwrap();
    let (code, text, stderr) = hiregate_reconcile(&config, &[]).await;
    assert_eq!(code, 1, "{text}\n{stderr}");
    assert!(text.contains("escrow_event_not_recorded"), "{text}");
    assert!(text.contains("escrow totals"), "{text}");
}

#[tokio::test]
async fn escrowed_payments_reconcile_to_the_atomic_unit_and_corruption_is_reported() {
    escrow_reconciles_then_reports_corruption(TestDatabase::sqlite()).await;
}

#[tokio::test]
async fn escrowed_payments_reconcile_on_postgres() {
    let Some(database) = TestDatabase::postgres().await else {
        return;
    };
    escrow_reconciles_then_reports_corruption(database).await;
}
