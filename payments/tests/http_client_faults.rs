//! How the HTTP facilitator client reads answers it cannot get from our own facilitator.
//!
//! wiremock stands in for the facilitator ONLY to inject what a real, healthy one does not
//! produce on demand: 5xx, slow answers, non-JSON bodies, auth failures, and the 400/412 verdict
//! style of other implementations (x402-rs). The happy path against the real facilitator is in
//! `facilitator_http.rs`.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use alloy::primitives::{Address, U256};
use alloy::signers::local::PrivateKeySigner;
use hiregate_payments::facilitator::http_client::{
    AuthFn, AuthHeaderError, FacilitatorCall, StaticHeaders, Timeouts,
};
use hiregate_payments::{
    Facilitator, FacilitatorError, HttpFacilitatorClient, Network, PaymentRequirements, Reason,
    TokenDomain, UnknownOutcome, VerifyRequest, sign_exact_payment,
};
use reqwest::header::{AUTHORIZATION, HeaderMap, HeaderValue};
use serde_json::json;
use url::Url;
use wiremock::matchers::{body_partial_json, header, method, path};
use wiremock::{Mock, MockServer, ResponseTemplate};

async fn request() -> VerifyRequest {
    let requirements = PaymentRequirements::exact_evm(
        Network::eip155(84532),
        U256::from(10_000u64),
        "0x036CbD53842c5426634e7929541eC2318f3dCF7e"
            .parse()
            .unwrap(),
        Address::repeat_byte(0x42),
        60,
        &TokenDomain {
            name: "USDC".into(),
            version: "2".into(),
        },
    );
    let payload = sign_exact_payment(
        &PrivateKeySigner::random(),
        &requirements,
        None,
        1_750_000_000,
    )
    .await
    .unwrap();
    VerifyRequest::new(payload, requirements)
}

fn quick_timeouts() -> Timeouts {
    Timeouts {
        connect: Duration::from_secs(2),
        verify: Duration::from_millis(300),
        settle: Duration::from_millis(300),
        supported: Duration::from_millis(300),
    }
}

fn client(server: &MockServer) -> HttpFacilitatorClient {
    let url: Url = server.uri().parse().unwrap();
    HttpFacilitatorClient::new(url, quick_timeouts(), None).unwrap()
}

fn unknown(result: Result<impl std::fmt::Debug, FacilitatorError>) -> UnknownOutcome {
    match result {
        Err(FacilitatorError::Unknown(outcome)) => outcome,
        other => panic!("expected an unknown outcome, got {other:?}"),
    }
}

#[tokio::test]
async fn verdicts_are_read_from_200_400_and_412() {
    let server = MockServer::start().await;
    Mock::given(method("POST"))
        .and(path("/verify"))
        .and(body_partial_json(json!({"x402Version": 2})))
        .respond_with(ResponseTemplate::new(400).set_body_json(json!({
            "isValid": false,
            "invalidReason": "invalid_payment_expired",
            "invalidReasonDetails": "expired",
            "payer": ""
        })))
        .mount(&server)
        .await;
    Mock::given(method("POST"))
        .and(path("/settle"))
        .respond_with(ResponseTemplate::new(412).set_body_json(json!({
            "success": false,
            "errorReason": "permit2_allowance_required",
            "transaction": "",
            "network": ""
        })))
        .mount(&server)
        .await;
    let facilitator = client(&server);
    let request = request().await;

    let verdict = facilitator.verify(&request).await.unwrap();
    assert!(!verdict.is_valid);
    assert_eq!(
        verdict.invalid_reason,
        Some(Reason::Other("invalid_payment_expired".into()))
    );
    let outcome = facilitator.settle(&request).await.unwrap();
    assert!(!outcome.success);
    assert_eq!(
        outcome.error_reason,
        Some(Reason::Other("permit2_allowance_required".into()))
    );
}

#[tokio::test]
async fn server_errors_are_unknown_even_with_a_verdict_body() {
    let server = MockServer::start().await;
    Mock::given(method("POST"))
        .respond_with(ResponseTemplate::new(500).set_body_json(json!({
            "isValid": false, "invalidReason": "unexpected_verify_error"
        })))
        .mount(&server)
        .await;
    let facilitator = client(&server);
    let outcome = unknown(facilitator.verify(&request().await).await);
    assert!(
        matches!(outcome, UnknownOutcome::ServerError { status: 500 }),
        "{outcome}"
    );

    let server = MockServer::start().await;
    Mock::given(method("POST"))
        .respond_with(ResponseTemplate::new(503))
        .mount(&server)
        .await;
    let outcome = unknown(client(&server).settle(&request().await).await);
    assert!(
        matches!(outcome, UnknownOutcome::ServerError { status: 503 }),
        "{outcome}"
    );
}

#[tokio::test]
async fn timeouts_are_unknown() {
    let server = MockServer::start().await;
    Mock::given(method("POST"))
        .and(path("/settle"))
        .respond_with(
            ResponseTemplate::new(200)
                .set_body_json(
                    json!({"success": true, "transaction": "0x01", "network": "eip155:84532"}),
                )
                .set_delay(Duration::from_secs(3)),
        )
        .mount(&server)
        .await;
    let outcome = unknown(client(&server).settle(&request().await).await);
    assert!(
        matches!(outcome, UnknownOutcome::Timeout(limit) if limit == Duration::from_millis(300)),
        "{outcome}"
    );
}

#[tokio::test]
async fn bodies_that_are_not_verdicts_are_unknown() {
    let server = MockServer::start().await;
    Mock::given(method("POST"))
        .and(path("/verify"))
        .respond_with(ResponseTemplate::new(200).set_body_string("<html>gateway</html>"))
        .mount(&server)
        .await;
    Mock::given(method("POST"))
        .and(path("/settle"))
        .respond_with(ResponseTemplate::new(400).set_body_json(json!({"error": "bad request"})))
        .mount(&server)
        .await;
    let facilitator = client(&server);
    let request = request().await;
    let outcome = unknown(facilitator.verify(&request).await);
    assert!(
        matches!(outcome, UnknownOutcome::BadBody { status: 200, .. }),
        "{outcome}"
    );
    let outcome = unknown(facilitator.settle(&request).await);
    assert!(
        matches!(outcome, UnknownOutcome::BadBody { status: 400, .. }),
        "{outcome}"
    );
}

#[tokio::test]
async fn statuses_without_verdicts_and_dead_hosts_are_unknown() {
    let server = MockServer::start().await;
    Mock::given(method("POST"))
        .respond_with(ResponseTemplate::new(401).set_body_json(json!({"error": "unauthorized"})))
        .mount(&server)
        .await;
    let outcome = unknown(client(&server).verify(&request().await).await);
    assert!(
        matches!(outcome, UnknownOutcome::UnexpectedStatus { status: 401 }),
        "{outcome}"
    );

    // A port nobody listens on: bind, learn the port, close.
    let port = {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        listener.local_addr().unwrap().port()
    };
    let url: Url = format!("http://127.0.0.1:{port}/").parse().unwrap();
    let facilitator = HttpFacilitatorClient::new(url, quick_timeouts(), None).unwrap();
    let outcome = unknown(facilitator.verify(&request().await).await);
    assert!(matches!(outcome, UnknownOutcome::Transport(_)), "{outcome}");
}

#[tokio::test]
async fn auth_hook_headers_are_sent_per_call_and_base_path_is_kept() {
    let server = MockServer::start().await;
    Mock::given(method("POST"))
        .and(path("/platform/v2/x402/verify"))
        .and(header("authorization", "Bearer token-for-verify"))
        .respond_with(ResponseTemplate::new(200).set_body_json(json!({
            "isValid": true, "payer": "0x4242424242424242424242424242424242424242"
        })))
        .expect(1)
        .mount(&server)
        .await;
    Mock::given(method("GET"))
        .and(path("/platform/v2/x402/supported"))
        .and(header("authorization", "Bearer token-for-supported"))
        .respond_with(ResponseTemplate::new(200).set_body_json(json!({"kinds": []})))
        .expect(1)
        .mount(&server)
        .await;

    let calls = Arc::new(AtomicUsize::new(0));
    let counted = Arc::clone(&calls);
    let hook = AuthFn(move |call: FacilitatorCall, url: &Url| {
        counted.fetch_add(1, Ordering::SeqCst);
        assert!(url.path().ends_with(call.path()));
        let mut headers = HeaderMap::new();
        let token = format!("Bearer token-for-{}", call.path());
        headers.insert(
            AUTHORIZATION,
            HeaderValue::from_str(&token).map_err(|e| AuthHeaderError(Box::new(e)))?,
        );
        Ok(headers)
    });
    // No trailing slash: the client must still append to the path, not replace its last part.
    let url: Url = format!("{}/platform/v2/x402", server.uri())
        .parse()
        .unwrap();
    let facilitator =
        HttpFacilitatorClient::new(url, quick_timeouts(), Some(Arc::new(hook))).unwrap();

    assert!(facilitator.verify(&request().await).await.unwrap().is_valid);
    assert!(facilitator.supported().await.unwrap().kinds.is_empty());
    assert_eq!(calls.load(Ordering::SeqCst), 2);
}

#[tokio::test]
async fn failing_auth_hook_sends_nothing() {
    let server = MockServer::start().await;
    Mock::given(method("POST"))
        .respond_with(ResponseTemplate::new(200))
        .expect(0)
        .mount(&server)
        .await;
    let hook = AuthFn(
        |_: FacilitatorCall, _: &Url| -> Result<HeaderMap, AuthHeaderError> {
            Err(AuthHeaderError("signing key unavailable".into()))
        },
    );
    let url: Url = server.uri().parse().unwrap();
    let facilitator =
        HttpFacilitatorClient::new(url, quick_timeouts(), Some(Arc::new(hook))).unwrap();
    let outcome = unknown(facilitator.verify(&request().await).await);
    assert!(
        matches!(outcome, UnknownOutcome::AuthHeaders(_)),
        "{outcome}"
    );
}

#[test]
fn static_headers_debug_hides_values() {
    let mut headers = HeaderMap::new();
    headers.insert(AUTHORIZATION, HeaderValue::from_static("Bearer s3cr3t"));
    let printed = format!("{:?}", StaticHeaders(headers));
    assert!(!printed.contains("s3cr3t"), "{printed}");
    assert!(printed.contains("authorization"));
}

#[test]
fn non_http_urls_are_refused() {
    let url: Url = "ftp://example.com/".parse().unwrap();
    assert!(HttpFacilitatorClient::new(url, Timeouts::default(), None).is_err());
}
