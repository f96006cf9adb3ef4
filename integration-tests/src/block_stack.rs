//! Paid hires at real block times: anvil mining every second or two, one or more `hiregate
//! serve` processes on the shipped defaults (embedded facilitator, batching and nonces as
//! shipped), the echo worker with a slot for every hire in flight, and seekers paying `exact` or
//! `auth-capture` (authorize and capture both on chain) with the project's own client.
//!
//! | part | what |
//! |---|---|
//! | chain | real anvil; accounts are funded under automine, then [`BlockStack::mine_every`] sets the block time |
//! | gateways | the real binary as children, `facilitator.mode = "embedded"`; each instance its own relayer key unless [`RelayerKeys::Shared`]; one escrow operator key for all (offers name it) |
//! | database | SQLite for one instance, or a URL (one PostgreSQL for several) |
//! | worker | the echo worker in the test process, `max_parallel` and slots [`BlockStackOptions::worker_slots`] |
//! | seekers | `c` concurrent clients, each paying fresh wallets funded with twice the price (a second payment would show in the balance) |
//!
//! [`BlockStack::run`] measures a load ([`LoadReport`]: hires per second, latency in blocks,
//! transactions and payments per block); [`BlockStack::check_money`] compares every balance
//! with what the hires should have moved, to the atomic unit; [`BlockStack::reconcile`] runs
//! `hiregate reconcile`.

use std::{
    collections::BTreeMap,
    path::Path,
    sync::Arc,
    time::{Duration, Instant},
};

use alloy::{
    primitives::{Address, U256},
    providers::Provider as _,
    rpc::types::{Filter, TransactionInput, TransactionRequest},
    signers::local::PrivateKeySigner,
    sol_types::{SolCall as _, SolEvent as _},
};
use futures::{StreamExt as _, stream};
use hiregate_payments::{
    AuthCaptureSignOptions, PaymentPayload, auth_capture::abi::IAuthCaptureEscrow, devnet::Devnet,
    exact::onchain::IEip3009Token, sign_auth_capture_payment, sign_exact_payment,
};
use hiregate_worker_sdk::{
    GatewayKeys, RunningServer,
    example_workers::{echo_builder, echo_handler},
    seeker::SeekerClient,
};
use serde_json::json;
use url::Url;

use crate::{
    harness::{
        Binaries, CliRun, GatewayConfig, GatewayProcess, HarnessError, HarnessResult, PRICE,
        checked_json, list_summarize_worker, summarize_proposal,
    },
    money_stack::Database,
};

/// Which scheme a load pays with.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Scheme {
    /// `exact` (EIP-3009): one settlement after the work, batched with others.
    Exact,
    /// `auth-capture`: authorize before the work, capture after it, two escrow transactions.
    AuthCapture,
}

impl Scheme {
    /// The x402 scheme name.
    pub fn name(self) -> &'static str {
        match self {
            Self::Exact => "exact",
            Self::AuthCapture => "auth-capture",
        }
    }
}

/// Which relayer key each gateway instance settles with.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RelayerKeys {
    /// A key of its own per instance (the recommended set-up).
    OwnPerInstance,
    /// One key for every instance.
    Shared,
}

/// How to start a [`BlockStack`].
#[derive(Debug, Clone)]
pub struct BlockStackOptions {
    /// How many gateway instances share the database.
    pub instances: usize,
    /// Their database (several instances need PostgreSQL).
    pub database: Database,
    /// Relayer keys of the instances.
    pub relayer_keys: RelayerKeys,
    /// The worker's `max_parallel` and concurrent tasks.
    pub worker_slots: u32,
    /// The listing's marketplace fee on escrowed hires.
    pub fee_bps: u16,
}

impl Default for BlockStackOptions {
    fn default() -> Self {
        Self {
            instances: 1,
            database: Database::Sqlite,
            relayer_keys: RelayerKeys::OwnPerInstance,
            worker_slots: 512,
            fee_bps: 250,
        }
    }
}

/// One paid hire of a load.
#[derive(Debug, Clone)]
pub struct HireRecord {
    /// How it paid.
    pub scheme: Scheme,
    /// The contract, once proposed.
    pub contract_id: Option<String>,
    /// The wallet that paid.
    pub payer: Address,
    /// HTTP status of the paid execute (0 when it never answered).
    pub status: u16,
    /// Whether the answer carried `PAYMENT-RESPONSE` with a success.
    pub settled: bool,
    /// From sending the payment to the answer.
    pub latency: Duration,
    /// Why it failed, when it did.
    pub error: Option<String>,
}

impl HireRecord {
    /// Answered 200 with a successful `PAYMENT-RESPONSE`.
    pub fn ok(&self) -> bool {
        self.status == 200 && self.settled && self.error.is_none()
    }
}

/// What one load did, as the seekers and the chain saw it.
#[derive(Debug, Clone)]
pub struct LoadReport {
    /// The scheme.
    pub scheme: Scheme,
    /// Concurrent seekers.
    pub concurrency: usize,
    /// The chain's block time.
    pub block_time: Duration,
    /// Every hire.
    pub hires: Vec<HireRecord>,
    /// From the first payment to the last answer.
    pub elapsed: Duration,
    /// Blocks mined during the load (first, last).
    pub blocks: (u64, u64),
    /// Transactions per block, over the blocks that carried any.
    pub transactions_per_block: BlockCounts,
    /// Payments reaching the worker per block (transfers to its payout address: `exact`
    /// settlements, escrow captures), over the blocks that carried any.
    pub payouts_per_block: BlockCounts,
}

/// A count per block: mean and most over the blocks where it was not zero.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct BlockCounts {
    /// Mean.
    pub mean: f64,
    /// Most in one block.
    pub max: usize,
    /// Blocks counted.
    pub blocks: usize,
}

impl BlockCounts {
    fn of(counts: &BTreeMap<u64, usize>) -> Self {
        let busy: Vec<usize> = counts.values().copied().filter(|n| *n > 0).collect();
        if busy.is_empty() {
            return Self::default();
        }
        Self {
            mean: busy.iter().sum::<usize>() as f64 / busy.len() as f64,
            max: busy.iter().copied().max().unwrap_or(0),
            blocks: busy.len(),
        }
    }
}

impl LoadReport {
    /// Hires that did not end in 200 with a settled payment.
    pub fn failures(&self) -> usize {
        self.hires.iter().filter(|hire| !hire.ok()).count()
    }

    /// Completed hires per second.
    pub fn hires_per_second(&self) -> f64 {
        self.hires.len() as f64 / self.elapsed.as_secs_f64().max(f64::EPSILON)
    }

    /// The `q` quantile (0..=1) of the hires' latencies.
    pub fn latency(&self, q: f64) -> Duration {
        let mut latencies: Vec<Duration> = self.hires.iter().map(|hire| hire.latency).collect();
        latencies.sort_unstable();
        if latencies.is_empty() {
            return Duration::ZERO;
        }
        let index = ((latencies.len() - 1) as f64 * q).round() as usize;
        latencies[index]
    }

    /// The `q` quantile of the latencies in blocks; `None` on a chain that mines per
    /// transaction.
    pub fn latency_blocks(&self, q: f64) -> Option<f64> {
        (!self.block_time.is_zero())
            .then(|| self.latency(q).as_secs_f64() / self.block_time.as_secs_f64())
    }

    /// The header of [`Self::row`].
    pub fn header() -> &'static str {
        "| block | scheme | c | hires | hires/s | p50 ms | p50 blocks | p99 blocks | tx/block (max) | payouts/block (max) | failures | double payments |\n|---|---|---|---|---|---|---|---|---|---|---|---|"
    }

    /// One table row; `double_payments` from [`BlockStack::check_money`].
    pub fn row(&self, double_payments: usize) -> String {
        let blocks = |q| {
            self.latency_blocks(q)
                .map_or_else(|| "-".to_owned(), |blocks| format!("{blocks:.2}"))
        };
        let block = if self.block_time.is_zero() {
            "auto".to_owned()
        } else {
            format!("{} s", self.block_time.as_secs())
        };
        format!(
            "| {block} | {} | {} | {} | {:.1} | {} | {} | {} | {:.1} ({}) | {:.1} ({}) | {} | {} |",
            self.scheme.name(),
            self.concurrency,
            self.hires.len(),
            self.hires_per_second(),
            self.latency(0.5).as_millis(),
            blocks(0.5),
            blocks(0.99),
            self.transactions_per_block.mean,
            self.transactions_per_block.max,
            self.payouts_per_block.mean,
            self.payouts_per_block.max,
            self.failures(),
            double_payments,
        )
    }
}

/// What the chain says about a load's money.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MoneyCheck {
    /// Payers charged more than once.
    pub double_payments: usize,
    /// Payers of a hire answered 200 that were never charged.
    pub unpaid: usize,
    /// What the worker's payout address received, and what it should have.
    pub worker: (U256, U256),
    /// What the treasury received, and what it should have.
    pub treasury: (U256, U256),
    /// What the escrow still holds for the operator.
    pub held: U256,
}

impl MoneyCheck {
    /// Every payment moved exactly once, to the atomic unit.
    pub fn exact(&self) -> bool {
        self.double_payments == 0
            && self.unpaid == 0
            && self.worker.0 == self.worker.1
            && self.treasury.0 == self.treasury.1
            && self.held.is_zero()
    }
}

/// The deployment (see the module doc). Fields drop in order: gateways, worker, chain, files.
pub struct BlockStack {
    /// The gateway instances.
    pub gateways: Vec<GatewayProcess>,
    worker: RunningServer,
    /// The chain.
    pub devnet: Devnet,
    /// The relayer address of each instance.
    pub relayers: Vec<Address>,
    /// The escrow operator (one for all instances).
    pub operator: Address,
    /// The escrow's fee recipient.
    pub treasury: Address,
    /// The worker's payout address.
    pub pay_to: Address,
    fee_bps: u16,
    seeker_key: String,
    worker_id: String,
    block_time: Duration,
    http: reqwest::Client,
    bins: Binaries,
    dir: tempfile::TempDir,
}

impl std::fmt::Debug for BlockStack {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("BlockStack")
            .field("instances", &self.gateways.len())
            .field("block_time", &self.block_time)
            .finish_non_exhaustive()
    }
}

impl BlockStack {
    /// Starts the chain (automine until [`Self::mine_every`]), the gateways and the worker, and
    /// lists the worker for both schemes.
    pub async fn start(bins: Binaries, options: BlockStackOptions) -> HarnessResult<Self> {
        let dir = tempfile::tempdir().map_err(|source| HarnessError::File {
            path: std::env::temp_dir(),
            source,
        })?;
        let devnet = Devnet::start().await?;
        let database_url = match &options.database {
            Database::Sqlite => format!("sqlite://{}", dir.path().join("hiregate.db").display()),
            Database::Url(url) => url.clone(),
        };
        let admin_key = format!("hg_admin_{}", uuid::Uuid::new_v4().simple());
        let operator = devnet.fresh_relayer().await?;
        let treasury = PrivateKeySigner::random().address();
        let shared_relayer = devnet.fresh_relayer().await?;
        let mut gateways = Vec::with_capacity(options.instances);
        let mut relayers = Vec::with_capacity(options.instances);
        for index in 0..options.instances.max(1) {
            let relayer = match options.relayer_keys {
                RelayerKeys::OwnPerInstance => devnet.fresh_relayer().await?,
                RelayerKeys::Shared => shared_relayer.clone(),
            };
            relayers.push(relayer.address());
            let config = GatewayConfig {
                database_url: database_url.clone(),
                admin_key: admin_key.clone(),
                // Unused: the facilitator is embedded.
                facilitator_url: Url::parse("http://127.0.0.1:9/")?,
                network: devnet.network(),
                rpc_url: devnet.rpc_url().clone(),
                // One key file: every instance signs what the others verify.
                signing_key_path: dir.path().join("gateway-key.json"),
                env: shipped_defaults_env(&relayer, &operator, treasury),
            };
            gateways.push(
                GatewayProcess::start_named(&bins, &config, dir.path(), &format!("gateway{index}"))
                    .await?,
            );
        }
        let first = gateways[0].url();
        let worker = echo_worker(&first, options.worker_slots).await?;
        let http = reqwest::Client::builder()
            .timeout(Duration::from_secs(120))
            .pool_max_idle_per_host(1_024)
            .build()?;
        let listed = list_summarize_worker(
            &http,
            &first,
            &admin_key,
            &worker.base_url(),
            &devnet,
            options.worker_slots,
        )
        .await?;
        checked_json(
            "PATCH /v1/workers/{id}",
            http.patch(first.join(&format!("v1/workers/{}", listed.worker_id))?)
                .bearer_auth(&listed.operator_key)
                .json(&json!({
                    "payment_schemes": ["exact", "auth-capture"],
                    "fee_policy": {"fee_bps": options.fee_bps},
                }))
                .send()
                .await?,
        )
        .await?;
        Ok(Self {
            gateways,
            worker,
            devnet,
            relayers,
            operator: operator.address(),
            treasury,
            pay_to: listed.pay_to,
            fee_bps: options.fee_bps,
            seeker_key: listed.seeker_key,
            worker_id: listed.worker_id,
            block_time: Duration::ZERO,
            http,
            bins,
            dir,
        })
    }

    /// The directory of configs, logs and the SQLite file.
    pub fn dir(&self) -> &Path {
        self.dir.path()
    }

    /// The worker's base URL.
    pub fn worker_url(&self) -> Url {
        self.worker.base_url()
    }

    /// `count` fresh payers with twice the price each, funded a block per transaction.
    /// Leaves the chain mining a block per transaction: call [`Self::mine_every`] after.
    pub async fn payers(&mut self, count: usize) -> HarnessResult<Vec<PrivateKeySigner>> {
        self.devnet.set_automine(true).await?;
        self.block_time = Duration::ZERO;
        let mut payers = Vec::with_capacity(count);
        for _ in 0..count {
            payers.push(self.devnet.funded_account(U256::from(2 * PRICE)).await?);
        }
        Ok(payers)
    }

    /// A block every `block_time` (whole seconds) from now on.
    pub async fn mine_every(&mut self, block_time: Duration) -> HarnessResult<()> {
        self.devnet.set_interval_mining(block_time).await?;
        self.block_time = block_time;
        Ok(())
    }

    /// `payers.len()` paid hires of `scheme`, `concurrency` at a time, spread over the
    /// instances in turn; each payer pays once.
    pub async fn run(
        &self,
        scheme: Scheme,
        concurrency: usize,
        payers: &[PrivateKeySigner],
    ) -> HarnessResult<LoadReport> {
        let provider = self.devnet.provider();
        let first_block = provider.get_block_number().await?;
        let started = Instant::now();
        let hires: Vec<HireRecord> = stream::iter(payers.iter().enumerate())
            .map(|(index, payer)| self.hire(index, scheme, payer))
            .buffer_unordered(concurrency.max(1))
            .collect()
            .await;
        let elapsed = started.elapsed();
        // Whatever the last answers sent (a capture's block) is mined by now or in a block.
        let last_block = provider.get_block_number().await?;
        let (transactions, payouts) = self.block_counts(first_block + 1, last_block).await?;
        Ok(LoadReport {
            scheme,
            concurrency,
            block_time: self.block_time,
            hires,
            elapsed,
            blocks: (first_block + 1, last_block),
            transactions_per_block: BlockCounts::of(&transactions),
            payouts_per_block: BlockCounts::of(&payouts),
        })
    }

    /// One paid hire through instance `index % instances`: propose, 402, sign, pay.
    async fn hire(&self, index: usize, scheme: Scheme, payer: &PrivateKeySigner) -> HireRecord {
        let mut record = HireRecord {
            scheme,
            contract_id: None,
            payer: payer.address(),
            status: 0,
            settled: false,
            latency: Duration::ZERO,
            error: None,
        };
        let gateway = self.gateways[index % self.gateways.len()].url();
        let seeker = SeekerClient::new(gateway, self.seeker_key.clone(), Arc::new(payer.clone()))
            .with_http_client(self.http.clone());
        let prepared = async {
            let mut proposal = summarize_proposal(
                &self.worker_id,
                &json!({"text": format!("paid hire {index} over {}", scheme.name())}),
                30_000,
            );
            if scheme == Scheme::AuthCapture {
                proposal["payment_scheme"] = json!("auth-capture");
            }
            let contract = seeker
                .propose(&proposal)
                .await
                .map_err(|error| error.to_string())?;
            let challenge = seeker
                .challenge(&contract.id)
                .await
                .map_err(|error| error.to_string())?;
            let payment = sign_offer(payer, &challenge, scheme).await?;
            Ok::<_, String>((contract.id, payment))
        };
        let (contract_id, payment) = match prepared.await {
            Ok(prepared) => prepared,
            Err(error) => {
                record.error = Some(error);
                return record;
            }
        };
        record.contract_id = Some(contract_id.clone());
        let sent = Instant::now();
        let answer = seeker.execute_with_payment(&contract_id, &payment).await;
        record.latency = sent.elapsed();
        match answer {
            Ok(outcome) => {
                record.status = outcome.status;
                record.settled = outcome
                    .payment_response
                    .as_ref()
                    .is_some_and(|response| response.success);
                if !record.ok() {
                    record.error = Some(format!("answered {}: {}", outcome.status, outcome.body));
                }
            }
            Err(error) => record.error = Some(error.to_string()),
        }
        record
    }

    /// Per block from `from` to `to`: the transactions, and the token transfers to the
    /// worker's payout address.
    async fn block_counts(
        &self,
        from: u64,
        to: u64,
    ) -> HarnessResult<(BTreeMap<u64, usize>, BTreeMap<u64, usize>)> {
        let provider = self.devnet.provider();
        let mut transactions = BTreeMap::new();
        for number in from..=to {
            let block = provider
                .get_block_by_number(number.into())
                .await?
                .ok_or_else(|| HarnessError::Payment(format!("block {number} missing")))?;
            transactions.insert(number, block.transactions.len());
        }
        let logs = provider
            .get_logs(
                &Filter::new()
                    .address(self.devnet.token())
                    .event_signature(IEip3009Token::Transfer::SIGNATURE_HASH)
                    .topic2(self.pay_to.into_word())
                    .from_block(from)
                    .to_block(to),
            )
            .await?;
        let mut payouts = BTreeMap::new();
        for log in logs {
            if let Some(number) = log.block_number {
                *payouts.entry(number).or_insert(0) += 1;
            }
        }
        Ok((transactions, payouts))
    }

    /// The chain's account of the money of `loads` (run one after another on this stack from
    /// its start): each payer charged once, the worker and treasury paid exactly, nothing held.
    pub async fn check_money(&self, loads: &[&LoadReport]) -> HarnessResult<MoneyCheck> {
        let fee = U256::from(PRICE) * U256::from(self.fee_bps) / U256::from(10_000u32);
        let (mut worker, mut treasury) = (U256::ZERO, U256::ZERO);
        let (mut double_payments, mut unpaid) = (0, 0);
        for load in loads {
            for hire in &load.hires {
                let left = self.devnet.balance_of(hire.payer).await?;
                // Funded with twice the price: one payment leaves one price.
                if left < U256::from(PRICE) {
                    double_payments += 1;
                }
                if left > U256::from(PRICE) {
                    if hire.ok() {
                        unpaid += 1;
                    }
                    continue;
                }
                match hire.scheme {
                    Scheme::Exact => worker += U256::from(PRICE),
                    Scheme::AuthCapture => {
                        worker += U256::from(PRICE) - fee;
                        treasury += fee;
                    }
                }
            }
        }
        Ok(MoneyCheck {
            double_payments,
            unpaid,
            worker: (self.devnet.balance_of(self.pay_to).await?, worker),
            treasury: (self.devnet.balance_of(self.treasury).await?, treasury),
            held: self.escrow_held().await?,
        })
    }

    /// The operator's token store balance: what the escrow still holds.
    async fn escrow_held(&self) -> HarnessResult<U256> {
        let call = IAuthCaptureEscrow::getTokenStoreCall {
            operator: self.operator,
        };
        let request = TransactionRequest::default()
            .to(self.devnet.auth_capture_escrow())
            .input(TransactionInput::new(call.abi_encode().into()));
        let bytes = self.devnet.provider().call(request).await?;
        let store = IAuthCaptureEscrow::getTokenStoreCall::abi_decode_returns(&bytes)
            .map_err(|error| HarnessError::Payment(format!("getTokenStore: {error}")))?;
        Ok(self.devnet.balance_of(store).await?)
    }

    /// `hiregate reconcile --json` with the first instance's configuration.
    pub async fn reconcile(&self) -> HarnessResult<CliRun> {
        self.gateways[0]
            .run_cli(
                &self.bins,
                &["reconcile", "--json"],
                Duration::from_secs(120),
            )
            .await
    }

    /// How many times each instance logged `needle` (JSON logs, one event a line).
    pub fn log_count(&self, needle: &str) -> Vec<usize> {
        self.gateways
            .iter()
            .map(|gateway| {
                gateway
                    .process_ref()
                    .output(crate::harness::Stream::Stdout)
                    .matches(needle)
                    .count()
            })
            .collect()
    }

    /// Waits until every instance has logged a line holding all of `needles` (e.g. that it
    /// learned another instance sends from a key), or fails with the logs after `within`.
    pub async fn wait_for_log(&self, needles: &[&str], within: Duration) -> HarnessResult<()> {
        let deadline = Instant::now() + within;
        loop {
            let logged = self.gateways.iter().all(|gateway| {
                gateway
                    .process_ref()
                    .output(crate::harness::Stream::Stdout)
                    .lines()
                    .any(|line| needles.iter().all(|needle| line.contains(needle)))
            });
            if logged {
                return Ok(());
            }
            if Instant::now() >= deadline {
                return Err(HarnessError::Payment(format!(
                    "not every instance logged {needles:?} within {within:?}:\n{}",
                    self.logs()
                )));
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// Log tails of every instance.
    pub fn logs(&self) -> String {
        self.gateways
            .iter()
            .map(|gateway| gateway.process_ref().log_tail())
            .collect::<Vec<_>>()
            .join("\n")
    }
}

/// The gateway's environment: the shipped defaults but for what an embedded facilitator and an
/// escrow operator need (the harness's config file sets a few test values; `verify_timeout_ms`
/// is put back to the shipped one).
fn shipped_defaults_env(
    relayer: &PrivateKeySigner,
    operator: &PrivateKeySigner,
    treasury: Address,
) -> Vec<(String, String)> {
    let default = |key: &str| {
        hiregate_engine::settings::DEFAULT_CONFIG_TOML
            .lines()
            .find_map(|line| {
                line.trim()
                    .strip_prefix(key)
                    .and_then(|rest| rest.trim_start().strip_prefix('='))
                    .map(|value| value.trim().to_owned())
            })
    };
    let mut env = vec![
        (
            "HIREGATE_FACILITATOR__MODE".to_owned(),
            "embedded".to_owned(),
        ),
        (
            "HIREGATE_CHAINS__DEVNET__RELAYER_PRIVATE_KEY".to_owned(),
            relayer.to_bytes().to_string(),
        ),
        (
            "HIREGATE_CHAINS__DEVNET__OPERATOR_PRIVATE_KEY".to_owned(),
            operator.to_bytes().to_string(),
        ),
        (
            "HIREGATE_ESCROW__TREASURY".to_owned(),
            treasury.to_checksum(None),
        ),
    ];
    if let Some(verify_timeout) = default("verify_timeout_ms") {
        env.push((
            "HIREGATE_FACILITATOR__VERIFY_TIMEOUT_MS".to_owned(),
            verify_timeout,
        ));
    }
    env
}

/// The echo worker trusting `gateway`'s contract tokens, `slots` tasks at once.
async fn echo_worker(gateway: &Url, slots: u32) -> HarnessResult<RunningServer> {
    let keys = GatewayKeys::remote(gateway.join(".well-known/jwks.json")?);
    let worker = echo_builder()
        .gateway_keys(keys)
        .max_concurrent_tasks(slots as usize)
        .build(echo_handler())
        .map_err(|error| HarnessError::Stop {
            name: "echo-worker".to_owned(),
            reason: format!("cannot build: {error}"),
        })?;
    hiregate_worker_sdk::serve(
        worker.router(),
        ([127, 0, 0, 1], 0).into(),
        std::future::pending(),
    )
    .await
    .map_err(|source| HarnessError::File {
        path: "127.0.0.1:0".into(),
        source,
    })
}

/// `payer`'s payment for the `scheme` offer of `challenge`, echoing its extensions.
async fn sign_offer(
    payer: &PrivateKeySigner,
    challenge: &hiregate_payments::PaymentRequired,
    scheme: Scheme,
) -> Result<PaymentPayload, String> {
    let offer = challenge
        .accepts
        .iter()
        .find(|offer| offer.scheme == scheme.name())
        .ok_or_else(|| format!("the 402 offers no {}", scheme.name()))?;
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|elapsed| elapsed.as_secs())
        .unwrap_or_default();
    let resource = Some(challenge.resource.clone());
    let mut payment = match scheme {
        Scheme::Exact => sign_exact_payment(payer, offer, resource, now)
            .await
            .map_err(|error| error.to_string())?,
        Scheme::AuthCapture => sign_auth_capture_payment(
            payer,
            offer,
            resource,
            now,
            &AuthCaptureSignOptions::default(),
        )
        .await
        .map_err(|error| error.to_string())?,
    };
    payment.extensions = challenge.extensions.clone();
    Ok(payment)
}
