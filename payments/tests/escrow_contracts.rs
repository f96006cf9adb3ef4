//! The devnet's `auth-capture` escrow contracts on their own (real anvil, real signatures): the
//! look-alikes of base/commerce-payments v1.0.0 that [`Devnet::start`] places at the canonical
//! addresses. Calls go through bindings written here from the upstream's published interface
//! (not generated from this repository's artifacts), so a drift of a signature, struct, typehash,
//! event or error from the upstream fails these tests.
//!
//! | area | tests |
//! |---|---|
//! | placement | `contracts_sit_at_the_canonical_addresses_with_the_right_immutables` |
//! | authorize / capture | `authorize_then_capture_pays_receiver_and_fee_receiver_exactly`, `partial_captures_add_up_and_never_exceed_the_authorization`, `escrowed_funds_sit_in_the_operators_token_store` |
//! | void / reclaim | `void_makes_the_payer_whole`, `capture_is_refused_from_capture_deadline_but_void_still_works`, `payer_reclaims_from_capture_deadline_only` |
//! | refund | `refund_is_funded_by_the_operator_through_the_refund_collector`, `refund_is_refused_from_refund_deadline` |
//! | fees | `fee_bps_outside_the_agreed_range_is_refused`, `fee_receiver_must_match_even_at_zero_bps` |
//! | replay / access | `a_payment_info_is_authorized_once_even_after_void`, `a_used_or_canceled_authorization_nonce_is_refused`, `only_the_operator_drives_a_payment`, `a_signature_for_one_operator_is_useless_to_another`, `the_wrong_collector_type_is_refused` |
//! | charge | `charge_collects_and_pays_out_in_one_step` |
//! | official client | `the_official_auth_capture_client_payload_authorizes_on_the_devnet_escrow` |
//! | gas | `gas_per_operation` (printed; run with `--nocapture`) |
#![cfg(feature = "devnet")]

use alloy::{
    primitives::{Address, B256, Bytes, U256, keccak256},
    providers::{DynProvider, Provider, ProviderBuilder},
    rpc::types::TransactionReceipt,
    signers::{Signer, local::PrivateKeySigner},
    sol,
    sol_types::{Eip712Domain, SolStruct, SolValue},
};
use hiregate_payments::devnet::{
    AUTH_CAPTURE_ESCROW_ADDRESS, Devnet, ERC3009_COLLECTOR_ADDRESS, MULTICALL3_ADDRESS,
    OPERATOR_REFUND_COLLECTOR_ADDRESS, bindings::ReceiveWithAuthorization, node_script,
    node_tools_or_skip,
};
use serde_json::{Value, json};

sol! {
    /// `AuthCaptureEscrow.PaymentInfo`: the terms of one payment.
    #[derive(Debug, PartialEq, Eq)]
    struct PaymentInfo {
        address operator;
        address payer;
        address receiver;
        address token;
        uint120 maxAmount;
        uint48 preApprovalExpiry;
        uint48 authorizationExpiry;
        uint48 refundExpiry;
        uint16 minFeeBps;
        uint16 maxFeeBps;
        address feeReceiver;
        uint256 salt;
    }

    /// base/commerce-payments v1.0.0 `AuthCaptureEscrow`, as published.
    #[sol(rpc)]
    #[derive(Debug, PartialEq, Eq)]
    interface IAuthCaptureEscrow {
        function PAYMENT_INFO_TYPEHASH() external view returns (bytes32);
        function paymentState(bytes32 paymentInfoHash)
            external view returns (bool hasCollectedPayment, uint120 capturableAmount, uint120 refundableAmount);
        function charge(PaymentInfo calldata paymentInfo, uint256 amount, address tokenCollector, bytes calldata collectorData, uint16 feeBps, address feeReceiver) external;
        function authorize(PaymentInfo calldata paymentInfo, uint256 amount, address tokenCollector, bytes calldata collectorData) external;
        function capture(PaymentInfo calldata paymentInfo, uint256 amount, uint16 feeBps, address feeReceiver) external;
        function void(PaymentInfo calldata paymentInfo) external;
        function reclaim(PaymentInfo calldata paymentInfo) external;
        function refund(PaymentInfo calldata paymentInfo, uint256 amount, address tokenCollector, bytes calldata collectorData) external;
        function getHash(PaymentInfo calldata paymentInfo) external view returns (bytes32);
        function getTokenStore(address operator) external view returns (address);

        event PaymentCharged(bytes32 indexed paymentInfoHash, PaymentInfo paymentInfo, uint256 amount, address tokenCollector, uint16 feeBps, address feeReceiver);
        event PaymentAuthorized(bytes32 indexed paymentInfoHash, PaymentInfo paymentInfo, uint256 amount, address tokenCollector);
        event PaymentCaptured(bytes32 indexed paymentInfoHash, uint256 amount, uint16 feeBps, address feeReceiver);
        event PaymentVoided(bytes32 indexed paymentInfoHash, uint256 amount);
        event PaymentReclaimed(bytes32 indexed paymentInfoHash, uint256 amount);
        event PaymentRefunded(bytes32 indexed paymentInfoHash, uint256 amount, address tokenCollector);
        event TokenStoreCreated(address indexed operator, address tokenStore);

        error InvalidSender(address sender, address expected);
        error ZeroAmount();
        error AmountOverflow(uint256 amount, uint256 limit);
        error ExceedsMaxAmount(uint256 amount, uint256 maxAmount);
        error AfterPreApprovalExpiry(uint48 timestamp, uint48 expiry);
        error InvalidExpiries(uint48 preApproval, uint48 authorization, uint48 refund);
        error FeeBpsOverflow(uint16 feeBps);
        error InvalidFeeBpsRange(uint16 minFeeBps, uint16 maxFeeBps);
        error FeeBpsOutOfRange(uint16 feeBps, uint16 minFeeBps, uint16 maxFeeBps);
        error ZeroFeeReceiver();
        error InvalidFeeReceiver(address attempted, address expected);
        error InvalidCollectorForOperation();
        error TokenCollectionFailed();
        error PaymentAlreadyCollected(bytes32 paymentInfoHash);
        error AfterAuthorizationExpiry(uint48 timestamp, uint48 expiry);
        error InsufficientAuthorization(bytes32 paymentInfoHash, uint256 authorizedAmount, uint256 requestedAmount);
        error ZeroAuthorization(bytes32 paymentInfoHash);
        error BeforeAuthorizationExpiry(uint48 timestamp, uint48 expiry);
        error AfterRefundExpiry(uint48 timestamp, uint48 expiry);
        error RefundExceedsCapture(uint256 refund, uint256 captured);
    }

    /// The token collectors' shared surface (`TokenCollector`), plus the ERC-3009 collector's
    /// Multicall3 for ERC-6492.
    #[sol(rpc)]
    interface ITokenCollector {
        function collectorType() external view returns (uint8);
        function authCaptureEscrow() external view returns (address);
        function multicall3() external view returns (address);
        function collectTokens(PaymentInfo calldata paymentInfo, address tokenStore, uint256 amount, bytes calldata collectorData) external;
        error OnlyAuthCaptureEscrow();
    }

    /// The token calls the tests make, and the token's own errors that pass through the escrow.
    #[sol(rpc)]
    #[derive(Debug, PartialEq, Eq)]
    interface IToken {
        function balanceOf(address account) external view returns (uint256);
        function approve(address spender, uint256 value) external returns (bool);
        function authorizationState(address authorizer, bytes32 nonce) external view returns (bool);
        function cancelAuthorization(address authorizer, bytes32 nonce, bytes memory signature) external;
        error InsufficientBalance(address account, uint256 balance, uint256 needed);
        error InsufficientAllowance(address spender, uint256 allowance, uint256 needed);
        error AuthorizationExpired(uint256 validBefore, uint256 blockTimestamp);
        error AuthorizationUsedOrCanceled(address authorizer, bytes32 nonce);
        error InvalidSignature();
    }

    /// EIP-3009 `CancelAuthorization`, signed by the payer to burn a nonce.
    struct CancelAuthorization {
        address authorizer;
        bytes32 nonce;
    }
}

use IAuthCaptureEscrow::IAuthCaptureEscrowErrors as EscrowError;
use IToken::ITokenErrors as TokenError;

const USDC: u64 = 1_000_000;
/// What every payer holds at the start.
const PAYER_BALANCE: u64 = 10 * USDC;
/// `maxAmount` of the payments below: 1.25 tokens.
const AMOUNT: u64 = 1_250_000;
const PRE_APPROVAL_S: u64 = 600;
const CAPTURE_S: u64 = 3_600;
const REFUND_S: u64 = 7_200;
const PAYMENT_TYPE: &str = "PaymentInfo(address operator,address payer,address receiver,address token,uint120 maxAmount,uint48 preApprovalExpiry,uint48 authorizationExpiry,uint48 refundExpiry,uint16 minFeeBps,uint16 maxFeeBps,address feeReceiver,uint256 salt)";

/// A devnet with one operator (the gateway's role), a receiver (the worker) and a fee receiver
/// (the marketplace treasury).
struct Setup {
    devnet: Devnet,
    operator: PrivateKeySigner,
    receiver: Address,
    fee_receiver: Address,
}

impl Setup {
    async fn start() -> Self {
        let devnet = Devnet::start()
            .await
            .expect("devnet starts (scripts/install-tools.sh)");
        let operator = devnet.fresh_relayer().await.unwrap();
        Self {
            devnet,
            operator,
            receiver: PrivateKeySigner::random().address(),
            fee_receiver: PrivateKeySigner::random().address(),
        }
    }

    fn provider_as(&self, signer: &PrivateKeySigner) -> DynProvider {
        ProviderBuilder::new()
            .wallet(signer.clone())
            .connect_http(self.devnet.rpc_url().clone())
            .erased()
    }

    /// The escrow as its operator calls it.
    fn escrow(&self) -> IAuthCaptureEscrow::IAuthCaptureEscrowInstance<DynProvider> {
        self.escrow_as(&self.operator)
    }

    fn escrow_as(
        &self,
        signer: &PrivateKeySigner,
    ) -> IAuthCaptureEscrow::IAuthCaptureEscrowInstance<DynProvider> {
        IAuthCaptureEscrow::new(self.devnet.auth_capture_escrow(), self.provider_as(signer))
    }

    fn token(&self) -> IToken::ITokenInstance<DynProvider> {
        IToken::new(self.devnet.token(), self.devnet.provider())
    }

    async fn payer(&self) -> PrivateKeySigner {
        self.devnet
            .funded_account(U256::from(PAYER_BALANCE))
            .await
            .unwrap()
    }

    async fn balance(&self, who: Address) -> u64 {
        self.devnet.balance_of(who).await.unwrap().to::<u64>()
    }

    async fn chain_now(&self) -> u64 {
        let block = self
            .devnet
            .provider()
            .get_block_by_number(Default::default())
            .await
            .unwrap()
            .unwrap();
        block.header.timestamp
    }

    /// Moves chain time forward by `seconds` and mines a block there.
    async fn travel(&self, seconds: u64) {
        let provider = self.devnet.provider();
        provider
            .raw_request::<_, Value>("evm_increaseTime".into(), (seconds,))
            .await
            .unwrap();
        provider
            .raw_request::<_, Value>("evm_mine".into(), ())
            .await
            .unwrap();
    }

    /// Terms like an x402 `auth-capture` offer: fee 0–5 %, fee receiver fixed, deadlines from
    /// the chain's clock.
    async fn payment_info(&self, payer: Address) -> PaymentInfo {
        let now = self.chain_now().await;
        PaymentInfo {
            operator: self.operator.address(),
            payer,
            receiver: self.receiver,
            token: self.devnet.token(),
            maxAmount: alloy::primitives::Uint::from(AMOUNT),
            preApprovalExpiry: alloy::primitives::Uint::from(now + PRE_APPROVAL_S),
            authorizationExpiry: alloy::primitives::Uint::from(now + CAPTURE_S),
            refundExpiry: alloy::primitives::Uint::from(now + REFUND_S),
            minFeeBps: 0,
            maxFeeBps: 500,
            feeReceiver: self.fee_receiver,
            salt: U256::from_be_bytes(rand::random::<[u8; 32]>()),
        }
    }

    fn token_domain(&self) -> Eip712Domain {
        Eip712Domain::new(
            Some(self.devnet.token_name().to_owned().into()),
            Some(self.devnet.token_version().to_owned().into()),
            Some(U256::from(self.devnet.chain_id())),
            Some(self.devnet.token()),
            None,
        )
    }

    /// The payer's ERC-3009 `ReceiveWithAuthorization` for `info`, as the x402 client signs it:
    /// to the collector, `maxAmount`, valid from 0 to `preApprovalExpiry`, nonce = the
    /// payer-agnostic hash. The raw 65 bytes are the `collectorData`.
    async fn sign(&self, payer: &PrivateKeySigner, info: &PaymentInfo) -> Bytes {
        let authorization = ReceiveWithAuthorization {
            from: payer.address(),
            to: ERC3009_COLLECTOR_ADDRESS,
            value: U256::from(info.maxAmount),
            validAfter: U256::ZERO,
            validBefore: U256::from(info.preApprovalExpiry),
            nonce: payer_agnostic_hash(self.devnet.chain_id(), info),
        };
        let digest = authorization.eip712_signing_hash(&self.token_domain());
        let signature = payer.sign_hash(&digest).await.unwrap();
        Bytes::from(signature.as_bytes().to_vec())
    }

    async fn authorize(
        &self,
        info: &PaymentInfo,
        amount: u64,
        signature: Bytes,
    ) -> Result<TransactionReceipt, alloy::contract::Error> {
        send(
            self.escrow()
                .authorize(
                    info.clone(),
                    U256::from(amount),
                    ERC3009_COLLECTOR_ADDRESS,
                    signature,
                )
                .send()
                .await,
        )
        .await
    }

    async fn capture(
        &self,
        info: &PaymentInfo,
        amount: u64,
        fee_bps: u16,
        fee_receiver: Address,
    ) -> Result<TransactionReceipt, alloy::contract::Error> {
        send(
            self.escrow()
                .capture(info.clone(), U256::from(amount), fee_bps, fee_receiver)
                .send()
                .await,
        )
        .await
    }

    async fn void(&self, info: &PaymentInfo) -> Result<TransactionReceipt, alloy::contract::Error> {
        send(self.escrow().void(info.clone()).send().await).await
    }

    async fn refund(
        &self,
        info: &PaymentInfo,
        amount: u64,
        collector: Address,
    ) -> Result<TransactionReceipt, alloy::contract::Error> {
        send(
            self.escrow()
                .refund(info.clone(), U256::from(amount), collector, Bytes::new())
                .send()
                .await,
        )
        .await
    }

    /// The operator lets the refund collector pull up to `amount` from its wallet.
    async fn approve_refunds(&self, amount: u64) {
        send(
            IToken::new(self.devnet.token(), self.provider_as(&self.operator))
                .approve(OPERATOR_REFUND_COLLECTOR_ADDRESS, U256::from(amount))
                .send()
                .await,
        )
        .await
        .unwrap();
    }

    async fn token_store(&self) -> Address {
        self.escrow()
            .getTokenStore(self.operator.address())
            .call()
            .await
            .unwrap()
    }

    /// `(hasCollectedPayment, capturableAmount, refundableAmount)` of the payment.
    async fn state(&self, info: &PaymentInfo) -> (bool, u64, u64) {
        let escrow = self.escrow();
        let hash = escrow.getHash(info.clone()).call().await.unwrap();
        assert_eq!(hash, payment_hash(self.devnet.chain_id(), info));
        let state = escrow.paymentState(hash).call().await.unwrap();
        (
            state.hasCollectedPayment,
            state.capturableAmount.to::<u64>(),
            state.refundableAmount.to::<u64>(),
        )
    }

    /// A payer, its terms, and an authorization of the full amount.
    async fn authorized(&self) -> (PrivateKeySigner, PaymentInfo, TransactionReceipt) {
        let payer = self.payer().await;
        let info = self.payment_info(payer.address()).await;
        let signature = self.sign(&payer, &info).await;
        let receipt = self.authorize(&info, AMOUNT, signature).await.unwrap();
        (payer, info, receipt)
    }
}

/// Waits for the receipt and insists the transaction succeeded.
async fn send(
    pending: Result<
        alloy::providers::PendingTransactionBuilder<alloy::network::Ethereum>,
        alloy::contract::Error,
    >,
) -> Result<TransactionReceipt, alloy::contract::Error> {
    let receipt = pending?.get_receipt().await.unwrap();
    assert!(receipt.status(), "mined but reverted: {receipt:?}");
    Ok(receipt)
}

/// The escrow's custom error in a refused call (from gas estimation).
fn escrow_error(result: Result<TransactionReceipt, alloy::contract::Error>) -> EscrowError {
    let error = result.expect_err("the escrow must refuse");
    error
        .as_decoded_interface_error::<EscrowError>()
        .unwrap_or_else(|| panic!("not an escrow error: {error}"))
}

/// The token's custom error passed through the escrow unchanged.
fn token_error(result: Result<TransactionReceipt, alloy::contract::Error>) -> TokenError {
    let error = result.expect_err("the token must refuse");
    error
        .as_decoded_interface_error::<TokenError>()
        .unwrap_or_else(|| panic!("not a token error: {error}"))
}

/// `keccak256(abi.encode(chainId, escrow, keccak256(abi.encode(PAYMENT_INFO_TYPEHASH, info))))`,
/// derived here independently of the contract.
fn payment_hash(chain_id: u64, info: &PaymentInfo) -> B256 {
    let struct_hash = keccak256((keccak256(PAYMENT_TYPE), info.clone()).abi_encode());
    keccak256(
        (
            U256::from(chain_id),
            AUTH_CAPTURE_ESCROW_ADDRESS,
            struct_hash,
        )
            .abi_encode(),
    )
}

/// The ERC-3009 nonce: the payment hash with the payer zeroed.
fn payer_agnostic_hash(chain_id: u64, info: &PaymentInfo) -> B256 {
    let mut agnostic = info.clone();
    agnostic.payer = Address::ZERO;
    payment_hash(chain_id, &agnostic)
}

#[tokio::test]
async fn contracts_sit_at_the_canonical_addresses_with_the_right_immutables() {
    let setup = Setup::start().await;
    let provider = setup.devnet.provider();
    assert_eq!(
        setup.devnet.auth_capture_escrow(),
        AUTH_CAPTURE_ESCROW_ADDRESS
    );
    for address in [
        AUTH_CAPTURE_ESCROW_ADDRESS,
        ERC3009_COLLECTOR_ADDRESS,
        OPERATOR_REFUND_COLLECTOR_ADDRESS,
    ] {
        assert!(!provider.get_code_at(address).await.unwrap().is_empty());
    }
    let escrow = setup.escrow();
    assert_eq!(
        escrow.PAYMENT_INFO_TYPEHASH().call().await.unwrap(),
        keccak256(PAYMENT_TYPE)
    );
    // The sol! struct's EIP-712 type string is the same text: one typehash for the escrow, the
    // client and the gateway.
    assert_eq!(PaymentInfo::eip712_encode_type().as_ref(), PAYMENT_TYPE);

    let collector = ITokenCollector::new(ERC3009_COLLECTOR_ADDRESS, &provider);
    assert_eq!(collector.collectorType().call().await.unwrap(), 0);
    assert_eq!(
        collector.authCaptureEscrow().call().await.unwrap(),
        AUTH_CAPTURE_ESCROW_ADDRESS
    );
    assert_eq!(
        collector.multicall3().call().await.unwrap(),
        MULTICALL3_ADDRESS
    );
    let refunds = ITokenCollector::new(OPERATOR_REFUND_COLLECTOR_ADDRESS, &provider);
    assert_eq!(refunds.collectorType().call().await.unwrap(), 1);
    assert_eq!(
        refunds.authCaptureEscrow().call().await.unwrap(),
        AUTH_CAPTURE_ESCROW_ADDRESS
    );

    // Only the escrow may make a collector pull funds.
    let intruder = setup.payer().await;
    let info = setup.payment_info(intruder.address()).await;
    let refused = ITokenCollector::new(ERC3009_COLLECTOR_ADDRESS, setup.provider_as(&intruder))
        .collectTokens(info, intruder.address(), U256::from(1), Bytes::new())
        .send()
        .await
        .expect_err("only the escrow may collect");
    assert!(matches!(
        refused.as_decoded_interface_error::<ITokenCollector::ITokenCollectorErrors>(),
        Some(ITokenCollector::ITokenCollectorErrors::OnlyAuthCaptureEscrow(_))
    ));
}

#[tokio::test]
async fn authorize_then_capture_pays_receiver_and_fee_receiver_exactly() {
    let setup = Setup::start().await;
    let payer = setup.payer().await;
    let info = setup.payment_info(payer.address()).await;
    let signature = setup.sign(&payer, &info).await;
    let nonce = payer_agnostic_hash(setup.devnet.chain_id(), &info);
    assert_eq!(
        setup
            .escrow()
            .getHash({
                let mut agnostic = info.clone();
                agnostic.payer = Address::ZERO;
                agnostic
            })
            .call()
            .await
            .unwrap(),
        nonce
    );

    let receipt = setup.authorize(&info, AMOUNT, signature).await.unwrap();
    let hash = payment_hash(setup.devnet.chain_id(), &info);
    let authorized = receipt
        .decoded_log::<IAuthCaptureEscrow::PaymentAuthorized>()
        .expect("PaymentAuthorized");
    assert_eq!(authorized.paymentInfoHash, hash);
    assert_eq!(authorized.paymentInfo, info);
    assert_eq!(authorized.amount, U256::from(AMOUNT));
    assert_eq!(authorized.tokenCollector, ERC3009_COLLECTOR_ADDRESS);
    assert_eq!(setup.state(&info).await, (true, AMOUNT, 0));
    assert_eq!(setup.balance(payer.address()).await, PAYER_BALANCE - AMOUNT);
    assert!(
        setup
            .token()
            .authorizationState(payer.address(), nonce)
            .call()
            .await
            .unwrap()
    );

    // 3.33 %: 1_250_000 * 333 / 10_000 = 41_625 exactly; 333 bps keeps it exact, 1 bps below
    // rounds down (see the partial-capture test).
    let receipt = setup
        .capture(&info, AMOUNT, 333, setup.fee_receiver)
        .await
        .unwrap();
    let captured = receipt
        .decoded_log::<IAuthCaptureEscrow::PaymentCaptured>()
        .expect("PaymentCaptured");
    assert_eq!(captured.paymentInfoHash, hash);
    assert_eq!(captured.amount, U256::from(AMOUNT));
    assert_eq!(captured.feeBps, 333);
    assert_eq!(captured.feeReceiver, setup.fee_receiver);
    assert_eq!(setup.balance(setup.fee_receiver).await, 41_625);
    assert_eq!(setup.balance(setup.receiver).await, AMOUNT - 41_625);
    assert_eq!(setup.state(&info).await, (true, 0, AMOUNT));
    let store = setup
        .escrow()
        .getTokenStore(setup.operator.address())
        .call()
        .await
        .unwrap();
    assert_eq!(setup.balance(store).await, 0);
    assert_eq!(setup.balance(AUTH_CAPTURE_ESCROW_ADDRESS).await, 0);
    assert_eq!(setup.balance(ERC3009_COLLECTOR_ADDRESS).await, 0);

    // Nothing left to capture.
    assert!(matches!(
        escrow_error(setup.capture(&info, 1, 0, setup.fee_receiver).await),
        EscrowError::InsufficientAuthorization(_)
    ));
}

#[tokio::test]
async fn partial_captures_add_up_and_never_exceed_the_authorization() {
    let setup = Setup::start().await;
    let payer = setup.payer().await;
    let info = setup.payment_info(payer.address()).await;
    let signature = setup.sign(&payer, &info).await;
    // Authorizing less than `maxAmount`: the collector returns the rest to the payer at once.
    setup.authorize(&info, 1_000_000, signature).await.unwrap();
    assert_eq!(
        setup.balance(payer.address()).await,
        PAYER_BALANCE - 1_000_000
    );
    assert_eq!(setup.balance(setup.token_store().await).await, 1_000_000);
    assert_eq!(setup.state(&info).await, (true, 1_000_000, 0));

    // 333_333 at 1 % = 3_333.33 → 3_333: the fee rounds down, the receiver gets the remainder.
    setup
        .capture(&info, 333_333, 100, setup.fee_receiver)
        .await
        .unwrap();
    assert_eq!(setup.balance(setup.fee_receiver).await, 3_333);
    assert_eq!(setup.balance(setup.receiver).await, 330_000);
    assert_eq!(setup.state(&info).await, (true, 666_667, 333_333));

    assert!(matches!(
        escrow_error(setup.capture(&info, 666_668, 100, setup.fee_receiver).await),
        EscrowError::InsufficientAuthorization(e)
            if e.authorizedAmount == U256::from(666_667) && e.requestedAmount == U256::from(666_668)
    ));
    // 666_667 at 4.99 % = 33_266.68 → 33_266.
    setup
        .capture(&info, 666_667, 499, setup.fee_receiver)
        .await
        .unwrap();
    assert_eq!(setup.balance(setup.fee_receiver).await, 3_333 + 33_266);
    assert_eq!(
        setup.balance(setup.receiver).await,
        330_000 + 666_667 - 33_266
    );
    assert_eq!(setup.state(&info).await, (true, 0, 1_000_000));
    assert_eq!(setup.balance(setup.token_store().await).await, 0);
    assert!(matches!(
        escrow_error(setup.capture(&info, 0, 0, setup.fee_receiver).await),
        EscrowError::ZeroAmount(_)
    ));
}

#[tokio::test]
async fn escrowed_funds_sit_in_the_operators_token_store() {
    let setup = Setup::start().await;
    let store = setup.token_store().await;
    let provider = setup.devnet.provider();
    assert_ne!(store, AUTH_CAPTURE_ESCROW_ADDRESS);
    let other_operator = setup
        .escrow()
        .getTokenStore(PrivateKeySigner::random().address())
        .call()
        .await
        .unwrap();
    assert_ne!(store, other_operator, "one store per operator");

    let (_first_payer, first, _) = setup.authorized().await;
    let (_second_payer, second, _) = setup.authorized().await;
    assert_eq!(setup.balance(store).await, 2 * AMOUNT);
    assert_eq!(setup.balance(AUTH_CAPTURE_ESCROW_ADDRESS).await, 0);
    assert_eq!(setup.balance(ERC3009_COLLECTOR_ADDRESS).await, 0);
    // The store is an address until its first payout creates it, at the predicted address.
    assert!(provider.get_code_at(store).await.unwrap().is_empty());

    let receipt = setup
        .capture(&first, AMOUNT, 0, setup.fee_receiver)
        .await
        .unwrap();
    let created = receipt
        .decoded_log::<IAuthCaptureEscrow::TokenStoreCreated>()
        .expect("TokenStoreCreated on the first payout");
    assert_eq!(created.operator, setup.operator.address());
    assert_eq!(created.tokenStore, store);
    assert!(!provider.get_code_at(store).await.unwrap().is_empty());
    assert_eq!(setup.balance(store).await, AMOUNT);

    let receipt = setup.void(&second).await.unwrap();
    assert!(
        receipt
            .decoded_log::<IAuthCaptureEscrow::TokenStoreCreated>()
            .is_none(),
        "created once"
    );
    assert_eq!(setup.balance(store).await, 0);
}

#[tokio::test]
async fn void_makes_the_payer_whole() {
    let setup = Setup::start().await;
    let (payer, info, _) = setup.authorized().await;
    assert_eq!(setup.balance(payer.address()).await, PAYER_BALANCE - AMOUNT);

    let receipt = setup.void(&info).await.unwrap();
    let voided = receipt
        .decoded_log::<IAuthCaptureEscrow::PaymentVoided>()
        .expect("PaymentVoided");
    assert_eq!(
        voided.paymentInfoHash,
        payment_hash(setup.devnet.chain_id(), &info)
    );
    assert_eq!(voided.amount, U256::from(AMOUNT));
    assert_eq!(setup.balance(payer.address()).await, PAYER_BALANCE);
    assert_eq!(setup.balance(setup.receiver).await, 0);
    assert_eq!(setup.balance(setup.token_store().await).await, 0);
    // Never reset: a voided payment reads (collected, 0, 0).
    assert_eq!(setup.state(&info).await, (true, 0, 0));

    assert!(matches!(
        escrow_error(setup.void(&info).await),
        EscrowError::ZeroAuthorization(_)
    ));
    assert!(matches!(
        escrow_error(setup.capture(&info, AMOUNT, 0, setup.fee_receiver).await),
        EscrowError::InsufficientAuthorization(_)
    ));
}

#[tokio::test]
async fn capture_is_refused_from_capture_deadline_but_void_still_works() {
    let setup = Setup::start().await;
    let (payer, info, _) = setup.authorized().await;
    setup.travel(CAPTURE_S).await;
    assert!(setup.chain_now().await >= info.authorizationExpiry.to::<u64>());

    assert!(matches!(
        escrow_error(setup.capture(&info, AMOUNT, 0, setup.fee_receiver).await),
        EscrowError::AfterAuthorizationExpiry(e) if e.expiry == info.authorizationExpiry
    ));
    setup.void(&info).await.unwrap();
    assert_eq!(setup.balance(payer.address()).await, PAYER_BALANCE);
    assert_eq!(setup.balance(setup.receiver).await, 0);
}

#[tokio::test]
async fn capture_just_before_the_deadline_still_works() {
    let setup = Setup::start().await;
    let (_payer, info, _) = setup.authorized().await;
    let deadline = info.authorizationExpiry.to::<u64>();
    // The capture's block is the last second before the deadline.
    setup
        .devnet
        .provider()
        .raw_request::<_, Value>("evm_setNextBlockTimestamp".into(), (deadline - 1,))
        .await
        .unwrap();
    setup
        .capture(&info, AMOUNT, 0, setup.fee_receiver)
        .await
        .unwrap();
    assert_eq!(setup.balance(setup.receiver).await, AMOUNT);
}

#[tokio::test]
async fn payer_reclaims_from_capture_deadline_only() {
    let setup = Setup::start().await;
    let (payer, info, _) = setup.authorized().await;
    let as_payer = setup.escrow_as(&payer);

    let early = send(as_payer.reclaim(info.clone()).send().await).await;
    assert!(matches!(
        escrow_error(early),
        EscrowError::BeforeAuthorizationExpiry(e) if e.expiry == info.authorizationExpiry
    ));
    setup.travel(CAPTURE_S).await;
    // Reclaiming is the payer's right, not the operator's.
    assert!(matches!(
        escrow_error(send(setup.escrow().reclaim(info.clone()).send().await).await),
        EscrowError::InvalidSender(e) if e.sender == setup.operator.address() && e.expected == payer.address()
    ));

    let receipt = send(as_payer.reclaim(info.clone()).send().await)
        .await
        .unwrap();
    let reclaimed = receipt
        .decoded_log::<IAuthCaptureEscrow::PaymentReclaimed>()
        .expect("PaymentReclaimed");
    assert_eq!(reclaimed.amount, U256::from(AMOUNT));
    assert_eq!(setup.balance(payer.address()).await, PAYER_BALANCE);
    assert_eq!(setup.state(&info).await, (true, 0, 0));
    assert!(matches!(
        escrow_error(send(as_payer.reclaim(info.clone()).send().await).await),
        EscrowError::ZeroAuthorization(_)
    ));
}

#[tokio::test]
async fn refund_is_funded_by_the_operator_through_the_refund_collector() {
    let setup = Setup::start().await;
    let (payer, info, _) = setup.authorized().await;
    setup
        .capture(&info, AMOUNT, 200, setup.fee_receiver)
        .await
        .unwrap();
    let fee = AMOUNT * 200 / 10_000;
    let paid_out = setup.balance(setup.receiver).await;
    assert_eq!(paid_out, AMOUNT - fee);
    // The operator's own wallet funds refunds: the receiver and the treasury keep what they got.
    setup
        .devnet
        .mint(setup.operator.address(), U256::from(AMOUNT))
        .await
        .unwrap();

    // Without an allowance the token refuses, and its error passes through the escrow.
    assert!(matches!(
        token_error(setup.refund(&info, 500_000, OPERATOR_REFUND_COLLECTOR_ADDRESS).await),
        TokenError::InsufficientAllowance(e) if e.spender == OPERATOR_REFUND_COLLECTOR_ADDRESS
    ));
    // A payment collector cannot be used to refund (and vice versa).
    assert!(matches!(
        escrow_error(
            setup
                .refund(&info, 500_000, ERC3009_COLLECTOR_ADDRESS)
                .await
        ),
        EscrowError::InvalidCollectorForOperation(_)
    ));

    setup.approve_refunds(AMOUNT).await;
    let receipt = setup
        .refund(&info, 500_000, OPERATOR_REFUND_COLLECTOR_ADDRESS)
        .await
        .unwrap();
    let refunded = receipt
        .decoded_log::<IAuthCaptureEscrow::PaymentRefunded>()
        .expect("PaymentRefunded");
    assert_eq!(refunded.amount, U256::from(500_000));
    assert_eq!(refunded.tokenCollector, OPERATOR_REFUND_COLLECTOR_ADDRESS);
    assert_eq!(
        setup.balance(payer.address()).await,
        PAYER_BALANCE - AMOUNT + 500_000
    );
    assert_eq!(
        setup.balance(setup.operator.address()).await,
        AMOUNT - 500_000
    );
    assert_eq!(setup.balance(setup.receiver).await, paid_out);
    assert_eq!(setup.balance(setup.fee_receiver).await, fee);
    assert_eq!(setup.balance(setup.token_store().await).await, 0);
    assert_eq!(setup.state(&info).await, (true, 0, AMOUNT - 500_000));

    assert!(matches!(
        escrow_error(setup.refund(&info, AMOUNT - 500_000 + 1, OPERATOR_REFUND_COLLECTOR_ADDRESS).await),
        EscrowError::RefundExceedsCapture(e) if e.captured == U256::from(AMOUNT - 500_000)
    ));
    setup
        .refund(&info, AMOUNT - 500_000, OPERATOR_REFUND_COLLECTOR_ADDRESS)
        .await
        .unwrap();
    assert_eq!(setup.balance(payer.address()).await, PAYER_BALANCE);
    // Fully refunded also reads (collected, 0, 0).
    assert_eq!(setup.state(&info).await, (true, 0, 0));
}

#[tokio::test]
async fn refund_is_refused_from_refund_deadline() {
    let setup = Setup::start().await;
    let (_payer, info, _) = setup.authorized().await;
    setup
        .capture(&info, AMOUNT, 0, setup.fee_receiver)
        .await
        .unwrap();
    setup
        .devnet
        .mint(setup.operator.address(), U256::from(AMOUNT))
        .await
        .unwrap();
    setup.approve_refunds(AMOUNT).await;
    setup.travel(REFUND_S).await;
    assert!(matches!(
        escrow_error(setup.refund(&info, 1, OPERATOR_REFUND_COLLECTOR_ADDRESS).await),
        EscrowError::AfterRefundExpiry(e) if e.expiry == info.refundExpiry
    ));
    assert_eq!(setup.balance(setup.operator.address()).await, AMOUNT);
}

#[tokio::test]
async fn fee_bps_outside_the_agreed_range_is_refused() {
    let setup = Setup::start().await;
    let payer = setup.payer().await;
    let mut info = setup.payment_info(payer.address()).await;
    info.minFeeBps = 100;
    info.maxFeeBps = 500;
    let signature = setup.sign(&payer, &info).await;
    setup.authorize(&info, AMOUNT, signature).await.unwrap();
    for fee_bps in [0, 99, 501, 10_000] {
        assert!(
            matches!(
                escrow_error(setup.capture(&info, AMOUNT, fee_bps, setup.fee_receiver).await),
                EscrowError::FeeBpsOutOfRange(e)
                    if e.feeBps == fee_bps && e.minFeeBps == 100 && e.maxFeeBps == 500
            ),
            "{fee_bps} bps"
        );
    }
    setup
        .capture(&info, AMOUNT, 500, setup.fee_receiver)
        .await
        .unwrap();
    assert_eq!(
        setup.balance(setup.fee_receiver).await,
        AMOUNT * 500 / 10_000
    );

    // Terms that are broken in themselves are refused at authorization.
    let mut overflow = setup.payment_info(payer.address()).await;
    overflow.maxFeeBps = 10_001;
    let signature = setup.sign(&payer, &overflow).await;
    assert!(matches!(
        escrow_error(setup.authorize(&overflow, AMOUNT, signature).await),
        EscrowError::FeeBpsOverflow(e) if e.feeBps == 10_001
    ));
    let mut inverted = setup.payment_info(payer.address()).await;
    inverted.minFeeBps = 300;
    inverted.maxFeeBps = 200;
    let signature = setup.sign(&payer, &inverted).await;
    assert!(matches!(
        escrow_error(setup.authorize(&inverted, AMOUNT, signature).await),
        EscrowError::InvalidFeeBpsRange(_)
    ));
}

#[tokio::test]
async fn fee_receiver_must_match_even_at_zero_bps() {
    let setup = Setup::start().await;
    let (_payer, info, _) = setup.authorized().await;
    let elsewhere = PrivateKeySigner::random().address();
    for fee_bps in [0, 100] {
        assert!(matches!(
            escrow_error(setup.capture(&info, AMOUNT, fee_bps, elsewhere).await),
            EscrowError::InvalidFeeReceiver(e) if e.attempted == elsewhere && e.expected == setup.fee_receiver
        ));
    }
    assert!(matches!(
        escrow_error(setup.capture(&info, AMOUNT, 0, Address::ZERO).await),
        EscrowError::InvalidFeeReceiver(_)
    ));

    // Terms without a fee receiver let the operator name one, but never the zero address for a
    // non-zero fee.
    let payer = setup.payer().await;
    let mut open = setup.payment_info(payer.address()).await;
    open.feeReceiver = Address::ZERO;
    let signature = setup.sign(&payer, &open).await;
    setup.authorize(&open, AMOUNT, signature).await.unwrap();
    assert!(matches!(
        escrow_error(setup.capture(&open, AMOUNT, 100, Address::ZERO).await),
        EscrowError::ZeroFeeReceiver(_)
    ));
    setup.capture(&open, AMOUNT, 100, elsewhere).await.unwrap();
    assert_eq!(setup.balance(elsewhere).await, AMOUNT / 100);
}

#[tokio::test]
async fn a_payment_info_is_authorized_once_even_after_void() {
    let setup = Setup::start().await;
    let payer = setup.payer().await;
    let info = setup.payment_info(payer.address()).await;
    let signature = setup.sign(&payer, &info).await;
    setup
        .authorize(&info, AMOUNT, signature.clone())
        .await
        .unwrap();
    let hash = payment_hash(setup.devnet.chain_id(), &info);
    assert!(matches!(
        escrow_error(setup.authorize(&info, AMOUNT, signature.clone()).await),
        EscrowError::PaymentAlreadyCollected(e) if e.paymentInfoHash == hash
    ));
    setup.void(&info).await.unwrap();
    assert!(matches!(
        escrow_error(setup.authorize(&info, AMOUNT, signature.clone()).await),
        EscrowError::PaymentAlreadyCollected(_)
    ));
    // Nor can the voided terms be charged instead.
    assert!(matches!(
        escrow_error(
            send(
                setup
                    .escrow()
                    .charge(
                        info.clone(),
                        U256::from(AMOUNT),
                        ERC3009_COLLECTOR_ADDRESS,
                        signature,
                        0,
                        setup.fee_receiver
                    )
                    .send()
                    .await
            )
            .await
        ),
        EscrowError::PaymentAlreadyCollected(_)
    ));
    assert_eq!(setup.balance(payer.address()).await, PAYER_BALANCE);
}

#[tokio::test]
async fn a_used_or_canceled_authorization_nonce_is_refused() {
    let setup = Setup::start().await;
    let payer = setup.payer().await;
    let info = setup.payment_info(payer.address()).await;
    let signature = setup.sign(&payer, &info).await;
    let nonce = payer_agnostic_hash(setup.devnet.chain_id(), &info);

    // The payer burns the nonce before the operator authorizes: the token's refusal passes
    // through the escrow unchanged, and nothing is recorded.
    let cancel = CancelAuthorization {
        authorizer: payer.address(),
        nonce,
    };
    let cancel_signature = payer
        .sign_hash(&cancel.eip712_signing_hash(&setup.token_domain()))
        .await
        .unwrap();
    send(
        IToken::new(setup.devnet.token(), setup.provider_as(&payer))
            .cancelAuthorization(
                payer.address(),
                nonce,
                Bytes::from(cancel_signature.as_bytes().to_vec()),
            )
            .send()
            .await,
    )
    .await
    .unwrap();
    assert!(matches!(
        token_error(setup.authorize(&info, AMOUNT, signature).await),
        TokenError::AuthorizationUsedOrCanceled(e) if e.authorizer == payer.address() && e.nonce == nonce
    ));
    assert_eq!(setup.state(&info).await, (false, 0, 0));
    assert_eq!(setup.balance(payer.address()).await, PAYER_BALANCE);

    // A pre-approval past its expiry is refused by the escrow before the token is asked.
    let late = setup.payment_info(payer.address()).await;
    let late_signature = setup.sign(&payer, &late).await;
    setup.travel(PRE_APPROVAL_S).await;
    assert!(matches!(
        escrow_error(setup.authorize(&late, AMOUNT, late_signature).await),
        EscrowError::AfterPreApprovalExpiry(e) if e.expiry == late.preApprovalExpiry
    ));
}

#[tokio::test]
async fn only_the_operator_drives_a_payment() {
    let setup = Setup::start().await;
    let (payer, info, _) = setup.authorized().await;
    let intruder = setup.devnet.fresh_relayer().await.unwrap();
    let as_intruder = setup.escrow_as(&intruder);
    let expected = setup.operator.address();
    let refusals = [
        send(
            as_intruder
                .capture(info.clone(), U256::from(AMOUNT), 0, setup.fee_receiver)
                .send()
                .await,
        )
        .await,
        send(as_intruder.void(info.clone()).send().await).await,
        send(
            as_intruder
                .refund(
                    info.clone(),
                    U256::from(1),
                    OPERATOR_REFUND_COLLECTOR_ADDRESS,
                    Bytes::new(),
                )
                .send()
                .await,
        )
        .await,
    ];
    for refusal in refusals {
        assert!(matches!(
            escrow_error(refusal),
            EscrowError::InvalidSender(e) if e.sender == intruder.address() && e.expected == expected
        ));
    }

    // Even the payer cannot authorize its own signature in the operator's place.
    let fresh = setup.payment_info(payer.address()).await;
    let signature = setup.sign(&payer, &fresh).await;
    assert!(matches!(
        escrow_error(
            send(
                setup
                    .escrow_as(&payer)
                    .authorize(fresh.clone(), U256::from(AMOUNT), ERC3009_COLLECTOR_ADDRESS, signature)
                    .send()
                    .await
            )
            .await
        ),
        EscrowError::InvalidSender(e) if e.sender == payer.address() && e.expected == expected
    ));
    assert_eq!(setup.state(&info).await, (true, AMOUNT, 0));
}

#[tokio::test]
async fn a_signature_for_one_operator_is_useless_to_another() {
    let setup = Setup::start().await;
    let payer = setup.payer().await;
    let info = setup.payment_info(payer.address()).await;
    let signature = setup.sign(&payer, &info).await;

    // Another operator copies the terms with itself as operator (and treasury): the nonce the
    // payer signed no longer matches, so the token refuses the signature.
    let thief = setup.devnet.fresh_relayer().await.unwrap();
    let mut stolen = info.clone();
    stolen.operator = thief.address();
    stolen.feeReceiver = thief.address();
    assert!(matches!(
        token_error(
            send(
                setup
                    .escrow_as(&thief)
                    .authorize(
                        stolen,
                        U256::from(AMOUNT),
                        ERC3009_COLLECTOR_ADDRESS,
                        signature.clone()
                    )
                    .send()
                    .await
            )
            .await
        ),
        TokenError::InvalidSignature(_)
    ));
    // The payer-agnostic nonce is the same for another payer, but the signature is not theirs.
    let victim = setup.payer().await;
    let mut redirected = info.clone();
    redirected.payer = victim.address();
    assert!(matches!(
        token_error(
            setup
                .authorize(&redirected, AMOUNT, signature.clone())
                .await
        ),
        TokenError::InvalidSignature(_)
    ));
    assert_eq!(setup.balance(victim.address()).await, PAYER_BALANCE);
    // More than the signed `maxAmount` is refused before any token moves.
    assert!(matches!(
        escrow_error(setup.authorize(&info, AMOUNT + 1, signature.clone()).await),
        EscrowError::ExceedsMaxAmount(_)
    ));
    setup.authorize(&info, AMOUNT, signature).await.unwrap();
}

#[tokio::test]
async fn the_wrong_collector_type_is_refused() {
    let setup = Setup::start().await;
    let payer = setup.payer().await;
    let info = setup.payment_info(payer.address()).await;
    let signature = setup.sign(&payer, &info).await;
    assert!(matches!(
        escrow_error(
            send(
                setup
                    .escrow()
                    .authorize(
                        info.clone(),
                        U256::from(AMOUNT),
                        OPERATOR_REFUND_COLLECTOR_ADDRESS,
                        signature
                    )
                    .send()
                    .await
            )
            .await
        ),
        EscrowError::InvalidCollectorForOperation(_)
    ));
    assert_eq!(setup.balance(payer.address()).await, PAYER_BALANCE);
}

#[tokio::test]
async fn charge_collects_and_pays_out_in_one_step() {
    let setup = Setup::start().await;
    let payer = setup.payer().await;
    let info = setup.payment_info(payer.address()).await;
    let signature = setup.sign(&payer, &info).await;
    let receipt = send(
        setup
            .escrow()
            .charge(
                info.clone(),
                U256::from(1_000_000),
                ERC3009_COLLECTOR_ADDRESS,
                signature,
                250,
                setup.fee_receiver,
            )
            .send()
            .await,
    )
    .await
    .unwrap();
    let charged = receipt
        .decoded_log::<IAuthCaptureEscrow::PaymentCharged>()
        .expect("PaymentCharged");
    assert_eq!(charged.paymentInfo, info);
    assert_eq!(charged.amount, U256::from(1_000_000));
    assert_eq!(charged.feeBps, 250);
    assert_eq!(
        setup.balance(payer.address()).await,
        PAYER_BALANCE - 1_000_000
    );
    assert_eq!(setup.balance(setup.fee_receiver).await, 25_000);
    assert_eq!(setup.balance(setup.receiver).await, 975_000);
    assert_eq!(setup.state(&info).await, (true, 0, 1_000_000));
}

/// One `auth-capture` offer for the v1.0 deployment, as the gateway would put in `accepts[]`.
fn auth_capture_requirements(setup: &Setup, now: u64) -> Value {
    json!({
        "scheme": "auth-capture",
        "network": setup.devnet.network(),
        "amount": AMOUNT.to_string(),
        "asset": setup.devnet.token().to_checksum(None),
        "payTo": setup.receiver.to_checksum(None),
        "maxTimeoutSeconds": 300,
        "extra": {
            "name": setup.devnet.token_name(),
            "version": setup.devnet.token_version(),
            "captureAuthorizer": setup.operator.address().to_checksum(None),
            "captureDeadline": now + CAPTURE_S,
            "refundDeadline": now + REFUND_S,
            "minFeeBps": 0,
            "maxFeeBps": 500,
            "feeRecipient": setup.fee_receiver.to_checksum(None),
            "autoCapture": false,
            "assetTransferMethod": "eip3009",
            "authCaptureEscrow": AUTH_CAPTURE_ESCROW_ADDRESS.to_checksum(None),
        },
    })
}

fn json_u64(value: &Value) -> u64 {
    match value {
        Value::Number(n) => n.as_u64().unwrap(),
        Value::String(s) => s.parse().unwrap(),
        other => panic!("not a number: {other}"),
    }
}

#[tokio::test]
async fn the_official_auth_capture_client_payload_authorizes_on_the_devnet_escrow() {
    if !node_tools_or_skip("official auth-capture client") {
        return;
    }
    let setup = Setup::start().await;
    let payer = setup.payer().await;
    let now = setup.chain_now().await;
    let requirements = auth_capture_requirements(&setup, now);
    let output = node_script(
        "auth-capture-sign.mjs",
        &json!({
            "privateKey": format!("0x{}", hex::encode(payer.to_bytes())),
            "requirements": requirements,
        }),
    )
    .await
    .unwrap();
    let payload = &output["paymentPayload"]["payload"];
    let authorization = &payload["authorization"];
    assert_eq!(
        authorization["to"]
            .as_str()
            .unwrap()
            .parse::<Address>()
            .unwrap(),
        ERC3009_COLLECTOR_ADDRESS
    );

    // PaymentInfo as the spec maps the offer and payload onto it.
    let extra = &requirements["extra"];
    let info = PaymentInfo {
        operator: setup.operator.address(),
        payer: authorization["from"].as_str().unwrap().parse().unwrap(),
        receiver: setup.receiver,
        token: setup.devnet.token(),
        maxAmount: alloy::primitives::Uint::from(json_u64(&authorization["value"])),
        preApprovalExpiry: alloy::primitives::Uint::from(json_u64(&authorization["validBefore"])),
        authorizationExpiry: alloy::primitives::Uint::from(json_u64(&extra["captureDeadline"])),
        refundExpiry: alloy::primitives::Uint::from(json_u64(&extra["refundDeadline"])),
        minFeeBps: 0,
        maxFeeBps: 500,
        feeReceiver: setup.fee_receiver,
        salt: payload["salt"].as_str().unwrap().parse::<U256>().unwrap(),
    };
    assert_eq!(info.payer, payer.address());
    assert_eq!(info.maxAmount.to::<u64>(), AMOUNT);
    let nonce: B256 = authorization["nonce"].as_str().unwrap().parse().unwrap();
    assert_eq!(nonce, payer_agnostic_hash(setup.devnet.chain_id(), &info));

    let signature: Bytes = payload["signature"].as_str().unwrap().parse().unwrap();
    assert_eq!(signature.len(), 65);
    setup.authorize(&info, AMOUNT, signature).await.unwrap();
    assert_eq!(setup.state(&info).await, (true, AMOUNT, 0));
    assert_eq!(setup.balance(setup.token_store().await).await, AMOUNT);
    setup
        .capture(&info, AMOUNT, 250, setup.fee_receiver)
        .await
        .unwrap();
    let fee = AMOUNT * 250 / 10_000;
    assert_eq!(setup.balance(setup.fee_receiver).await, fee);
    assert_eq!(setup.balance(setup.receiver).await, AMOUNT - fee);
    assert_eq!(setup.balance(payer.address()).await, PAYER_BALANCE - AMOUNT);
}

#[tokio::test]
async fn gas_per_operation() {
    let setup = Setup::start().await;
    setup
        .devnet
        .mint(setup.operator.address(), U256::from(10 * AMOUNT))
        .await
        .unwrap();
    setup.approve_refunds(10 * AMOUNT).await;

    // The operator's first payment also creates its token store on the first payout.
    let (_, first, first_authorize) = setup.authorized().await;
    let first_capture = setup
        .capture(&first, AMOUNT, 100, setup.fee_receiver)
        .await
        .unwrap();
    let (_, second, authorize) = setup.authorized().await;
    let capture = setup
        .capture(&second, AMOUNT, 100, setup.fee_receiver)
        .await
        .unwrap();
    let (_, third, _) = setup.authorized().await;
    let void = setup.void(&third).await.unwrap();
    let refund = setup
        .refund(&second, AMOUNT, OPERATOR_REFUND_COLLECTOR_ADDRESS)
        .await
        .unwrap();
    let report = [
        ("authorize (operator's first)", first_authorize.gas_used),
        (
            "capture with fee (creates the token store)",
            first_capture.gas_used,
        ),
        ("authorize", authorize.gas_used),
        ("capture with fee", capture.gas_used),
        ("void", void.gas_used),
        ("refund (operator-funded)", refund.gas_used),
    ];
    for (operation, gas) in report {
        println!("gas {operation}: {gas}");
        // Far below a block; a jump would mean the contracts changed shape.
        assert!(gas > 21_000 && gas < 400_000, "{operation}: {gas}");
    }
}
