//! Sign-in-with-x (x402 `sign-in-with-x`, CAIP-122 / EIP-4361) on a real anvil chain with real
//! signatures: a wallet that paid over the stable x402 resource reads its contract, events,
//! event log and receipt with a `SIGN-IN-WITH-X` proof signed by its key (EIP-191), built from
//! the challenge a 401 of those routes declares or by itself; another wallet's proof, an
//! expired or stale message, another domain or origin, another chain, a replayed nonce, a
//! tampered field and a garbled header are refused on every route (dispute opening included),
//! with the API's JSON error and nothing stored; an account's contract opens to no wallet
//! proof; `/v1/wallet/contracts` lists a signed-in wallet's contracts and no one else's; a contract wallet's proof is judged by its EIP-1271 `isValidSignature`; the official
//! Python and TypeScript x402 SDKs' SIWX clients sign proofs the gateway accepts.

use alloy::signers::{SignerSync as _, local::PrivateKeySigner};
use base64::Engine as _;
use chrono::{Duration, SecondsFormat, Utc};
use hiregate_payments::devnet::{PythonLibs, python_libs_or_skip, python_script_with};
use serde_json::{Value, json};

use crate::{
    helpers::TestDatabase,
    hire_env::{HireEnv, WorkerKind, hire_env},
    x402_resource::{call, offer, row_counts},
};

const B64: base64::engine::GeneralPurpose = base64::engine::general_purpose::STANDARD;

/// The routes a wallet proof opens (all `GET`).
fn read_routes(contract_id: &str) -> [String; 4] {
    [
        format!("/v1/contracts/{contract_id}"),
        format!("/v1/contracts/{contract_id}/events"),
        format!("/v1/contracts/{contract_id}/events.jsonl"),
        format!("/v1/contracts/{contract_id}/receipt"),
    ]
}

fn at(t: chrono::DateTime<Utc>) -> String {
    t.to_rfc3339_opts(SecondsFormat::Millis, true)
}

/// The fields of a fresh proof for `path` on `env`'s gateway (everything but address and
/// signature), as a client fills them in without asking for a challenge.
fn fields(env: &HireEnv, path: &str) -> Value {
    let uri = format!("{}{path}", env.app.address);
    let now = Utc::now();
    json!({
        "domain": env.app.address.trim_start_matches("http://"),
        "uri": uri,
        "version": "1",
        "chainId": format!("eip155:{}", env.devnet.chain_id()),
        "type": "eip191",
        "nonce": hex::encode(rand::random::<[u8; 16]>()),
        "issuedAt": at(now),
        "expirationTime": at(now + Duration::minutes(5)),
        "statement": "Sign in to read my contract",
        "resources": [uri],
    })
}

/// The EIP-4361 message of `fields` signed by `address` (written from the EIP, not from the
/// gateway's code).
fn eip4361(fields: &Value, address: &str) -> String {
    let s = |k: &str| fields[k].as_str().map(str::to_owned);
    let chain = s("chainId").unwrap();
    let mut lines = vec![
        format!(
            "{} wants you to sign in with your Ethereum account:",
            s("domain").unwrap()
        ),
        address.to_owned(),
        String::new(),
    ];
    if let Some(statement) = s("statement") {
        lines.push(statement);
    }
    lines.push(String::new());
    lines.push(format!("URI: {}", s("uri").unwrap()));
    lines.push(format!("Version: {}", s("version").unwrap()));
    lines.push(format!("Chain ID: {}", chain.trim_start_matches("eip155:")));
    lines.push(format!("Nonce: {}", s("nonce").unwrap()));
    lines.push(format!("Issued At: {}", s("issuedAt").unwrap()));
    if let Some(t) = s("expirationTime") {
        lines.push(format!("Expiration Time: {t}"));
    }
    if let Some(t) = s("notBefore") {
        lines.push(format!("Not Before: {t}"));
    }
    if let Some(resources) = fields["resources"].as_array() {
        lines.push("Resources:".to_owned());
        lines.extend(
            resources
                .iter()
                .map(|r| format!("- {}", r.as_str().unwrap())),
        );
    }
    lines.join("\n")
}

/// `SIGN-IN-WITH-X` for `fields` signed by `signer`: base64 of the JSON proof.
fn sign(signer: &PrivateKeySigner, fields: &Value) -> String {
    sign_as(signer, &signer.address().to_checksum(None), fields)
}

/// [`sign`] for the wallet at `address`, signed by `signer` (a contract wallet's owner).
fn sign_as(signer: &PrivateKeySigner, address: &str, fields: &Value) -> String {
    let address = address.to_owned();
    let message = eip4361(fields, &address);
    let signature = signer.sign_message_sync(message.as_bytes()).unwrap();
    let mut proof = fields.clone();
    proof["address"] = json!(address);
    proof["signature"] = json!(format!("0x{}", hex::encode(signature.as_bytes())));
    B64.encode(proof.to_string())
}

async fn get_with(env: &HireEnv, path: &str, proof: &str) -> (u16, Value) {
    let response = env
        .app
        .client
        .get(format!("{}{path}", env.app.address))
        .header("SIGN-IN-WITH-X", proof)
        .send()
        .await
        .unwrap();
    let status = response.status().as_u16();
    let text = response.text().await.unwrap();
    // The event stream and the event log answer lines, not one JSON document; errors are JSON.
    let body = match serde_json::from_str(&text) {
        Ok(body) => body,
        Err(_) if status == 200 => json!({ "lines": text.lines().count() }),
        Err(_) => panic!("{path}: not JSON: {text}"),
    };
    (status, body)
}

async fn open_dispute_with(env: &HireEnv, contract_id: &str, proof: &str) -> (u16, Value) {
    let response = env
        .app
        .client
        .post(format!(
            "{}/v1/contracts/{contract_id}/disputes",
            env.app.address
        ))
        .header("SIGN-IN-WITH-X", proof)
        .json(&json!({"reason": "not what I asked for"}))
        .send()
        .await
        .unwrap();
    (
        response.status().as_u16(),
        response.json().await.unwrap_or(Value::Null),
    )
}

/// A contract hired and paid by `env.wallet` over the stable x402 resource.
async fn paid_contract(env: &HireEnv) -> String {
    let input = HireEnv::input("paid from a wallet, read with its signature");
    let challenge = offer(env, &env.worker_id, &input).await;
    let payment = env.pay(&challenge).await;
    let paid = call(env, &env.worker_id, &input, Some(&payment)).await;
    assert_eq!(paid.status, 200, "{:?}", paid.body);
    paid.body["contract_id"].as_str().unwrap().to_owned()
}

async fn a_paying_wallet_signs_in(database: TestDatabase) {
    let env = hire_env(database, WorkerKind::Echo, 4, "").await;
    let contract_id = paid_contract(&env).await;

    // Each route opens to a fresh proof of the paying wallet.
    for path in read_routes(&contract_id) {
        let (status, body) = get_with(&env, &path, &sign(&env.wallet, &fields(&env, &path))).await;
        assert_eq!(status, 200, "{path}: {body}");
        if path.ends_with(&contract_id) {
            assert_eq!(body["state"], "settled");
            assert_eq!(
                body["payment"]["payer"],
                env.wallet.address().to_checksum(None)
            );
        }
    }

    // Without a credential the 401 declares the extension; its challenge, signed, opens it.
    let view = &read_routes(&contract_id)[0];
    let response = env.app.get(view, None).await;
    assert_eq!(response.status(), 401);
    let declared = response
        .headers()
        .get("payment-required")
        .expect("a PAYMENT-REQUIRED challenge")
        .to_str()
        .unwrap()
        .to_owned();
    assert_eq!(
        response.json::<Value>().await.unwrap()["error"]["code"],
        "missing_api_key"
    );
    let required: Value = serde_json::from_slice(&B64.decode(&declared).unwrap()).unwrap();
    assert_eq!(required["x402Version"], 2);
    assert_eq!(required["accepts"], json!([]));
    let extension = &required["extensions"]["sign-in-with-x"];
    let info = &extension["info"];
    assert_eq!(
        info["domain"],
        env.app.address.trim_start_matches("http://")
    );
    assert_eq!(info["uri"], format!("{}{view}", env.app.address));
    assert_eq!(info["nonce"].as_str().unwrap().len(), 32);
    assert_eq!(
        extension["supportedChains"],
        json!([{"chainId": env.devnet.network(), "type": "eip191"}])
    );
    let mut answered = info.clone();
    answered["chainId"] = extension["supportedChains"][0]["chainId"].clone();
    answered["type"] = json!("eip191");
    let (status, body) = get_with(&env, view, &sign(&env.wallet, &answered)).await;
    assert_eq!(status, 200, "{body}");
    // A route a wallet proof does not open declares nothing.
    let keys = env.app.get("/v1/contracts", None).await;
    assert_eq!(keys.status(), 401);
    assert!(keys.headers().get("payment-required").is_none());

    // Bad proofs, on every route: the API's JSON 401 with a stable code, or the 404 a stranger
    // gets; nothing stored (no nonce claimed, no dispute opened).
    let stranger = PrivateKeySigner::random();
    let before = row_counts(&env.app.database_url).await;
    let mut paths: Vec<String> = read_routes(&contract_id).into();
    paths.push(format!("/v1/contracts/{contract_id}/disputes"));
    for path in &paths {
        let fresh = || fields(&env, path);
        let with = |change: &dyn Fn(&mut Value)| {
            let mut fields = fresh();
            change(&mut fields);
            sign(&env.wallet, &fields)
        };
        let now = Utc::now();
        let tampered = {
            let proof = sign(&env.wallet, &fresh());
            let mut proof: Value = serde_json::from_slice(&B64.decode(proof).unwrap()).unwrap();
            proof["statement"] = json!("Sign in to read every contract");
            B64.encode(proof.to_string())
        };
        let cases: Vec<(&str, String, u16, &str)> = vec![
            (
                "another wallet",
                sign(&stranger, &fresh()),
                404,
                "not_found",
            ),
            (
                "expired",
                with(&|f| {
                    f["issuedAt"] = json!(at(now - Duration::minutes(2)));
                    f["expirationTime"] = json!(at(now - Duration::seconds(1)));
                }),
                401,
                "invalid_siwx_expired",
            ),
            (
                "stale",
                with(&|f| {
                    f["issuedAt"] = json!(at(now - Duration::minutes(6)));
                    f["expirationTime"] = json!(at(now + Duration::minutes(6)));
                }),
                401,
                "invalid_siwx_issued_at_too_old",
            ),
            (
                "not yet valid",
                with(&|f| f["notBefore"] = json!(at(now + Duration::minutes(2)))),
                401,
                "invalid_siwx_not_yet_valid",
            ),
            (
                "another domain",
                with(&|f| f["domain"] = json!("gateway.example.com")),
                401,
                "invalid_siwx_domain_mismatch",
            ),
            (
                "another origin",
                with(&|f| f["uri"] = json!(format!("https://evil.example{path}"))),
                401,
                "invalid_siwx_uri_mismatch",
            ),
            (
                "another chain",
                with(&|f| f["chainId"] = json!("eip155:1")),
                401,
                "invalid_siwx_unsupported_chain",
            ),
            ("tampered", tampered, 401, "invalid_siwx_signature"),
            (
                "garbled",
                "not base64 at all!".to_owned(),
                401,
                "invalid_siwx_header",
            ),
            (
                "not a proof",
                B64.encode(r#"{"domain": 7}"#),
                401,
                "invalid_siwx_header",
            ),
        ];
        for (case, proof, want_status, want_code) in cases {
            let (status, body) = if path.ends_with("/disputes") {
                open_dispute_with(&env, &contract_id, &proof).await
            } else {
                get_with(&env, path, &proof).await
            };
            assert_eq!(status, want_status, "{case} on {path}: {body}");
            assert_eq!(body["error"]["code"], want_code, "{case} on {path}: {body}");
            let message = body["error"]["message"].as_str().unwrap_or_default();
            assert!(
                !message.contains("0x"),
                "{case}: the answer echoes no proof"
            );
        }
    }
    assert_eq!(row_counts(&env.app.database_url).await, before);

    // A proof is accepted once: its replay is refused on every route.
    for path in read_routes(&contract_id) {
        let proof = sign(&env.wallet, &fields(&env, &path));
        assert_eq!(get_with(&env, &path, &proof).await.0, 200, "{path}");
        let (status, body) = get_with(&env, &path, &proof).await;
        assert_eq!(status, 401, "replay on {path}: {body}");
        assert_eq!(body["error"]["code"], "invalid_siwx_nonce");
    }
    let proof = sign(&env.wallet, &fields(&env, &read_routes(&contract_id)[0]));
    assert_eq!(
        get_with(&env, &read_routes(&contract_id)[0], &proof)
            .await
            .0,
        200
    );
    let (status, body) = open_dispute_with(&env, &contract_id, &proof).await;
    assert_eq!(
        (status, &body["error"]["code"]),
        (401, &json!("invalid_siwx_nonce"))
    );

    // The wallet's own list names the contract; another wallet's list is empty; it declares the
    // challenge, refuses bad proofs and replays like the contract routes.
    let list = "/v1/wallet/contracts";
    let proof = sign(&env.wallet, &fields(&env, list));
    let (status, body) = get_with(&env, list, &proof).await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["wallet"], env.wallet.address().to_checksum(None));
    assert_eq!(body["contracts"][0]["contract_id"], contract_id.as_str());
    assert_eq!(body["contracts"][0]["state"], "settled");
    assert_eq!(body["contracts"].as_array().unwrap().len(), 1);
    let (status, body) = get_with(&env, list, &proof).await;
    assert_eq!(
        (status, &body["error"]["code"]),
        (401, &json!("invalid_siwx_nonce"))
    );
    let (status, body) = get_with(&env, list, &sign(&stranger, &fields(&env, list))).await;
    assert_eq!((status, &body["contracts"]), (200, &json!([])), "{body}");
    let (status, body) = get_with(&env, list, "%%%").await;
    assert_eq!(
        (status, &body["error"]["code"]),
        (401, &json!("invalid_siwx_header"))
    );
    let unsigned = env.app.get(list, None).await;
    assert_eq!(unsigned.status(), 401);
    assert!(unsigned.headers().get("payment-required").is_some());

    // An account's contract opens to no wallet proof, not even its payer's... and the API key
    // and the capability token keep working next to proofs.
    let account = env
        .contract(HireEnv::input("an account's"), json!({}))
        .await;
    for path in read_routes(&account) {
        let (status, body) = get_with(&env, &path, &sign(&env.wallet, &fields(&env, &path))).await;
        assert_eq!(
            (status, &body["error"]["code"]),
            (404, &json!("not_found")),
            "{path}"
        );
        // (The unpaid contract has no receipt yet: 409, the key's answer, not a refusal.)
        let by_key = env.app.get(&path, Some(&env.seeker_key)).await.status();
        assert!(by_key == 200 || by_key == 409, "{path}: {by_key}");
    }
}

#[tokio::test]
async fn a_paying_wallet_reads_its_contract_signed_in_and_nobody_else_does() {
    a_paying_wallet_signs_in(TestDatabase::sqlite()).await;
}

#[tokio::test]
async fn a_paying_wallet_reads_its_contract_signed_in_and_nobody_else_does_on_postgres() {
    let Some(database) = TestDatabase::postgres().await else {
        return;
    };
    a_paying_wallet_signs_in(database).await;
}

/// A contract wallet's proof is judged by its EIP-1271 `isValidSignature` on the configured
/// chain: its owner's signature gets past the signature check (and, that wallet not being the
/// payer, meets the stranger's 404), anyone else's is 401 `invalid_siwx_signature`.
#[tokio::test]
async fn a_contract_wallets_proof_is_judged_by_its_isvalidsignature() {
    let env = hire_env(TestDatabase::sqlite(), WorkerKind::Echo, 4, "").await;
    let contract_id = paid_contract(&env).await;
    let owner = PrivateKeySigner::random();
    let wallet = env
        .devnet
        .deploy_1271_wallet(owner.address())
        .await
        .unwrap()
        .to_checksum(None);
    let path = format!("/v1/contracts/{contract_id}");
    let (status, body) =
        get_with(&env, &path, &sign_as(&owner, &wallet, &fields(&env, &path))).await;
    assert_eq!(
        (status, &body["error"]["code"]),
        (404, &json!("not_found")),
        "{body}"
    );
    let intruder = PrivateKeySigner::random();
    let (status, body) = get_with(
        &env,
        &path,
        &sign_as(&intruder, &wallet, &fields(&env, &path)),
    )
    .await;
    assert_eq!(
        (status, &body["error"]["code"]),
        (401, &json!("invalid_siwx_signature")),
        "{body}"
    );
    // The paying EOA still opens it.
    let (status, _) = get_with(&env, &path, &sign(&env.wallet, &fields(&env, &path))).await;
    assert_eq!(status, 200);
}

/// The official Python x402 SDK's SIWX client hook answers the 401's challenge: the header it
/// produces (its field names, message layout and signature encoding) opens the contract, once.
#[tokio::test]
async fn the_official_x402_sdk_siwx_client_reads_a_paid_contract() {
    let env = hire_env(TestDatabase::sqlite(), WorkerKind::Echo, 4, "").await;
    if !python_libs_or_skip("siwx::the_official_x402_sdk_siwx_client", PythonLibs::Siwx) {
        return;
    }
    let contract_id = paid_contract(&env).await;
    let path = format!("/v1/contracts/{contract_id}");
    let url = format!("{}{path}", env.app.address);
    let response = env.app.get(&path, None).await;
    assert_eq!(response.status(), 401);
    let declared = response.headers()["payment-required"]
        .to_str()
        .unwrap()
        .to_owned();
    let args = json!({
        "paymentRequired": declared,
        "url": url,
        "privateKey": env.wallet.to_bytes().to_string(),
    });
    let headers = python_script_with(PythonLibs::Siwx, "sign_in.py", &args)
        .await
        .expect("sign_in.py runs");
    // The SDK names the header in lower case; HTTP header names are case-insensitive.
    let proof = headers["sign-in-with-x"]
        .as_str()
        .expect("the SDK's SIGN-IN-WITH-X header")
        .to_owned();
    let (status, body) = get_with(&env, &path, &proof).await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["state"], "settled");
    let (status, body) = get_with(&env, &path, &proof).await;
    assert_eq!(
        (status, &body["error"]["code"]),
        (401, &json!("invalid_siwx_nonce"))
    );
}

/// The official TypeScript x402 SDK's SIWX client hook (`@x402/extensions/sign-in-with-x`,
/// `tools/interop/siwx-sign-in.mjs`) answers the 401's challenge with a viem account: its header
/// opens the contract, once.
#[tokio::test]
async fn the_official_typescript_x402_siwx_client_reads_a_paid_contract() {
    let test = "the_official_typescript_x402_siwx_client_reads_a_paid_contract";
    if !hiregate_payments::devnet::node_tools_or_skip(test) {
        return;
    }
    if !std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../tools/node_modules/@x402/extensions/package.json")
        .is_file()
    {
        assert!(
            !std::env::var("CI").is_ok_and(|v| v == "true"),
            "@x402/extensions is missing: run scripts/install-tools.sh"
        );
        eprintln!("skipped: {test}: @x402/extensions is missing (scripts/install-tools.sh)");
        return;
    }
    let env = hire_env(TestDatabase::sqlite(), WorkerKind::Echo, 4, "").await;
    let contract_id = paid_contract(&env).await;
    let path = format!("/v1/contracts/{contract_id}/receipt");
    let response = env.app.get(&path, None).await;
    assert_eq!(response.status(), 401);
    let declared = response.headers()["payment-required"]
        .to_str()
        .unwrap()
        .to_owned();
    let headers = hiregate_payments::devnet::node_script(
        "siwx-sign-in.mjs",
        &json!({
            "paymentRequired": declared,
            "url": format!("{}{path}", env.app.address),
            "privateKey": env.wallet.to_bytes().to_string(),
        }),
    )
    .await
    .expect("siwx-sign-in.mjs runs");
    let proof = headers["sign-in-with-x"]
        .as_str()
        .expect("the SDK's SIGN-IN-WITH-X header")
        .to_owned();
    let (status, body) = get_with(&env, &path, &proof).await;
    assert_eq!(status, 200, "{body}");
    let (status, body) = get_with(&env, &path, &proof).await;
    assert_eq!(
        (status, &body["error"]["code"]),
        (401, &json!("invalid_siwx_nonce"))
    );
}
