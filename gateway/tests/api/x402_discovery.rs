//! x402 discovery metadata (the `bazaar` extension of the x402 specs) in a real 402: the listing's
//! name, description and input schema and the task's output schema, where x402 catalogues read
//! them, and a payment of that very challenge still settles on chain.

use alloy::primitives::U256;
use hiregate_worker_sdk::example_workers::summary_output_schema;
use reqwest::Method;
use serde_json::{Value, json};

use crate::{
    helpers::TestDatabase,
    hire_env::{PRICE, WorkerKind, hire_env, hire_listing},
};

#[tokio::test]
async fn the_402_carries_the_listings_discovery_metadata() {
    let env = hire_env(TestDatabase::sqlite(), WorkerKind::Echo, 2, "").await;
    let input_schema = json!({
        "type": "object",
        "required": ["text"],
        "properties": {"text": {"type": "string", "maxLength": 1000}},
    });
    let mut listing = hire_listing(&env.worker.endpoint, env.pay_to, &env.devnet, 2);
    listing["name"] = json!("Echo Summarizer");
    listing["description"] = json!("Summarizes short texts; paid per verified summary.");
    listing["input_schema"] = input_schema.clone();
    let response = env.app.register_worker(&env.operator_key, &listing).await;
    assert_eq!(response.status(), 201);
    let worker_id = response.json::<Value>().await.unwrap()["id"]
        .as_str()
        .unwrap()
        .to_owned();
    let input = json!({"text": "catalogue me"});
    let response = env
        .app
        .send_json(
            Method::POST,
            "/v1/contracts",
            Some(&env.seeker_key),
            &json!({"worker_id": worker_id, "task_type": "summarize", "input": input,
                    "sla": {"max_latency_ms": 5000}}),
        )
        .await;
    assert_eq!(response.status(), 201);
    let contract_id = response.json::<Value>().await.unwrap()["contract_id"]
        .as_str()
        .unwrap()
        .to_owned();

    let unpaid = env.execute(&contract_id, None, None).await;
    assert_eq!(unpaid.status, 402);
    let challenge = unpaid.payment_required();
    // The header and the body state the same challenge.
    assert_eq!(
        serde_json::to_value(&challenge).unwrap(),
        unpaid.body["error"]["details"]["payment_required"]
    );
    let resource = serde_json::to_value(&challenge.resource).unwrap();
    assert_eq!(
        resource["description"],
        "Summarizes short texts; paid per verified summary."
    );
    assert_eq!(resource["serviceName"], "Echo Summarizer");
    assert_eq!(resource["tags"], json!(["hiregate", "summarize"]));

    let bazaar = &challenge.extensions["bazaar"];
    assert_eq!(bazaar["info"]["input"]["method"], "POST");
    assert_eq!(bazaar["info"]["input"]["bodyType"], "json");
    assert_eq!(bazaar["info"]["input"]["body"], input);
    let schema = &bazaar["schema"];
    assert_eq!(
        schema["$schema"],
        "https://json-schema.org/draft/2020-12/schema"
    );
    assert_eq!(
        schema["properties"]["input"]["properties"]["body"],
        input_schema
    );
    // The output schema, embedded without its own `$schema` (the embedding document names the
    // dialect).
    let mut output_schema = summary_output_schema();
    output_schema.as_object_mut().unwrap().remove("$schema");
    assert_eq!(
        schema["properties"]["output"]["properties"]["example"],
        output_schema
    );
    // As the spec asks of catalogues: `info` validates against `schema`.
    let validator = jsonschema::validator_for(schema).unwrap();
    assert!(validator.is_valid(&bazaar["info"]));

    // Paying exactly this challenge (extensions and all) settles.
    let before = env.balance(env.pay_to).await;
    let paid = env
        .execute(&contract_id, Some(&env.pay(&challenge).await), None)
        .await;
    assert_eq!(paid.status, 200, "{:?}", paid.body);
    assert_eq!(env.balance(env.pay_to).await, before + U256::from(PRICE));
}
