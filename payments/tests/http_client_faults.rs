//! How the HTTP facilitator client reads answers it cannot get from our own facilitator.
//!
//! wiremock (and, for an endless chunked body, a raw TCP listener) stands in for the
//! facilitator ONLY to inject faults a real, healthy one does not produce on demand: verdicts
//! under 4xx/5xx statuses (x402-rs answers 400, 412 and 500), slow answers, non-JSON and
//! oversized bodies, auth failures. The happy path and the unknown outcome of the real
//! facilitator are in `facilitator_http.rs`.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use alloy::primitives::{Address, U256};
use alloy::signers::local::PrivateKeySigner;
use hiregate_payments::facilitator::http_client::{
    AuthFn, AuthHeaderError, FacilitatorCall, MAX_BODY_BYTES, StaticHeaders, Timeouts,
};
use hiregate_payments::{
    Facilitator, FacilitatorError, HttpFacilitatorClient, Network, PaymentRequirements, Reason,
    TokenDomain, UnknownOutcome, VerifyRequest, sign_exact_payment,
};
use reqwest::header::{AUTHORIZATION, HeaderMap, HeaderValue};
use serde_json::json;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use url::Url;
use wiremock::matchers::{body_partial_json, header, method, path};
use wiremock::{Mock, MockServer, ResponseTemplate};

async fn request() -> VerifyRequest {
    let requirements = PaymentRequirements::exact_evm(
        Network::eip155(84532).unwrap(),
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

/// A mock facilitator answering every `/verify` and `/settle` with `status` and `body`.
async fn answering(status: u16, body: serde_json::Value) -> MockServer {
    let server = MockServer::start().await;
    Mock::given(method("POST"))
        .and(body_partial_json(json!({"x402Version": 2})))
        .respond_with(ResponseTemplate::new(status).set_body_json(body))
        .mount(&server)
        .await;
    server
}

#[tokio::test]
async fn verdicts_are_read_whatever_the_status() {
    let request = request().await;
    for status in [200, 400, 402, 412, 500, 502, 503] {
        // x402-rs's shape of a refused verify (it sends `payer: ""`).
        let server = answering(
            status,
            json!({
                "isValid": false,
                "invalidReason": "invalid_payment_expired",
                "invalidReasonDetails": "Payment authorization is expired",
                "payer": ""
            }),
        )
        .await;
        let verdict = client(&server).verify(&request).await.unwrap();
        assert!(!verdict.is_valid, "{status}");
        assert_eq!(
            verdict.invalid_reason,
            Some(Reason::ValidBefore),
            "{status}"
        );

        // x402-rs's shape of a failed settle.
        let server = answering(
            status,
            json!({
                "success": false,
                "network": "",
                "transaction": "",
                "errorReason": "permit2_allowance_required",
                "errorMessage": "Allowance is not enough to cover the payment amount",
                "payer": ""
            }),
        )
        .await;
        let outcome = client(&server).settle(&request).await.unwrap();
        assert!(!outcome.success, "{status}");
        assert_eq!(
            outcome.error_reason,
            Some(Reason::Permit2AllowanceRequired),
            "{status}"
        );
    }

    // What x402-rs answers for a bad signature (its simulation reverts): a 500 verdict.
    let server = answering(
        500,
        json!({
            "isValid": false,
            "invalidReason": "unexpected_error",
            "invalidReasonDetails": "Contract call failed: execution reverted",
            "payer": ""
        }),
    )
    .await;
    let verdict = client(&server).verify(&request).await.unwrap();
    assert_eq!(verdict.invalid_reason, Some(Reason::UnexpectedError));

    // The official TS facilitator's replayed settle, whatever status a proxy puts on it.
    let server = answering(
        500,
        json!({
            "success": false,
            "errorReason": "invalid_exact_evm_nonce_already_used",
            "errorMessage": "FiatTokenV2: authorization is used or canceled",
            "transaction": "",
            "network": "eip155:84532",
            "payer": "0x4242424242424242424242424242424242424242"
        }),
    )
    .await;
    let outcome = client(&server).settle(&request).await.unwrap();
    assert_eq!(outcome.error_reason, Some(Reason::NonceAlreadyUsed));
}

#[tokio::test]
async fn answers_without_a_verdict_are_unknown_whatever_the_status() {
    let request = request().await;
    let cases = [
        (
            502,
            ResponseTemplate::new(502).set_body_string("<html>bad gateway</html>"),
        ),
        (503, ResponseTemplate::new(503)),
        (
            200,
            ResponseTemplate::new(200).set_body_string("<html>gateway</html>"),
        ),
        (
            200,
            ResponseTemplate::new(200).set_body_string("{\"isValid\":"),
        ),
        (
            400,
            ResponseTemplate::new(400).set_body_json(json!({"error": "bad request"})),
        ),
        (
            401,
            ResponseTemplate::new(401).set_body_json(json!({"error": "unauthorized"})),
        ),
    ];
    for (status, template) in cases {
        let server = MockServer::start().await;
        Mock::given(method("POST"))
            .and(path("/verify"))
            .respond_with(template.clone())
            .mount(&server)
            .await;
        Mock::given(method("POST"))
            .and(path("/settle"))
            .respond_with(template)
            .mount(&server)
            .await;
        let facilitator = client(&server);
        let outcome = unknown(facilitator.verify(&request).await);
        assert!(
            matches!(outcome, UnknownOutcome::BadBody { status: s, .. } if s == status),
            "{status}: {outcome}"
        );
        let outcome = unknown(facilitator.settle(&request).await);
        assert!(
            matches!(outcome, UnknownOutcome::BadBody { status: s, .. } if s == status),
            "{status}: {outcome}"
        );
    }

    // A settle verdict is not a verify verdict.
    let server = answering(200, json!({"success": true, "transaction": "0x01"})).await;
    let outcome = unknown(client(&server).verify(&request).await);
    assert!(
        matches!(outcome, UnknownOutcome::BadBody { status: 200, .. }),
        "{outcome}"
    );
}

#[tokio::test]
async fn supported_needs_a_2xx_status() {
    let server = MockServer::start().await;
    Mock::given(method("GET"))
        .and(path("/supported"))
        .respond_with(ResponseTemplate::new(500).set_body_json(json!({"kinds": []})))
        .mount(&server)
        .await;
    let outcome = unknown(client(&server).supported().await);
    assert!(
        matches!(outcome, UnknownOutcome::UnexpectedStatus { status: 500 }),
        "{outcome}"
    );
}

#[tokio::test]
async fn oversized_bodies_are_unknown() {
    let request = request().await;
    // A verdict padded past the limit, with a Content-Length that announces it.
    let padding = "x".repeat(MAX_BODY_BYTES);
    let server = answering(
        200,
        json!({"isValid": false, "invalidReason": "invalid_payload", "invalidMessage": padding}),
    )
    .await;
    let outcome = unknown(client(&server).verify(&request).await);
    assert!(
        matches!(outcome, UnknownOutcome::BodyTooLarge { status: 200, limit } if limit == MAX_BODY_BYTES),
        "{outcome}"
    );

    // A hostile facilitator streaming a chunked body without end: the client stops at the
    // limit (well before its timeout) instead of buffering it.
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url: Url = format!("http://{}/", listener.local_addr().unwrap())
        .parse()
        .unwrap();
    let streamer = tokio::spawn(async move {
        let (mut socket, _) = listener.accept().await.unwrap();
        let mut head = [0u8; 4096];
        let _ = socket.read(&mut head).await;
        socket
            .write_all(
                b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ntransfer-encoding: chunked\r\n\r\n",
            )
            .await
            .unwrap();
        let chunk = format!("{:x}\r\n{}\r\n", 64 * 1024, " ".repeat(64 * 1024));
        let mut sent = 0usize;
        while socket.write_all(chunk.as_bytes()).await.is_ok() {
            sent += 64 * 1024;
            if sent > 64 * MAX_BODY_BYTES {
                break;
            }
        }
        sent
    });
    let timeouts = Timeouts {
        verify: Duration::from_secs(30),
        ..quick_timeouts()
    };
    let facilitator = HttpFacilitatorClient::new(url, timeouts, None).unwrap();
    let started = std::time::Instant::now();
    let outcome = unknown(facilitator.verify(&request).await);
    assert!(
        matches!(outcome, UnknownOutcome::BodyTooLarge { status: 200, .. }),
        "{outcome}"
    );
    assert!(started.elapsed() < Duration::from_secs(20));
    drop(facilitator);
    let sent = streamer.await.unwrap();
    assert!(
        sent < 64 * MAX_BODY_BYTES,
        "the client kept reading: {sent} bytes"
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
async fn dead_hosts_are_unknown() {
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
