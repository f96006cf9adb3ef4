//! Receipts and the audit log, on real parts (anvil, devnet token, embedded facilitator,
//! worker-sdk example workers): a terminal outcome gets one gateway-signed receipt that
//! verifies offline with the JWKS (library and `hiregate receipt verify`), the event log exports
//! as JSON lines, and the database refuses to change or remove an event.

use std::process::{Command, Output};

use hiregate_contracts::{state::ContractState, token::Jwks};
use hiregate_worker_sdk::receipt::verify_receipt;
use serde_json::{Value, json};

use crate::{
    helpers::TestDatabase,
    hire_env::{HireEnv, WorkerKind, hire_env},
};

async fn get_json(env: &HireEnv, path: &str, key: &str) -> (u16, Value) {
    let response = env.app.get(path, Some(key)).await;
    let status = response.status().as_u16();
    (status, response.json().await.unwrap_or(Value::Null))
}

async fn jwks(env: &HireEnv) -> Jwks {
    env.app
        .get("/.well-known/jwks.json", None)
        .await
        .json()
        .await
        .unwrap()
}

async fn settled_contract_has_a_verifiable_receipt(database: TestDatabase) {
    let database_url = database.url();
    let env = hire_env(database, WorkerKind::Echo, 4, "").await;
    let input = HireEnv::input("receipt please");
    let contract_id = env.contract(input.clone(), json!({})).await;
    let challenge = env.challenge(&contract_id).await;
    let payload = env.sign(&challenge).await;
    let nonce = payload.exact_evm().unwrap().authorization.nonce;
    let paid = env
        .execute(
            &contract_id,
            Some(&hiregate_payments::encode_header(&payload)),
            Some(&input),
        )
        .await;
    assert_eq!(paid.status, 200, "{:?}", paid.body);
    let transaction = paid.payment_response().transaction;

    let path = format!("/v1/contracts/{contract_id}/receipt");
    let (status, body) = get_json(&env, &path, &env.seeker_key).await;
    assert_eq!(status, 200, "{body}");
    let token = body["receipt"].as_str().unwrap().to_owned();
    let jwks = jwks(&env).await;
    let receipt = verify_receipt(&token, &jwks).expect("the receipt verifies with the JWKS");
    assert_eq!(body["kid"].as_str(), jwks.key_ids().first().copied());

    // It binds what the contract view says happened.
    let (_, view) = get_json(
        &env,
        &format!("/v1/contracts/{contract_id}"),
        &env.seeker_key,
    )
    .await;
    assert_eq!(receipt.sub.as_str(), contract_id);
    assert_eq!(receipt.outcome, ContractState::Settled);
    assert_eq!(receipt.terms_hash.to_string(), view["terms_hash"]);
    let payment = receipt.payment.as_ref().expect("payment bound");
    assert_eq!(payment.nonce, nonce.to_string());
    assert_eq!(payment.payer, env.wallet.address().to_checksum(None));
    assert_eq!(payment.network, env.devnet.network());
    assert_eq!(payment.asset, env.devnet.token().to_checksum(None));
    assert_eq!(payment.tx_hash.as_deref(), Some(transaction.as_str()));
    let stored = env
        .app
        .store
        .latest_deliverables(&contract_id)
        .await
        .unwrap();
    assert!(!stored.is_empty());
    assert_eq!(
        receipt
            .deliverable_digests
            .iter()
            .map(ToString::to_string)
            .collect::<Vec<_>>(),
        stored.iter().map(|d| d.digest.clone()).collect::<Vec<_>>()
    );
    let verification = env
        .app
        .store
        .latest_verification(&contract_id)
        .await
        .unwrap()
        .expect("verification stored");
    assert_eq!(
        receipt.verifier_result_hash.map(|d| d.to_string()),
        Some(verification.verifier_result_hash)
    );
    assert_eq!(
        receipt.policy_hash.map(|d| d.to_string()),
        Some(verification.policy_hash)
    );
    assert_eq!(receipt.verification_status.as_deref(), Some("passed"));
    assert_eq!(
        view["receipt"], token,
        "the contract view shows the receipt"
    );

    // Issued once: the operator (the other party) gets the same bytes.
    let (status, again) = get_json(&env, &path, &env.operator_key).await;
    assert_eq!(status, 200, "{again}");
    assert_eq!(again["receipt"], token);

    // A receipt issued before receipts were kept per outcome (migration 0018) keeps its bytes
    // while it still vouches for the contract's state.
    move_receipt_to_unrecorded_outcome(&database_url, &contract_id).await;
    let (status, legacy) = get_json(&env, &path, &env.seeker_key).await;
    assert_eq!(status, 200, "{legacy}");
    assert_eq!(legacy["receipt"], token);

    // Any edited byte fails (or, for a base64 padding bit, changes nothing it states).
    for index in (0..token.len()).step_by(7) {
        let mut bytes = token.clone().into_bytes();
        bytes[index] = if bytes[index] == b'x' { b'y' } else { b'x' };
        let edited = String::from_utf8(bytes).unwrap();
        match verify_receipt(&edited, &jwks) {
            Err(_) => {}
            Ok(claims) => assert_eq!(claims, receipt, "edit at {index} verified differently"),
        }
    }
    let mut signature_edit = token.clone().into_bytes();
    let middle = token.rfind('.').unwrap() + 10;
    signature_edit[middle] = if signature_edit[middle] == b'x' {
        b'y'
    } else {
        b'x'
    };
    assert!(verify_receipt(&String::from_utf8(signature_edit).unwrap(), &jwks).is_err());

    // Someone who is not a party learns nothing.
    let (stranger, _) = env.app.create_key("seeker").await;
    let (status, _) = get_json(&env, &path, &stranger).await;
    assert_eq!(status, 404);

    // The audit log: JSON lines, gap-free, ending in `settled`.
    let export = env
        .app
        .get(
            &format!("/v1/contracts/{contract_id}/events.jsonl"),
            Some(&env.seeker_key),
        )
        .await;
    assert_eq!(export.status(), 200);
    assert_eq!(
        export.headers()["content-type"].to_str().unwrap(),
        "application/jsonl"
    );
    let lines: Vec<Value> = export
        .text()
        .await
        .unwrap()
        .lines()
        .map(|line| serde_json::from_str(line).unwrap())
        .collect();
    assert!(lines.len() >= 4, "{lines:?}");
    for (index, line) in lines.iter().enumerate() {
        assert_eq!(line["seq"], index as i64 + 1);
        assert_eq!(line["contract_id"], contract_id.as_str());
        assert!(line["actor"].is_string() && line["correlation_id"].is_string());
    }
    assert!(lines.iter().any(|line| line["to_state"] == "settled"));
    let (status, _) = get_json(
        &env,
        &format!("/v1/contracts/{contract_id}/events.jsonl"),
        &stranger,
    )
    .await;
    assert_eq!(status, 404);

    // The database itself refuses to rewrite history or a receipt.
    assert_history_is_append_only(&database_url, &contract_id).await;

    // Offline, from the command line: a JWKS file and the receipt string.
    let dir = tempfile::tempdir().unwrap();
    let jwks_file = dir.path().join("jwks.json");
    std::fs::write(&jwks_file, serde_json::to_string(&jwks).unwrap()).unwrap();
    let ok = hiregate(vec![
        "receipt".into(),
        "verify".into(),
        "--jwks".into(),
        jwks_file.to_str().unwrap().into(),
        token.clone(),
    ])
    .await;
    assert!(
        ok.status.success(),
        "{}",
        String::from_utf8_lossy(&ok.stderr)
    );
    let printed: Value = serde_json::from_slice(&ok.stdout).unwrap();
    assert_eq!(printed["outcome"], "settled");
    let receipt_file = dir.path().join("receipt.jws");
    let mut tampered = token.clone().into_bytes();
    tampered[middle] = if tampered[middle] == b'x' { b'y' } else { b'x' };
    std::fs::write(&receipt_file, tampered).unwrap();
    let bad = hiregate(vec![
        "receipt".into(),
        "verify".into(),
        "--jwks".into(),
        format!("{}/.well-known/jwks.json", env.app.address),
        receipt_file.to_str().unwrap().into(),
    ])
    .await;
    assert!(!bad.status.success());
    assert!(String::from_utf8_lossy(&bad.stderr).contains("does NOT verify"));
}

/// Runs the binary off the test's runtime: it may fetch the JWKS from the gateway this
/// runtime serves, so blocking the runtime on it would deadlock.
async fn hiregate(args: Vec<String>) -> Output {
    tokio::task::spawn_blocking(move || {
        Command::new(env!("CARGO_BIN_EXE_hiregate"))
            .args(args)
            .output()
            .unwrap()
    })
    .await
    .unwrap()
}

/// Stores the contract's receipt the way migration 0018 kept receipts issued before it: under
/// outcome `''`. The row is deleted and inserted again (write-once forbids an update).
async fn move_receipt_to_unrecorded_outcome(database_url: &str, contract_id: &str) {
    const COPY: &str = "insert into contract_receipt (contract_id, outcome, kid, token, issued_at) \
        select contract_id, '', kid, token, issued_at from contract_receipt where contract_id = $1";
    const DELETE: &str = "delete from contract_receipt where contract_id = $1 and outcome <> ''";
    let statements = [COPY, DELETE];
    if database_url.starts_with("sqlite") {
        let pool = sqlx::SqlitePool::connect(database_url).await.unwrap();
        for sql in statements {
            sqlx::query(sql)
                .bind(contract_id)
                .execute(&pool)
                .await
                .unwrap();
        }
    } else {
        let pool = sqlx::PgPool::connect(database_url).await.unwrap();
        for sql in statements {
            sqlx::query(sql)
                .bind(contract_id)
                .execute(&pool)
                .await
                .unwrap();
        }
    }
}

async fn assert_history_is_append_only(database_url: &str, contract_id: &str) {
    const UPDATE_EVENT: &str = "update contract_event set actor = 'someone else' \
        where contract_id = $1";
    const DELETE_EVENT: &str = "delete from contract_event where contract_id = $1";
    const UPDATE_RECEIPT: &str = "update contract_receipt set token = 'forged' \
        where contract_id = $1";
    let errors: Vec<String> = if database_url.starts_with("sqlite") {
        let pool = sqlx::SqlitePool::connect(database_url).await.unwrap();
        let mut errors = Vec::new();
        for sql in [UPDATE_EVENT, DELETE_EVENT, UPDATE_RECEIPT] {
            let result = sqlx::query(sql).bind(contract_id).execute(&pool).await;
            errors.push(result.expect_err(sql).to_string());
        }
        errors
    } else {
        let pool = sqlx::PgPool::connect(database_url).await.unwrap();
        let mut errors = Vec::new();
        for sql in [UPDATE_EVENT, DELETE_EVENT, UPDATE_RECEIPT] {
            let result = sqlx::query(sql).bind(contract_id).execute(&pool).await;
            errors.push(result.expect_err(sql).to_string());
        }
        errors
    };
    for error in &errors {
        assert!(
            error.contains("append-only") || error.contains("write-once"),
            "{error}"
        );
    }
}

#[tokio::test]
async fn a_settled_contract_has_one_verifiable_receipt_and_an_immutable_log() {
    settled_contract_has_a_verifiable_receipt(TestDatabase::sqlite()).await;
}

#[tokio::test]
async fn a_settled_contract_has_one_verifiable_receipt_on_postgres() {
    let Some(database) = TestDatabase::postgres().await else {
        return;
    };
    settled_contract_has_a_verifiable_receipt(database).await;
}

#[tokio::test]
async fn a_rejected_contract_has_no_receipt_yet_a_failed_one_has_one_without_settlement() {
    let env = hire_env(TestDatabase::sqlite(), WorkerKind::Faulty, 4, "").await;

    // Rejected is not final (an operator may still dispute it): no receipt yet.
    let input = json!({"text": "x", "mode": "invalid"});
    let rejected = env.contract(input.clone(), json!({})).await;
    let payment = env.pay(&env.challenge(&rejected).await).await;
    let answer = env.execute(&rejected, Some(&payment), None).await;
    assert_eq!(answer.status, 422, "{:?}", answer.body);
    let (status, body) = get_json(
        &env,
        &format!("/v1/contracts/{rejected}/receipt"),
        &env.seeker_key,
    )
    .await;
    assert_eq!(status, 409, "{body}");
    assert_eq!(body["error"]["code"], "contract_not_terminal");

    // Failed (retries exhausted) is final: the receipt binds the voided payment, no tx.
    let input = json!({"text": "never", "mode": "fail"});
    let failed = env
        .contract(input, json!({"retry_policy": {"max_attempts": 1}}))
        .await;
    let payment = env.pay(&env.challenge(&failed).await).await;
    let answer = env.execute(&failed, Some(&payment), None).await;
    assert_eq!(answer.status, 502, "{:?}", answer.body);
    assert_eq!(env.state(&failed).await, "failed");
    let (status, body) = get_json(
        &env,
        &format!("/v1/contracts/{failed}/receipt"),
        &env.seeker_key,
    )
    .await;
    assert_eq!(status, 200, "{body}");
    let receipt = verify_receipt(body["receipt"].as_str().unwrap(), &jwks(&env).await).unwrap();
    assert_eq!(receipt.outcome, ContractState::Failed);
    let payment = receipt.payment.expect("the held authorization is bound");
    assert_eq!(payment.payer, env.wallet.address().to_checksum(None));
    assert_eq!(payment.tx_hash, None);
    assert!(receipt.verifier_result_hash.is_none());
}

#[tokio::test]
async fn a_receipt_signed_by_a_rotated_out_key_verifies_while_that_key_is_published() {
    let key_dir = tempfile::tempdir().unwrap();
    let old_key = key_dir.path().join("old-key.json");
    let new_key = key_dir.path().join("new-key.json");
    let database = TestDatabase::sqlite();
    let url = database.url();
    let env = hire_env(
        database,
        WorkerKind::Echo,
        4,
        &format!("[signing_key]\npath = \"{}\"", old_key.display()),
    )
    .await;
    let input = HireEnv::input("rotate after me");
    let contract_id = env.contract(input.clone(), json!({})).await;
    let payment = env.pay(&env.challenge(&contract_id).await).await;
    let paid = env
        .execute(&contract_id, Some(&payment), Some(&input))
        .await;
    assert_eq!(paid.status, 200, "{:?}", paid.body);
    let path = format!("/v1/contracts/{contract_id}/receipt");
    let (status, issued) = get_json(&env, &path, &env.seeker_key).await;
    assert_eq!(status, 200, "{issued}");
    let token = issued["receipt"].as_str().unwrap().to_owned();
    let old_kid = issued["kid"].as_str().unwrap().to_owned();

    // The gateway restarts with a new key; the old one is listed as previous.
    let rotated = crate::helpers::spawn_app_on(
        TestDatabase::Shared(url.clone()),
        &crate::hire_env::chain_settings(
            &env.devnet,
            &format!(
                "[signing_key]\npath = \"{}\"\nprevious_paths = [\"{}\"]",
                new_key.display(),
                old_key.display()
            ),
        ),
    )
    .await;
    let rotated_jwks: Jwks = rotated
        .get("/.well-known/jwks.json", None)
        .await
        .json()
        .await
        .unwrap();
    let kids = rotated_jwks.key_ids();
    assert_eq!(kids.len(), 2, "{kids:?}");
    assert_ne!(kids[0], old_kid, "the new key signs");
    assert_eq!(kids[1], old_kid, "the old key stays published");
    let stored: Value = rotated
        .get(&path, Some(&env.seeker_key))
        .await
        .json()
        .await
        .unwrap();
    assert_eq!(stored["receipt"], token, "a receipt is never re-signed");
    let receipt = verify_receipt(&token, &rotated_jwks).expect("verifies with the old key");
    assert_eq!(receipt.outcome, ContractState::Settled);

    // Retired (no longer listed): the JWKS no longer vouches for it.
    drop(rotated);
    let retired = crate::helpers::spawn_app_on(
        TestDatabase::Shared(url),
        &crate::hire_env::chain_settings(
            &env.devnet,
            &format!("[signing_key]\npath = \"{}\"", new_key.display()),
        ),
    )
    .await;
    let retired_jwks: Jwks = retired
        .get("/.well-known/jwks.json", None)
        .await
        .json()
        .await
        .unwrap();
    assert_eq!(retired_jwks.key_ids().len(), 1);
    assert!(verify_receipt(&token, &retired_jwks).is_err());
}
