// SPDX-License-Identifier: Apache-2.0
pragma solidity 0.8.37;

import {AuthCaptureEscrow} from "AuthCaptureEscrow.sol";

/// @title TokenCollector
/// @notice What every token collector of the escrow shares (base/commerce-payments v1.0.0
/// interface): only the escrow may ask it to collect, and it declares whether it collects payments
/// or refunds, so a refund source can never be used to pull a payer's funds and vice versa.
abstract contract TokenCollector {
    enum CollectorType {
        Payment,
        Refund
    }

    /// @notice The escrow allowed to call `collectTokens`.
    AuthCaptureEscrow public immutable authCaptureEscrow;

    error OnlyAuthCaptureEscrow();

    constructor(address authCaptureEscrow_) {
        authCaptureEscrow = AuthCaptureEscrow(authCaptureEscrow_);
    }

    /// @notice Moves exactly `amount` of `paymentInfo.token` into `tokenStore`; the escrow checks
    /// the store's balance change.
    function collectTokens(
        AuthCaptureEscrow.PaymentInfo calldata paymentInfo,
        address tokenStore,
        uint256 amount,
        bytes calldata collectorData
    ) external {
        if (msg.sender != address(authCaptureEscrow)) {
            revert OnlyAuthCaptureEscrow();
        }
        _collectTokens(paymentInfo, tokenStore, amount, collectorData);
    }

    function collectorType() external view virtual returns (CollectorType);

    function _collectTokens(
        AuthCaptureEscrow.PaymentInfo calldata paymentInfo,
        address tokenStore,
        uint256 amount,
        bytes calldata collectorData
    ) internal virtual;

    /// @dev The escrow's hash of `paymentInfo` with the payer set to zero: what a payer signs as
    /// its authorization nonce, because the payer's own address cannot be part of what it signs
    /// before the operator knows who will pay.
    function _getHashPayerAgnostic(AuthCaptureEscrow.PaymentInfo memory paymentInfo)
        internal
        view
        returns (bytes32 hash)
    {
        address payer = paymentInfo.payer;
        paymentInfo.payer = address(0);
        hash = authCaptureEscrow.getHash(paymentInfo);
        paymentInfo.payer = payer;
    }
}
