// SPDX-License-Identifier: Apache-2.0
pragma solidity 0.8.37;

import {AuthCaptureEscrow} from "AuthCaptureEscrow.sol";
import {TokenCollector} from "TokenCollector.sol";
import {SafeTransfer} from "SafeTransfer.sol";

/// @notice The ERC-3009 entry point the collector uses (the `bytes signature` form).
interface IReceiveWithAuthorization {
    function receiveWithAuthorization(
        address from,
        address to,
        uint256 value,
        uint256 validAfter,
        uint256 validBefore,
        bytes32 nonce,
        bytes memory signature
    ) external;
}

/// @notice The Multicall3 call used to run an ERC-6492 wallet's deployment before its signature is
/// checked.
interface ISignaturePrepareMulticall {
    struct Call {
        address target;
        bytes callData;
    }

    struct Result {
        bool success;
        bytes returnData;
    }

    function tryAggregate(bool requireSuccess, Call[] calldata calls)
        external
        payable
        returns (Result[] memory returnData);
}

/// @title ERC3009PaymentCollector
/// @notice Collects a payment with the payer's ERC-3009 `ReceiveWithAuthorization`, written to the
/// published interface of base/commerce-payments v1.0.0 (`ERC3009PaymentCollector`).
/// @dev What the payer signs, and what the official x402 `auth-capture` client produces:
/// `ReceiveWithAuthorization(from = payer, to = this collector, value = maxAmount, validAfter = 0,
/// validBefore = preApprovalExpiry, nonce = escrow.getHash(paymentInfo with payer = 0))`, in the
/// token's EIP-712 domain. `collectorData` is that signature: 65 raw bytes for an EOA, anything the
/// wallet accepts for EIP-1271, optionally ERC-6492-wrapped.
contract ERC3009PaymentCollector is TokenCollector {
    /// @dev ERC-6492's magic suffix of a wrapped signature.
    bytes32 internal constant ERC6492_MAGIC_VALUE = 0x6492649264926492649264926492649264926492649264926492649264926492;

    CollectorType public constant override collectorType = CollectorType.Payment;

    /// @notice Multicall3, the neutral sender of ERC-6492 deployment calls (never this collector,
    /// which would let a "deployment" act with the collector's token balance).
    ISignaturePrepareMulticall public immutable multicall3;

    constructor(address authCaptureEscrow_, address multicall3_) TokenCollector(authCaptureEscrow_) {
        multicall3 = ISignaturePrepareMulticall(multicall3_);
    }

    function _collectTokens(
        AuthCaptureEscrow.PaymentInfo calldata paymentInfo,
        address tokenStore,
        uint256 amount,
        bytes calldata collectorData
    ) internal override {
        address token = paymentInfo.token;
        address payer = paymentInfo.payer;
        uint256 maxAmount = paymentInfo.maxAmount;

        // The signature covers `maxAmount`; whatever is not authorized goes straight back.
        IReceiveWithAuthorization(token).receiveWithAuthorization(
            payer,
            address(this),
            maxAmount,
            0,
            paymentInfo.preApprovalExpiry,
            _getHashPayerAgnostic(paymentInfo),
            unwrapErc6492(collectorData)
        );
        if (maxAmount > amount) {
            SafeTransfer.safeTransfer(token, payer, maxAmount - amount);
        }
        SafeTransfer.safeTransfer(token, tokenStore, amount);
    }

    /// @dev Returns the inner signature of an ERC-6492 wrapper after running its prepare call
    /// (failures ignored: the token's signature check decides); other signatures pass unchanged.
    function unwrapErc6492(bytes calldata signature) private returns (bytes memory) {
        uint256 length = signature.length;
        if (length < 32 || bytes32(signature[length - 32:]) != ERC6492_MAGIC_VALUE) {
            return signature;
        }
        (address prepareTarget, bytes memory prepareData, bytes memory inner) =
            abi.decode(signature[:length - 32], (address, bytes, bytes));
        ISignaturePrepareMulticall.Call[] memory calls = new ISignaturePrepareMulticall.Call[](1);
        calls[0] = ISignaturePrepareMulticall.Call(prepareTarget, prepareData);
        multicall3.tryAggregate(false, calls);
        return inner;
    }
}
