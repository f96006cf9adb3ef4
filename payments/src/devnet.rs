//! A local EVM for tests and the demo (feature `devnet`): an `anvil` child process with the
//! project's own EIP-3009 token (and a plain ERC-20 for Permit2) deployed on it.
//!
//! - [`Devnet::start`] / [`Devnet::start_with`]: find anvil (`$HIREGATE_ANVIL`, then
//!   `<workspace>/.tools/bin/anvil` from `scripts/install-tools.sh`, then `PATH`), run it on a free
//!   loopback port, wait until it answers, deploy [`bindings::DevnetUsd`]. Every call gets its own
//!   chain, so tests run in parallel; dropping the [`Devnet`] kills anvil.
//! - Multicall3: [`bindings::DevnetMulticall`] at [`MULTICALL3_ADDRESS`], as on public chains.
//! - Escrow (x402 `auth-capture`): look-alikes of base/commerce-payments v1.0.0 at its canonical
//!   addresses, which the official client signs for when an offer names the v1.0 escrow:
//!
//!   | contract | address | constructor immutables |
//!   |---|---|---|
//!   | [`bindings::AuthCaptureEscrow`] | [`AUTH_CAPTURE_ESCROW_ADDRESS`] | none (it CREATE2s its token-store implementation and the per-operator clones from its own address on the first payout) |
//!   | [`bindings::ERC3009PaymentCollector`] | [`ERC3009_COLLECTOR_ADDRESS`] | escrow = the canonical escrow, multicall3 = [`MULTICALL3_ADDRESS`] |
//!   | [`bindings::OperatorRefundCollector`] | [`OPERATOR_REFUND_COLLECTOR_ADDRESS`] | escrow = the canonical escrow |
//!
//!   The collectors' runtime code, immutables included, comes from running their creation code
//!   with those arguments in an `eth_call`; `anvil_setCode` then puts it at the canonical address.
//!   No transaction is sent, so the deployer's nonce (and the token's address) stay as before.
//!   Refunds through the refund collector are paid from the operator's own wallet: approve the
//!   collector on the token first.
//! - Permit2 (x402 `exact` over Permit2, `upto`): look-alikes of Uniswap's Permit2 and of the two
//!   x402 proxies at their canonical addresses, placed the same way, and
//!   [`bindings::DevnetPermitToken`], a plain ERC-20 with EIP-2612 `permit` and no EIP-3009
//!   ([`Devnet::permit_token`]), deployed after the devnet token:
//!
//!   | contract | address | constructor immutables |
//!   |---|---|---|
//!   | [`bindings::Permit2`] | [`PERMIT2_ADDRESS`] | none (its EIP-712 domain uses the address it runs at) |
//!   | [`bindings::X402ExactPermit2Proxy`] | [`EXACT_PERMIT2_PROXY_ADDRESS`] | permit2 = [`PERMIT2_ADDRESS`] |
//!   | [`bindings::X402UptoPermit2Proxy`] | [`UPTO_PERMIT2_PROXY_ADDRESS`] | permit2 = [`PERMIT2_ADDRESS`] |
//!
//!   A payer approves Permit2 on the token once ([`Devnet::approve_permit2`]) or signs an EIP-2612
//!   permit that the settlement submits. [`Devnet::deploy_plain_token`] deploys, on demand,
//!   [`bindings::DevnetPlainToken`], an ERC-20 without EIP-2612 either, which a payer approves
//!   only by transaction (`plain_token`).
//! - Accounts: anvil's deterministic dev account 0 deploys and mints (owner of the token);
//!   account 1 is the [`Devnet::relayer`] for a facilitator; [`Devnet::funded_account`] makes fresh
//!   random payers with ETH and tokens.
//! - Block times: [`Devnet::set_interval_mining`] switches a devnet started with automine to a
//!   block every few seconds (fund accounts first, at automine speed).
//! - Fault tests: [`Devnet::set_automine`] / [`Devnet::mine_block`] / [`Devnet::mempool_size`]
//!   leave a broadcast settlement unmined, [`Devnet::pending_transactions`] /
//!   [`Devnet::drop_transaction`] inspect and empty the mempool; [`Devnet::authorization_used_transactions`] and
//!   [`Devnet::transfers`] read what the chain says happened; [`Devnet::transfer_tokens`] lets a
//!   payer empty its wallet.
//! - [`rpc_counter::RpcCounter`]: a JSON-RPC proxy in front of a node that counts calls by
//!   method, and can refuse one method as a node without it does.
//! - [`node_script`]: runs an interop script of `tools/interop/` (official x402 SDK) with JSON in
//!   and out; [`node_tools_or_skip`] lets Node-dependent tests skip outside CI.
//! - [`python_script`]: the same for a Python interop script, run in `.tools/sdk-venv` (official
//!   x402 Python SDK and MCP client); [`python_tools_or_skip`] likewise; [`python_script_with`]
//!   for the A2A client's and the SIWX builder's scripts, with their own libraries
//!   ([`PythonLibs`]).

mod anvil;
pub mod bindings;
mod error;
mod node;
mod plain_token;
mod python;
pub mod rpc_counter;

use std::{
    fmt,
    path::{Path, PathBuf},
    time::Duration,
};

use alloy::{
    primitives::{Address, B256, U256, address, b256},
    providers::{DynProvider, Provider, ProviderBuilder},
    signers::local::PrivateKeySigner,
    sol_types::SolEvent as _,
};
use tokio::sync::Mutex;
use url::Url;

pub use error::DevnetError;
pub use node::{
    DEFAULT_NODE_SCRIPT_TIMEOUT, NODE_ENV, check_node_tools, interop_dir, node_script,
    node_script_with_timeout, node_tools_or_skip,
};
pub use plain_token::PLAIN_TOKEN_NAME;
pub use python::{
    DEFAULT_PYTHON_SCRIPT_TIMEOUT, PythonLibs, SDK_PYTHON_ENV, check_python_libs,
    check_python_tools, python_libs_or_skip, python_script, python_script_with,
    python_tools_or_skip, sdk_python,
};

use anvil::{AnvilArgs, AnvilProcess, locate_anvil};
use bindings::{
    AuthCaptureEscrow, DevnetMulticall, DevnetPermitToken, DevnetUsd, ERC3009PaymentCollector,
    Eip1271Wallet, OperatorRefundCollector, Permit2, X402ExactPermit2Proxy, X402UptoPermit2Proxy,
};

/// Environment variable that points the helper at a specific anvil binary.
pub const ANVIL_ENV: &str = anvil::ANVIL_ENV;

/// Private key of anvil's dev account 0 (the default "test … junk" mnemonic): public knowledge,
/// for local chains only. It deploys the token and mints.
const DEPLOYER_KEY: B256 =
    b256!("ac0974bec39a17e36ba4a6b4d238ff944bacb478cbed5efcae784d7bf4f2ff80");
/// Anvil's dev account 1: the facilitator relayer. Kept apart from the deployer so minting never
/// competes with settlement for transaction nonces.
const RELAYER_KEY: B256 = b256!("59c6995e998f97a5a0044966f0945389dc9e86dae88c7a8412f4603b6b78690d");

/// Multicall3's canonical address. The devnet puts [`DevnetMulticall`] there, because the official
/// x402 facilitator reads it to explain a failed simulation.
pub const MULTICALL3_ADDRESS: Address = crate::facilitator::config::MULTICALL3_CANONICAL;

/// base/commerce-payments `AuthCaptureEscrow` v1.0 canonical address (the devnet puts
/// [`bindings::AuthCaptureEscrow`] there).
pub const AUTH_CAPTURE_ESCROW_ADDRESS: Address =
    address!("BdEA0D1bcC5966192B070Fdf62aB4EF5b4420cff");
/// The v1.0 ERC-3009 token collector's canonical address: the `to` of the payer's
/// `ReceiveWithAuthorization`.
pub const ERC3009_COLLECTOR_ADDRESS: Address = address!("0E3dF9510de65469C4518D7843919c0b8C7A7757");
/// The v1.0 operator refund collector's canonical address: refunds are pulled from the operator's
/// wallet through its token allowance to this address.
pub const OPERATOR_REFUND_COLLECTOR_ADDRESS: Address =
    address!("934907bffd0901b6A21e398B9C53A4A38F02fa5d");

/// Uniswap's canonical Permit2 address (the devnet puts [`bindings::Permit2`] there).
pub const PERMIT2_ADDRESS: Address = address!("000000000022D473030F116dDEE9F6B43aC78BA3");
/// The canonical `x402ExactPermit2Proxy` address.
pub const EXACT_PERMIT2_PROXY_ADDRESS: Address =
    address!("402085c248EeA27D92E8b30b2C58ed07f9E20001");
/// The canonical `x402UptoPermit2Proxy` address.
pub const UPTO_PERMIT2_PROXY_ADDRESS: Address =
    address!("4020A4f3b7b90ccA423B9fabCc0CE57C6C240002");

/// EIP-712 domain name (and ERC-20 name) of [`bindings::DevnetPermitToken`].
pub const PERMIT_TOKEN_NAME: &str = "Hiregate Devnet Permit USD";
/// EIP-712 domain version of [`bindings::DevnetPermitToken`].
pub const PERMIT_TOKEN_VERSION: &str = "1";

/// ETH given to every fresh account, in wei (100 ETH): plenty of gas for any test.
const FRESH_ACCOUNT_WEI: u128 = 100 * 10u128.pow(18);

/// The repository root, where `.tools/` and `tools/` live.
pub fn workspace_root() -> PathBuf {
    let manifest_dir = Path::new(env!("CARGO_MANIFEST_DIR"));
    manifest_dir.parent().unwrap_or(manifest_dir).to_path_buf()
}

/// How to start a [`Devnet`]. `Default` is a USDC-like token on chain 31337 with instant mining.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DevnetOptions {
    /// EIP-155 chain id anvil reports.
    pub chain_id: u64,
    /// EIP-712 domain name of the token (also its ERC-20 `name()`).
    pub token_name: String,
    /// EIP-712 domain version of the token.
    pub token_version: String,
    /// ERC-20 symbol.
    pub token_symbol: String,
    /// `None`: a block per transaction (fast tests). `Some`: interval mining, like a real chain.
    pub block_time: Option<Duration>,
    /// How far the chain's clock runs behind the wall clock: anvil starts with its genesis
    /// block this far in the past and every later block keeps the gap (a chain whose block
    /// time lags the gateway's clock, as an idle devnet's does). Zero: the wall clock.
    pub clock_behind: Duration,
    /// Upper bound on waiting for anvil to answer RPC calls.
    pub startup_timeout: Duration,
}

impl Default for DevnetOptions {
    fn default() -> Self {
        Self {
            chain_id: 31_337,
            token_name: "Hiregate Devnet USD".to_owned(),
            token_version: "2".to_owned(),
            token_symbol: "hUSD".to_owned(),
            block_time: None,
            clock_behind: Duration::ZERO,
            startup_timeout: Duration::from_secs(30),
        }
    }
}

impl DevnetOptions {
    fn validate(&self) -> Result<(), DevnetError> {
        if self.chain_id == 0 {
            return Err(DevnetError::InvalidOptions(
                "chain_id must be positive".into(),
            ));
        }
        if self.token_name.is_empty() || self.token_version.is_empty() {
            return Err(DevnetError::InvalidOptions(
                "token_name and token_version must not be empty".into(),
            ));
        }
        if self
            .block_time
            .is_some_and(|block_time| block_time.is_zero())
        {
            return Err(DevnetError::InvalidOptions(
                "block_time must be positive (use None for instant mining)".into(),
            ));
        }
        Ok(())
    }
}

/// A running local chain with the devnet token deployed. Dropping it kills anvil.
pub struct Devnet {
    anvil: AnvilProcess,
    chain_id: u64,
    token: Address,
    permit_token: Address,
    token_owner: Address,
    options: DevnetOptions,
    relayer: PrivateKeySigner,
    /// Read-only provider.
    reader: DynProvider,
    /// Provider that signs with the deployer key (token owner).
    deployer: DynProvider,
    /// Serialises the deployer's transactions so concurrent helpers never reuse a nonce.
    deployer_lock: Mutex<()>,
}

impl fmt::Debug for Devnet {
    // Hand-written: the providers hold signing keys and have nothing useful to show.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Devnet")
            .field("rpc_url", &self.anvil.rpc_url().as_str())
            .field("chain_id", &self.chain_id)
            .field("token", &self.token)
            .field("token_name", &self.options.token_name)
            .field("token_version", &self.options.token_version)
            .field("relayer", &self.relayer.address())
            .finish_non_exhaustive()
    }
}

impl Devnet {
    /// Starts a devnet with [`DevnetOptions::default`].
    pub async fn start() -> Result<Self, DevnetError> {
        Self::start_with(DevnetOptions::default()).await
    }

    /// Starts anvil as `options` say and deploys the token.
    pub async fn start_with(options: DevnetOptions) -> Result<Self, DevnetError> {
        options.validate()?;
        let deployer_signer = dev_signer(DEPLOYER_KEY)?;
        let relayer = dev_signer(RELAYER_KEY)?;
        let binary = locate_anvil()?;
        let anvil = AnvilProcess::start(
            &binary,
            &AnvilArgs {
                chain_id: options.chain_id,
                block_time: options.block_time,
                clock_behind: options.clock_behind,
                startup_timeout: options.startup_timeout,
            },
        )
        .await?;

        let rpc_url = anvil.rpc_url().clone();
        let reader = ProviderBuilder::new()
            .connect_http(rpc_url.clone())
            .erased();
        let accounts = reader
            .get_accounts()
            .await
            .map_err(DevnetError::rpc("eth_accounts"))?;
        for expected in [deployer_signer.address(), relayer.address()] {
            if !accounts.contains(&expected) {
                return Err(DevnetError::UnexpectedNode(format!(
                    "dev account {expected} is not unlocked; is {} a stock anvil?",
                    binary.display()
                )));
            }
        }

        let token_owner = deployer_signer.address();
        let deployer = ProviderBuilder::new()
            .wallet(deployer_signer)
            .connect_http(rpc_url)
            .erased();
        let token = DevnetUsd::deploy(
            deployer.clone(),
            options.token_name.clone(),
            options.token_version.clone(),
            options.token_symbol.clone(),
        )
        .await
        .map_err(DevnetError::contract("deploy DevnetUsd"))?;
        let permit_token = DevnetPermitToken::deploy(
            deployer.clone(),
            PERMIT_TOKEN_NAME.to_owned(),
            PERMIT_TOKEN_VERSION.to_owned(),
            "hPUSD".to_owned(),
        )
        .await
        .map_err(DevnetError::contract("deploy DevnetPermitToken"))?;
        reader
            .raw_request::<_, ()>(
                "anvil_setCode".into(),
                (MULTICALL3_ADDRESS, &DevnetMulticall::DEPLOYED_BYTECODE),
            )
            .await
            .map_err(DevnetError::rpc("anvil_setCode"))?;
        place_escrow_contracts(&reader).await?;
        place_permit2_contracts(&reader).await?;

        Ok(Self {
            anvil,
            chain_id: options.chain_id,
            token: *token.address(),
            permit_token: *permit_token.address(),
            token_owner,
            options,
            relayer,
            reader,
            deployer,
            deployer_lock: Mutex::new(()),
        })
    }

    /// The JSON-RPC endpoint (`http://127.0.0.1:<port>/`).
    pub fn rpc_url(&self) -> &Url {
        self.anvil.rpc_url()
    }

    /// The EIP-155 chain id.
    pub fn chain_id(&self) -> u64 {
        self.chain_id
    }

    /// The CAIP-2 network id x402 uses: `eip155:<chain id>`.
    pub fn network(&self) -> String {
        format!("eip155:{}", self.chain_id)
    }

    /// Address of the deployed [`DevnetUsd`] token.
    pub fn token(&self) -> Address {
        self.token
    }

    /// Address of the deployed [`bindings::DevnetPermitToken`]: an ERC-20 without EIP-3009,
    /// paid with over Permit2 (EIP-712 domain [`PERMIT_TOKEN_NAME`], [`PERMIT_TOKEN_VERSION`]).
    pub fn permit_token(&self) -> Address {
        self.permit_token
    }

    /// The `AuthCaptureEscrow` (v1.0 canonical address, devnet look-alike).
    pub fn auth_capture_escrow(&self) -> Address {
        AUTH_CAPTURE_ESCROW_ADDRESS
    }

    /// The ERC-3009 token collector for `authorize`/`charge` (v1.0 canonical address).
    pub fn erc3009_collector(&self) -> Address {
        ERC3009_COLLECTOR_ADDRESS
    }

    /// The operator refund collector for `refund` (v1.0 canonical address); it pulls the refund
    /// from the operator's wallet, which must have approved it on the token.
    pub fn operator_refund_collector(&self) -> Address {
        OPERATOR_REFUND_COLLECTOR_ADDRESS
    }

    /// The token's EIP-712 domain name: x402 `extra.name`.
    pub fn token_name(&self) -> &str {
        &self.options.token_name
    }

    /// The token's EIP-712 domain version: x402 `extra.version`.
    pub fn token_version(&self) -> &str {
        &self.options.token_version
    }

    /// The token's ERC-20 symbol.
    pub fn token_symbol(&self) -> &str {
        &self.options.token_symbol
    }

    /// The token owner (anvil dev account 0), which mints.
    pub fn token_owner(&self) -> Address {
        self.token_owner
    }

    /// An ETH-funded key for a facilitator to pay gas with (anvil dev account 1). Nothing else in
    /// this helper sends transactions from it.
    pub fn relayer(&self) -> PrivateKeySigner {
        self.relayer.clone()
    }

    /// A read-only provider on this chain.
    pub fn provider(&self) -> DynProvider {
        self.reader.clone()
    }

    /// The file that collects anvil's stdout and stderr (deleted with the devnet).
    pub fn log_path(&self) -> &Path {
        self.anvil.log_path()
    }

    /// A fresh random key holding 100 ETH (for gas) and nothing else: e.g. a second relayer, so
    /// two facilitators on one chain never compete for nonces.
    pub async fn fresh_relayer(&self) -> Result<PrivateKeySigner, DevnetError> {
        let signer = PrivateKeySigner::random();
        self.set_eth_balance(signer.address(), U256::from(FRESH_ACCOUNT_WEI))
            .await?;
        Ok(signer)
    }

    /// A fresh random key holding 100 ETH and `token_amount` atomic units of the token.
    pub async fn funded_account(
        &self,
        token_amount: U256,
    ) -> Result<PrivateKeySigner, DevnetError> {
        let signer = self.fresh_relayer().await?;
        if !token_amount.is_zero() {
            self.mint(signer.address(), token_amount).await?;
        }
        Ok(signer)
    }

    /// Mints `amount` atomic units to `to`, waiting until the transaction is mined.
    pub async fn mint(&self, to: Address, amount: U256) -> Result<(), DevnetError> {
        const CALL: &str = "DevnetUsd.mint";
        let _serialised = self.deployer_lock.lock().await;
        let token = DevnetUsd::new(self.token, &self.deployer);
        let receipt = token
            .mint(to, amount)
            .send()
            .await
            .map_err(DevnetError::contract(CALL))?
            .get_receipt()
            .await
            .map_err(DevnetError::confirmation(CALL))?;
        if !receipt.status() {
            return Err(DevnetError::Reverted {
                call: CALL,
                tx_hash: receipt.transaction_hash,
            });
        }
        Ok(())
    }

    /// Mints `amount` atomic units of the [`Devnet::permit_token`] to `to`, waiting until mined.
    pub async fn mint_permit_token(&self, to: Address, amount: U256) -> Result<(), DevnetError> {
        const CALL: &str = "DevnetPermitToken.mint";
        let _serialised = self.deployer_lock.lock().await;
        let token = DevnetPermitToken::new(self.permit_token, &self.deployer);
        let receipt = token
            .mint(to, amount)
            .send()
            .await
            .map_err(DevnetError::contract(CALL))?
            .get_receipt()
            .await
            .map_err(DevnetError::confirmation(CALL))?;
        if !receipt.status() {
            return Err(DevnetError::Reverted {
                call: CALL,
                tx_hash: receipt.transaction_hash,
            });
        }
        Ok(())
    }

    /// Balance of `who` in the [`Devnet::permit_token`], in atomic units.
    pub async fn permit_token_balance(&self, who: Address) -> Result<U256, DevnetError> {
        DevnetPermitToken::new(self.permit_token, &self.reader)
            .balanceOf(who)
            .call()
            .await
            .map_err(DevnetError::contract("DevnetPermitToken.balanceOf"))
    }

    /// `holder`'s allowance to Permit2 on `token`.
    pub async fn permit2_allowance(
        &self,
        token: Address,
        holder: Address,
    ) -> Result<U256, DevnetError> {
        DevnetPermitToken::new(token, &self.reader)
            .allowance(holder, PERMIT2_ADDRESS)
            .call()
            .await
            .map_err(DevnetError::contract("allowance"))
    }

    /// `holder` approves Permit2 for `amount` of `token` with its own transaction (the one-time
    /// set-up Permit2 payments need), waiting until mined.
    pub async fn approve_permit2(
        &self,
        holder: &PrivateKeySigner,
        token: Address,
        amount: U256,
    ) -> Result<B256, DevnetError> {
        const CALL: &str = "approve(Permit2)";
        let wallet = ProviderBuilder::new()
            .wallet(holder.clone())
            .connect_http(self.rpc_url().clone());
        let receipt = DevnetPermitToken::new(token, &wallet)
            .approve(PERMIT2_ADDRESS, amount)
            .send()
            .await
            .map_err(DevnetError::contract(CALL))?
            .get_receipt()
            .await
            .map_err(DevnetError::confirmation(CALL))?;
        if !receipt.status() {
            return Err(DevnetError::Reverted {
                call: CALL,
                tx_hash: receipt.transaction_hash,
            });
        }
        Ok(receipt.transaction_hash)
    }

    /// Whether `owner`'s Permit2 nonce `nonce` is spent (its bit in `nonceBitmap`).
    pub async fn permit2_nonce_used(
        &self,
        owner: Address,
        nonce: U256,
    ) -> Result<bool, DevnetError> {
        // Bit `nonce & 0xff` of word `nonce >> 8`.
        let bit = U256::from(1u8) << (nonce & U256::from(0xffu8)).to::<usize>();
        let bitmap = Permit2::new(PERMIT2_ADDRESS, &self.reader)
            .nonceBitmap(owner, nonce >> 8)
            .call()
            .await
            .map_err(DevnetError::contract("Permit2.nonceBitmap"))?;
        Ok(bitmap & bit != U256::ZERO)
    }

    /// Sets the ETH balance of `who` (anvil cheat code; no transaction).
    pub async fn set_eth_balance(&self, who: Address, wei: U256) -> Result<(), DevnetError> {
        self.reader
            .raw_request::<_, ()>("anvil_setBalance".into(), (who, wei))
            .await
            .map_err(DevnetError::rpc("anvil_setBalance"))
    }

    /// Token balance of `who`, in atomic units.
    pub async fn balance_of(&self, who: Address) -> Result<U256, DevnetError> {
        DevnetUsd::new(self.token, &self.reader)
            .balanceOf(who)
            .call()
            .await
            .map_err(DevnetError::contract("DevnetUsd.balanceOf"))
    }

    /// EIP-3009 `authorizationState`: true once `nonce` of `authorizer` was used or canceled.
    pub async fn authorization_state(
        &self,
        authorizer: Address,
        nonce: B256,
    ) -> Result<bool, DevnetError> {
        DevnetUsd::new(self.token, &self.reader)
            .authorizationState(authorizer, nonce)
            .call()
            .await
            .map_err(DevnetError::contract("DevnetUsd.authorizationState"))
    }

    /// Turns anvil's automine on or off (`evm_setAutomine`). Off, sent transactions wait in the
    /// mempool until [`Devnet::mine_block`] or automine is on again: a settlement that is
    /// broadcast but not mined.
    pub async fn set_automine(&self, on: bool) -> Result<(), DevnetError> {
        self.reader
            .raw_request::<_, ()>("evm_setAutomine".into(), (on,))
            .await
            .map_err(DevnetError::rpc("evm_setAutomine"))
    }

    /// Mines a block every `interval` from now on, as a real chain does
    /// (`evm_setIntervalMining`, whole seconds); [`Devnet::set_automine`] goes back to a block
    /// per transaction. Lets a test fund its accounts at automine speed first.
    pub async fn set_interval_mining(&self, interval: Duration) -> Result<(), DevnetError> {
        if interval.as_secs() == 0 {
            return Err(DevnetError::InvalidOptions(
                "interval mining needs a whole number of seconds, at least one".into(),
            ));
        }
        self.reader
            .raw_request::<_, ()>("evm_setIntervalMining".into(), (interval.as_secs(),))
            .await
            .map_err(DevnetError::rpc("evm_setIntervalMining"))
    }

    /// Mines one block with whatever the mempool holds (`evm_mine`).
    pub async fn mine_block(&self) -> Result<(), DevnetError> {
        self.reader
            .raw_request::<_, serde_json::Value>("evm_mine".into(), ())
            .await
            .map(drop)
            .map_err(DevnetError::rpc("evm_mine"))
    }

    /// Moves the chain's clock `seconds` forward and mines a block at the new time
    /// (`evm_increaseTime` + `evm_mine`): deadlines of hours or days pass at once.
    pub async fn advance_time(&self, seconds: u64) -> Result<(), DevnetError> {
        self.reader
            .raw_request::<_, serde_json::Value>("evm_increaseTime".into(), (seconds,))
            .await
            .map(drop)
            .map_err(DevnetError::rpc("evm_increaseTime"))?;
        self.mine_block().await
    }

    /// The next block (the next transaction's, with automine) will carry `timestamp`
    /// (`evm_setNextBlockTimestamp`): the chain's clock jumps in that very block, and the
    /// latest block keeps its time until then.
    pub async fn set_next_block_timestamp(&self, timestamp: u64) -> Result<(), DevnetError> {
        self.reader
            .raw_request::<_, serde_json::Value>("evm_setNextBlockTimestamp".into(), (timestamp,))
            .await
            .map(drop)
            .map_err(DevnetError::rpc("evm_setNextBlockTimestamp"))
    }

    /// The latest block's timestamp: the chain's clock.
    pub async fn block_time(&self) -> Result<u64, DevnetError> {
        self.reader
            .get_block_by_number(alloy::eips::BlockNumberOrTag::Latest)
            .await
            .map_err(DevnetError::rpc("eth_getBlockByNumber"))?
            .map(|block| block.header.timestamp)
            .ok_or_else(|| DevnetError::UnexpectedNode("no latest block".into()))
    }

    /// Transactions sent from `who` and mined (`eth_getTransactionCount` at the latest block).
    pub async fn transaction_count(&self, who: Address) -> Result<u64, DevnetError> {
        self.reader
            .get_transaction_count(who)
            .latest()
            .await
            .map_err(DevnetError::rpc("eth_getTransactionCount"))
    }

    /// Transactions waiting in the mempool (`txpool_status`: pending + queued).
    pub async fn mempool_size(&self) -> Result<u64, DevnetError> {
        let status: serde_json::Value = self
            .reader
            .raw_request("txpool_status".into(), ())
            .await
            .map_err(DevnetError::rpc("txpool_status"))?;
        let count = |field: &str| {
            status[field]
                .as_str()
                .and_then(|hex| u64::from_str_radix(hex.trim_start_matches("0x"), 16).ok())
                .or_else(|| status[field].as_u64())
                .unwrap_or(0)
        };
        Ok(count("pending") + count("queued"))
    }

    /// Hashes of the transactions from `sender` waiting in the mempool (`txpool_content`).
    pub async fn pending_transactions(&self, sender: Address) -> Result<Vec<B256>, DevnetError> {
        let content: serde_json::Value = self
            .reader
            .raw_request("txpool_content".into(), ())
            .await
            .map_err(DevnetError::rpc("txpool_content"))?;
        let mut hashes = Vec::new();
        for pool in ["pending", "queued"] {
            let Some(by_sender) = content[pool].as_object() else {
                continue;
            };
            for (address, by_nonce) in by_sender {
                if address.parse::<Address>().ok() != Some(sender) {
                    continue;
                }
                let Some(by_nonce) = by_nonce.as_object() else {
                    continue;
                };
                hashes.extend(
                    by_nonce
                        .values()
                        .filter_map(|tx| tx["hash"].as_str()?.parse::<B256>().ok()),
                );
            }
        }
        Ok(hashes)
    }

    /// Removes a transaction from the mempool (`anvil_dropTransaction`), as a node that lost it
    /// would.
    pub async fn drop_transaction(&self, hash: B256) -> Result<(), DevnetError> {
        self.reader
            .raw_request::<_, serde_json::Value>("anvil_dropTransaction".into(), (hash,))
            .await
            .map(drop)
            .map_err(DevnetError::rpc("anvil_dropTransaction"))
    }

    /// Sends `amount` atomic units of the token from `from` to `to` (an ordinary ERC-20
    /// `transfer` the holder signs), waiting until it is mined.
    pub async fn transfer_tokens(
        &self,
        from: &PrivateKeySigner,
        to: Address,
        amount: U256,
    ) -> Result<B256, DevnetError> {
        const CALL: &str = "DevnetUsd.transfer";
        let holder = ProviderBuilder::new()
            .wallet(from.clone())
            .connect_http(self.rpc_url().clone());
        let receipt = DevnetUsd::new(self.token, &holder)
            .transfer(to, amount)
            .send()
            .await
            .map_err(DevnetError::contract(CALL))?
            .get_receipt()
            .await
            .map_err(DevnetError::confirmation(CALL))?;
        if !receipt.status() {
            return Err(DevnetError::Reverted {
                call: CALL,
                tx_hash: receipt.transaction_hash,
            });
        }
        Ok(receipt.transaction_hash)
    }

    /// Transactions whose token `AuthorizationUsed(authorizer, nonce)` log is on chain: the
    /// settlements of one EIP-3009 authorization (at most one, unless the token is broken).
    pub async fn authorization_used_transactions(
        &self,
        authorizer: Address,
        nonce: B256,
    ) -> Result<Vec<B256>, DevnetError> {
        let filter = alloy::rpc::types::Filter::new()
            .address(self.token)
            .event_signature(DevnetUsd::AuthorizationUsed::SIGNATURE_HASH)
            .topic1(B256::from(authorizer.into_word()))
            .topic2(nonce)
            .from_block(0);
        let logs = self
            .reader
            .get_logs(&filter)
            .await
            .map_err(DevnetError::rpc("eth_getLogs"))?;
        Ok(logs.iter().filter_map(|log| log.transaction_hash).collect())
    }

    /// Every token `Transfer(from, to, value)` on chain from `from` to `to`:
    /// `(transaction, value)` in chain order.
    pub async fn transfers(
        &self,
        from: Address,
        to: Address,
    ) -> Result<Vec<(B256, U256)>, DevnetError> {
        let filter = alloy::rpc::types::Filter::new()
            .address(self.token)
            .event_signature(DevnetUsd::Transfer::SIGNATURE_HASH)
            .topic1(B256::from(from.into_word()))
            .topic2(B256::from(to.into_word()))
            .from_block(0);
        let logs = self
            .reader
            .get_logs(&filter)
            .await
            .map_err(DevnetError::rpc("eth_getLogs"))?;
        Ok(logs
            .iter()
            .filter_map(|log| {
                let transfer = DevnetUsd::Transfer::decode_log(&log.inner).ok()?;
                Some((log.transaction_hash?, transfer.value))
            })
            .collect())
    }

    /// Deploys an [`Eip1271Wallet`] that accepts signatures of `owner`; returns its address.
    /// Fund it with [`Devnet::mint`].
    pub async fn deploy_1271_wallet(&self, owner: Address) -> Result<Address, DevnetError> {
        let _serialised = self.deployer_lock.lock().await;
        let wallet = Eip1271Wallet::deploy(&self.deployer, owner)
            .await
            .map_err(DevnetError::contract("deploy Eip1271Wallet"))?;
        Ok(*wallet.address())
    }
}

/// Puts the escrow contracts at their canonical addresses. Each collector's creation code runs in
/// an `eth_call` with the canonical escrow as constructor argument; what it returns is the runtime
/// code with that immutable baked in, ready for `anvil_setCode`.
async fn place_escrow_contracts(provider: &DynProvider) -> Result<(), DevnetError> {
    let erc3009_collector = ERC3009PaymentCollector::deploy_builder(
        provider,
        AUTH_CAPTURE_ESCROW_ADDRESS,
        MULTICALL3_ADDRESS,
    )
    .call_raw()
    .await
    .map_err(DevnetError::contract("construct ERC3009PaymentCollector"))?;
    let refund_collector =
        OperatorRefundCollector::deploy_builder(provider, AUTH_CAPTURE_ESCROW_ADDRESS)
            .call_raw()
            .await
            .map_err(DevnetError::contract("construct OperatorRefundCollector"))?;
    for (address, code) in [
        (
            AUTH_CAPTURE_ESCROW_ADDRESS,
            AuthCaptureEscrow::DEPLOYED_BYTECODE.clone(),
        ),
        (ERC3009_COLLECTOR_ADDRESS, erc3009_collector),
        (OPERATOR_REFUND_COLLECTOR_ADDRESS, refund_collector),
    ] {
        if code.is_empty() {
            return Err(DevnetError::UnexpectedNode(format!(
                "constructing the contract for {address} returned no runtime code"
            )));
        }
        provider
            .raw_request::<_, ()>("anvil_setCode".into(), (address, &code))
            .await
            .map_err(DevnetError::rpc("anvil_setCode"))?;
    }
    Ok(())
}

/// Puts Permit2 and the two x402 proxies at their canonical addresses; each proxy's creation
/// code runs in an `eth_call` with the canonical Permit2 as constructor argument.
async fn place_permit2_contracts(provider: &DynProvider) -> Result<(), DevnetError> {
    let exact = X402ExactPermit2Proxy::deploy_builder(provider, PERMIT2_ADDRESS)
        .call_raw()
        .await
        .map_err(DevnetError::contract("construct X402ExactPermit2Proxy"))?;
    let upto = X402UptoPermit2Proxy::deploy_builder(provider, PERMIT2_ADDRESS)
        .call_raw()
        .await
        .map_err(DevnetError::contract("construct X402UptoPermit2Proxy"))?;
    for (address, code) in [
        (PERMIT2_ADDRESS, Permit2::DEPLOYED_BYTECODE.clone()),
        (EXACT_PERMIT2_PROXY_ADDRESS, exact),
        (UPTO_PERMIT2_PROXY_ADDRESS, upto),
    ] {
        if code.is_empty() {
            return Err(DevnetError::UnexpectedNode(format!(
                "constructing the contract for {address} returned no runtime code"
            )));
        }
        provider
            .raw_request::<_, ()>("anvil_setCode".into(), (address, &code))
            .await
            .map_err(DevnetError::rpc("anvil_setCode"))?;
    }
    Ok(())
}

fn dev_signer(key: B256) -> Result<PrivateKeySigner, DevnetError> {
    PrivateKeySigner::from_bytes(&key)
        .map_err(|e| DevnetError::InvalidOptions(format!("built-in dev key rejected: {e}")))
}
