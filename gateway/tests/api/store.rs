//! Store suite, written once and run on SQLite (always) and PostgreSQL (when reachable; required
//! under `CI=true`). Uniqueness, compare-and-set and leases are exercised with real concurrent
//! connections.

use std::{collections::BTreeMap, collections::BTreeSet, time::Duration};

use chrono::{DateTime, Utc};
use hiregate_contracts::id::{
    ApiKeyId, AttemptId, ContractId, DeliverableId, DisputeId, JobId, PaymentId, PrincipalId,
    VerificationId, WorkerId,
};
use hiregate_contracts::state::{ContractState, DisputeDecision, Party};
use hiregate_engine::settings::Settings;
use hiregate_store::{
    ContractQuery, Enqueued, NewApiKey, NewContract, NewContractEvent, NewJob, NewPayment,
    ProbeResult, Store, StoreError, Transition, WorkerQuery,
    keys::{ApiKeyHash, CallbackSecret, Role},
    listing::model::{HealthState, OutputSchema, TaskCatalog, TaskOffer, WorkerListing},
    settings::DatabaseSettings,
    states::{Actor, AttemptState, DecidedVia, DisputeState, EventKind, PaymentState},
};
use serde_json::json;

use crate::helpers::{TestDatabase, signed_terms};

/// A migrated store on `database` (kept alive by the caller).
async fn open(database: &TestDatabase) -> Store {
    open_with(database, 8).await
}

/// [`open`] with a pool of `max_connections`.
async fn open_with(database: &TestDatabase, max_connections: u32) -> Store {
    let settings: DatabaseSettings = Settings::from_defaults_and(&format!(
        "[database]\nurl = \"{}\"\nmax_connections = {max_connections}",
        database.url()
    ))
    .unwrap()
    .database;
    let store = Store::connect(&settings).await.unwrap();
    store.migrate().await.unwrap();
    // Migrating twice is a no-op.
    store.migrate().await.unwrap();
    store
}

macro_rules! on_both_backends {
    ($($case:ident),* $(,)?) => {
        mod sqlite {
            $(
                #[tokio::test]
                async fn $case() {
                    let database = crate::helpers::TestDatabase::sqlite();
                    super::$case(super::open(&database).await).await;
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
                    super::$case(super::open(&database).await).await;
                }
            )*
        }
    };
}

/// Cases that open their own store on the test database.
macro_rules! on_both_databases {
    ($($case:ident),* $(,)?) => {
        mod sqlite_database {
            $(
                #[tokio::test]
                async fn $case() {
                    super::$case(&crate::helpers::TestDatabase::sqlite()).await;
                }
            )*
        }
        mod postgres_database {
            $(
                #[tokio::test]
                async fn $case() {
                    let Some(database) = crate::helpers::TestDatabase::postgres().await else {
                        return;
                    };
                    super::$case(&database).await;
                }
            )*
        }
    };
}

on_both_databases!(
    a_write_dropped_half_way_commits_all_or_nothing,
    siwx_nonces_are_claimed_once_across_instances,
    a_state_of_another_spelling_is_a_corrupt_row,
    an_event_kind_of_another_spelling_is_a_corrupt_row,
);

on_both_backends!(
    api_keys_are_found_by_hash_and_unique,
    workers_round_trip_and_filter,
    worker_updates_are_optimistic,
    probes_debounce_health,
    due_probes_are_claimed_once,
    contract_transitions_are_compare_and_set,
    contract_events_are_gap_free_under_concurrency,
    payment_uniqueness_lives_in_the_database,
    jobs_are_leased_exactly_once,
    disputes_are_one_per_contract_and_decided_once,
    a_chain_of_steps_and_its_writes_commit_together_or_not_at_all,
    a_worker_never_runs_more_than_its_slots_however_many_start_at_once,
    edge_characters_round_trip_through_every_json_column,
    diagnostic_texts_with_nul_are_stored,
    contracts_are_listed_newest_first_in_pages,
    api_keys_are_listed_revoked_and_rotated,
    listing_metadata_round_trips,
    the_bus_tells_which_events_may_queue_a_webhook,
);

/// Millisecond precision, as stored.
fn now() -> DateTime<Utc> {
    DateTime::from_timestamp_millis(Utc::now().timestamp_millis()).unwrap()
}

async fn api_keys_are_found_by_hash_and_unique(store: Store) {
    let principal = PrincipalId::generate_seeker();
    let key = NewApiKey {
        id: ApiKeyId::generate(),
        hash: ApiKeyHash::of("hg_sk_example"),
        display_prefix: "hg_sk_exam".into(),
        role: Role::Seeker,
        principal_id: principal.clone(),
        label: Some("laptop".into()),
        created_at: now(),
    };
    store.insert_api_key(&key).await.unwrap();
    let found = store.find_api_key(&key.hash).await.unwrap().unwrap();
    assert_eq!(found.id, key.id);
    assert_eq!(found.role, Role::Seeker);
    assert_eq!(found.principal_id, principal);
    assert_eq!(found.created_at, key.created_at);
    assert!(
        store
            .find_api_key(&ApiKeyHash::of("other"))
            .await
            .unwrap()
            .is_none()
    );

    let duplicate = NewApiKey {
        id: ApiKeyId::generate(),
        ..key.clone()
    };
    assert!(matches!(
        store.insert_api_key(&duplicate).await,
        Err(StoreError::Duplicate { entity: "api_key" })
    ));

    assert!(
        store
            .revoke_api_key(&key.id, &principal, now())
            .await
            .unwrap()
    );
    assert!(store.find_api_key(&key.hash).await.unwrap().is_none());
    assert!(
        !store
            .revoke_api_key(&key.id, &principal, now())
            .await
            .unwrap()
    );
}

fn listing(operator: &PrincipalId, tasks: &[(&str, &str)]) -> WorkerListing {
    let offers: BTreeMap<_, _> = tasks
        .iter()
        .map(|(task, price)| {
            (
                task.parse().unwrap(),
                TaskOffer {
                    price: price.parse().unwrap(),
                    output_schema: OutputSchema::parse(json!({ "type": "object" })).unwrap(),
                    metering: None,
                },
            )
        })
        .collect();
    let at = now();
    WorkerListing {
        metadata: Default::default(),
        probe_diagnostics: None,
        id: WorkerId::generate(),
        operator_id: operator.clone(),
        endpoint: "https://worker.example/agent".parse().unwrap(),
        protocol: hiregate_store::listing::model::Protocol::Hire,
        pay_to: "0x70997970C51812dc3A010C7d01b50e0d17dc79C8"
            .parse()
            .unwrap(),
        network: "eip155:84532".parse().unwrap(),
        asset: "0x036CbD53842c5426634e7929541eC2318f3dCF7e"
            .parse()
            .unwrap(),
        tasks: TaskCatalog::new(offers).unwrap(),
        max_parallel: 4.try_into().unwrap(),
        protocol_options: Default::default(),
        // Both schemes and a fee, so every listing these tests store round-trips them.
        payment_schemes: hiregate_store::listing::model::PaymentSchemes::from_stored(
            "auth-capture,exact",
        )
        .unwrap(),
        fee_policy: Some(hiregate_store::listing::model::FeePolicy { fee_bps: 250 }),
        payment_flow: Default::default(),
        health: HealthState::Healthy,
        consecutive_misses: 0,
        last_probe_at: Some(at),
        last_probe_error: None,
        created_at: at,
        updated_at: at,
        retired_at: None,
    }
}

async fn insert(store: &Store, listing: &WorkerListing) {
    store
        .insert_worker(
            listing,
            &CallbackSecret::generate(),
            now() + chrono::Duration::hours(1),
        )
        .await
        .unwrap();
}

fn ids(listings: &[WorkerListing]) -> Vec<WorkerId> {
    listings.iter().map(|l| l.id.clone()).collect()
}

async fn workers_round_trip_and_filter(store: Store) {
    let operator = PrincipalId::generate_operator();
    let cheap = listing(&operator, &[("summarize", "9")]);
    let both = listing(&operator, &[("summarize", "100"), ("translate", "5")]);
    let whale = listing(
        &PrincipalId::generate_operator(),
        &[(
            "translate",
            "115792089237316195423570985008687907853269984665640564039457584007913129639935",
        )],
    );
    for l in [&cheap, &both, &whale] {
        insert(&store, l).await;
    }
    assert_eq!(store.get_worker(&cheap.id).await.unwrap().unwrap(), cheap);
    assert_eq!(
        store.get_worker(&both.id).await.unwrap().unwrap(),
        both,
        "a listing of several tasks reads back with each"
    );
    assert_eq!(
        store.get_worker(&whale.id).await.unwrap().unwrap(),
        whale,
        "uint256 max survives"
    );
    assert!(
        store
            .get_worker(&WorkerId::generate())
            .await
            .unwrap()
            .is_none()
    );

    let query = |edit: &dyn Fn(&mut WorkerQuery)| {
        let mut q = WorkerQuery {
            limit: 50,
            ..WorkerQuery::default()
        };
        edit(&mut q);
        q
    };
    let all = store.list_workers(&query(&|_| {})).await.unwrap();
    assert_eq!(
        ids(&all),
        vec![cheap.id.clone(), both.id.clone(), whale.id.clone()]
    );
    let summarize = store
        .list_workers(&query(&|q| {
            q.task_type = Some("summarize".parse().unwrap())
        }))
        .await
        .unwrap();
    assert_eq!(ids(&summarize), vec![cheap.id.clone(), both.id.clone()]);
    let under_ten = store
        .list_workers(&query(&|q| {
            q.task_type = Some("summarize".parse().unwrap());
            q.max_price = Some("10".parse().unwrap());
        }))
        .await
        .unwrap();
    assert_eq!(ids(&under_ten), vec![cheap.id.clone()]);
    let any_under_six = store
        .list_workers(&query(&|q| q.max_price = Some("6".parse().unwrap())))
        .await
        .unwrap();
    assert_eq!(ids(&any_under_six), vec![both.id.clone()]);
    let mine = store
        .list_workers(&query(&|q| q.operator_id = Some(operator.clone())))
        .await
        .unwrap();
    assert_eq!(ids(&mine), vec![cheap.id.clone(), both.id.clone()]);
    let page = store
        .list_workers(&query(&|q| {
            q.after = Some(cheap.id.clone());
            q.limit = 1;
        }))
        .await
        .unwrap();
    assert_eq!(ids(&page), vec![both.id.clone()]);

    // Retired: out of discovery, still readable, retirement time kept on repeat.
    let retired = store
        .retire_worker(&cheap.id, &operator, now())
        .await
        .unwrap()
        .unwrap();
    assert!(retired.retired_at.is_some());
    let again = store
        .retire_worker(&cheap.id, &operator, now() + chrono::Duration::seconds(5))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(again.retired_at, retired.retired_at);
    assert!(
        store
            .retire_worker(&both.id, &PrincipalId::generate_operator(), now())
            .await
            .unwrap()
            .is_none(),
        "only the owner retires"
    );
    let live = store.list_workers(&query(&|_| {})).await.unwrap();
    assert_eq!(ids(&live), vec![both.id.clone(), whale.id.clone()]);
    let with_retired = store
        .list_workers(&query(&|q| q.include_retired = true))
        .await
        .unwrap();
    assert_eq!(with_retired.len(), 3);
}

async fn worker_updates_are_optimistic(store: Store) {
    let operator = PrincipalId::generate_operator();
    let original = listing(&operator, &[("summarize", "9")]);
    insert(&store, &original).await;

    let mut first = original.clone();
    first.max_parallel = 9.try_into().unwrap();
    first.tasks = listing(&operator, &[("translate", "3")]).tasks;
    first.updated_at = original.updated_at + chrono::Duration::milliseconds(1);
    assert!(
        store
            .update_worker(&first, original.updated_at)
            .await
            .unwrap()
    );
    assert_eq!(
        store.get_worker(&original.id).await.unwrap().unwrap(),
        first
    );

    // A writer that read the original version loses.
    let mut stale = original.clone();
    stale.updated_at = original.updated_at + chrono::Duration::milliseconds(2);
    assert!(
        !store
            .update_worker(&stale, original.updated_at)
            .await
            .unwrap()
    );
    assert_eq!(
        store.get_worker(&original.id).await.unwrap().unwrap(),
        first
    );
}

async fn probes_debounce_health(store: Store) {
    let operator = PrincipalId::generate_operator();
    let worker = listing(&operator, &[("summarize", "1")]);
    insert(&store, &worker).await;
    let miss = ProbeResult::Failed {
        reason: "health check failed".into(),
    };
    let expected = [
        (HealthState::Healthy, 1),
        (HealthState::Healthy, 2),
        (HealthState::Unhealthy, 3),
        (HealthState::Unhealthy, 4),
    ];
    for want in expected {
        let got = store
            .record_probe(&worker.id, &miss, 3, now())
            .await
            .unwrap();
        assert_eq!(got, Some(want));
    }
    let stored = store.get_worker(&worker.id).await.unwrap().unwrap();
    assert_eq!(
        stored.last_probe_error.as_deref(),
        Some("health check failed")
    );
    let healed = store
        .record_probe(&worker.id, &ProbeResult::Passed, 3, now())
        .await
        .unwrap();
    assert_eq!(healed, Some((HealthState::Healthy, 0)));
    assert!(
        store
            .get_worker(&worker.id)
            .await
            .unwrap()
            .unwrap()
            .last_probe_error
            .is_none()
    );

    store
        .retire_worker(&worker.id, &operator, now())
        .await
        .unwrap();
    assert_eq!(
        store
            .record_probe(&worker.id, &miss, 3, now())
            .await
            .unwrap(),
        None
    );
}

async fn due_probes_are_claimed_once(store: Store) {
    let operator = PrincipalId::generate_operator();
    let mut expected = BTreeSet::new();
    for _ in 0..12 {
        let worker = listing(&operator, &[("summarize", "1")]);
        // Due right away.
        store
            .insert_worker(&worker, &CallbackSecret::generate(), now())
            .await
            .unwrap();
        expected.insert(worker.id);
    }
    let later = now() + chrono::Duration::milliseconds(10);
    let next = later + chrono::Duration::hours(1);
    // Four concurrent claimers (as four gateway instances would be) share the due workers.
    let claims = futures::future::join_all((0..4).map(|_| {
        let store = store.clone();
        async move {
            let mut mine = Vec::new();
            loop {
                let batch = store
                    .claim_workers_due_for_probe(later, next, 2)
                    .await
                    .unwrap();
                if batch.is_empty() {
                    break mine;
                }
                mine.extend(batch.into_iter().map(|l| l.id));
            }
        }
    }))
    .await;
    let claimed: Vec<WorkerId> = claims.into_iter().flatten().collect();
    assert_eq!(
        claimed.len(),
        expected.len(),
        "each due worker claimed exactly once"
    );
    assert_eq!(claimed.into_iter().collect::<BTreeSet<_>>(), expected);
    assert!(
        store
            .claim_workers_due_for_probe(later, next, 50)
            .await
            .unwrap()
            .is_empty()
    );
    // Due again after the interval.
    let after_interval = next + chrono::Duration::milliseconds(1);
    let again = store
        .claim_workers_due_for_probe(after_interval, after_interval, 50)
        .await
        .unwrap();
    assert_eq!(again.len(), expected.len());
}

/// A new `offered` contract of `worker_id` for `input`, its offer open for five minutes.
fn offered_contract(worker_id: &str, input: &serde_json::Value) -> NewContract {
    let contract_id = ContractId::generate();
    NewContract {
        terms: signed_terms(contract_id.as_str(), worker_id, 1, input),
        parsed_terms: None,
        contract_id,
        seeker_id: PrincipalId::generate_seeker(),
        worker_id: worker_id.parse().unwrap(),
        task_type: "summarize".into(),
        terms_hash: format!("sha256:{}", ulid::Ulid::new()),
        gateway_jws: "eyJ.payload.sig".into(),
        state: ContractState::Offered,
        payment_offer: None,
        deadline_at: Some(now() + chrono::Duration::minutes(5)),
        created_at: now(),
    }
}

async fn contract_for(store: &Store) -> String {
    let operator = PrincipalId::generate_operator();
    let worker = listing(&operator, &[("summarize", "1")]);
    insert(store, &worker).await;
    let contract = offered_contract(worker.id.as_str(), &json!({ "text": "hello" }));
    let contract_id = contract.contract_id.clone();
    store
        .insert_contract(&contract, &event(EventKind::ContractOffered))
        .await
        .unwrap();
    let stored = store
        .get_contract(contract_id.as_str())
        .await
        .unwrap()
        .unwrap();
    assert_eq!(*stored.terms_document, contract.terms);
    assert_eq!(
        serde_json::to_value(&stored.terms).unwrap(),
        contract.terms,
        "the parsed terms are the stored document"
    );
    assert_eq!(stored.state, ContractState::Offered);
    let duplicate = NewContract {
        contract_id: ContractId::generate(),
        ..contract
    };
    assert!(matches!(
        store
            .insert_contract(&duplicate, &event(EventKind::ContractOffered))
            .await,
        Err(StoreError::Duplicate { entity: "contract" })
    ));
    contract_id.to_string()
}

/// The webhook loop wakes for the events the bus says may have queued a delivery: none of a
/// contract proposed through this store without a `webhook_url`, every one of a contract with
/// one, and every one of a contract it never saw (proposed by another instance, or before a
/// restart). The outbox rows agree.
async fn the_bus_tells_which_events_may_queue_a_webhook(store: Store) {
    let operator = PrincipalId::generate_operator();
    let worker = listing(&operator, &[("summarize", "1")]);
    insert(&store, &worker).await;
    let plain = offered_contract(worker.id.as_str(), &json!({ "text": "no webhook" }));
    let mut hooked = offered_contract(worker.id.as_str(), &json!({ "text": "a webhook" }));
    hooked.terms["webhook_url"] = json!("https://seeker.example/hook");
    let mut events = store.subscribe_events();
    for contract in [&plain, &hooked] {
        store
            .insert_contract(contract, &event(EventKind::ContractOffered))
            .await
            .unwrap();
        let mut progress = event(EventKind::WorkerProgress);
        progress.details = json!({ "percent": 50 });
        store
            .append_contract_event(contract.contract_id.as_str(), &progress)
            .await
            .unwrap();
    }

    let mut seen = None;
    for contract in [&plain, &hooked] {
        let has_webhook = contract.terms.get("webhook_url").is_some();
        for _ in 0..2 {
            let published = events.recv().await.unwrap();
            assert_eq!(published.contract_id, contract.contract_id);
            assert_eq!(store.may_queue_webhook(&published), has_webhook);
            seen = Some(published);
        }
        let queued = store
            .list_webhook_deliveries(contract.contract_id.as_str())
            .await
            .unwrap();
        assert_eq!(queued.len(), if has_webhook { 2 } else { 0 });
    }

    let mut unseen = (*seen.expect("events were published")).clone();
    unseen.contract_id = ContractId::generate();
    assert!(store.may_queue_webhook(&unseen));
}

fn event(kind: EventKind) -> NewContractEvent {
    NewContractEvent {
        at: now(),
        actor: Actor::Gateway,
        correlation_id: format!("req_{}", ulid::Ulid::new()),
        kind,
        details: json!({ "note": kind }),
    }
}

async fn contract_transitions_are_compare_and_set(store: Store) {
    let contract_id = contract_for(&store).await;
    // Ten racers try offered → paid; exactly one wins.
    let outcomes = futures::future::join_all((0..10).map(|_| {
        let store = store.clone();
        let contract_id = contract_id.clone();
        async move {
            store
                .transition_contract(
                    &contract_id,
                    ContractState::Offered,
                    ContractState::Paid,
                    None,
                    &event(EventKind::PaymentVerified),
                )
                .await
                .unwrap()
        }
    }))
    .await;
    let applied: Vec<_> = outcomes
        .iter()
        .filter(|o| matches!(o, Transition::Applied { .. }))
        .collect();
    assert_eq!(applied, vec![&Transition::Applied { seq: 2 }]);
    assert!(
        outcomes
            .iter()
            .all(|o| matches!(o, Transition::Applied { .. })
                || *o
                    == Transition::StateMismatch {
                        actual: ContractState::Paid
                    })
    );
    assert_eq!(
        store
            .transition_contract(
                "ctr_missing",
                ContractState::Offered,
                ContractState::Paid,
                None,
                &event(EventKind::WorkerProgress)
            )
            .await
            .unwrap(),
        Transition::NotFound
    );
    let contract = store.get_contract(&contract_id).await.unwrap().unwrap();
    assert_eq!(contract.state, ContractState::Paid);
    assert!(contract.deadline_at.is_none());
    let events = store
        .list_contract_events(&contract_id, 0, 100)
        .await
        .unwrap();
    assert_eq!(events.len(), 2, "failed racers recorded nothing");
    assert_eq!(events[1].from_state, Some(ContractState::Offered));
    assert_eq!(events[1].to_state, Some(ContractState::Paid));
}

async fn contract_events_are_gap_free_under_concurrency(store: Store) {
    let contract_id = contract_for(&store).await;
    let seqs = futures::future::join_all((0..20).map(|_| {
        let store = store.clone();
        let contract_id = contract_id.clone();
        async move {
            store
                .append_contract_event(&contract_id, &event(EventKind::WorkerProgress))
                .await
                .unwrap()
                .unwrap()
        }
    }))
    .await;
    let unique: BTreeSet<i64> = seqs.into_iter().collect();
    assert_eq!(unique, (2..=21).collect::<BTreeSet<i64>>());
    let events = store
        .list_contract_events(&contract_id, 0, 100)
        .await
        .unwrap();
    assert_eq!(
        events.iter().map(|e| e.seq).collect::<Vec<_>>(),
        (1..=21).collect::<Vec<_>>()
    );
    let ordered: Vec<i64> = events.iter().map(|e| e.event_id).collect();
    assert!(
        ordered.windows(2).all(|w| w[0] < w[1]),
        "event ids increase with seq"
    );
    // Resuming after seq 15 yields exactly the rest (the SSE Last-Event-ID case).
    let resumed = store
        .list_contract_events(&contract_id, 15, 100)
        .await
        .unwrap();
    assert_eq!(
        resumed.iter().map(|e| e.seq).collect::<Vec<_>>(),
        (16..=21).collect::<Vec<_>>()
    );
    assert_eq!(
        store
            .append_contract_event("ctr_missing", &event(EventKind::WorkerProgress))
            .await
            .unwrap(),
        None
    );
}

fn payment(contract_id: &str, nonce: &str, identifier: Option<&str>) -> NewPayment {
    NewPayment {
        payment_id: PaymentId::generate(),
        contract_id: contract_id.parse().unwrap(),
        network: "eip155:84532".parse().unwrap(),
        asset: "0x036CbD53842c5426634e7929541eC2318f3dCF7e"
            .parse()
            .unwrap(),
        payer: "0x3C44CdDdB6a900fa2b585dd299e03d12FA4293BC"
            .parse()
            .unwrap(),
        nonce: nonce.into(),
        amount: "1000".into(),
        valid_after: 0,
        valid_before: 4_000_000_000,
        payload: json!({ "signature": "0xsig", "authorization": { "nonce": nonce } }),
        payload_hash: format!("sha256:{nonce}"),
        payment_identifier: identifier.map(Into::into),
        state: PaymentState::Verified,
        created_at: now(),
    }
}

async fn payment_uniqueness_lives_in_the_database(store: Store) {
    let first_contract = contract_for(&store).await;
    let second_contract = contract_for(&store).await;
    let a = payment(&first_contract, "0xaa", Some("pid-1"));
    store.insert_payment(&a).await.unwrap();

    // The same authorization cannot pay another contract, nor the same one twice.
    for contract in [&second_contract, &first_contract] {
        let replay = NewPayment {
            payment_id: PaymentId::generate(),
            payment_identifier: None,
            ..payment(contract, "0xaa", None)
        };
        assert!(matches!(
            store.insert_payment(&replay).await,
            Err(StoreError::Duplicate { entity: "payment" })
        ));
    }
    // A payment identifier is used once.
    assert!(matches!(
        store
            .insert_payment(&payment(&second_contract, "0xbb", Some("pid-1")))
            .await,
        Err(StoreError::Duplicate { .. })
    ));
    let found = store
        .find_payment_by_authorization(&a.network, &a.asset, &a.payer, "0xaa")
        .await
        .unwrap()
        .unwrap();
    assert_eq!(found.contract_id.as_str(), first_contract);
    assert_eq!(found.payload, a.payload);
    assert!(
        !format!("{found:?}").contains("0xsig"),
        "payload redacted in Debug"
    );
    assert_eq!(
        store
            .find_payment_by_identifier("pid-1")
            .await
            .unwrap()
            .unwrap()
            .payment_id,
        a.payment_id
    );

    // At most one payment per contract ever enters settlement.
    let b = payment(&first_contract, "0xcc", None);
    store.insert_payment(&b).await.unwrap();
    assert!(store.begin_settlement(&a.payment_id, now()).await.unwrap());
    assert!(
        !store.begin_settlement(&a.payment_id, now()).await.unwrap(),
        "already settling"
    );
    assert!(matches!(
        store.begin_settlement(&b.payment_id, now()).await,
        Err(StoreError::Duplicate { entity: "payment" })
    ));
    assert!(
        !store
            .void_unsent_payment(&a.payment_id, now())
            .await
            .unwrap(),
        "a payment whose settlement began is never voided as unsent"
    );

    // An upfront cancel's void and the settlement's start exclude each other.
    let cancelled = payment(&contract_for(&store).await, "0xdd", None);
    store.insert_payment(&cancelled).await.unwrap();
    assert!(
        store
            .void_unsent_payment(&cancelled.payment_id, now())
            .await
            .unwrap()
    );
    assert!(
        !store
            .begin_settlement(&cancelled.payment_id, now())
            .await
            .unwrap(),
        "a voided payment never begins settling"
    );
    assert!(
        !store
            .void_unsent_payment(&cancelled.payment_id, now())
            .await
            .unwrap(),
        "voided once"
    );
    let stored = store
        .payment_of_contract(cancelled.contract_id.as_str())
        .await
        .unwrap()
        .unwrap();
    assert_eq!(stored.state, PaymentState::Voided);
    assert!(stored.settle_started_at.is_none());
}

/// Runs `sql` with `bind` on the test database directly, past the store (to plant a row the
/// store would never write).
async fn execute_raw(database: &TestDatabase, sql: &str, binds: &[&str]) {
    let url = database.url();
    if url.starts_with("sqlite") {
        let pool = sqlx::SqlitePool::connect(&url).await.unwrap();
        let mut query = sqlx::query(sql);
        for bind in binds {
            query = query.bind(*bind);
        }
        query.execute(&pool).await.unwrap();
    } else {
        let pool = sqlx::PgPool::connect(&url).await.unwrap();
        let mut query = sqlx::query(sql);
        for bind in binds {
            query = query.bind(*bind);
        }
        query.execute(&pool).await.unwrap();
    }
}

/// A payment's and an attempt's state are parsed when the row is read: the spellings the
/// gateway writes come back as their enum values, and any other spelling is a corrupt row
/// (an error naming the table), never a state the hire flow would have to guess about.
async fn a_state_of_another_spelling_is_a_corrupt_row(database: &TestDatabase) {
    let store = open(database).await;
    let contract_id = contract_for(&store).await;
    let paid = payment(&contract_id, "0xaa", Some("pid-spelling"));
    store.insert_payment(&paid).await.unwrap();
    assert!(
        store
            .begin_settlement(&paid.payment_id, now())
            .await
            .unwrap()
    );
    let stored = store.find_payment_by_identifier("pid-spelling").await;
    assert_eq!(stored.unwrap().unwrap().state, PaymentState::Settling);
    const ATTEMPT: &str = "insert into attempt (attempt_id, contract_id, attempt_no, payment_id, \
        state, started_at) values ($1, $2, 1, $3, $4, 0)";
    let attempt_id = format!("att_{}", ulid::Ulid::new());
    execute_raw(
        database,
        ATTEMPT,
        &[
            &attempt_id,
            &contract_id,
            paid.payment_id.as_str(),
            "timed_out",
        ],
    )
    .await;
    let attempts = store.list_attempts(&contract_id).await.unwrap();
    assert_eq!(attempts.len(), 1);
    assert_eq!(attempts[0].state, AttemptState::TimedOut);

    execute_raw(
        database,
        "update payment set state = 'Settled' where payment_id = $1",
        &[paid.payment_id.as_str()],
    )
    .await;
    assert!(matches!(
        store.find_payment_by_identifier("pid-spelling").await,
        Err(StoreError::Corrupt {
            entity: "payment",
            ..
        })
    ));
    execute_raw(
        database,
        "update attempt set state = 'done' where attempt_id = $1",
        &[&attempt_id],
    )
    .await;
    assert!(matches!(
        store.list_attempts(&contract_id).await,
        Err(StoreError::Corrupt {
            entity: "attempt",
            ..
        })
    ));
}

/// A contract event's kind is parsed when the row is read: the kinds the gateway writes come
/// back as their enum values, and any other spelling is a corrupt row (naming the event
/// table), never a kind a reader would have to guess about.
async fn an_event_kind_of_another_spelling_is_a_corrupt_row(database: &TestDatabase) {
    let store = open(database).await;
    let contract_id = contract_for(&store).await;
    store
        .append_contract_event(&contract_id, &event(EventKind::WorkerProgress))
        .await
        .unwrap()
        .unwrap();
    let events = store
        .list_contract_events(&contract_id, 0, 10)
        .await
        .unwrap();
    let kinds: Vec<_> = events.iter().map(|e| e.kind).collect();
    assert_eq!(
        kinds,
        [EventKind::ContractOffered, EventKind::WorkerProgress]
    );

    // The event log is append-only (a trigger refuses updates): plant a third row.
    execute_raw(
        database,
        "insert into contract_event (contract_id, seq, at, actor, correlation_id, kind, \
         details) values ($1, 3, 0, 'gateway', 'req_planted', 'Worker_Progress', '{}')",
        &[&contract_id],
    )
    .await;
    assert!(matches!(
        store.list_contract_events(&contract_id, 0, 10).await,
        Err(StoreError::Corrupt {
            entity: "contract_event",
            ..
        })
    ));
}

async fn jobs_are_leased_exactly_once(store: Store) {
    let t0 = now();
    let dedupe = format!("settle:{}", ulid::Ulid::new());
    let job = NewJob {
        id: JobId::generate(),
        kind: "settle".into(),
        dedupe_key: Some(dedupe.clone()),
        payload: json!({ "contract_id": "ctr_x" }),
        run_at: t0,
    };
    assert_eq!(
        store.enqueue_job(&job, t0).await.unwrap(),
        Enqueued::Created
    );
    let again = NewJob {
        id: JobId::generate(),
        ..job.clone()
    };
    assert_eq!(
        store.enqueue_job(&again, t0).await.unwrap(),
        Enqueued::AlreadyExists
    );

    let lease = Duration::from_secs(30);
    let claimed = store
        .claim_job("settle", "instance-a", t0, lease)
        .await
        .unwrap()
        .unwrap();
    assert_eq!((claimed.id.clone(), claimed.attempts), (job.id.clone(), 1));
    assert!(
        store
            .claim_job("settle", "instance-b", t0, lease)
            .await
            .unwrap()
            .is_none(),
        "leased"
    );
    assert!(
        store
            .claim_job("poll", "instance-b", t0, lease)
            .await
            .unwrap()
            .is_none(),
        "other kind"
    );

    // instance-a crashes; after its lease ends instance-b takes over.
    let t1 = t0 + chrono::Duration::seconds(31);
    let taken = store
        .claim_job("settle", "instance-b", t1, lease)
        .await
        .unwrap()
        .unwrap();
    assert_eq!((taken.id.clone(), taken.attempts), (job.id.clone(), 2));
    assert!(
        !store.complete_job(&job.id, "instance-a", t1).await.unwrap(),
        "stale owner refused"
    );
    assert!(
        store
            .reschedule_job(
                &job.id,
                "instance-b",
                t1,
                t1 + chrono::Duration::seconds(5),
                "timeout"
            )
            .await
            .unwrap()
    );
    assert!(
        store
            .claim_job("settle", "instance-b", t1, lease)
            .await
            .unwrap()
            .is_none(),
        "not due"
    );
    let t2 = t1 + chrono::Duration::seconds(5);
    let retried = store
        .claim_job("settle", "instance-c", t2, lease)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(retried.last_error.as_deref(), Some("timeout"));
    assert!(store.complete_job(&job.id, "instance-c", t2).await.unwrap());
    let t3 = t2 + chrono::Duration::minutes(5);
    assert!(
        store
            .claim_job("settle", "instance-c", t3, lease)
            .await
            .unwrap()
            .is_none(),
        "done"
    );

    // Many jobs, concurrent claimers: each job goes to exactly one of them.
    let mut expected = BTreeSet::new();
    for _ in 0..15 {
        let job = NewJob {
            id: JobId::generate(),
            kind: "poll".into(),
            dedupe_key: None,
            payload: json!({}),
            run_at: t0,
        };
        store.enqueue_job(&job, t0).await.unwrap();
        expected.insert(job.id);
    }
    let claims = futures::future::join_all((0..4).map(|i| {
        let store = store.clone();
        async move {
            let owner = format!("instance-{i}");
            let mut mine = Vec::new();
            while let Some(job) = store.claim_job("poll", &owner, t1, lease).await.unwrap() {
                mine.push(job.id);
            }
            mine
        }
    }))
    .await;
    let claimed: Vec<JobId> = claims.into_iter().flatten().collect();
    assert_eq!(claimed.len(), expected.len());
    assert_eq!(claimed.into_iter().collect::<BTreeSet<_>>(), expected);

    let dead = NewJob {
        id: JobId::generate(),
        kind: "webhook".into(),
        dedupe_key: None,
        payload: json!({}),
        run_at: t0,
    };
    store.enqueue_job(&dead, t0).await.unwrap();
    store
        .claim_job("webhook", "instance-a", t0, lease)
        .await
        .unwrap()
        .unwrap();
    assert!(
        store
            .bury_job(&dead.id, "instance-a", t0, "gave up")
            .await
            .unwrap()
    );
    assert!(
        store
            .claim_job("webhook", "instance-a", t3, lease)
            .await
            .unwrap()
            .is_none()
    );
}

/// A seeker's dispute of `contract_id`.
fn seeker_dispute(contract_id: &str) -> hiregate_store::NewDispute {
    hiregate_store::NewDispute {
        dispute_id: DisputeId::generate(),
        contract_id: contract_id.parse().unwrap(),
        party: Party::Seeker,
        opened_by: Actor::Seeker(PrincipalId::generate_seeker()),
        reason: "wrong".into(),
        claim: None,
        created_at: now(),
    }
}

/// `offered → paid → executing` as one chain, the second step setting `deadline`.
fn paid_then_executing<'a>(
    paid: &'a NewContractEvent,
    executing: &'a NewContractEvent,
    deadline: Option<DateTime<Utc>>,
) -> [hiregate_store::ContractStep<'a>; 2] {
    use hiregate_store::ContractStep;
    [
        ContractStep {
            from: ContractState::Offered,
            to: ContractState::Paid,
            deadline_at: None,
            event: paid,
        },
        ContractStep {
            from: ContractState::Paid,
            to: ContractState::Executing,
            deadline_at: deadline,
            event: executing,
        },
    ]
}

/// `advance_contract` is one statement on PostgreSQL and one transaction on SQLite: the two
/// must agree on the seqs handed out, on a missed compare-and-set and on a failing write.
async fn a_chain_of_steps_and_its_writes_commit_together_or_not_at_all(store: Store) {
    use hiregate_store::{ContractStep, SideWrite, Transition};
    let contract_id = contract_for(&store).await;
    let dispute = || seeker_dispute(&contract_id);
    let events_logged = || async {
        store
            .list_contract_events(&contract_id, 0, 10)
            .await
            .unwrap()
            .len()
    };
    let (paid, executing) = (
        event(EventKind::PaymentVerified),
        event(EventKind::Forwarded),
    );
    let deadline = now() + chrono::Duration::minutes(9);
    let steps = paid_then_executing(&paid, &executing, Some(deadline));
    let first = dispute();
    let moved = store
        .advance_contract(&contract_id, &steps, &[SideWrite::Dispute(&first)])
        .await
        .unwrap();
    assert_eq!(moved, Transition::Applied { seq: 3 });
    let stored = store.get_contract(&contract_id).await.unwrap().unwrap();
    assert_eq!(stored.state, ContractState::Executing);
    assert_eq!(stored.deadline_at, Some(deadline));
    let events = store
        .list_contract_events(&contract_id, 0, 10)
        .await
        .unwrap();
    let logged: Vec<_> = events
        .iter()
        .map(|e| {
            (
                e.seq,
                e.kind.as_str(),
                e.from_state.map(|state| state.as_str()),
                e.to_state.map(|state| state.as_str()),
            )
        })
        .collect();
    assert_eq!(
        logged,
        [
            (1, "contract_offered", None, Some("offered")),
            (2, "payment_verified", Some("offered"), Some("paid")),
            (3, "forwarded", Some("paid"), Some("executing")),
        ]
    );
    assert_eq!(
        store
            .dispute_of_contract(&contract_id)
            .await
            .unwrap()
            .unwrap()
            .dispute_id,
        first.dispute_id
    );

    // A step that applies but a write that fails (a second dispute): nothing is kept.
    let (failed, disputing) = (
        event(EventKind::WorkerFailed),
        event(EventKind::DisputeOpened),
    );
    let next = [
        ContractStep {
            from: ContractState::Executing,
            to: ContractState::Failed,
            deadline_at: None,
            event: &failed,
        },
        ContractStep {
            from: ContractState::Failed,
            to: ContractState::Disputed,
            deadline_at: None,
            event: &disputing,
        },
    ];
    let second = dispute();
    assert!(matches!(
        store
            .advance_contract(&contract_id, &next, &[SideWrite::Dispute(&second)])
            .await,
        Err(StoreError::Duplicate { entity: "dispute" })
    ));
    let stored = store.get_contract(&contract_id).await.unwrap().unwrap();
    assert_eq!(stored.state, ContractState::Executing);
    assert_eq!(events_logged().await, 3);

    // A missed compare-and-set writes nothing either and names the actual state.
    let third = dispute();
    assert_eq!(
        store
            .advance_contract(&contract_id, &steps, &[SideWrite::Dispute(&third)])
            .await
            .unwrap(),
        Transition::StateMismatch {
            actual: ContractState::Executing
        }
    );
    assert_eq!(events_logged().await, 3);
    assert!(matches!(
        store
            .advance_contract("ctr_missing", &steps, &[])
            .await
            .unwrap(),
        Transition::NotFound
    ));
}

/// A commit whose caller goes away (a client hung up, a timeout) at any point: it is applied
/// whole or not at all, and the connection it ran on is whole for the next user. One
/// connection, so the next write runs where the dropped one did: a transaction left open
/// there would make it fail ("cannot start a transaction within a transaction") or take the
/// dropped writes into its own commit.
async fn a_write_dropped_half_way_commits_all_or_nothing(database: &TestDatabase) {
    use hiregate_store::SideWrite;
    let store = open_with(database, 1).await;
    let mut applied = 0;
    for delay_micros in (0..600).step_by(15) {
        let contract_id = contract_for(&store).await;
        let (paid, executing) = (
            event(EventKind::PaymentVerified),
            event(EventKind::Forwarded),
        );
        let steps = paid_then_executing(&paid, &executing, None);
        let dispute = seeker_dispute(&contract_id);
        {
            let writes = [SideWrite::Dispute(&dispute)];
            let mut write = std::pin::pin!(store.advance_contract(&contract_id, &steps, &writes));
            // Sent, then dropped wherever the connection has got to after `delay_micros`.
            let mut finished = futures::poll!(&mut write).is_ready();
            let until = std::time::Instant::now() + Duration::from_micros(delay_micros);
            while !finished && std::time::Instant::now() < until {
                std::hint::spin_loop();
                tokio::task::yield_now().await;
                finished = futures::poll!(&mut write).is_ready();
            }
        }
        // The next write on the connection, then what the dropped one left.
        let next = contract_for(&store).await;
        assert_eq!(
            store
                .transition_contract(
                    &next,
                    ContractState::Offered,
                    ContractState::Paid,
                    None,
                    &event(EventKind::PaymentVerified)
                )
                .await
                .unwrap(),
            Transition::Applied { seq: 2 }
        );
        let state = store
            .get_contract(&contract_id)
            .await
            .unwrap()
            .unwrap()
            .state;
        let events = store
            .list_contract_events(&contract_id, 0, 10)
            .await
            .unwrap()
            .len();
        let disputed = store.dispute_of_contract(&contract_id).await.unwrap();
        match state.as_str() {
            "offered" => assert!(events == 1 && disputed.is_none(), "{events} events"),
            "executing" => {
                assert!(events == 3 && disputed.is_some(), "{events} events");
                applied += 1;
            }
            other => panic!("half a commit: {other}"),
        }
    }
    // Not asserted: how many were dropped before their commit depends on the machine.
    eprintln!("{applied} of 40 dropped writes had committed");
}

/// Ten paid contracts of one worker started at once against three slots: three start, the
/// other seven find the worker busy and write nothing. On PostgreSQL each start counts the
/// worker's load after taking its row lock, so it sees every start committed before it.
async fn a_worker_never_runs_more_than_its_slots_however_many_start_at_once(store: Store) {
    use hiregate_store::{NewAttempt, PayOutcome, StartAttempt};
    let worker = listing(&PrincipalId::generate_operator(), &[("summarize", "1")]);
    insert(&store, &worker).await;
    let mut contracts = Vec::new();
    for index in 0..10 {
        let contract = offered_contract(worker.id.as_str(), &json!({ "text": index }));
        let contract_id = contract.contract_id.clone();
        store
            .insert_contract(&contract, &event(EventKind::ContractOffered))
            .await
            .unwrap();
        let paid = payment(contract_id.as_str(), &format!("0x{index:02x}"), None);
        assert!(matches!(
            store
                .pay_contract(
                    &paid,
                    ContractState::Paid,
                    &event(EventKind::PaymentVerified)
                )
                .await
                .unwrap(),
            PayOutcome::Paid { .. }
        ));
        contracts.push((contract_id, paid.payment_id));
    }
    let outcomes = futures::future::join_all(contracts.iter().map(|(contract_id, payment_id)| {
        let (store, worker_id) = (store.clone(), worker.id.to_string());
        let attempt = NewAttempt {
            attempt_id: AttemptId::generate(),
            payment_id: payment_id.clone(),
            started_at: now(),
        };
        async move {
            store
                .start_attempt(
                    contract_id.as_str(),
                    &worker_id,
                    3,
                    &attempt,
                    &event(EventKind::Forwarded),
                )
                .await
                .unwrap()
        }
    }))
    .await;
    let started = outcomes
        .iter()
        .filter(|outcome| matches!(outcome, StartAttempt::Started { attempt_no: 1 }))
        .count();
    let busy = outcomes
        .iter()
        .filter(|outcome| {
            matches!(
                outcome,
                StartAttempt::WorkerBusy {
                    in_flight: 3,
                    ahead: 0
                }
            )
        })
        .count();
    assert_eq!((started, busy), (3, 7), "{outcomes:?}");
    let mut executing = 0;
    for (contract_id, _) in &contracts {
        let state = store
            .get_contract(contract_id.as_str())
            .await
            .unwrap()
            .unwrap()
            .state;
        let attempts = store
            .list_attempts(contract_id.as_str())
            .await
            .unwrap()
            .len();
        let events = store
            .list_contract_events(contract_id.as_str(), 0, 10)
            .await
            .unwrap()
            .len();
        match state.as_str() {
            "executing" => {
                assert_eq!((attempts, events), (1, 3));
                executing += 1;
            }
            "paid" => assert_eq!((attempts, events), (0, 2)),
            other => panic!("{other}"),
        }
    }
    assert_eq!(executing, 3);
}

async fn disputes_are_one_per_contract_and_decided_once(store: Store) {
    use hiregate_store::{DisputeDecisionRecord, NewDispute};
    let contract_id = contract_for(&store).await;
    let opened = NewDispute {
        dispute_id: DisputeId::generate(),
        contract_id: contract_id.parse().unwrap(),
        party: Party::Operator,
        opened_by: Actor::Operator(PrincipalId::generate_operator()),
        reason: "the output is fine".into(),
        claim: Some(json!({"note": "see it"})),
        created_at: now(),
    };
    store.insert_dispute(&opened).await.unwrap();
    let second = NewDispute {
        dispute_id: DisputeId::generate(),
        ..opened.clone()
    };
    assert!(matches!(
        store.insert_dispute(&second).await,
        Err(StoreError::Duplicate { entity: "dispute" })
    ));
    store
        .record_dispute_replay(
            opened.dispute_id.as_str(),
            &json!({"verification_status": "failed"}),
            "sha256:abc",
            DisputeState::Escalated,
        )
        .await
        .unwrap();
    let stored = store
        .dispute_of_contract(&contract_id)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(stored.state, DisputeState::Escalated);
    assert_eq!(stored.claim, opened.claim);
    assert_eq!(
        stored.replay_verifier_result_hash.as_deref(),
        Some("sha256:abc")
    );
    assert_eq!(stored.created_at, opened.created_at);
    let decision = |d: DisputeDecision| DisputeDecisionRecord {
        decision: d,
        decided_by: Actor::Admin,
        reason: format!("decided {d}"),
        via: DecidedVia::Arbiter,
        at: now(),
    };
    assert!(
        store
            .decide_dispute(
                opened.dispute_id.as_str(),
                &decision(DisputeDecision::Settle)
            )
            .await
            .unwrap()
    );
    assert!(
        !store
            .decide_dispute(opened.dispute_id.as_str(), &decision(DisputeDecision::Void))
            .await
            .unwrap(),
        "a decision is final"
    );
    let decided = store
        .get_dispute(opened.dispute_id.as_str())
        .await
        .unwrap()
        .unwrap();
    assert_eq!(decided.state, DisputeState::Decided);
    assert_eq!(decided.decision, Some(DisputeDecision::Settle));
    assert_eq!(decided.decision_reason.as_deref(), Some("decided settle"));
    assert!(decided.decided_at.is_some());
}

/// Values that are valid JSON but trip stores: U+0000 in strings and keys (jsonb refuses it),
/// noncharacters, line/paragraph separators, astral characters, escapes that look like
/// escapes, a long string, nesting past `serde_json`'s default limit of 128 (the API accepts
/// 128 levels and the gateway wraps them a level or two deeper), and numbers jsonb would
/// rewrite (`-0.0`, the float `1e16`).
fn edge_corpus() -> serde_json::Value {
    let mut nested = json!("\u{0}deep");
    for _ in 0..64 {
        nested = json!({ "\u{0}k": [nested] });
    }
    json!({
        "nul": "a\u{0}b\u{0}",
        "\u{0}": "key is NUL",
        "k\u{0}ey": { "\u{0}\u{0}": null },
        "noncharacters": "\u{FFFF}\u{FFFE}\u{FDD0}",
        "separators": "\u{2028}\u{2029}",
        "astral": "\u{1D11E}\u{1F600}\u{10FFFF}",
        "controls": "\u{1}\u{1F}\u{7F}\t\r\n\"\\/",
        "bom": "\u{FEFF}x",
        "looks_escaped": "\\u0000 \\\\u0000",
        "replacement": "\u{FFFD}",
        "long": "\u{0}\u{FFFF}\u{1F600}x".repeat(50_000),
        "nested": nested,
        "numbers": [-0.0, 1e16, 1.5e300, 5e-324, 0.1, u64::MAX, i64::MIN, 0],
        "empties": ["", {}, [], null, false],
    })
}

/// The same value, and the same bytes when serialized (what the API answers).
#[track_caller]
/// A stored offer whose `extensions` carry `corpus` (the offer's free-form part).
fn offer_with_extensions(corpus: &serde_json::Value) -> hiregate_store::offer::StoredOffer {
    serde_json::from_value(json!({
        "payment_required": {
            "x402Version": 2,
            "resource": {"url": "https://gateway.example/v1/contracts/ctr/execute"},
            "accepts": [],
            "extensions": {"edge": corpus},
        },
        "decimals": 6,
        "symbol": "USDC",
    }))
    .unwrap()
}

fn assert_faithful(stored: &serde_json::Value, written: &serde_json::Value, what: &str) {
    assert_eq!(
        serde_json::to_string(stored).unwrap(),
        serde_json::to_string(written).unwrap(),
        "{what} changed in the store"
    );
}

async fn edge_characters_round_trip_through_every_json_column(store: Store) {
    use hiregate_store::{
        AttemptEnd, NewAttempt, NewDeliverable, NewDispute, NewVerification, PayOutcome,
        SettlementOutcome, StartAttempt,
    };
    let corpus = edge_corpus();

    // Worker listing: output schema (the corpus rides in annotations) and protocol options.
    let operator = PrincipalId::generate_operator();
    let mut worker = listing(&operator, &[("summarize", "1")]);
    // Schema documents have their own size and depth limits: a small slice of the corpus.
    let schema = json!({
        "type": "object",
        "description": "\u{0}\u{2028}\u{1F600}\u{FFFF}",
        "examples": [{ "\u{0}": "\u{0}", "n": [-0.0, 1e16] }],
    });
    worker.tasks = TaskCatalog::new(BTreeMap::from([(
        "summarize".parse().unwrap(),
        TaskOffer {
            price: "1".parse().unwrap(),
            output_schema: OutputSchema::parse(schema.clone()).unwrap(),
            metering: None,
        },
    )]))
    .unwrap();
    insert(&store, &worker).await;
    let stored_worker = store.get_worker(&worker.id).await.unwrap().unwrap();
    let stored_schema = stored_worker
        .tasks
        .offers()
        .values()
        .next()
        .map(|offer| offer.output_schema.as_json().clone())
        .unwrap();
    assert_faithful(&stored_schema, &schema, "worker_task.output_schema");

    // Contract: terms (with a webhook URL, so the outbox trigger runs on every event) and offer.
    let contract_id = format!("ctr_{}", ulid::Ulid::new());
    let mut terms = signed_terms(&contract_id, worker.id.as_str(), 1, &corpus);
    terms["webhook_url"] = json!("https://seeker.example/hooks");
    let contract = NewContract {
        contract_id: contract_id.parse().unwrap(),
        seeker_id: PrincipalId::generate_seeker(),
        worker_id: worker.id.clone(),
        task_type: "summarize".into(),
        terms: terms.clone(),
        parsed_terms: None,
        terms_hash: format!("sha256:{}", ulid::Ulid::new()),
        gateway_jws: "eyJ.payload.sig".into(),
        state: ContractState::Offered,
        payment_offer: Some(offer_with_extensions(&corpus)),
        deadline_at: None,
        created_at: now(),
    };
    let with_corpus = |kind: EventKind| NewContractEvent {
        details: json!({ "kind": kind, "edge": corpus.clone() }),
        ..event(kind)
    };
    store
        .insert_contract(&contract, &with_corpus(EventKind::ContractOffered))
        .await
        .unwrap();
    let stored = store.get_contract(&contract_id).await.unwrap().unwrap();
    assert_faithful(&stored.terms_document, &terms, "contract.terms");
    assert_faithful(
        &serde_json::to_value(stored.payment_offer.as_ref().unwrap()).unwrap(),
        &serde_json::to_value(contract.payment_offer.as_ref().unwrap()).unwrap(),
        "contract.payment_offer",
    );

    // Payment payload, attempt error, deliverable bytes, verification result, settlement.
    let mut paid = payment(&contract_id, "0x01", None);
    paid.payload = json!({ "payload": corpus.clone() });
    assert!(matches!(
        store
            .pay_contract(
                &paid,
                ContractState::Paid,
                &with_corpus(EventKind::PaymentVerified)
            )
            .await
            .unwrap(),
        PayOutcome::Paid { .. }
    ));
    let start = |attempt_id: String| {
        let (store, contract_id, worker_id) = (&store, &contract_id, worker.id.as_str());
        let attempt = NewAttempt {
            attempt_id: attempt_id.parse().unwrap(),
            payment_id: paid.payment_id.clone(),
            started_at: now(),
        };
        let event = with_corpus(EventKind::Forwarded);
        async move {
            store
                .start_attempt(contract_id, worker_id, 4, &attempt, &event)
                .await
                .unwrap()
        }
    };
    let attempt_id = format!("att_{}", ulid::Ulid::new());
    assert!(matches!(
        start(attempt_id.clone()).await,
        StartAttempt::Started { attempt_no: 1 }
    ));
    // A second start finds the contract executing and writes nothing: no attempt, no event.
    let events_before = store
        .list_contract_events(&contract_id, 0, 100)
        .await
        .unwrap()
        .len();
    assert!(matches!(
        start(format!("att_{}", ulid::Ulid::new())).await,
        StartAttempt::StateMismatch { actual } if actual == ContractState::Executing
    ));
    assert_eq!(store.list_attempts(&contract_id).await.unwrap().len(), 1);
    assert_eq!(
        store
            .list_contract_events(&contract_id, 0, 100)
            .await
            .unwrap()
            .len(),
        events_before
    );
    let error =
        json!({ "kind": "worker_reported_failure", "code": "E\u{0}", "message": corpus.clone() });
    store
        .finish_attempt(
            &attempt_id,
            &AttemptEnd {
                state: AttemptState::Failed,
                http_status: Some(200),
                error: Some(error.clone()),
                worker_task_id: Some("task-\u{1F600}\u{2028}".into()),
                poll_url: None,
                worker_metadata: Some(json!({"model_used": "designbot-\u{1F600}"})),
                estimated_completion: Some("2025-01-30T12:00:00Z".into()),
                finished_at: Some(now()),
            },
        )
        .await
        .unwrap();
    let attempts = store.list_attempts(&contract_id).await.unwrap();
    assert_faithful(attempts[0].error.as_ref().unwrap(), &error, "attempt.error");
    assert_eq!(
        attempts[0].worker_task_id.as_deref(),
        Some("task-\u{1F600}\u{2028}")
    );
    assert_eq!(
        attempts[0].worker_metadata,
        Some(json!({"model_used": "designbot-\u{1F600}"}))
    );
    assert_eq!(
        attempts[0].estimated_completion.as_deref(),
        Some("2025-01-30T12:00:00Z")
    );
    let bytes = serde_json::to_vec(&corpus).unwrap();
    let piece = NewDeliverable {
        deliverable_id: DeliverableId::generate(),
        contract_id: contract_id.parse().unwrap(),
        attempt_id: attempt_id.parse().unwrap(),
        position: 0,
        name: Some("r\u{E9}sum\u{E9} \u{1F600}.json".into()),
        kind: hiregate_store::states::PieceKind::Deliverable,
        media_type: Some("application/json".into()),
        digest: "sha256:00".into(),
        content: [b"\0raw\0".as_slice(), &bytes].concat(),
        source_url: None,
        created_at: now(),
    };
    store
        .insert_deliverables(std::slice::from_ref(&piece))
        .await
        .unwrap();
    let pieces = store.latest_deliverables(&contract_id).await.unwrap();
    assert_eq!(pieces[0].content, piece.content);
    assert_eq!(pieces[0].name, piece.name);
    let verification = NewVerification {
        verification_id: VerificationId::generate(),
        contract_id: contract_id.parse().unwrap(),
        attempt_id: attempt_id.clone(),
        policy_id: "vp.schema_only.v1".into(),
        policy_version: "1".into(),
        policy_hash: "sha256:00".into(),
        passed: false,
        score: 0.0,
        reason_codes: vec![101, 999],
        status: "failed".into(),
        verifier_result_hash: "sha256:11".into(),
        result: json!({ "failing_paths": ["/\u{0}"], "detail": corpus.clone() }),
        created_at: now(),
    };
    store.insert_verification(&verification).await.unwrap();
    let stored_verification = store
        .latest_verification(&contract_id)
        .await
        .unwrap()
        .unwrap();
    assert_faithful(
        &stored_verification.result,
        &verification.result,
        "verification.result",
    );
    assert_eq!(stored_verification.reason_codes, verification.reason_codes);

    // The remaining transitions carry the corpus in their events; settlement stores a response.
    for (from, to, kind) in [
        (
            ContractState::Executing,
            ContractState::Delivered,
            EventKind::DeliverableReceived,
        ),
        (
            ContractState::Delivered,
            ContractState::Accepted,
            EventKind::VerificationPassed,
        ),
    ] {
        assert!(matches!(
            store
                .transition_contract(&contract_id, from, to, None, &with_corpus(kind))
                .await
                .unwrap(),
            Transition::Applied { .. }
        ));
    }
    store
        .append_contract_event(&contract_id, &with_corpus(EventKind::WorkerProgress))
        .await
        .unwrap()
        .unwrap();
    assert!(matches!(
        store
            .begin_settlement_of_contract(
                &contract_id,
                ContractState::Accepted,
                &paid.payment_id,
                None,
                &with_corpus(EventKind::AcceptanceWindowClosed),
            )
            .await
            .unwrap(),
        Transition::Applied { .. }
    ));
    let response = json!({ "success": true, "extra": corpus.clone() });
    store
        .finish_settlement(
            &contract_id,
            ContractState::Settling,
            &paid.payment_id,
            &SettlementOutcome {
                contract_state: ContractState::Settled,
                payment_state: PaymentState::Settled,
                transaction: Some("0xabc".into()),
                response: Some(response.clone()),
                remainder_transaction: None,
            },
            &with_corpus(EventKind::SettlementSucceeded),
        )
        .await
        .unwrap();
    let stored_payment = store
        .payment_of_contract(&contract_id)
        .await
        .unwrap()
        .unwrap();
    assert_faithful(&stored_payment.payload, &paid.payload, "payment.payload");
    assert_faithful(
        stored_payment.settle_response.as_ref().unwrap(),
        &response,
        "payment.settle_response",
    );

    // Every event's details came back whole, and the outbox trigger queued each for the webhook.
    let events = store
        .list_contract_events(&contract_id, 0, 100)
        .await
        .unwrap();
    assert_eq!(events.len(), 8);
    for stored_event in &events {
        assert_faithful(
            &stored_event.details,
            &json!({ "kind": stored_event.kind, "edge": corpus.clone() }),
            "contract_event.details",
        );
    }
    let deliveries = store
        .claim_webhook_deliveries("instance-a", now(), Duration::from_secs(30), 100)
        .await
        .unwrap();
    assert_eq!(deliveries.len(), events.len());
    for delivery in &deliveries {
        assert_eq!(delivery.url, "https://seeker.example/hooks");
        assert_faithful(
            &delivery.details["edge"],
            &corpus,
            "webhook delivery details",
        );
    }

    // Job payloads.
    let job = NewJob {
        id: JobId::generate(),
        kind: "poll".into(),
        dedupe_key: Some(format!("poll:{}", ulid::Ulid::new())),
        payload: json!({ "contract_id": contract_id, "edge": corpus.clone() }),
        run_at: now(),
    };
    store.enqueue_job(&job, now()).await.unwrap();
    let claimed = store
        .claim_job("poll", "instance-a", now(), Duration::from_secs(30))
        .await
        .unwrap()
        .unwrap();
    assert_faithful(&claimed.payload, &job.payload, "job.payload");

    // Dispute claim and replay (on another contract: one dispute per contract).
    let disputed = contract_for(&store).await;
    let dispute = NewDispute {
        dispute_id: DisputeId::generate(),
        contract_id: disputed.parse().unwrap(),
        party: Party::Seeker,
        opened_by: Actor::Seeker(PrincipalId::generate_seeker()),
        reason: "\u{2028}\u{1F600} wrong".into(),
        claim: Some(corpus.clone()),
        created_at: now(),
    };
    store.insert_dispute(&dispute).await.unwrap();
    let replay = json!({ "verification_status": "failed", "edge": corpus.clone() });
    store
        .record_dispute_replay(
            dispute.dispute_id.as_str(),
            &replay,
            "sha256:abc",
            DisputeState::Escalated,
        )
        .await
        .unwrap();
    let stored_dispute = store
        .get_dispute(dispute.dispute_id.as_str())
        .await
        .unwrap()
        .unwrap();
    assert_faithful(
        stored_dispute.claim.as_ref().unwrap(),
        &corpus,
        "dispute.claim",
    );
    assert_faithful(
        stored_dispute.replay.as_ref().unwrap(),
        &replay,
        "dispute.replay",
    );
    assert_eq!(stored_dispute.reason, dispute.reason);
}

/// The gateway's own error texts sometimes quote a remote's bytes; a NUL in them is stored as
/// U+FFFD on both backends instead of failing the write (a failed job reschedule would leave
/// the job leased until its lease ran out).
async fn diagnostic_texts_with_nul_are_stored(store: Store) {
    let operator = PrincipalId::generate_operator();
    let worker = listing(&operator, &[("summarize", "1")]);
    insert(&store, &worker).await;
    store
        .record_probe(
            &worker.id,
            &ProbeResult::Failed {
                reason: "capabilities said \u{0}boom\u{0}".into(),
            },
            3,
            now(),
        )
        .await
        .unwrap()
        .unwrap();
    let stored = store.get_worker(&worker.id).await.unwrap().unwrap();
    assert_eq!(
        stored.last_probe_error.as_deref(),
        Some("capabilities said \u{FFFD}boom\u{FFFD}")
    );

    let job = NewJob {
        id: JobId::generate(),
        kind: "poll".into(),
        dedupe_key: None,
        payload: json!({}),
        run_at: now(),
    };
    store.enqueue_job(&job, now()).await.unwrap();
    let lease = Duration::from_secs(30);
    store
        .claim_job("poll", "instance-a", now(), lease)
        .await
        .unwrap()
        .unwrap();
    assert!(
        store
            .reschedule_job(&job.id, "instance-a", now(), now(), "poll failed: E\u{0}")
            .await
            .unwrap()
    );
    let again = store
        .claim_job("poll", "instance-a", now(), lease)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(again.last_error.as_deref(), Some("poll failed: E\u{FFFD}"));
    assert!(
        store
            .bury_job(&job.id, "instance-a", now(), "gave up: \u{0}")
            .await
            .unwrap()
    );
}

/// Stores a contract of `seeker` with `worker` created at `created_at`, in `state`.
async fn contract_at(
    store: &Store,
    seeker: &PrincipalId,
    worker: &WorkerListing,
    created_at: DateTime<Utc>,
    state: &str,
) -> ContractId {
    let contract_id = ContractId::generate();
    let contract = NewContract {
        contract_id: contract_id.clone(),
        seeker_id: seeker.clone(),
        worker_id: worker.id.clone(),
        task_type: "summarize".into(),
        terms: signed_terms(contract_id.as_str(), worker.id.as_str(), 1, &json!({})),
        parsed_terms: None,
        terms_hash: format!("sha256:{}", ulid::Ulid::new()),
        gateway_jws: "eyJ.payload.sig".into(),
        state: state.parse().unwrap(),
        payment_offer: None,
        deadline_at: None,
        created_at,
    };
    store
        .insert_contract(&contract, &event(EventKind::ContractOffered))
        .await
        .unwrap();
    contract_id
}

async fn contracts_are_listed_newest_first_in_pages(store: Store) {
    let (seeker, other_seeker) = (
        PrincipalId::generate_seeker(),
        PrincipalId::generate_seeker(),
    );
    let (operator, other_operator) = (
        PrincipalId::generate_operator(),
        PrincipalId::generate_operator(),
    );
    let worker = listing(&operator, &[("summarize", "1")]);
    let other_worker = listing(&other_operator, &[("summarize", "1")]);
    insert(&store, &worker).await;
    insert(&store, &other_worker).await;
    let base = now() - chrono::Duration::hours(1);
    // Five contracts share one millisecond: only the id orders them, and pages must neither
    // skip nor repeat one.
    let mut mine = Vec::new();
    for i in 0..8_i64 {
        let at = base + chrono::Duration::milliseconds(i.min(4));
        let state = if i % 2 == 0 { "offered" } else { "settled" };
        mine.push((at, contract_at(&store, &seeker, &worker, at, state).await));
    }
    let theirs = contract_at(&store, &other_seeker, &other_worker, base, "offered").await;
    mine.sort_by(|a, b| b.cmp(a));
    let expected: Vec<ContractId> = mine.iter().map(|(_, id)| id.clone()).collect();

    let mut seen = Vec::new();
    let mut after = None;
    loop {
        let page = store
            .list_contracts(&ContractQuery {
                seeker_id: Some(seeker.clone()),
                after: after.clone(),
                limit: 3,
                ..ContractQuery::default()
            })
            .await
            .unwrap();
        seen.extend(page.iter().map(|c| c.contract_id.clone()));
        match page.last() {
            Some(last) if page.len() == 3 => {
                after = Some((last.created_at, last.contract_id.clone()));
            }
            _ => break,
        }
    }
    assert_eq!(
        seen, expected,
        "newest first, ties by id, no gaps or repeats"
    );

    let all = |query: ContractQuery| {
        let store = store.clone();
        async move {
            store
                .list_contracts(&ContractQuery {
                    limit: 100,
                    ..query
                })
                .await
                .unwrap()
                .into_iter()
                .map(|c| c.contract_id)
                .collect::<Vec<_>>()
        }
    };
    let everything = all(ContractQuery::default()).await;
    assert_eq!(everything.len(), 9);
    assert!(everything.contains(&theirs));
    assert_eq!(
        all(ContractQuery {
            operator_id: Some(other_operator.clone()),
            ..ContractQuery::default()
        })
        .await,
        vec![theirs.clone()]
    );
    assert_eq!(
        all(ContractQuery {
            operator_id: Some(operator.clone()),
            ..ContractQuery::default()
        })
        .await,
        expected
    );
    let settled = all(ContractQuery {
        seeker_id: Some(seeker.clone()),
        state: Some("settled".into()),
        ..ContractQuery::default()
    })
    .await;
    assert_eq!(settled.len(), 4);
    assert_eq!(
        all(ContractQuery {
            worker_id: Some(other_worker.id.clone()),
            ..ContractQuery::default()
        })
        .await,
        vec![theirs]
    );
    // created_after is inclusive, created_before exclusive.
    let window = all(ContractQuery {
        seeker_id: Some(seeker.clone()),
        created_after: Some(base + chrono::Duration::milliseconds(1)),
        created_before: Some(base + chrono::Duration::milliseconds(3)),
        ..ContractQuery::default()
    })
    .await;
    let in_window: Vec<ContractId> = mine
        .iter()
        .filter(|(at, _)| {
            *at >= base + chrono::Duration::milliseconds(1)
                && *at < base + chrono::Duration::milliseconds(3)
        })
        .map(|(_, id)| id.clone())
        .collect();
    assert_eq!(in_window.len(), 2);
    assert_eq!(window, in_window);
}

async fn api_keys_are_listed_revoked_and_rotated(store: Store) {
    let owner = PrincipalId::generate_seeker();
    let other = PrincipalId::generate_seeker();
    let mut keys = Vec::new();
    for principal in [&owner, &owner, &other] {
        let key = NewApiKey {
            id: ApiKeyId::generate(),
            hash: ApiKeyHash::of(&format!("secret-{}", ulid::Ulid::new())),
            display_prefix: "hg_sk_abcd".into(),
            role: Role::Seeker,
            principal_id: principal.clone(),
            label: Some("ci".into()),
            created_at: now(),
        };
        store.insert_api_key(&key).await.unwrap();
        keys.push(key);
    }
    let listed = store
        .list_api_keys(Some(&owner), false, None, 10)
        .await
        .unwrap();
    assert_eq!(listed.len(), 2);
    assert_eq!(
        store
            .list_api_keys(None, false, None, 10)
            .await
            .unwrap()
            .len(),
        3
    );
    let first_page = store.list_api_keys(None, false, None, 2).await.unwrap();
    let rest = store
        .list_api_keys(None, false, Some(&first_page[1].record.id), 2)
        .await
        .unwrap();
    assert_eq!(first_page.len() + rest.len(), 3);

    // Another owner's key is not revoked; the owner's is, once.
    assert!(
        store
            .revoke_api_key_by_id(&keys[0].id, Some(&other), now())
            .await
            .unwrap()
            .is_none()
    );
    let revoked = store
        .revoke_api_key_by_id(&keys[0].id, Some(&owner), now())
        .await
        .unwrap()
        .unwrap();
    assert_eq!(revoked.hash, keys[0].hash);
    assert!(revoked.info.revoked_at.is_some());
    assert!(store.find_api_key(&keys[0].hash).await.unwrap().is_none());
    assert!(
        store
            .revoke_api_key_by_id(&keys[0].id, None, now())
            .await
            .unwrap()
            .is_none()
    );
    assert_eq!(
        store
            .list_api_keys(Some(&owner), true, None, 10)
            .await
            .unwrap()
            .len(),
        2
    );

    // Rotation: the old key revoked and the new one stored in one step, or nothing at all.
    let replacement = NewApiKey {
        id: ApiKeyId::generate(),
        hash: ApiKeyHash::of("rotated"),
        display_prefix: "hg_sk_ef01".into(),
        role: Role::Seeker,
        principal_id: owner.clone(),
        label: Some("ci".into()),
        created_at: now(),
    };
    let declined = store
        .rotate_api_key(&keys[1].id, None, now(), |_| None)
        .await
        .unwrap();
    assert!(declined.is_none());
    assert!(store.find_api_key(&keys[1].hash).await.unwrap().is_some());
    let (old, new) = store
        .rotate_api_key(&keys[1].id, Some(&owner), now(), |old| {
            assert_eq!(old.principal_id, owner);
            Some(replacement.clone())
        })
        .await
        .unwrap()
        .unwrap();
    assert_eq!(old.hash, keys[1].hash);
    assert_eq!(new.id, replacement.id);
    assert!(store.find_api_key(&keys[1].hash).await.unwrap().is_none());
    assert!(
        store
            .find_api_key(&replacement.hash)
            .await
            .unwrap()
            .is_some()
    );
}

async fn listing_metadata_round_trips(store: Store) {
    let operator = PrincipalId::generate_operator();
    let mut worker = listing(&operator, &[("summarize", "1")]);
    worker.metadata = serde_json::from_value(json!({
        "name": "Summarizer \u{1F600}",
        "description": "Summarizes text.",
        "input_schema": {"type": "object", "required": ["text"]},
        "examples": [{"text": "hello"}],
    }))
    .unwrap();
    insert(&store, &worker).await;
    let stored = store.get_worker(&worker.id).await.unwrap().unwrap();
    assert_eq!(stored.metadata, worker.metadata);
    let bare = listing(&operator, &[("summarize", "1")]);
    insert(&store, &bare).await;
    let stored = store.get_worker(&bare.id).await.unwrap().unwrap();
    assert_eq!(stored.metadata, Default::default());
}

/// A sign-in-with-x nonce is claimed once among every instance sharing the database: of 16
/// concurrent claims through two stores (two instances' pools) exactly one wins; once its
/// proof could no longer be accepted anyway the row is purged by the next claim.
async fn siwx_nonces_are_claimed_once_across_instances(database: &TestDatabase) {
    let (first, second) = (open(database).await, open(database).await);
    let now = Utc::now();
    let until = now + chrono::Duration::minutes(5);
    let claims = (0..16).map(|i| {
        let store = if i % 2 == 0 { &first } else { &second };
        async move {
            store
                .claim_siwx_nonce("a1b2c3d4e5f67890", until, now)
                .await
                .unwrap()
        }
    });
    let won = futures::future::join_all(claims).await;
    assert_eq!(won.iter().filter(|w| **w).count(), 1, "{won:?}");
    assert!(
        !second
            .claim_siwx_nonce("a1b2c3d4e5f67890", until, now)
            .await
            .unwrap()
    );
    // Past its window the claim is purged; the nonce's proof is refused by its age by then.
    let later = until + chrono::Duration::seconds(1);
    assert!(
        first
            .claim_siwx_nonce("ffffffffffffffff", later, later)
            .await
            .unwrap()
    );
    assert!(
        second
            .claim_siwx_nonce("a1b2c3d4e5f67890", later, later)
            .await
            .unwrap()
    );
}
