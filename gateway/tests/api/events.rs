//! `GET /v1/contracts/{id}/events` (SSE) over real parts: a paid hire on anvil with a slow
//! worker-sdk worker, read by a real HTTP client that disconnects and resumes.

use std::time::Duration;

use eventsource_stream::{Event, Eventsource};
use futures::{Stream, StreamExt};
use serde_json::{Value, json};

use crate::{
    helpers::{TestDatabase, spawn_app_on},
    hire_env::{HireEnv, WorkerKind, hire_env},
};

const FAST_EVENTS: &str = r#"
[events]
heartbeat_interval_ms = 100
poll_interval_ms = 100
replay_batch = 2
"#;

type Events = std::pin::Pin<Box<dyn Stream<Item = Event> + Send>>;

/// Open the stream as `key`, resuming after `last_event_id` if given.
async fn open(env: &HireEnv, key: &str, contract_id: &str, last_event_id: Option<&str>) -> Events {
    let mut request = env
        .app
        .client
        .get(format!(
            "{}/v1/contracts/{contract_id}/events",
            env.app.address
        ))
        .bearer_auth(key);
    if let Some(id) = last_event_id {
        request = request.header("Last-Event-ID", id);
    }
    let response = request.send().await.expect("stream opens");
    assert_eq!(response.status(), 200);
    assert_eq!(
        response.headers()["content-type"].to_str().unwrap(),
        "text/event-stream"
    );
    Box::pin(
        response
            .bytes_stream()
            .eventsource()
            .map(|item| item.expect("well-formed SSE")),
    )
}

/// The next event, failing the test after 15 s.
async fn next(events: &mut Events) -> Option<Event> {
    tokio::time::timeout(Duration::from_secs(15), events.next())
        .await
        .expect("an event (or the end) within 15 s")
}

fn data(event: &Event) -> Value {
    serde_json::from_str(&event.data).expect("event data is JSON")
}

/// Read to the end (the server closes a terminal contract's stream).
async fn drain(events: &mut Events) -> Vec<Event> {
    let mut all = Vec::new();
    while let Some(event) = next(events).await {
        all.push(event);
    }
    all
}

async fn reconnect_with_last_event_id(database: TestDatabase) {
    let env = hire_env(database, WorkerKind::Faulty, 2, FAST_EVENTS).await;
    let input = json!({"text": "take your time", "mode": "slow", "delay_ms": 1500});
    let contract_id = env.contract(input.clone(), json!({})).await;

    let mut first = open(&env, &env.seeker_key, &contract_id, None).await;
    let offered = next(&mut first).await.unwrap();
    assert_eq!(offered.id, "1");
    assert_eq!(offered.event, "contract_offered");
    assert_eq!(data(&offered)["contract_id"], contract_id.as_str());

    // Pay in the background; the worker takes 1.5 s.
    let challenge = env.challenge(&contract_id).await;
    let payment = env.pay(&challenge).await;
    let execute = {
        let client = env.app.client.clone();
        let url = format!("{}/v1/contracts/{contract_id}/execute", env.app.address);
        let key = env.seeker_key.clone();
        tokio::spawn(async move {
            client
                .post(url)
                .bearer_auth(key)
                .header("PAYMENT-SIGNATURE", payment)
                .timeout(Duration::from_secs(60))
                .send()
                .await
                .unwrap()
                .status()
        })
    };

    // Read live until the job is executing, then drop the connection mid-job.
    let mut seen = vec![offered];
    loop {
        let event = next(&mut first).await.expect("stream still open mid-job");
        let executing = data(&event)["to_state"] == "executing";
        seen.push(event);
        if executing {
            break;
        }
    }
    drop(first);
    assert_eq!(
        env.state(&contract_id).await,
        "executing",
        "disconnected mid-job"
    );
    assert_eq!(execute.await.unwrap(), 200);
    assert_eq!(env.state(&contract_id).await, "settled");

    // Resume: the rest of the log, then the server closes (settled is terminal).
    let last = seen.last().unwrap().id.clone();
    let mut resumed = open(&env, &env.seeker_key, &contract_id, Some(&last)).await;
    seen.extend(drain(&mut resumed).await);

    let stored = env
        .app
        .store
        .list_contract_events(&contract_id, 0, 1000)
        .await
        .unwrap();
    let ids: Vec<String> = seen.iter().map(|e| e.id.clone()).collect();
    let expected: Vec<String> = (1..=stored.len()).map(|n| n.to_string()).collect();
    assert_eq!(ids, expected, "no gap, no duplicate");
    for (event, stored) in seen.iter().zip(&stored) {
        assert_eq!(event.event, stored.kind.as_str());
        assert_eq!(data(event)["seq"], stored.seq);
    }
    assert_eq!(data(seen.last().unwrap())["to_state"], "settled");
}

#[tokio::test]
async fn a_terminal_contract_replays_and_closes_for_both_parties() {
    let env = hire_env(TestDatabase::sqlite(), WorkerKind::Echo, 2, FAST_EVENTS).await;
    let contract_id = env.contract(HireEnv::input("done"), json!({})).await;
    let challenge = env.challenge(&contract_id).await;
    let payment = env.pay(&challenge).await;
    assert_eq!(
        env.execute(&contract_id, Some(&payment), None).await.status,
        200
    );
    let kinds = env.event_kinds(&contract_id).await;

    // replay_batch = 2, so the replay takes several reads.
    let mut seeker = open(&env, &env.seeker_key, &contract_id, None).await;
    let all = drain(&mut seeker).await;
    assert_eq!(
        all.iter().map(|e| e.event.clone()).collect::<Vec<_>>(),
        kinds
    );

    let mut operator = open(&env, &env.operator_key, &contract_id, None).await;
    assert_eq!(drain(&mut operator).await.len(), kinds.len());

    // ?after= starts later.
    let response = env
        .app
        .get(
            &format!("/v1/contracts/{contract_id}/events?after=2"),
            Some(&env.seeker_key),
        )
        .await;
    let mut later: Events = Box::pin(
        response
            .bytes_stream()
            .eventsource()
            .map(|item| item.expect("well-formed SSE")),
    );
    let rest = drain(&mut later).await;
    assert_eq!(rest.first().unwrap().id, "3");
    assert_eq!(rest.len(), kinds.len() - 2);
}

#[tokio::test]
async fn strangers_and_bad_cursors_are_refused() {
    let env = hire_env(TestDatabase::sqlite(), WorkerKind::Echo, 2, FAST_EVENTS).await;
    let contract_id = env.contract(HireEnv::input("mine"), json!({})).await;
    let path = format!("/v1/contracts/{contract_id}/events");
    let (stranger, _) = env.app.create_key("seeker").await;
    assert_eq!(env.app.get(&path, Some(&stranger)).await.status(), 404);
    assert_eq!(env.app.get(&path, None).await.status(), 401);
    let bad = env
        .app
        .client
        .get(format!("{}{path}", env.app.address))
        .bearer_auth(&env.seeker_key)
        .header("Last-Event-ID", "minus-one")
        .send()
        .await
        .unwrap();
    assert_eq!(bad.status(), 400);
    let bad = env
        .app
        .get(&format!("{path}?after=-3"), Some(&env.seeker_key))
        .await;
    assert_eq!(bad.status(), 400);
}

#[tokio::test]
async fn an_idle_stream_sends_heartbeats() {
    let env = hire_env(TestDatabase::sqlite(), WorkerKind::Echo, 2, FAST_EVENTS).await;
    let contract_id = env.contract(HireEnv::input("idle"), json!({})).await;
    let response = env
        .app
        .get(
            &format!("/v1/contracts/{contract_id}/events"),
            Some(&env.seeker_key),
        )
        .await;
    let mut bytes = response.bytes_stream();
    let mut text = String::new();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(5);
    while text.matches("\n: heartbeat\n").count() < 2 {
        let chunk = tokio::time::timeout_at(deadline, bytes.next())
            .await
            .expect("heartbeats within 5 s")
            .expect("stream open")
            .unwrap();
        text.push_str(&String::from_utf8_lossy(&chunk));
    }
    // The replayed event came first; the heartbeats are comment lines after it.
    assert!(text.starts_with("id: 1\n"), "{text}");
}

#[tokio::test]
async fn events_appended_by_another_instance_arrive() {
    let database = TestDatabase::sqlite();
    let url = database.url();
    let env = hire_env(database, WorkerKind::Echo, 2, FAST_EVENTS).await;
    let contract_id = env.contract(HireEnv::input("shared"), json!({})).await;
    // A second gateway on the same database: its store has its own in-process bus, so only
    // the database poll can bring it events the first instance writes.
    let other = spawn_app_on(
        TestDatabase::Shared(url),
        &crate::hire_env::chain_settings(&env.devnet, FAST_EVENTS),
    )
    .await;
    let response = other
        .client
        .get(format!(
            "{}/v1/contracts/{contract_id}/events",
            other.address
        ))
        .bearer_auth(&env.seeker_key)
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 200);
    let mut events: Events = Box::pin(
        response
            .bytes_stream()
            .eventsource()
            .map(|item| item.expect("well-formed SSE")),
    );
    assert_eq!(next(&mut events).await.unwrap().id, "1");
    let challenge = env.challenge(&contract_id).await;
    let payment = env.pay(&challenge).await;
    assert_eq!(
        env.execute(&contract_id, Some(&payment), None).await.status,
        200
    );
    let rest = drain(&mut events).await;
    let kinds = env.event_kinds(&contract_id).await;
    assert_eq!(rest.len(), kinds.len() - 1);
    assert_eq!(rest.last().unwrap().event, *kinds.last().unwrap());
}

#[tokio::test]
async fn a_client_that_reconnects_with_last_event_id_gets_every_event_once() {
    reconnect_with_last_event_id(TestDatabase::sqlite()).await;
}

#[tokio::test]
async fn a_client_that_reconnects_with_last_event_id_gets_every_event_once_on_postgres() {
    let Some(database) = TestDatabase::postgres().await else {
        return;
    };
    reconnect_with_last_event_id(database).await;
}
