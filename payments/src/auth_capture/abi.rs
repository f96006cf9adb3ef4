//! The on-chain interface hiregate talks to, as published by base/commerce-payments v1.0.0
//! (`AuthCaptureEscrow`, `TokenCollector`), plus the revert shapes of the tokens behind the
//! collector. One `sol!` block, so the escrow's functions and events share the
//! [`PaymentInfo`] type.

alloy::sol! {
    /// All a payment is: who drives it, who pays whom, how much at most, until when, with what
    /// fee bounds, and a salt for uniqueness. Field order and types are upstream's, so the ABI
    /// encoding and the typehash match the escrow byte for byte.
    #[derive(Debug, PartialEq, Eq, Hash)]
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

    /// `AuthCaptureEscrow` v1.0.0: functions, events and custom errors.
    #[derive(Debug, PartialEq, Eq)]
    interface IAuthCaptureEscrow {
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

        function charge(PaymentInfo paymentInfo, uint256 amount, address tokenCollector, bytes collectorData, uint16 feeBps, address feeReceiver) external;
        function authorize(PaymentInfo paymentInfo, uint256 amount, address tokenCollector, bytes collectorData) external;
        function capture(PaymentInfo paymentInfo, uint256 amount, uint16 feeBps, address feeReceiver) external;
        function void(PaymentInfo paymentInfo) external;
        function reclaim(PaymentInfo paymentInfo) external;
        function refund(PaymentInfo paymentInfo, uint256 amount, address tokenCollector, bytes collectorData) external;
        function getHash(PaymentInfo paymentInfo) external view returns (bytes32);
        function getTokenStore(address operator) external view returns (address);
        function paymentState(bytes32 paymentInfoHash) external view returns (bool hasCollectedPayment, uint120 capturableAmount, uint120 refundableAmount);
    }

    /// What a token collector or the token under it may revert with: the collector's own
    /// error, the devnet token's custom errors, and OpenZeppelin's `SafeERC20` failure.
    #[derive(Debug, PartialEq, Eq)]
    interface ICollectorReverts {
        error OnlyAuthCaptureEscrow();
        error SafeERC20FailedOperation(address token);
        error InsufficientBalance(address account, uint256 balance, uint256 needed);
        error InsufficientAllowance(address spender, uint256 allowance, uint256 needed);
        error AuthorizationNotYetValid(uint256 validAfter, uint256 blockTimestamp);
        error AuthorizationExpired(uint256 validBefore, uint256 blockTimestamp);
        error AuthorizationUsedOrCanceled(address authorizer, bytes32 nonce);
        error InvalidSignature();
        error CallerMustBePayee(address caller, address payee);
        error ERC20InsufficientBalance(address sender, uint256 balance, uint256 needed);
        error ERC20InsufficientAllowance(address spender, uint256 allowance, uint256 needed);
        error TransferFromFailed();
        error TransferFailed();
    }

    /// The ERC-20 reads and approval an operator needs to fund refunds.
    interface IErc20Allowance {
        function balanceOf(address account) external view returns (uint256);
        function allowance(address owner, address spender) external view returns (uint256);
        function approve(address spender, uint256 value) external returns (bool);
    }
}
