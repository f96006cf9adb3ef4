//! The bundled facilitator served over HTTP (`serve` on 127.0.0.1:0) and called through the
//! HTTP client, on a real chain. Run with `cargo test -p hiregate-payments --features devnet`.

#![cfg(all(feature = "devnet", feature = "server"))]

mod support;

use std::time::Duration;

use alloy::primitives::U256;
use hiregate_payments::facilitator::http_client::Timeouts;
use hiregate_payments::{
    Facilitator, FacilitatorError, HttpFacilitatorClient, LocalFacilitator, Reason, SettleResponse,
    SignOptions, UnknownOutcome, VerifyResponse, router, serve,
};
use serde_json::{Value, json};
use support::{AMOUNT, Harness};
use tokio::net::TcpListener;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;
use url::Url;

struct Served {
    url: Url,
    shutdown: CancellationToken,
    task: JoinHandle<Result<(), hiregate_payments::facilitator::server::ServeError>>,
}

async fn serve_facilitator(harness: &Harness) -> Served {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url: Url = format!("http://{}/", listener.local_addr().unwrap())
        .parse()
        .unwrap();
    let shutdown = CancellationToken::new();
    let task = tokio::spawn(serve(harness.config(), listener, shutdown.clone()));
    Served {
        url,
        shutdown,
        task,
    }
}

fn client(url: &Url) -> HttpFacilitatorClient {
    HttpFacilitatorClient::new(url.clone(), Timeouts::default(), None).unwrap()
}

#[tokio::test]
async fn http_facilitator_verifies_settles_and_lists_what_it_supports() {
    let harness = Harness::start().await;
    let served = serve_facilitator(&harness).await;
    let facilitator = client(&served.url);
    let payer = harness.payer(3 * AMOUNT).await;

    let supported = facilitator.supported().await.unwrap();
    assert_eq!(supported.kinds.len(), 3);
    for kind in &supported.kinds {
        assert_eq!(kind.network, harness.network.as_str());
        assert_eq!(kind.x402_version, 2);
    }
    assert_eq!(supported.kinds[0].scheme, "exact");
    assert_eq!(supported.kinds[1].scheme, "auth-capture");
    assert_eq!(
        supported.kinds[1].extra.as_ref().unwrap()["authCaptureEscrow"],
        "0xBdEA0D1bcC5966192B070Fdf62aB4EF5b4420cff"
    );
    // `upto` payers name the facilitator that may choose the amount: this relayer.
    assert_eq!(supported.kinds[2].scheme, "upto");
    assert_eq!(
        supported.kinds[2].extra.as_ref().unwrap()["facilitatorAddress"],
        harness.devnet.relayer().address().to_checksum(None)
    );
    assert_eq!(
        supported.signers["eip155:*"],
        vec![harness.devnet.relayer().address().to_checksum(None)]
    );

    let payload = harness
        .sign(&payer, &harness.requirements, &SignOptions::default())
        .await;
    let request = harness.request(payload);
    let verdict = facilitator.verify(&request).await.unwrap();
    assert!(verdict.is_valid, "{verdict:?}");
    let outcome = facilitator.settle(&request).await.unwrap();
    assert!(outcome.success, "{outcome:?}");
    assert!(outcome.transaction.starts_with("0x"));
    assert_eq!(harness.balance(harness.pay_to).await, U256::from(AMOUNT));

    // A refusal travels as a 200 verdict and reaches the caller as a value, not an error.
    let mut underpaid = harness.requirements.clone();
    underpaid.amount = (AMOUNT - 1).into();
    let payload = harness
        .sign(&payer, &underpaid, &SignOptions::default())
        .await;
    let verdict = facilitator.verify(&harness.request(payload)).await.unwrap();
    assert_eq!(verdict.invalid_reason, Some(Reason::ValueMismatch));

    served.shutdown.cancel();
    tokio::time::timeout(Duration::from_secs(10), served.task)
        .await
        .expect("serve stops on cancellation")
        .unwrap()
        .unwrap();
}

#[tokio::test]
async fn malformed_requests_get_400_with_a_verdict_body() {
    let harness = Harness::start().await;
    let served = serve_facilitator(&harness).await;
    let http = reqwest::Client::new();
    let payer = harness.payer(AMOUNT).await;
    let payload = harness
        .sign(&payer, &harness.requirements, &SignOptions::default())
        .await;
    let good = serde_json::to_value(harness.request(payload)).unwrap();

    let post = |path: &'static str, body: String| {
        let http = http.clone();
        let url = served.url.join(path).unwrap();
        async move {
            let response = http
                .post(url)
                .header("content-type", "application/json")
                .body(body)
                .send()
                .await
                .unwrap();
            let status = response.status().as_u16();
            (status, response.json::<Value>().await.unwrap())
        }
    };

    let (status, body) = post("verify", "{\"x402Version\":2,".into()).await;
    assert_eq!(status, 400);
    let verdict: VerifyResponse = serde_json::from_value(body).unwrap();
    assert_eq!(verdict.invalid_reason, Some(Reason::InvalidPayload));

    let mut v1 = good.clone();
    v1["paymentPayload"]["x402Version"] = json!(1);
    let (status, body) = post("verify", v1.to_string()).await;
    assert_eq!(status, 400);
    let verdict: VerifyResponse = serde_json::from_value(body).unwrap();
    assert_eq!(verdict.invalid_reason, Some(Reason::InvalidX402Version));

    let mut top_v1 = good.clone();
    top_v1["x402Version"] = json!(1);
    let (status, body) = post("settle", top_v1.to_string()).await;
    assert_eq!(status, 400);
    let outcome: SettleResponse = serde_json::from_value(body).unwrap();
    assert!(!outcome.success);
    assert_eq!(outcome.error_reason, Some(Reason::InvalidX402Version));
    assert_eq!(outcome.network, harness.network.as_str());

    let mut bad_amount = good.clone();
    bad_amount["paymentRequirements"]["amount"] = json!(1250000);
    let (status, body) = post("settle", bad_amount.to_string()).await;
    assert_eq!(status, 400);
    let outcome: SettleResponse = serde_json::from_value(body).unwrap();
    assert_eq!(outcome.error_reason, Some(Reason::InvalidPayload));

    // Nothing of the above moved money; the well-formed request still verifies.
    let (status, body) = post("verify", good.to_string()).await;
    assert_eq!(status, 200);
    assert_eq!(body["isValid"], true, "{body}");
    assert_eq!(harness.balance(payer.address()).await, U256::from(AMOUNT));

    let health = http
        .get(served.url.join("health").unwrap())
        .send()
        .await
        .unwrap();
    assert_eq!(health.status().as_u16(), 200);
    served.shutdown.cancel();
}

#[tokio::test]
async fn a_replayed_settle_over_http_is_refused_with_nonce_used() {
    let harness = Harness::start().await;
    let served = serve_facilitator(&harness).await;
    let facilitator = client(&served.url);
    let payer = harness.payer(3 * AMOUNT).await;
    let payload = harness
        .sign(&payer, &harness.requirements, &SignOptions::default())
        .await;
    let request = harness.request(payload);

    let first = facilitator.settle(&request).await.unwrap();
    assert!(first.success, "{first:?}");

    // On the wire exactly what the official facilitator answers a duplicate settle with.
    let response = reqwest::Client::new()
        .post(served.url.join("settle").unwrap())
        .json(&request)
        .send()
        .await
        .unwrap();
    assert_eq!(response.status().as_u16(), 200);
    let body: Value = response.json().await.unwrap();
    assert_eq!(body["success"], false, "{body}");
    assert_eq!(
        body["errorReason"], "invalid_exact_evm_nonce_already_used",
        "{body}"
    );
    assert_eq!(body["transaction"], "", "{body}");
    assert_eq!(body["network"], harness.network.as_str(), "{body}");

    let replay = facilitator.settle(&request).await.unwrap();
    assert!(!replay.success);
    assert_eq!(replay.error_reason, Some(Reason::NonceAlreadyUsed));
    assert_eq!(harness.balance(harness.pay_to).await, U256::from(AMOUNT));
    served.shutdown.cancel();
}

#[tokio::test]
async fn a_facilitator_that_lost_its_chain_answers_503_without_a_verdict() {
    let harness = Harness::start().await;
    let facilitator = LocalFacilitator::connect(harness.config()).await.unwrap();
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url: Url = format!("http://{}/", listener.local_addr().unwrap())
        .parse()
        .unwrap();
    let server = tokio::spawn(async move {
        axum::serve(listener, router(std::sync::Arc::new(facilitator))).await
    });
    let payer = harness.payer(AMOUNT).await;
    let payload = harness
        .sign(&payer, &harness.requirements, &SignOptions::default())
        .await;
    let request = harness.request(payload);
    // The chain node goes away after the facilitator connected to it.
    drop(harness);

    let response = reqwest::Client::new()
        .post(url.join("settle").unwrap())
        .json(&request)
        .send()
        .await
        .unwrap();
    assert_eq!(response.status().as_u16(), 503);
    let body: Value = response.json().await.unwrap();
    assert_eq!(
        body["error"]["code"], "facilitator_outcome_unknown",
        "{body}"
    );
    assert!(
        body.get("success").is_none() && body.get("isValid").is_none(),
        "{body}"
    );

    // Our own client therefore reads it as unknown, never as a refusal.
    let facilitator = client(&url);
    for outcome in [
        facilitator.verify(&request).await.map(|_| ()),
        facilitator.settle(&request).await.map(|_| ()),
    ] {
        assert!(
            matches!(
                outcome,
                Err(FacilitatorError::Unknown(UnknownOutcome::BadBody {
                    status: 503,
                    ..
                }))
            ),
            "{outcome:?}"
        );
    }
    server.abort();
}

#[tokio::test]
async fn serve_fails_fast_when_the_chain_is_misconfigured() {
    let harness = Harness::start().await;
    let mut config = harness.config();
    config.chains[0].network = hiregate_payments::Network::eip155(1).unwrap();
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let result = serve(config, listener, CancellationToken::new()).await;
    assert!(
        matches!(
            result,
            Err(hiregate_payments::facilitator::server::ServeError::Start(_))
        ),
        "{result:?}"
    );
}
