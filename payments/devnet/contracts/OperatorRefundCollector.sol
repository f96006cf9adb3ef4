// SPDX-License-Identifier: Apache-2.0
pragma solidity 0.8.37;

import {AuthCaptureEscrow} from "AuthCaptureEscrow.sol";
import {TokenCollector} from "TokenCollector.sol";
import {SafeTransfer} from "SafeTransfer.sol";

/// @title OperatorRefundCollector
/// @notice Funds refunds from the operator's own wallet, to the published interface of
/// base/commerce-payments v1.0.0 (`OperatorRefundCollector`).
/// @dev Captured money has already left the escrow (receiver and fee receiver were paid), so a
/// refund is new money: the operator must have approved this collector on the token for at least
/// the refund. The receiver is never clawed back. Only the escrow can call `collectTokens`, and the
/// escrow only lets the payment's operator refund, so nobody else can spend that allowance.
contract OperatorRefundCollector is TokenCollector {
    CollectorType public constant override collectorType = CollectorType.Refund;

    constructor(address authCaptureEscrow_) TokenCollector(authCaptureEscrow_) {}

    function _collectTokens(
        AuthCaptureEscrow.PaymentInfo calldata paymentInfo,
        address tokenStore,
        uint256 amount,
        bytes calldata
    ) internal override {
        SafeTransfer.safeTransferFrom(paymentInfo.token, paymentInfo.operator, tokenStore, amount);
    }
}
