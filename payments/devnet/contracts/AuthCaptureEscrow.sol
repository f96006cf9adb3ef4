// SPDX-License-Identifier: Apache-2.0
pragma solidity 0.8.37;

import {TokenStore} from "TokenStore.sol";
import {TokenCollector} from "TokenCollector.sol";
import {IEscrowToken} from "SafeTransfer.sol";

/// @title AuthCaptureEscrow
/// @notice hiregate's devnet look-alike of base/commerce-payments' `AuthCaptureEscrow` v1.0.0,
/// written in this repository to its published interface (functions, `PaymentInfo`, EIP-712
/// typehash, `getHash`, `paymentState`, events, custom errors) so that the official x402
/// `auth-capture` clients and hiregate's gateway behave on a local chain as on the audited
/// deployment. The devnet places its runtime code at the canonical v1.0 address.
///
/// Lifecycle of one `PaymentInfo` (keyed by `getHash`, which includes the payer):
/// - `authorize` (operator): a token collector moves up to `maxAmount` from the payer into the
///   operator's token store; `capturableAmount` = amount. Each PaymentInfo is collected once ever.
/// - `capture` (operator, strictly before `authorizationExpiry`): capturable → refundable; the
///   amount goes to `receiver` minus `amount * feeBps / 10000` (rounded down) to the fee receiver.
/// - `void` (operator, any time) / `reclaim` (payer, from `authorizationExpiry`): capturable back
///   to the payer.
/// - `refund` (operator, strictly before `refundExpiry`): up to the refundable amount, pulled in
///   by a refund collector (e.g. from the operator's wallet) and paid to the payer.
/// - `charge` (operator): authorize and capture in one step.
/// @dev Test-only deployment; the audited upstream contracts are what real chains use.
contract AuthCaptureEscrow {
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

    struct PaymentState {
        bool hasCollectedPayment;
        uint120 capturableAmount;
        uint120 refundableAmount;
    }

    bytes32 public constant PAYMENT_INFO_TYPEHASH = keccak256(
        "PaymentInfo(address operator,address payer,address receiver,address token,uint120 maxAmount,uint48 preApprovalExpiry,uint48 authorizationExpiry,uint48 refundExpiry,uint16 minFeeBps,uint16 maxFeeBps,address feeReceiver,uint256 salt)"
    );

    uint16 internal constant MAX_FEE_BPS = 10_000;

    /// @notice Per payment: collected at all, still capturable, captured and not yet refunded.
    /// Never reset: a voided, reclaimed or fully refunded payment reads `(true, 0, 0)`.
    mapping(bytes32 paymentInfoHash => PaymentState state) public paymentState;

    /// @dev Transient reentrancy lock (EIP-1153), as the canonical contract's guard.
    bool private transient entered;

    event PaymentCharged(
        bytes32 indexed paymentInfoHash,
        PaymentInfo paymentInfo,
        uint256 amount,
        address tokenCollector,
        uint16 feeBps,
        address feeReceiver
    );
    event PaymentAuthorized(
        bytes32 indexed paymentInfoHash, PaymentInfo paymentInfo, uint256 amount, address tokenCollector
    );
    event PaymentCaptured(bytes32 indexed paymentInfoHash, uint256 amount, uint16 feeBps, address feeReceiver);
    event PaymentVoided(bytes32 indexed paymentInfoHash, uint256 amount);
    event PaymentReclaimed(bytes32 indexed paymentInfoHash, uint256 amount);
    event PaymentRefunded(bytes32 indexed paymentInfoHash, uint256 amount, address tokenCollector);
    event TokenStoreCreated(address indexed operator, address tokenStore);

    error Reentrancy();
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

    modifier nonReentrant() {
        if (entered) {
            revert Reentrancy();
        }
        entered = true;
        _;
        entered = false;
    }

    modifier onlySender(address expected) {
        if (msg.sender != expected) {
            revert InvalidSender(msg.sender, expected);
        }
        _;
    }

    modifier validAmount(uint256 amount) {
        if (amount == 0) {
            revert ZeroAmount();
        }
        if (amount > type(uint120).max) {
            revert AmountOverflow(amount, type(uint120).max);
        }
        _;
    }

    // ---------------------------------------------------------------- payment lifecycle

    /// @notice Collects `amount` from the payer and pays it out at once (fee included).
    function charge(
        PaymentInfo calldata paymentInfo,
        uint256 amount,
        address tokenCollector,
        bytes calldata collectorData,
        uint16 feeBps,
        address feeReceiver
    ) external nonReentrant onlySender(paymentInfo.operator) validAmount(amount) {
        checkPaymentInfo(paymentInfo, amount);
        checkFee(paymentInfo, feeBps, feeReceiver);
        bytes32 paymentInfoHash = markCollected(paymentInfo, 0, uint120(amount));
        emit PaymentCharged(paymentInfoHash, paymentInfo, amount, tokenCollector, feeBps, feeReceiver);
        collect(paymentInfo, amount, tokenCollector, collectorData, TokenCollector.CollectorType.Payment);
        distribute(paymentInfo, amount, feeBps, feeReceiver);
    }

    /// @notice Moves `amount` from the payer into the operator's token store, capturable until
    /// `authorizationExpiry`.
    function authorize(
        PaymentInfo calldata paymentInfo,
        uint256 amount,
        address tokenCollector,
        bytes calldata collectorData
    ) external nonReentrant onlySender(paymentInfo.operator) validAmount(amount) {
        checkPaymentInfo(paymentInfo, amount);
        bytes32 paymentInfoHash = markCollected(paymentInfo, uint120(amount), 0);
        emit PaymentAuthorized(paymentInfoHash, paymentInfo, amount, tokenCollector);
        collect(paymentInfo, amount, tokenCollector, collectorData, TokenCollector.CollectorType.Payment);
    }

    /// @notice Pays `amount` of the authorization to the receiver, `feeBps` of it to the fee
    /// receiver. May be called repeatedly up to the authorized amount.
    function capture(PaymentInfo calldata paymentInfo, uint256 amount, uint16 feeBps, address feeReceiver)
        external
        nonReentrant
        onlySender(paymentInfo.operator)
        validAmount(amount)
    {
        checkFee(paymentInfo, feeBps, feeReceiver);
        if (block.timestamp >= paymentInfo.authorizationExpiry) {
            revert AfterAuthorizationExpiry(uint48(block.timestamp), paymentInfo.authorizationExpiry);
        }
        bytes32 paymentInfoHash = getHash(paymentInfo);
        PaymentState storage state = paymentState[paymentInfoHash];
        uint120 capturable = state.capturableAmount;
        if (capturable < amount) {
            revert InsufficientAuthorization(paymentInfoHash, capturable, amount);
        }
        state.capturableAmount = capturable - uint120(amount);
        state.refundableAmount += uint120(amount);
        emit PaymentCaptured(paymentInfoHash, amount, feeBps, feeReceiver);
        distribute(paymentInfo, amount, feeBps, feeReceiver);
    }

    /// @notice Returns everything still capturable to the payer (operator; also after expiry).
    function void(PaymentInfo calldata paymentInfo) external nonReentrant onlySender(paymentInfo.operator) {
        bytes32 paymentInfoHash = getHash(paymentInfo);
        uint120 amount = releaseCapturable(paymentInfoHash);
        emit PaymentVoided(paymentInfoHash, amount);
        sendFromStore(paymentInfo.operator, paymentInfo.token, paymentInfo.payer, amount);
    }

    /// @notice Returns everything still capturable to the payer (payer; from
    /// `authorizationExpiry` on), so funds are never stuck with an absent operator.
    function reclaim(PaymentInfo calldata paymentInfo) external nonReentrant onlySender(paymentInfo.payer) {
        if (block.timestamp < paymentInfo.authorizationExpiry) {
            revert BeforeAuthorizationExpiry(uint48(block.timestamp), paymentInfo.authorizationExpiry);
        }
        bytes32 paymentInfoHash = getHash(paymentInfo);
        uint120 amount = releaseCapturable(paymentInfoHash);
        emit PaymentReclaimed(paymentInfoHash, amount);
        sendFromStore(paymentInfo.operator, paymentInfo.token, paymentInfo.payer, amount);
    }

    /// @notice Pays up to the captured, unrefunded amount back to the payer, with funds a refund
    /// collector brings in (the receiver is never charged back).
    function refund(
        PaymentInfo calldata paymentInfo,
        uint256 amount,
        address tokenCollector,
        bytes calldata collectorData
    ) external nonReentrant onlySender(paymentInfo.operator) validAmount(amount) {
        if (block.timestamp >= paymentInfo.refundExpiry) {
            revert AfterRefundExpiry(uint48(block.timestamp), paymentInfo.refundExpiry);
        }
        bytes32 paymentInfoHash = getHash(paymentInfo);
        PaymentState storage state = paymentState[paymentInfoHash];
        uint120 refundable = state.refundableAmount;
        if (refundable < amount) {
            revert RefundExceedsCapture(amount, refundable);
        }
        state.refundableAmount = refundable - uint120(amount);
        emit PaymentRefunded(paymentInfoHash, amount, tokenCollector);
        collect(paymentInfo, amount, tokenCollector, collectorData, TokenCollector.CollectorType.Refund);
        sendFromStore(paymentInfo.operator, paymentInfo.token, paymentInfo.payer, amount);
    }

    // ---------------------------------------------------------------- views

    /// @notice The payment's key: `keccak256(abi.encode(chainId, this, keccak256(abi.encode(
    /// PAYMENT_INFO_TYPEHASH, paymentInfo))))`, so equal terms on another chain or escrow differ.
    function getHash(PaymentInfo calldata paymentInfo) public view returns (bytes32) {
        bytes32 structHash = keccak256(abi.encode(PAYMENT_INFO_TYPEHASH, paymentInfo));
        return keccak256(abi.encode(block.chainid, address(this), structHash));
    }

    /// @notice Where `operator`'s escrowed funds are held (deterministic; may not exist yet).
    function getTokenStore(address operator) public view returns (address) {
        bytes32 initCodeHash = keccak256(abi.encodePacked(type(TokenStore).creationCode, abi.encode(address(this))));
        return address(
            uint160(uint256(keccak256(abi.encodePacked(bytes1(0xff), address(this), storeSalt(operator), initCodeHash))))
        );
    }

    // ---------------------------------------------------------------- internals

    function checkPaymentInfo(PaymentInfo calldata paymentInfo, uint256 amount) private view {
        if (amount > paymentInfo.maxAmount) {
            revert ExceedsMaxAmount(amount, paymentInfo.maxAmount);
        }
        uint48 preApproval = paymentInfo.preApprovalExpiry;
        uint48 authorization = paymentInfo.authorizationExpiry;
        uint48 refundBy = paymentInfo.refundExpiry;
        if (block.timestamp >= preApproval) {
            revert AfterPreApprovalExpiry(uint48(block.timestamp), preApproval);
        }
        if (preApproval > authorization || authorization > refundBy) {
            revert InvalidExpiries(preApproval, authorization, refundBy);
        }
        if (paymentInfo.maxFeeBps > MAX_FEE_BPS) {
            revert FeeBpsOverflow(paymentInfo.maxFeeBps);
        }
        if (paymentInfo.minFeeBps > paymentInfo.maxFeeBps) {
            revert InvalidFeeBpsRange(paymentInfo.minFeeBps, paymentInfo.maxFeeBps);
        }
    }

    function checkFee(PaymentInfo calldata paymentInfo, uint16 feeBps, address feeReceiver) private pure {
        if (feeBps < paymentInfo.minFeeBps || feeBps > paymentInfo.maxFeeBps) {
            revert FeeBpsOutOfRange(feeBps, paymentInfo.minFeeBps, paymentInfo.maxFeeBps);
        }
        if (feeBps > 0 && feeReceiver == address(0)) {
            revert ZeroFeeReceiver();
        }
        // A fee receiver the payer agreed to is binding, even for a zero fee.
        address agreed = paymentInfo.feeReceiver;
        if (agreed != address(0) && agreed != feeReceiver) {
            revert InvalidFeeReceiver(feeReceiver, agreed);
        }
    }

    function markCollected(PaymentInfo calldata paymentInfo, uint120 capturable, uint120 refundable)
        private
        returns (bytes32 paymentInfoHash)
    {
        paymentInfoHash = getHash(paymentInfo);
        if (paymentState[paymentInfoHash].hasCollectedPayment) {
            revert PaymentAlreadyCollected(paymentInfoHash);
        }
        paymentState[paymentInfoHash] = PaymentState(true, capturable, refundable);
    }

    function releaseCapturable(bytes32 paymentInfoHash) private returns (uint120 amount) {
        amount = paymentState[paymentInfoHash].capturableAmount;
        if (amount == 0) {
            revert ZeroAuthorization(paymentInfoHash);
        }
        paymentState[paymentInfoHash].capturableAmount = 0;
    }

    /// @dev Has the collector bring exactly `amount` into the operator's store, measured on the
    /// store's balance so a collector cannot under-deliver.
    function collect(
        PaymentInfo calldata paymentInfo,
        uint256 amount,
        address tokenCollector,
        bytes calldata collectorData,
        TokenCollector.CollectorType expected
    ) private {
        if (TokenCollector(tokenCollector).collectorType() != expected) {
            revert InvalidCollectorForOperation();
        }
        IEscrowToken token = IEscrowToken(paymentInfo.token);
        address store = getTokenStore(paymentInfo.operator);
        uint256 before = token.balanceOf(store);
        TokenCollector(tokenCollector).collectTokens(paymentInfo, store, amount, collectorData);
        if (token.balanceOf(store) != before + amount) {
            revert TokenCollectionFailed();
        }
    }

    function distribute(PaymentInfo calldata paymentInfo, uint256 amount, uint16 feeBps, address feeReceiver)
        private
    {
        uint256 fee = amount * feeBps / MAX_FEE_BPS;
        if (fee > 0) {
            sendFromStore(paymentInfo.operator, paymentInfo.token, feeReceiver, fee);
        }
        if (amount > fee) {
            sendFromStore(paymentInfo.operator, paymentInfo.token, paymentInfo.receiver, amount - fee);
        }
    }

    /// @dev Pays from the operator's store, creating the store on its first payout.
    function sendFromStore(address operator, address token, address recipient, uint256 amount) private {
        address store = getTokenStore(operator);
        if (store.code.length == 0) {
            new TokenStore{salt: storeSalt(operator)}(address(this));
            emit TokenStoreCreated(operator, store);
        }
        TokenStore(store).sendTokens(token, recipient, amount);
    }

    function storeSalt(address operator) private pure returns (bytes32) {
        return bytes32(bytes20(operator));
    }
}
