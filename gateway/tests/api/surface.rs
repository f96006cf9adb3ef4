//! The API surface added for clients and the console, over HTTP on SQLite and PostgreSQL:
//! `GET /v1/contracts` (scopes, filters, cursor pages, 422s), API key management (admin and
//! owners, revocation at once on this instance) and worker listing metadata (input schema
//! checked at registration and enforced at proposal).

use chrono::{DateTime, Utc};
use hiregate_store::{NewContract, NewContractEvent};
use reqwest::Method;
use serde_json::{Value, json};

use crate::helpers::{ADMIN_KEY, TestApp, TestWorker, signed_terms, worker_body};

macro_rules! on_both_backends {
    ($($case:ident),* $(,)?) => {
        mod sqlite {
            $(
                #[tokio::test]
                async fn $case() {
                    super::$case(crate::helpers::spawn_app_on(
                        crate::helpers::TestDatabase::sqlite(),
                        super::CONFIG,
                    ).await).await;
                }
            )*
        }
        mod postgres {
            $(
                #[tokio::test]
                async fn $case() {
                    let Some(database) = crate::helpers::TestDatabase::postgres().await else {
                        return;
                    };
                    super::$case(crate::helpers::spawn_app_on(database, super::CONFIG).await)
                        .await;
                }
            )*
        }
    };
}

// A long key cache, so revocation is seen to act at once rather than by expiry.
const CONFIG: &str = "[http]\napi_key_cache_ttl_ms = 600000";

on_both_backends!(
    contracts_are_listed_by_scope_newest_first,
    contract_listing_refuses_bad_filters_and_cursors,
    keys_are_managed_by_admins_and_owners,
    listings_describe_their_inputs,
);

async fn error_of(response: reqwest::Response) -> (u16, Value) {
    let status = response.status().as_u16();
    let body: Value = response.json().await.unwrap();
    (status, body["error"].clone())
}

async fn register(app: &TestApp, operator_key: &str, body: &Value) -> Value {
    let response = app.register_worker(operator_key, body).await;
    assert_eq!(response.status(), 201, "{:?}", response.text().await);
    response.json().await.unwrap()
}

/// A contract stored directly (the paid hire has its own tests): what the listing reads.
async fn store_contract(
    app: &TestApp,
    seeker_id: &str,
    worker_id: &str,
    state: &str,
    created_at: DateTime<Utc>,
) -> String {
    let contract_id = format!("ctr_{}", ulid::Ulid::new());
    app.store
        .insert_contract(
            &NewContract {
                contract_id: contract_id.parse().unwrap(),
                seeker_id: seeker_id.parse().unwrap(),
                worker_id: worker_id.parse().unwrap(),
                task_type: "summarize".into(),
                terms: signed_terms(&contract_id, worker_id, 1500, &json!({})),
                parsed_terms: None,
                terms_hash: format!("sha256:{}", ulid::Ulid::new()),
                gateway_jws: "eyJ.payload.sig".into(),
                state: state.parse().unwrap(),
                payment_offer: None,
                deadline_at: None,
                created_at,
            },
            &NewContractEvent {
                at: created_at,
                actor: hiregate_store::states::Actor::Gateway,
                correlation_id: "req_test".into(),
                kind: hiregate_store::states::EventKind::ContractOffered,
                details: json!({}),
            },
        )
        .await
        .unwrap();
    contract_id
}

async fn list(app: &TestApp, key: &str, query: &str) -> Value {
    let response = app.get(&format!("/v1/contracts{query}"), Some(key)).await;
    assert_eq!(response.status(), 200, "{:?}", response.text().await);
    response.json().await.unwrap()
}

fn ids(page: &Value) -> Vec<String> {
    page["contracts"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["contract_id"].as_str().unwrap().to_owned())
        .collect()
}

async fn contracts_are_listed_by_scope_newest_first(app: TestApp) {
    let worker = TestWorker::start(&["summarize"]).await;
    let (operator_key, _) = app.create_key("operator").await;
    let (other_operator_key, _) = app.create_key("operator").await;
    let listing = register(
        &app,
        &operator_key,
        &worker_body(&worker.endpoint, &[("summarize", "1500")]),
    )
    .await;
    let other_listing = register(
        &app,
        &other_operator_key,
        &worker_body(&worker.endpoint, &[("summarize", "1500")]),
    )
    .await;
    let (worker_id, other_worker_id) = (
        listing["id"].as_str().unwrap(),
        other_listing["id"].as_str().unwrap(),
    );
    let (seeker_key, seeker) = app.create_key("seeker").await;
    let (other_seeker_key, other_seeker) = app.create_key("seeker").await;

    let base = DateTime::from_timestamp_millis(1_800_000_000_000).unwrap();
    let mut mine = Vec::new();
    for i in 0..5_i64 {
        let state = if i < 2 { "settled" } else { "offered" };
        // Two share a millisecond: the id breaks the tie.
        let at = base + chrono::Duration::seconds(i.min(3));
        mine.push((
            at,
            store_contract(&app, &seeker, worker_id, state, at).await,
        ));
    }
    let theirs = store_contract(&app, &other_seeker, other_worker_id, "offered", base).await;
    mine.sort_by(|a, b| b.cmp(a));
    let expected: Vec<String> = mine.iter().map(|(_, id)| id.clone()).collect();

    // A seeker sees its own, newest first, in pages that neither skip nor repeat.
    let first = list(&app, &seeker_key, "?limit=2").await;
    assert_eq!(ids(&first), expected[..2]);
    let cursor = first["next_cursor"].as_str().unwrap();
    let second = list(&app, &seeker_key, &format!("?limit=2&cursor={cursor}")).await;
    assert_eq!(ids(&second), expected[2..4]);
    let cursor = second["next_cursor"].as_str().unwrap();
    let third = list(&app, &seeker_key, &format!("?limit=2&cursor={cursor}")).await;
    assert_eq!(ids(&third), expected[4..]);
    assert!(third["next_cursor"].is_null());
    let summary = &first["contracts"][0];
    assert_eq!(summary["seeker_id"], seeker.as_str());
    assert_eq!(summary["worker_id"], worker_id);
    assert_eq!(summary["price"]["amount"], "1500");
    assert!(summary.get("terms").is_none(), "summaries carry no terms");

    assert_eq!(
        ids(&list(&app, &other_seeker_key, "").await),
        vec![theirs.clone()]
    );
    // An operator sees its workers' contracts; the admin all of them.
    assert_eq!(ids(&list(&app, &operator_key, "").await), expected);
    assert_eq!(
        ids(&list(&app, &other_operator_key, "").await),
        vec![theirs.clone()]
    );
    assert_eq!(ids(&list(&app, ADMIN_KEY, "").await).len(), 6);

    // Filters.
    let settled = list(&app, &seeker_key, "?state=settled").await;
    assert_eq!(ids(&settled).len(), 2);
    assert!(
        settled["contracts"]
            .as_array()
            .unwrap()
            .iter()
            .all(|c| c["state"] == "settled")
    );
    assert_eq!(
        ids(&list(&app, ADMIN_KEY, &format!("?worker_id={other_worker_id}")).await),
        vec![theirs]
    );
    // The seeker's filter never widens its scope.
    assert!(
        ids(&list(&app, &seeker_key, &format!("?worker_id={other_worker_id}")).await).is_empty()
    );
    let after = (base + chrono::Duration::seconds(1)).to_rfc3339();
    let before = (base + chrono::Duration::seconds(3)).to_rfc3339();
    let window = list(
        &app,
        &seeker_key,
        &format!(
            "?created_after={}&created_before={}",
            urlencode(&after),
            urlencode(&before)
        ),
    )
    .await;
    let in_window: Vec<String> = mine
        .iter()
        .filter(|(at, _)| {
            *at >= base + chrono::Duration::seconds(1) && *at < base + chrono::Duration::seconds(3)
        })
        .map(|(_, id)| id.clone())
        .collect();
    assert_eq!(ids(&window), in_window);

    let (status, error) = error_of(app.get("/v1/contracts", None).await).await;
    assert_eq!(
        (status, error["code"].as_str()),
        (401, Some("missing_api_key"))
    );
}

fn urlencode(raw: &str) -> String {
    raw.replace('+', "%2B").replace(':', "%3A")
}

async fn contract_listing_refuses_bad_filters_and_cursors(app: TestApp) {
    let (seeker_key, _) = app.create_key("seeker").await;
    for (query, code, field) in [
        ("?state=paid_twice", "invalid_filter", "state"),
        (
            "?worker_id=ctr_01J9ZQ4X1V8E6W0M3C5T7B2N4K",
            "invalid_filter",
            "worker_id",
        ),
        (
            "?created_after=yesterday",
            "invalid_filter",
            "created_after",
        ),
        (
            "?created_before=2026-13-01T00:00:00Z",
            "invalid_filter",
            "created_before",
        ),
        ("?limit=0", "invalid_filter", "limit"),
        ("?limit=201", "invalid_filter", "limit"),
        ("?cursor=not-a-cursor", "invalid_cursor", "cursor"),
        // Well-formed base64 of something that is not a position.
        ("?cursor=MTIzOndrXzAx", "invalid_cursor", "cursor"),
    ] {
        let (status, error) = error_of(
            app.get(&format!("/v1/contracts{query}"), Some(&seeker_key))
                .await,
        )
        .await;
        assert_eq!(status, 422, "{query}");
        assert_eq!(error["code"], code, "{query}");
        assert_eq!(error["details"]["field"], field, "{query}");
    }
    let (status, error) =
        error_of(app.get("/v1/contracts?colour=red", Some(&seeker_key)).await).await;
    assert_eq!(
        (status, error["code"].as_str()),
        (400, Some("invalid_query"))
    );
}

async fn keys_are_managed_by_admins_and_owners(app: TestApp) {
    let (seeker_key, seeker) = app.create_key("seeker").await;
    // A second key of the same account, and someone else's key.
    let second: Value = app
        .send_json(
            Method::POST,
            "/v1/admin/keys",
            Some(ADMIN_KEY),
            &json!({ "role": "seeker", "principal_id": seeker, "label": "ci" }),
        )
        .await
        .json()
        .await
        .unwrap();
    let second_key = second["api_key"].as_str().unwrap().to_owned();
    let second_id = second["key_id"].as_str().unwrap().to_owned();
    let (other_key, other) = app.create_key("operator").await;

    // Owners list their account's keys, never a secret or a hash.
    let page = app.get("/v1/keys", Some(&seeker_key)).await;
    assert_eq!(page.status(), 200);
    let text = page.text().await.unwrap();
    assert!(
        !text.contains(&seeker_key) && !text.contains(&second_key),
        "{text}"
    );
    assert!(!text.contains("hash"), "{text}");
    let page: Value = serde_json::from_str(&text).unwrap();
    let keys = page["keys"].as_array().unwrap();
    assert_eq!(keys.len(), 2);
    assert!(keys.iter().all(|k| k["principal_id"] == seeker.as_str()));
    assert!(keys.iter().all(|k| k["revoked_at"].is_null()));
    let first_id = keys
        .iter()
        .find(|k| k["key_id"] != second_id.as_str())
        .unwrap()["key_id"]
        .as_str()
        .unwrap()
        .to_owned();

    // Another owner's key is 404 for every owner route.
    let other_page: Value = app
        .get("/v1/keys", Some(&other_key))
        .await
        .json()
        .await
        .unwrap();
    let other_id = other_page["keys"][0]["key_id"].as_str().unwrap().to_owned();
    assert_eq!(other_page["keys"][0]["principal_id"], other.as_str());
    for (method, path) in [
        (Method::DELETE, format!("/v1/keys/{other_id}")),
        (Method::POST, format!("/v1/keys/{other_id}/rotate")),
    ] {
        let response = app
            .send_json(method, &path, Some(&seeker_key), &json!({}))
            .await;
        assert_eq!(error_of(response).await.0, 404, "{path}");
    }
    assert_eq!(app.get("/v1/keys", Some(&other_key)).await.status(), 200);

    // The owner rotates its second key: a new secret once, the old one refused at once even
    // though this instance had it cached for ten minutes.
    assert_eq!(app.get("/v1/keys", Some(&second_key)).await.status(), 200);
    let rotated = app
        .send_json(
            Method::POST,
            &format!("/v1/keys/{second_id}/rotate"),
            Some(&seeker_key),
            &json!({}),
        )
        .await;
    assert_eq!(rotated.status(), 200);
    let rotated: Value = rotated.json().await.unwrap();
    let new_key = rotated["api_key"].as_str().unwrap().to_owned();
    assert!(new_key.starts_with("hg_sk_"));
    assert_eq!(rotated["replaces"], second_id.as_str());
    assert_eq!(rotated["label"], "ci");
    assert_eq!(rotated["principal_id"], seeker.as_str());
    assert_eq!(
        error_of(app.get("/v1/keys", Some(&second_key)).await)
            .await
            .1["code"],
        "invalid_api_key"
    );
    assert_eq!(app.get("/v1/keys", Some(&new_key)).await.status(), 200);
    // Rotating a revoked key is 404: there is nothing live to rotate.
    let again = app
        .send_json(
            Method::POST,
            &format!("/v1/keys/{second_id}/rotate"),
            Some(&seeker_key),
            &json!({}),
        )
        .await;
    assert_eq!(again.status(), 404);

    // The owner revokes the key it is using; it stops working on the next request.
    let revoked = app
        .send_json(
            Method::DELETE,
            &format!("/v1/keys/{first_id}"),
            Some(&seeker_key),
            &json!({}),
        )
        .await;
    assert_eq!(revoked.status(), 200);
    let revoked: Value = revoked.json().await.unwrap();
    assert!(revoked["revoked_at"].is_string());
    assert_eq!(app.get("/v1/keys", Some(&seeker_key)).await.status(), 401);

    // Admins: list all (with revoked ones on request), rotate and revoke anyone's.
    let all: Value = app
        .get("/v1/admin/keys?include_revoked=true", Some(ADMIN_KEY))
        .await
        .json()
        .await
        .unwrap();
    assert_eq!(all["keys"].as_array().unwrap().len(), 4);
    let live: Value = app
        .get(
            &format!("/v1/admin/keys?principal_id={seeker}"),
            Some(ADMIN_KEY),
        )
        .await
        .json()
        .await
        .unwrap();
    assert_eq!(
        live["keys"].as_array().unwrap().len(),
        1,
        "only the rotated-in key"
    );
    let text = serde_json::to_string(&all).unwrap();
    assert!(!text.contains(&new_key) && !text.contains(&other_key));
    let paged: Value = app
        .get(
            "/v1/admin/keys?include_revoked=true&limit=3",
            Some(ADMIN_KEY),
        )
        .await
        .json()
        .await
        .unwrap();
    let next = paged["next_after"].as_str().unwrap();
    let rest: Value = app
        .get(
            &format!("/v1/admin/keys?include_revoked=true&limit=3&after={next}"),
            Some(ADMIN_KEY),
        )
        .await
        .json()
        .await
        .unwrap();
    assert_eq!(rest["keys"].as_array().unwrap().len(), 1);

    let admin_rotated: Value = app
        .send_json(
            Method::POST,
            &format!("/v1/admin/keys/{other_id}/rotate"),
            Some(ADMIN_KEY),
            &json!({}),
        )
        .await
        .json()
        .await
        .unwrap();
    let other_new = admin_rotated["api_key"].as_str().unwrap().to_owned();
    assert!(other_new.starts_with("hg_op_"));
    assert_eq!(app.get("/v1/keys", Some(&other_key)).await.status(), 401);
    let new_other_id = admin_rotated["key_id"].as_str().unwrap();
    let response = app
        .send_json(
            Method::DELETE,
            &format!("/v1/admin/keys/{new_other_id}"),
            Some(ADMIN_KEY),
            &json!({}),
        )
        .await;
    assert_eq!(response.status(), 200);
    assert_eq!(app.get("/v1/keys", Some(&other_new)).await.status(), 401);
    let response = app
        .send_json(
            Method::DELETE,
            "/v1/admin/keys/key_nonsense",
            Some(ADMIN_KEY),
            &json!({}),
        )
        .await;
    assert_eq!(error_of(response).await.0, 404);
    // Key owners cannot use the admin routes, nor the admin the owner routes.
    assert_eq!(
        app.get("/v1/admin/keys", Some(&new_key)).await.status(),
        403
    );
    assert_eq!(app.get("/v1/keys", Some(ADMIN_KEY)).await.status(), 403);
}

fn described_worker(endpoint: &str) -> Value {
    let mut body = worker_body(endpoint, &[("summarize", "1500")]);
    body["name"] = json!("Summarizer");
    body["description"] = json!("Summarizes English text.");
    body["input_schema"] = json!({
        "type": "object",
        "required": ["text"],
        "properties": {
            "text": { "type": "string", "minLength": 1 },
            "max_words": { "type": "integer", "minimum": 1 }
        }
    });
    body["examples"] = json!([{ "text": "A long article.", "max_words": 20 }]);
    body
}

async fn listings_describe_their_inputs(app: TestApp) {
    let worker = TestWorker::start(&["summarize"]).await;
    let (operator_key, _) = app.create_key("operator").await;

    // Refused at registration: a schema that is not one, an example that breaks it.
    let mut bad_schema = described_worker(&worker.endpoint);
    bad_schema["input_schema"] = json!({ "type": 12 });
    let (status, error) = error_of(app.register_worker(&operator_key, &bad_schema).await).await;
    assert_eq!(
        (status, error["code"].as_str()),
        (422, Some("invalid_body")),
        "{error}"
    );
    let mut bad_example = described_worker(&worker.endpoint);
    bad_example["examples"] = json!([{ "text": "fine" }, { "text": 7 }]);
    let (status, error) = error_of(app.register_worker(&operator_key, &bad_example).await).await;
    assert_eq!(
        (status, error["code"].as_str()),
        (422, Some("validation_failed"))
    );
    assert_eq!(error["details"]["field"], "examples/1");

    let listing = register(&app, &operator_key, &described_worker(&worker.endpoint)).await;
    let id = listing["id"].as_str().unwrap().to_owned();
    assert_eq!(listing["name"], "Summarizer");
    let page: Value = app.get("/v1/workers", None).await.json().await.unwrap();
    let public = &page["workers"][0];
    assert_eq!(public["description"], "Summarizes English text.");
    assert_eq!(public["input_schema"]["required"], json!(["text"]));
    assert_eq!(public["examples"][0]["max_words"], 20);
    let owner = app.owner_view(&operator_key, &id).await;
    assert_eq!(owner["name"], "Summarizer");
    // A listing without metadata still registers and shows none.
    let bare = register(
        &app,
        &operator_key,
        &worker_body(&worker.endpoint, &[("summarize", "1")]),
    )
    .await;
    assert!(bare.get("name").is_none() && bare.get("input_schema").is_none());

    // An update that breaks the examples is refused; one that keeps them valid applies.
    let patch = app
        .send_json(
            Method::PATCH,
            &format!("/v1/workers/{id}"),
            Some(&operator_key),
            &json!({ "input_schema": { "type": "object", "required": ["url"] } }),
        )
        .await;
    let (status, error) = error_of(patch).await;
    assert_eq!(
        (status, error["details"]["field"].as_str()),
        (422, Some("examples/0"))
    );
    let patch = app
        .send_json(
            Method::PATCH,
            &format!("/v1/workers/{id}"),
            Some(&operator_key),
            &json!({ "name": "Summarizer 2" }),
        )
        .await;
    assert_eq!(patch.status(), 200);

    // Proposals are checked against the input schema before anything is signed.
    let (seeker_key, _) = app.create_key("seeker").await;
    let proposal = app
        .send_json(
            Method::POST,
            "/v1/contracts",
            Some(&seeker_key),
            &json!({
                "worker_id": id,
                "task_type": "summarize",
                "input": { "text": "", "max_words": "ten" },
            }),
        )
        .await;
    let (status, error) = error_of(proposal).await;
    assert_eq!(
        (status, error["code"].as_str()),
        (422, Some("input_schema_violation"))
    );
    let mut paths: Vec<&str> = error["details"]["violations"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v["instance_path"].as_str().unwrap())
        .collect();
    paths.sort_unstable();
    assert_eq!(paths, vec!["/max_words", "/text"]);
    let listed: Value = app
        .get("/v1/contracts", Some(&seeker_key))
        .await
        .json()
        .await
        .unwrap();
    assert!(ids(&listed).is_empty(), "nothing was stored");
}
