//! Golden vectors and property tests for everything hiregate hashes.
//!
//! The golden literals were computed once and pasted in, and cross-checked with an independent
//! canonicalisation (Python `json.dumps(sort_keys=True, separators=(",", ":"))` + `hashlib`). If one of these tests fails, a hash
//! that is already inside signed contracts, receipts or WattSwarm votes has changed meaning:
//! that is a breaking change, not a test to update casually.

use hiregate_contracts::canonical::{Digest, to_canonical_string};
use hiregate_contracts::deliverable::{Deliverable, Output};
use hiregate_contracts::id::{ContractId, SeekerId, WorkerId};
use hiregate_contracts::money::{AtomicAmount, EvmAddress, Network, PaymentScheme, Price};
use hiregate_contracts::policy::{PolicyBinding, PolicyId, policy_hash};
use hiregate_contracts::schema::{OutputSchema, SchemaLimits};
use hiregate_contracts::terms::{
    ContractProposal, ContractTerms, OfferContext, TermsLimits, WorkerOffer, WorkerParty,
    WorkerProtocol,
};
use hiregate_contracts::verify::{
    EvidenceSet, ResultHashInput, VerificationRequest, Verifier, verifier_result_hash,
};
use proptest::prelude::*;
use serde_json::{Value, json};
use ulid::Ulid;

fn offer() -> WorkerOffer {
    WorkerOffer {
        worker: WorkerParty::new(
            WorkerId::from_ulid(Ulid::from_parts(1_700_000_000_000, 7)),
            "https://worker.example.com/agent".parse().unwrap(),
            WorkerProtocol::Hire,
            "0x5aAeb6053F3E94C9b9A09f33669435E7Ef1BeAed"
                .parse()
                .unwrap(),
        )
        .unwrap(),
        task_type: "code_review".parse().unwrap(),
        price: Price::new(
            PaymentScheme::Exact,
            Network::eip155(84532).unwrap(),
            "0x036CbD53842c5426634e7929541eC2318f3dCF7e"
                .parse()
                .unwrap(),
            AtomicAmount::new(5_000_000),
        )
        .unwrap(),
        output_schema: Some(
            OutputSchema::parse(
                json!({
                    "type": "object",
                    "required": ["score", "issues"],
                    "properties": {
                        "score": {"type": "number", "minimum": 0, "maximum": 10},
                        "issues": {"type": "array", "items": {"type": "object"}}
                    }
                }),
                &SchemaLimits::default(),
            )
            .unwrap(),
        ),
    }
}

fn proposal_json() -> Value {
    json!({
        "worker_id": offer().worker.id(),
        "task_type": "code_review",
        "input": {"repo": "https://git.example.com/app", "files": ["src/main.rs", "src/lib.rs"], "depth": 2, "strict": true, "ratio": 0.25},
        "output_schema": {"type": "object", "properties": {"issues": {"maxItems": 50}}},
        "verification": {
            "policy_id": "vp.schema_thresholds.v1",
            "policy_params": {"thresholds": [{"pointer": "/score", "op": ">=", "value": 5}], "max_len": 65536}
        },
        "sla": {"max_latency_ms": 30000, "poll_window_s": 600},
        "retry_policy": {"max_attempts": 2},
        "webhook_url": "https://seeker.example.com/hooks/hiregate",
        "acceptance_window_s": 600
    })
}

fn context() -> OfferContext {
    OfferContext {
        contract_id: ContractId::from_ulid(Ulid::from_parts(1_738_238_400_000, 1)),
        seeker: SeekerId::from_ulid(Ulid::from_parts(1_700_000_000_000, 3)),
        created_at: "2025-01-30T12:00:00Z".parse().unwrap(),
        offer_ttl_s: 900,
        escrow: None,
    }
}

fn terms_from(proposal: Value) -> ContractTerms {
    let proposal: ContractProposal = serde_json::from_value(proposal).unwrap();
    ContractTerms::from_proposal(proposal, &offer(), context(), &TermsLimits::default()).unwrap()
}

fn golden_terms() -> ContractTerms {
    terms_from(proposal_json())
}

// ---------------------------------------------------------------------------------------------
// Golden vectors
// ---------------------------------------------------------------------------------------------

#[test]
fn golden_canonical_bytes() {
    let value: Value = serde_json::from_str(
        r#"{"z": [3, 1.50, -0.0, 1e21, "é\n"], "a": {"c": null, "b": false}}"#,
    )
    .unwrap();
    assert_eq!(
        to_canonical_string(&value).unwrap(),
        "{\"a\":{\"b\":false,\"c\":null},\"z\":[3,1.5,0,1e+21,\"é\\n\"]}"
    );
}

#[test]
fn golden_terms_hash() {
    let terms = golden_terms();
    assert_eq!(
        terms.contract_id().as_str(),
        "ctr_01JJVHA5G00000000000000001"
    );
    assert_eq!(
        terms.task().input_digest().to_string(),
        "sha256:4c6e55377dcedbfdf6937bcace08868ae8e7ab86befc5dfffd6fa9193f3cd2c1"
    );
    assert_eq!(
        terms.terms_hash().unwrap().to_string(),
        "sha256:dcc1675dcbba8f95a8b43b66d2529560f88b9bd4e9bea1937d52f1c015d3ca44"
    );
}

#[test]
fn golden_policy_hashes() {
    assert_eq!(
        PolicyBinding::schema_only().policy_hash().to_string(),
        "sha256:02bc5d4afd9f63f48473bd7b5136fd4537b364dfdb054015477bdd8901f75394"
    );
    let thresholds = json!({"thresholds": [{"pointer": "/confidence", "op": ">=", "value": 0.8}]});
    assert_eq!(
        policy_hash(PolicyId::SchemaThresholdsV1, &thresholds)
            .unwrap()
            .to_string(),
        "sha256:1b4dc81fc07ae8b7145130db00403ea152bccc0abe3ce12ca20f6f8d26f102a5"
    );
    let crosscheck = json!({
        "references": [{"pointer": "/answer", "equals": "42"}],
        "quorum": {"min_verifiers": 2, "min_pass_ratio": 0.66, "min_score": 0.5}
    });
    assert_eq!(
        policy_hash(PolicyId::CrosscheckV1, &crosscheck)
            .unwrap()
            .to_string(),
        "sha256:6c493442337eb88b90a8af03dc779f1d172b5e23aad5d7065c303e5fed537ae8"
    );
}

fn golden_deliverable() -> Deliverable {
    Deliverable::completed(Output::Json {
        content: json!({"score": 7.5, "issues": [{"line": 42, "severity": "warning"}]}),
    })
    .unwrap()
}

#[test]
fn golden_deliverable_digest() {
    assert_eq!(
        golden_deliverable().digest().unwrap().to_string(),
        "sha256:1fd11ca8dfdb60bd3dec654d04e2432a8310464431f492af3833a69d94d0ad83"
    );
}

#[test]
fn golden_verifier_result_hash() {
    let bare = verifier_result_hash(&ResultHashInput {
        candidate_id: "cand-7a3f",
        execution_id: "exec-4f2a9c",
        passed: true,
        score: 1.0,
        reason_codes: &[],
        provider_family: "swarm-runtime",
        model_id: "swarm-model-v1",
        policy_hash: &PolicyBinding::schema_only().policy_hash(),
    })
    .unwrap();
    assert_eq!(
        bare.to_string(),
        "sha256:70ac4cfbea81364ef32a3b9f7d4b3e91b3639604c1abd7ff1cb589e2d3e4522d"
    );

    let terms = golden_terms();
    let verifier = Verifier::default();
    let result = verifier
        .verify(&VerificationRequest {
            candidate_id: "att_01JJVHA5G00000000000000002",
            execution_id: "att_01JJVHA5G00000000000000002",
            deliverable: &golden_deliverable(),
            output_schemas: terms.task().output_schemas(),
            policy: terms.verification(),
            evidence: &EvidenceSet::new(),
            votes: None,
        })
        .unwrap();
    assert!(result.passed);
    assert_eq!(
        result.verifier_result_hash.to_string(),
        "sha256:0d115094aaf1e1c3b3464b51430ac673e210cbb1ad9a74f1298ffce92953cd12"
    );
}

// ---------------------------------------------------------------------------------------------
// Property tests
// ---------------------------------------------------------------------------------------------

/// A tiny deterministic generator so one proptest seed drives every spelling choice.
struct Choices(u64);

impl Choices {
    fn next(&mut self, bound: u64) -> u64 {
        // xorshift64*
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D) % bound.max(1)
    }

    fn space(&mut self) -> &'static str {
        ["", " ", "\n", "\t ", "  \r\n  "][usize::try_from(self.next(5)).unwrap()]
    }
}

/// Writes `value` as JSON text with shuffled keys, random whitespace and, where `free` is
/// true (inside free-form JSON such as the task input), other spellings of the same numbers.
fn respell(value: &Value, free: bool, path: &str, choices: &mut Choices, out: &mut String) {
    out.push_str(choices.space());
    match value {
        Value::Object(map) => {
            let mut keys: Vec<&String> = map.keys().collect();
            for i in (1..keys.len()).rev() {
                let j = usize::try_from(choices.next(i as u64 + 1)).unwrap();
                keys.swap(i, j);
            }
            out.push('{');
            for (i, key) in keys.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                out.push_str(choices.space());
                out.push_str(&serde_json::to_string(key).unwrap());
                out.push_str(choices.space());
                out.push(':');
                let child_path = format!("{path}/{key}");
                let child_free = free
                    || child_path == "/task/input"
                    || child_path == "/task/output_schemas"
                    || child_path == "/verification/policy_params";
                respell(&map[*key], child_free, &child_path, choices, out);
            }
            out.push_str(choices.space());
            out.push('}');
        }
        Value::Array(items) => {
            out.push('[');
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                respell(item, free, &format!("{path}/{i}"), choices, out);
            }
            out.push_str(choices.space());
            out.push(']');
        }
        Value::Number(number) if free => {
            let plain = number.to_string();
            let spelled = match (number.as_i64(), choices.next(4)) {
                (Some(int), 0) => format!("{int}.0"),
                (Some(int), 1) => format!("{int}e0"),
                (Some(int), 2) if int != 0 => format!("{}e-1", int * 10),
                (None, 1) => format!("{:e}", number.as_f64().unwrap()),
                _ => plain,
            };
            out.push_str(&spelled);
        }
        other => out.push_str(&serde_json::to_string(other).unwrap()),
    }
    out.push_str(choices.space());
}

fn json_leaf() -> impl Strategy<Value = Value> {
    prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::from),
        (-1_000_000i64..1_000_000).prop_map(Value::from),
        (-1000.0f64..1000.0).prop_map(|f| json!((f * 100.0).round() / 100.0)),
        "[a-zA-Z0-9 é€😀_-]{0,12}".prop_map(Value::from),
    ]
}

fn json_value() -> impl Strategy<Value = Value> {
    json_leaf().prop_recursive(4, 48, 6, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..6).prop_map(Value::from),
            prop::collection::btree_map("[a-z_é]{1,8}", inner, 0..6)
                .prop_map(|map| Value::Object(map.into_iter().collect())),
        ]
    })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    #[test]
    fn key_order_whitespace_and_number_spelling_do_not_change_terms_hash(
        input in json_value(),
        seed in any::<u64>(),
    ) {
        let mut proposal = proposal_json();
        proposal["input"] = input;
        let terms = terms_from(proposal);
        let mut text = String::new();
        respell(&serde_json::to_value(&terms).unwrap(), false, "", &mut Choices(seed | 1), &mut text);
        let reparsed: ContractTerms = serde_json::from_str(&text)
            .map_err(|e| TestCaseError::fail(format!("{e}: {text}")))?;
        prop_assert_eq!(reparsed.terms_hash().unwrap(), terms.terms_hash().unwrap());
        prop_assert_eq!(reparsed.task().input_digest(), terms.task().input_digest());
    }

    #[test]
    fn any_term_change_changes_terms_hash(field in 0usize..16, salt in 1u64..1_000_000) {
        let base = golden_terms();
        let mut changed_proposal = proposal_json();
        let mut changed_offer = offer();
        let mut changed_context = context();
        match field {
            0 => changed_proposal["input"]["depth"] = json!(2 + salt),
            1 => changed_proposal["input"]["extra"] = json!(salt),
            2 => changed_proposal["output_schema"]["properties"]["issues"]["maxItems"] = json!(50 + salt),
            3 => changed_proposal["verification"]["policy_params"]["max_len"] = json!(65536 + salt),
            4 => changed_proposal["sla"]["max_latency_ms"] = json!(30000 + 1 + salt % 1000),
            5 => changed_proposal["sla"]["poll_window_s"] = json!(600 + 1 + salt % 1000),
            6 => changed_proposal["retry_policy"]["max_attempts"] = json!(3 + salt % 7),
            7 => changed_proposal["webhook_url"] = json!(format!("https://seeker.example.com/hooks/{salt}")),
            8 => changed_proposal["acceptance_window_s"] = json!(600 + salt),
            9 => {
                changed_context.contract_id = ContractId::from_ulid(Ulid::from_parts(1_738_238_400_000, 1 + u128::from(salt)));
            }
            10 => changed_context.seeker = SeekerId::from_ulid(Ulid::from_parts(1_700_000_000_000, 3 + u128::from(salt))),
            11 => changed_context.created_at = changed_context.created_at.plus_seconds(salt).unwrap(),
            12 => changed_context.offer_ttl_s = 900 + 1 + salt % 1000,
            13 => {
                changed_offer.price = Price::new(
                    PaymentScheme::Exact,
                    changed_offer.price.network(),
                    changed_offer.price.asset(),
                    AtomicAmount::new(5_000_000 + u128::from(salt)),
                ).unwrap();
            }
            14 => {
                let mut bytes = *changed_offer.worker.payout_address().as_bytes();
                bytes[19] ^= u8::try_from(salt % 255 + 1).unwrap();
                changed_offer.worker = WorkerParty::new(
                    changed_offer.worker.id().clone(),
                    changed_offer.worker.endpoint().clone(),
                    changed_offer.worker.protocol(),
                    EvmAddress::from_bytes(bytes),
                ).unwrap();
            }
            _ => {
                changed_offer.worker = WorkerParty::new(
                    changed_offer.worker.id().clone(),
                    format!("https://worker.example.com/agent/{salt}").parse().unwrap(),
                    WorkerProtocol::Wattswarm,
                    changed_offer.worker.payout_address(),
                ).unwrap();
            }
        }
        let proposal: ContractProposal = serde_json::from_value(changed_proposal).unwrap();
        let changed = ContractTerms::from_proposal(proposal, &changed_offer, changed_context, &TermsLimits::default()).unwrap();
        prop_assert_ne!(changed.terms_hash().unwrap(), base.terms_hash().unwrap());
    }

    #[test]
    fn canonical_digest_is_invariant_under_respelling(value in json_value(), seed in any::<u64>()) {
        let mut text = String::new();
        respell(&value, true, "", &mut Choices(seed | 1), &mut text);
        let reparsed: Value = serde_json::from_str(&text).unwrap();
        prop_assert_eq!(Digest::of_canonical(&reparsed).unwrap(), Digest::of_canonical(&value).unwrap());
    }

    #[test]
    fn policy_hash_is_invariant_under_respelling_and_sensitive_to_change(
        value in 0.0f64..1.0, seed in any::<u64>(), bump in 1u32..1000
    ) {
        let value = (value * 1000.0).round() / 1000.0;
        let params = json!({"thresholds": [{"pointer": "/confidence", "op": ">=", "value": value}], "max_len": 1000});
        let mut text = String::new();
        respell(&params, true, "", &mut Choices(seed | 1), &mut text);
        let respelled: Value = serde_json::from_str(&text).unwrap();
        let original = policy_hash(PolicyId::SchemaThresholdsV1, &params).unwrap();
        prop_assert_eq!(policy_hash(PolicyId::SchemaThresholdsV1, &respelled).unwrap(), original);
        let changed = json!({"thresholds": [{"pointer": "/confidence", "op": ">=", "value": value}], "max_len": 1000 + bump});
        prop_assert_ne!(policy_hash(PolicyId::SchemaThresholdsV1, &changed).unwrap(), original);
        prop_assert_ne!(policy_hash(PolicyId::CrosscheckV1, &params).unwrap(), original);
    }
}
