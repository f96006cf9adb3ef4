//! Interop both ways with the official x402 TypeScript stack, on anvil:
//!
//! - **A standard seller on hiregate's facilitator.** An `@x402/express` resource server
//!   (`tools/interop/express-server.mjs`: `paymentMiddleware`, `x402ResourceServer`, the
//!   official `@x402/evm` `exact` and `upto` server schemes) reaches `hiregate facilitator` (the
//!   bundled facilitator as its own process) by URL, and the official `@x402/fetch` client pays it
//!   in `exact` over EIP-3009, `exact` over Permit2 and `upto` (the seller settling less than the
//!   maximum through `Settlement-Overrides`). Balances, the Permit2 allowance and nonces are read
//!   on chain; a replayed payment and eight concurrent copies of one are settled once.
//!   `@x402/evm` 2.27 ships no `auth-capture` server or facilitator scheme, so an escrowed payment
//!   has no official seller to run here; hiregate's own gateway is that seller (`escrow.rs`).
//! - **hiregate on the official facilitator.** A gateway configured with the official
//!   TypeScript facilitator (`tools/interop/facilitator-server.mjs`: `x402Facilitator` with the
//!   `exact` and `upto` facilitator schemes) settles a metered `upto` hire through it: 3 of 5
//!   verified items pay 3 units (the Permit2 case is in `permit2.rs`).

use std::time::Duration;

use alloy::{
    primitives::{Address, U256},
    signers::local::PrivateKeySigner,
};
use hiregate_payments::{PaymentRequired, SettleResponse, decode_header, devnet::Devnet};
use serde_json::{Value, json};
use tokio::io::{AsyncBufRead, AsyncBufReadExt as _, AsyncWriteExt as _};

use crate::{
    helpers::TestDatabase,
    hire_env::assert_reconciled,
    upto::{MAX_UNITS, UNIT, balances, input, official_upto_payment, upto_env_on},
};

/// Price of the `exact` routes, in atomic units.
const PRICE: u64 = 250_000;
/// The `upto` route's maximum, and what its seller charges of it.
const UPTO_MAXIMUM: u64 = 1_000_000;
const UPTO_CHARGE: u64 = 300_000;
/// The payer's holdings of each token and its approval of Permit2.
const FUNDS: u64 = 100_000_000;

/// Waits (30 s at most) for the line `prefix<url>` from a child process and returns the URL.
async fn listening_url(lines: impl AsyncBufRead + Unpin, prefix: &str) -> String {
    let mut lines = lines.lines();
    tokio::time::timeout(Duration::from_secs(30), async {
        while let Some(line) = lines.next_line().await.expect("reads the child's output") {
            if let Some(url) = line.trim().strip_prefix(prefix) {
                return url.trim_end_matches('/').to_owned();
            }
        }
        panic!("the child exited before printing `{prefix}`");
    })
    .await
    .unwrap_or_else(|_| panic!("no `{prefix}` within 30 s"))
}

fn node() -> std::ffi::OsString {
    std::env::var_os(hiregate_payments::devnet::NODE_ENV)
        .unwrap_or_else(|| std::ffi::OsString::from("node"))
}

/// `hiregate facilitator` serving `devnet` with its relayer key: (child, base URL).
pub(crate) async fn bundled_facilitator(devnet: &Devnet) -> (tokio::process::Child, String) {
    let mut command = tokio::process::Command::new(env!("CARGO_BIN_EXE_hiregate"));
    for (name, _) in std::env::vars() {
        if name.starts_with("HIREGATE_") {
            command.env_remove(name);
        }
    }
    let mut child = command
        .args(["facilitator", "--listen", "127.0.0.1:0"])
        .env("HIREGATE_CHAINS__DEVNET__NETWORK", devnet.network())
        .env(
            "HIREGATE_CHAINS__DEVNET__RPC_URL",
            devnet.rpc_url().as_str(),
        )
        .env(
            "HIREGATE_CHAINS__DEVNET__RELAYER_PRIVATE_KEY",
            devnet.relayer().to_bytes().to_string(),
        )
        .stderr(std::process::Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .expect("hiregate facilitator starts");
    let stderr = tokio::io::BufReader::new(child.stderr.take().unwrap());
    let url = listening_url(stderr, "facilitator listening on ").await;
    (child, url)
}

/// The official TypeScript facilitator (`tools/interop/facilitator-server.mjs`:
/// `x402Facilitator` with the `exact` and `upto` EVM schemes) serving `devnet` with its relayer:
/// (child, base URL).
pub(crate) async fn official_facilitator(devnet: &Devnet) -> (tokio::process::Child, String) {
    let mut child = tokio::process::Command::new(node())
        .arg(hiregate_payments::devnet::interop_dir().join("facilitator-server.mjs"))
        .arg("--rpc-url")
        .arg(devnet.rpc_url().as_str())
        .arg("--chain-id")
        .arg(devnet.chain_id().to_string())
        .env(
            "FACILITATOR_RELAYER_KEY",
            devnet.relayer().to_bytes().to_string(),
        )
        .current_dir(hiregate_payments::devnet::workspace_root())
        .stdout(std::process::Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .expect("node runs");
    let stdout = tokio::io::BufReader::new(child.stdout.take().unwrap());
    let url = listening_url(stdout, "facilitator listening on ").await;
    (child, url)
}

/// An `@x402/express` resource server (`tools/interop/express-server.mjs`) selling `routes`
/// through the facilitator at `facilitator_url`: (child, base URL).
async fn express_server(
    facilitator_url: &str,
    routes: Value,
    charges: Value,
) -> (tokio::process::Child, String) {
    let mut child = tokio::process::Command::new(node())
        .arg(hiregate_payments::devnet::interop_dir().join("express-server.mjs"))
        .current_dir(hiregate_payments::devnet::workspace_root())
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .expect("node runs");
    let config = json!({"facilitatorUrl": facilitator_url, "routes": routes, "charges": charges});
    let mut stdin = child.stdin.take().unwrap();
    stdin
        .write_all(config.to_string().as_bytes())
        .await
        .unwrap();
    drop(stdin);
    let stdout = tokio::io::BufReader::new(child.stdout.take().unwrap());
    let url = listening_url(stdout, "resource server listening on ").await;
    (child, url)
}

/// One priced route of the express seller.
fn route(scheme: &str, network: &str, pay_to: Address, price: &Value) -> Value {
    json!({
        "accepts": {
            "scheme": scheme,
            "network": network,
            "payTo": pay_to.to_checksum(None),
            "price": price,
            "maxTimeoutSeconds": 120,
        },
        "description": format!("sold in {scheme} by @x402/express"),
    })
}

/// (payer, seller) balances of `token`.
async fn holdings(
    devnet: &Devnet,
    token: Address,
    payer: Address,
    seller: Address,
) -> (U256, U256) {
    let of = |who: Address| async move {
        if token == devnet.token() {
            devnet.balance_of(who).await.unwrap()
        } else {
            devnet.permit_token_balance(who).await.unwrap()
        }
    };
    (of(payer).await, of(seller).await)
}

/// The official `@x402/fetch` client (`pay.mjs`) buys `url` with `scheme`.
async fn official_client_buys(url: &str, payer: &PrivateKeySigner, scheme: &str) -> Value {
    hiregate_payments::devnet::node_script(
        "pay.mjs",
        &json!({
            "url": url,
            "method": "GET",
            "privateKey": payer.to_bytes().to_string(),
            "scheme": scheme,
        }),
    )
    .await
    .expect("pay.mjs runs")
}

/// The route's 402 (decoded `PAYMENT-REQUIRED`), and a payment of it signed by the official
/// client (`sign.mjs`) as a `PAYMENT-SIGNATURE` value.
async fn signed_payment(http: &reqwest::Client, url: &str, payer: &PrivateKeySigner) -> String {
    let unpaid = http.get(url).send().await.unwrap();
    assert_eq!(unpaid.status(), 402);
    let required: PaymentRequired = decode_header(
        unpaid
            .headers()
            .get("payment-required")
            .expect("PAYMENT-REQUIRED")
            .to_str()
            .unwrap(),
    )
    .expect("PAYMENT-REQUIRED decodes");
    let signed = hiregate_payments::devnet::node_script(
        "sign.mjs",
        &json!({"privateKey": payer.to_bytes().to_string(), "paymentRequired": required}),
    )
    .await
    .expect("sign.mjs runs");
    signed["paymentSignature"].as_str().unwrap().to_owned()
}

/// Sends `payment` to `url` eight times at once, then once more: (answers that were paid 200
/// with a successful `PAYMENT-RESPONSE`, the statuses of the others).
async fn duplicates(http: &reqwest::Client, url: &str, payment: &str) -> (usize, Vec<u16>) {
    let send = || async {
        let answer = http
            .get(url)
            .header("PAYMENT-SIGNATURE", payment)
            .send()
            .await
            .unwrap();
        let settled = answer
            .headers()
            .get("payment-response")
            .and_then(|value| decode_header::<SettleResponse>(value.to_str().ok()?).ok())
            .is_some_and(|response| response.success);
        (answer.status().as_u16(), settled)
    };
    let mut answers = futures::future::join_all((0..8).map(|_| send())).await;
    answers.push(send().await);
    let paid = answers
        .iter()
        .filter(|(status, settled)| *status == 200 && *settled)
        .count();
    let others = answers
        .iter()
        .filter(|(status, settled)| !(*status == 200 && *settled))
        .map(|(status, _)| *status)
        .collect();
    (paid, others)
}

#[tokio::test]
async fn an_express_seller_on_the_bundled_facilitator_is_paid_in_exact_permit2_and_upto_once() {
    if !hiregate_payments::devnet::node_tools_or_skip(
        "an_express_seller_on_the_bundled_facilitator_is_paid_in_exact_permit2_and_upto_once",
    ) {
        return;
    }
    let devnet = Devnet::start().await.expect("anvil devnet starts");
    let (_facilitator, facilitator_url) = bundled_facilitator(&devnet).await;
    let payer = devnet.funded_account(U256::from(FUNDS)).await.unwrap();
    devnet
        .mint_permit_token(payer.address(), U256::from(FUNDS))
        .await
        .unwrap();
    devnet
        .approve_permit2(&payer, devnet.permit_token(), U256::from(FUNDS))
        .await
        .unwrap();
    let seller = PrivateKeySigner::random().address();
    let network = devnet.network();
    let token = devnet.token();
    let permit_token = devnet.permit_token();
    let routes = json!({
        "GET /exact": route("exact", &network, seller, &json!({
            "amount": PRICE.to_string(),
            "asset": token.to_checksum(None),
            "extra": {"name": devnet.token_name(), "version": devnet.token_version()},
        })),
        "GET /permit2": route("exact", &network, seller, &json!({
            "amount": PRICE.to_string(),
            "asset": permit_token.to_checksum(None),
            "extra": {"assetTransferMethod": "permit2"},
        })),
        "GET /upto": route("upto", &network, seller, &json!({
            "amount": UPTO_MAXIMUM.to_string(),
            "asset": permit_token.to_checksum(None),
            "extra": {"assetTransferMethod": "permit2"},
        })),
    });
    let (_server, base) = express_server(
        &facilitator_url,
        routes,
        json!({"/upto": UPTO_CHARGE.to_string()}),
    )
    .await;
    let http = reqwest::Client::new();

    // (path, scheme the client registers, token, what one sale moves)
    let sales = [
        ("/exact", "exact", token, PRICE),
        ("/permit2", "exact", permit_token, PRICE),
        ("/upto", "upto", permit_token, UPTO_CHARGE),
    ];
    for (path, scheme, asset, moved) in sales {
        let url = format!("{base}{path}");
        let before = holdings(&devnet, asset, payer.address(), seller).await;
        let allowance_before = devnet
            .permit2_allowance(asset, payer.address())
            .await
            .unwrap();

        let bought = official_client_buys(&url, &payer, scheme).await;
        assert_eq!(bought["status"], 200, "{path}: {bought}");
        assert_eq!(bought["body"]["path"], path);
        let response = &bought["paymentResponse"];
        assert_eq!(response["success"], true, "{path}: {bought}");
        assert_eq!(response["network"], network.as_str());
        assert_eq!(
            response["payer"].as_str().unwrap().to_lowercase(),
            payer.address().to_string().to_lowercase()
        );
        // The settlement the seller was told of is mined and succeeded.
        let receipt = {
            use alloy::providers::Provider as _;
            devnet
                .provider()
                .get_transaction_receipt(response["transaction"].as_str().unwrap().parse().unwrap())
                .await
                .unwrap()
                .expect("the settlement is mined")
        };
        assert!(receipt.status(), "{path}: the settlement succeeded");
        let after = holdings(&devnet, asset, payer.address(), seller).await;
        assert_eq!(
            after.0,
            before.0 - U256::from(moved),
            "{path}: the payer paid"
        );
        assert_eq!(
            after.1,
            before.1 + U256::from(moved),
            "{path}: the seller got it"
        );
        if asset == permit_token {
            assert_eq!(
                devnet
                    .permit2_allowance(asset, payer.address())
                    .await
                    .unwrap(),
                allowance_before - U256::from(moved),
                "{path}: Permit2 spent exactly the settled amount"
            );
        }

        // One payment sent eight times at once and then once more: one sale, money moved once.
        let payment = signed_payment(&http, &url, &payer).await;
        let before = holdings(&devnet, asset, payer.address(), seller).await;
        let (paid, others) = duplicates(&http, &url, &payment).await;
        assert_eq!(
            paid, 1,
            "{path}: one copy is paid, the others refused: {others:?}"
        );
        assert!(
            others.iter().all(|status| *status == 402),
            "{path}: refused copies are 402s: {others:?}"
        );
        let after = holdings(&devnet, asset, payer.address(), seller).await;
        assert_eq!(after.0, before.0 - U256::from(moved), "{path}: moved once");
        assert_eq!(after.1, before.1 + U256::from(moved), "{path}: moved once");
    }
}

#[tokio::test]
async fn the_official_typescript_facilitator_settles_a_metered_upto_hire_for_the_gateway() {
    if !hiregate_payments::devnet::node_tools_or_skip(
        "the_official_typescript_facilitator_settles_a_metered_upto_hire_for_the_gateway",
    ) {
        return;
    }
    let devnet = Devnet::start().await.expect("anvil devnet starts");
    let (_facilitator, url) = official_facilitator(&devnet).await;
    let env = upto_env_on(
        devnet,
        TestDatabase::sqlite(),
        &format!("[facilitator]\nmode = \"http\"\nurl = \"{url}\"\n"),
    )
    .await;
    let contract_id = env
        .contract(input(&[true, false, true, false, true]), json!({}))
        .await;
    let challenge = env.challenge(&contract_id).await;
    let offer = &challenge.accepts[0];
    assert_eq!(offer.scheme, "upto");
    assert_eq!(offer.amount.get(), U256::from(MAX_UNITS * UNIT));
    assert_eq!(
        offer.extra["facilitatorAddress"],
        env.devnet.relayer().address().to_checksum(None),
        "the address the official facilitator's /supported names"
    );
    let before = balances(&env).await;
    let (payment, _) = official_upto_payment(&env, &challenge).await;
    let paid = env.execute(&contract_id, Some(&payment), None).await;
    assert_eq!(paid.status, 200, "{:?}", paid.body);
    assert_eq!(paid.body["state"], "settled");
    let three = U256::from(3 * UNIT);
    let after = balances(&env).await;
    assert_eq!(after.0, before.0 - three, "the payer paid three units");
    assert_eq!(after.1, before.1 + three, "the worker got three units");
    // A replay is the stored answer; nothing moves again.
    let again = env.execute(&contract_id, Some(&payment), None).await;
    assert_eq!(again.status, 200, "{:?}", again.body);
    assert_eq!(balances(&env).await, after);
    let report = assert_reconciled(&env).await;
    assert_eq!(report["matched"].as_array().unwrap().len(), 1, "{report:#}");
    assert_eq!(report["totals"][0]["chain"]["amount"], three.to_string());
}
