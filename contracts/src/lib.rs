//! # hiregate-contracts
//!
//! The pure domain at the bottom of the hiregate workspace: what a contract between a seeker
//! and a worker *is*, how it is hashed and signed, how it moves through its lifecycle, and how
//! a deliverable is judged. No I/O, no async, no clock: time and fetched evidence are passed in,
//! so every function here is deterministic and replayable.
//!
//! ## Modules
//!
//! | module | what it holds |
//! |---|---|
//! | [`id`] | prefixed, sortable ids, the workspace's one vocabulary: `ctr_…`, `wk_…`, `skr_…`, `opr_…`, `dsp_…`, `att_…`, `rct_…`, `key_…`, `job_…`, principals (`skr_`/`opr_`), correlation ids |
//! | [`time`] | [`Timestamp`](time::Timestamp): UTC, millisecond precision, one spelling |
//! | [`money`] | CAIP-2 [`Network`](money::Network), EIP-55 [`EvmAddress`](money::EvmAddress), [`AtomicAmount`](money::AtomicAmount), [`Price`](money::Price) |
//! | [`canonical`] | RFC 8785 canonical JSON and the `sha256:<hex>` [`Digest`](canonical::Digest) |
//! | [`schema`] | output JSON Schemas admitted under limits (hostile-schema defences) and the [`SchemaCache`](schema::SchemaCache) |
//! | [`policy`] | verification policies, typed params, [`PolicyBinding`](policy::PolicyBinding) and `policy_hash` |
//! | [`metering`] | metered (`upto`) prices: the unit, its price and the most units pinned in the terms; what the verified units cost |
//! | [`payment_flow`] | when the money moves relative to the work (`authorization`, `upfront`, `escrow`); the upfront flow's consequence, pinned word for word in the terms |
//! | [`escrow`] | what an escrowed (`auth-capture`) contract pins: escrow, capture authorizer, deadlines, fee bounds, fee recipient |
//! | [`terms`] | [`ContractTerms`](terms::ContractTerms) built from a seeker's proposal and a worker's offer; `terms_hash` |
//! | [`did`] | DID names of the gateway keys (`did:key`, `did:web`) and its DID document, for signatures whose `kid` is a DID URL (x402 `offer-receipt`) |
//! | [`token`] | gateway JWS (EdDSA, `kid`): contract tokens, signed JSON for receipts, [`KeyRing`](token::KeyRing) rotation, [`Jwks`](token::Jwks) |
//! | [`state`] | the lifecycle: [`ContractState`](state::ContractState) + [`ContractEvent`](state::ContractEvent) → `transition` |
//! | [`deliverable`] | the one internal [`Deliverable`](deliverable::Deliverable) form and its digest |
//! | [`wire`] | HIRE, WattSwarm and Superwire shapes and their conversion into deliverables |
//! | [`verdict`] | [`VerificationStatus`](verdict::VerificationStatus): passed, failed or inconclusive, shared by the verifier and the WattSwarm wire |
//! | [`verify`] | the deterministic [`Verifier`](verify::Verifier): evidence checks, schemas, thresholds, cross-check quorum |
//! | [`receipt`] | the gateway-signed [`Receipt`](receipt::Receipt) of a terminal contract and offline [`verify_receipt`](receipt::verify_receipt) |
//! | [`reputation`] | a worker listing's figures from its verified, paid outcomes only (self-dealing excluded, 7 d / 30 d / all), the signed [`ReputationSnapshot`](reputation::ReputationSnapshot) and offline [`verify_reputation_snapshot`](reputation::verify_reputation_snapshot) |
//! | [`webhook`] | Standard Webhooks signing and verification (`whsec_` secrets): worker callbacks and seeker webhooks, both ends |
//! | [`reason`] | WattSwarm-numbered `u16` reason codes |
//!
//! ## Main flow (as the gateway uses it)
//!
//! 1. `POST /v1/contracts`: parse the body as [`terms::ContractProposal`], look up the worker's
//!    [`terms::WorkerOffer`], call [`terms::ContractTerms::from_proposal`] (schemas admitted,
//!    policy bound, input digested), then [`terms::ContractTerms::terms_hash`] and
//!    [`token::KeyRing::issue_contract_token`]. Publish [`token::KeyRing::jwks`].
//! 2. Drive the contract with [`state::ContractState::transition`]; persist each event.
//! 3. Convert the worker's answer with [`wire`] into a [`deliverable::Deliverable`], fetch what
//!    [`deliverable::Deliverable::evidence_requests`] lists, and judge it with
//!    [`verify::Verifier::verify`]. Store the deliverable, the evidence and the result: a
//!    dispute replays exactly that call.
//! 4. Workers and seekers check tokens offline with [`token::verify_contract_token`].

#![warn(missing_docs, unreachable_pub)]

pub mod canonical;
pub mod deliverable;
pub mod did;
pub mod escrow;
pub mod id;
pub mod metering;
pub mod money;
pub mod payment_flow;
pub mod policy;
pub mod reason;
pub mod receipt;
pub mod reputation;
pub mod schema;
pub mod state;
pub mod terms;
pub mod time;
pub mod token;
pub mod verdict;
pub mod verify;
pub mod webhook;
pub mod wire;
