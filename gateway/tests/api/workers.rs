//! Worker registry over HTTP with real in-test workers: registration probes, discovery,
//! updates, retirement, and the periodic health checks.

use std::time::Duration;

use reqwest::{Method, header};
use serde_json::{Value, json};

use crate::helpers::{
    TestApp, TestWorker, closed_port, eventually, spawn_app, spawn_app_with, spawn_postgres_app,
    worker_body,
};

async fn error_code(response: reqwest::Response) -> (u16, Value) {
    let status = response.status().as_u16();
    let body: Value = response.json().await.unwrap();
    (status, body["error"].clone())
}

async fn register(app: &TestApp, key: &str, endpoint: &str, tasks: &[(&str, &str)]) -> Value {
    let response = app
        .register_worker(key, &worker_body(endpoint, tasks))
        .await;
    assert_eq!(response.status(), 201, "{:?}", response.text().await);
    response.json().await.unwrap()
}

async fn registration_and_discovery(app: &TestApp) {
    let worker = TestWorker::start(&["summarize", "translate"]).await;
    let (key, principal) = app.create_key("operator").await;
    let response = app
        .register_worker(
            &key,
            &worker_body(&worker.endpoint, &[("summarize", "1500")]),
        )
        .await;
    assert_eq!(response.status(), 201);
    let location = response.headers()[header::LOCATION]
        .to_str()
        .unwrap()
        .to_owned();
    let listing: Value = response.json().await.unwrap();
    let id = listing["id"].as_str().unwrap().to_owned();
    assert_eq!(location, format!("/v1/workers/{id}"));
    assert!(id.starts_with("wk_"));
    assert_eq!(listing["operator_id"], principal);
    assert_eq!(listing["health"], "healthy");
    assert_eq!(listing["tasks"]["summarize"]["price"], "1500");
    let secret = listing["callback_secret"].as_str().unwrap();
    assert!(secret.starts_with("whsec_"), "{secret}");
    assert!(worker.health_calls() >= 1, "the gateway probed /health");

    // Discovery shows it, without the endpoint or the secret.
    let page: Value = app.get("/v1/workers", None).await.json().await.unwrap();
    let workers = page["workers"].as_array().unwrap();
    assert_eq!(workers.len(), 1);
    assert_eq!(workers[0]["id"], id.as_str());
    assert!(workers[0].get("endpoint").is_none());
    assert!(workers[0].get("callback_secret").is_none());

    // The owner's view never shows the secret again.
    let view = app.owner_view(&key, &id).await;
    assert_eq!(view["endpoint"], format!("{}/", worker.endpoint));
    assert!(view.get("callback_secret").is_none());
    let stored = app
        .store
        .worker_callback_secret(&id.parse().unwrap())
        .await
        .unwrap()
        .unwrap();
    assert_eq!(stored.reveal(), secret);
}

#[tokio::test]
async fn a_healthy_worker_is_listed_on_sqlite() {
    registration_and_discovery(&spawn_app().await).await;
}

#[tokio::test]
async fn a_healthy_worker_is_listed_on_postgres() {
    let Some(app) = spawn_postgres_app().await else {
        return;
    };
    registration_and_discovery(&app).await;
}

#[tokio::test]
async fn endpoints_that_fail_their_probe_are_refused() {
    let app = spawn_app().await;
    let (key, _) = app.create_key("operator").await;

    let sick = TestWorker::start(&["summarize"]).await;
    sick.set_healthy(false);
    let response = app
        .register_worker(&key, &worker_body(&sick.endpoint, &[("summarize", "1")]))
        .await;
    let (status, error) = error_code(response).await;
    assert_eq!(status, 422);
    assert_eq!(error["code"], "worker_probe_failed");
    assert_eq!(error["details"]["check"], "health");
    assert_eq!(error["details"]["status"], 503);

    let narrow = TestWorker::start(&["summarize"]).await;
    let response = app
        .register_worker(
            &key,
            &worker_body(&narrow.endpoint, &[("summarize", "1"), ("translate", "2")]),
        )
        .await;
    let (status, error) = error_code(response).await;
    assert_eq!(status, 422);
    assert_eq!(error["code"], "worker_capabilities_mismatch");
    assert_eq!(error["details"]["missing_task_types"], json!(["translate"]));

    let nobody = format!("http://127.0.0.1:{}", closed_port().await);
    let response = app
        .register_worker(&key, &worker_body(&nobody, &[("summarize", "1")]))
        .await;
    let (status, error) = error_code(response).await;
    assert_eq!(status, 422);
    assert_eq!(error["code"], "worker_probe_failed");

    // A Superwire listing is probed with its workflow source (POST /validate); without one
    // there is nothing to probe.
    let mut superwire = worker_body(&narrow.endpoint, &[("summarize", "1")]);
    superwire["protocol"] = json!("superwire");
    let (status, error) = error_code(app.register_worker(&key, &superwire).await).await;
    assert_eq!(
        (status, error["code"].as_str()),
        (422, Some("worker_probe_failed"))
    );
    assert_eq!(error["details"]["check"], "validate");

    // Nothing was listed.
    let page: Value = app.get("/v1/workers", None).await.json().await.unwrap();
    assert_eq!(page["workers"], json!([]));
}

#[tokio::test]
async fn malformed_listings_are_refused_before_any_probe() {
    let app = spawn_app().await;
    let (key, _) = app.create_key("operator").await;
    let worker = TestWorker::start(&["summarize"]).await;
    let good = worker_body(&worker.endpoint, &[("summarize", "1")]);
    let mut cases = Vec::new();
    for (field, value) in [
        ("pay_to", json!("0x123")),
        ("network", json!("base")),
        ("max_parallel", json!(0)),
        ("protocol", json!("grpc")),
        ("endpoint", json!("ftp://example.com")),
        ("tasks", json!({})),
    ] {
        let mut body = good.clone();
        body[field] = value;
        cases.push(body);
    }
    let mut bad_price = good.clone();
    bad_price["tasks"]["summarize"]["price"] = json!("1.5");
    cases.push(bad_price);
    let mut bad_schema = good.clone();
    bad_schema["tasks"]["summarize"]["output_schema"] = json!({ "type": 7 });
    cases.push(bad_schema);
    for body in cases {
        let (status, error) = error_code(app.register_worker(&key, &body).await).await;
        assert_eq!(
            (status, error["code"].as_str()),
            (422, Some("invalid_body")),
            "{body}"
        );
    }
    assert_eq!(worker.health_calls(), 0, "no probe for invalid input");
}

#[tokio::test]
async fn discovery_filters_by_task_type_price_and_health() {
    let app = spawn_app().await;
    let (key, _) = app.create_key("operator").await;
    let a = TestWorker::start(&["summarize"]).await;
    let b = TestWorker::start(&["summarize", "translate"]).await;
    let c = TestWorker::start(&["translate"]).await;
    let wa = register(&app, &key, &a.endpoint, &[("summarize", "9")]).await;
    let wb = register(
        &app,
        &key,
        &b.endpoint,
        &[("summarize", "100"), ("translate", "5")],
    )
    .await;
    let wc = register(
        &app,
        &key,
        &c.endpoint,
        &[("translate", "1000000000000000000000")],
    )
    .await;
    let ids = |page: &Value| -> Vec<String> {
        page["workers"]
            .as_array()
            .unwrap()
            .iter()
            .map(|w| w["id"].as_str().unwrap().to_owned())
            .collect()
    };
    let id = |w: &Value| w["id"].as_str().unwrap().to_owned();
    let query = |q: &'static str| {
        let app = &app;
        async move {
            let response = app.get(&format!("/v1/workers?{q}"), None).await;
            assert_eq!(response.status(), 200, "{q}");
            response.json::<Value>().await.unwrap()
        }
    };

    assert_eq!(
        ids(&query("task_type=summarize").await),
        vec![id(&wa), id(&wb)]
    );
    assert_eq!(
        ids(&query("task_type=translate").await),
        vec![id(&wb), id(&wc)]
    );
    // Numeric, not lexicographic: 9 <= 10 < 100.
    assert_eq!(
        ids(&query("task_type=summarize&max_price=10").await),
        vec![id(&wa)]
    );
    assert_eq!(ids(&query("max_price=5").await), vec![id(&wb)]);
    assert_eq!(
        ids(&query("task_type=translate&max_price=999999999999999999999").await),
        vec![id(&wb)]
    );
    assert_eq!(ids(&query("healthy=false").await), Vec::<String>::new());
    assert_eq!(ids(&query("healthy=true").await).len(), 3);

    // Pagination.
    let first = query("limit=2").await;
    assert_eq!(ids(&first), vec![id(&wa), id(&wb)]);
    assert_eq!(first["next_after"], id(&wb).as_str());
    let rest = app
        .get(&format!("/v1/workers?limit=2&after={}", id(&wb)), None)
        .await
        .json::<Value>()
        .await
        .unwrap();
    assert_eq!(ids(&rest), vec![id(&wc)]);
    assert!(rest["next_after"].is_null());

    for bad in [
        "max_price=-1",
        "task_type=",
        "limit=0",
        "limit=5000",
        "healthy=maybe",
        "bogus=1",
    ] {
        let (status, error) = error_code(app.get(&format!("/v1/workers?{bad}"), None).await).await;
        assert_eq!(
            (status, error["code"].as_str()),
            (400, Some("invalid_query")),
            "{bad}"
        );
    }
}

#[tokio::test]
async fn health_checks_debounce_and_never_delete() {
    let app = spawn_app_with("[health]\ninterval_ms = 100\nmiss_threshold = 3").await;
    let (key, _) = app.create_key("operator").await;
    let worker = TestWorker::start(&["summarize"]).await;
    let listing = register(&app, &key, &worker.endpoint, &[("summarize", "1")]).await;
    let id = listing["id"].as_str().unwrap().to_owned();

    let (app_ref, key_ref, id_ref) = (&app, &key, &id);
    worker.set_healthy(false);
    // Below the threshold it stays healthy; at the threshold it turns unhealthy.
    let view = eventually(
        Duration::from_secs(15),
        "worker marked unhealthy",
        || async move {
            let view = app_ref.owner_view(key_ref, id_ref).await;
            let misses = view["consecutive_misses"].as_u64().unwrap();
            if misses < 3 {
                assert_eq!(
                    view["health"], "healthy",
                    "debounced below threshold: {view}"
                );
                None
            } else {
                Some(view)
            }
        },
    )
    .await;
    assert_eq!(view["health"], "unhealthy", "{view}");
    assert!(
        view["last_probe_error"]
            .as_str()
            .unwrap()
            .contains("health"),
        "{view}"
    );

    // Unhealthy workers are out of healthy discovery but still listed.
    let healthy: Value = app
        .get("/v1/workers?healthy=true", None)
        .await
        .json()
        .await
        .unwrap();
    assert_eq!(healthy["workers"], json!([]));
    let all: Value = app.get("/v1/workers", None).await.json().await.unwrap();
    assert_eq!(all["workers"].as_array().unwrap().len(), 1);

    // One success heals it.
    worker.set_healthy(true);
    let view = eventually(
        Duration::from_secs(15),
        "worker healthy again",
        || async move {
            let view = app_ref.owner_view(key_ref, id_ref).await;
            (view["health"] == "healthy").then_some(view)
        },
    )
    .await;
    assert_eq!(view["consecutive_misses"], 0);
    assert!(view["last_probe_error"].is_null());
    let metrics = app.get("/metrics", None).await.text().await.unwrap();
    assert!(
        metrics.contains("hiregate_workers_marked_unhealthy_total 1"),
        "{metrics}"
    );
    assert!(
        metrics.contains("hiregate_workers_marked_healthy_total 1"),
        "{metrics}"
    );
}

#[tokio::test]
async fn retiring_hides_from_discovery_and_freezes_the_listing() {
    let app = spawn_app().await;
    let (key, _) = app.create_key("operator").await;
    let worker = TestWorker::start(&["summarize"]).await;
    let listing = register(&app, &key, &worker.endpoint, &[("summarize", "1")]).await;
    let id = listing["id"].as_str().unwrap();
    let path = format!("/v1/workers/{id}");

    let (app_ref, key_ref, path_ref) = (&app, &key, &path);
    let delete = || async move {
        app_ref
            .client
            .delete(format!("{}{path_ref}", app_ref.address))
            .bearer_auth(key_ref)
            .send()
            .await
            .unwrap()
    };
    let first = delete().await;
    assert_eq!(first.status(), 200);
    let retired: Value = first.json().await.unwrap();
    assert!(retired["retired_at"].is_string());
    // Idempotent: the first retirement time stays.
    let second: Value = delete().await.json().await.unwrap();
    assert_eq!(second["retired_at"], retired["retired_at"]);

    let page: Value = app.get("/v1/workers", None).await.json().await.unwrap();
    assert_eq!(page["workers"], json!([]));
    // Never hard-deleted.
    let view = app.owner_view(&key, id).await;
    assert_eq!(view["retired_at"], retired["retired_at"]);
    let patch = app
        .send_json(
            Method::PATCH,
            &path,
            Some(&key),
            &json!({ "max_parallel": 5 }),
        )
        .await;
    let (status, error) = error_code(patch).await;
    assert_eq!(
        (status, error["code"].as_str()),
        (409, Some("worker_retired"))
    );
}

#[tokio::test]
async fn updates_reprobe_a_changed_catalog() {
    let app = spawn_app().await;
    let (key, _) = app.create_key("operator").await;
    let worker = TestWorker::start(&["summarize"]).await;
    let listing = register(&app, &key, &worker.endpoint, &[("summarize", "1")]).await;
    let path = format!("/v1/workers/{}", listing["id"].as_str().unwrap());

    let response = app
        .send_json(
            Method::PATCH,
            &path,
            Some(&key),
            &json!({ "max_parallel": 7 }),
        )
        .await;
    assert_eq!(response.status(), 200);
    let updated: Value = response.json().await.unwrap();
    assert_eq!(updated["max_parallel"], 7);

    let new_tasks = json!({ "tasks": { "translate": { "price": "3", "output_schema": { "type": "object" } } } });
    let response = app
        .send_json(Method::PATCH, &path, Some(&key), &new_tasks)
        .await;
    let (status, error) = error_code(response).await;
    assert_eq!(
        (status, error["code"].as_str()),
        (422, Some("worker_capabilities_mismatch"))
    );
    let view = app.owner_view(&key, listing["id"].as_str().unwrap()).await;
    assert!(
        view["tasks"].get("translate").is_none(),
        "unchanged after a refused update"
    );

    let response = app
        .send_json(
            Method::PATCH,
            &path,
            Some(&key),
            &json!({ "protocol": "wattswarm" }),
        )
        .await;
    let (status, error) = error_code(response).await;
    assert_eq!(
        (status, error["code"].as_str()),
        (422, Some("invalid_body"))
    );
}
