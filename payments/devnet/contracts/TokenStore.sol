// SPDX-License-Identifier: Apache-2.0
pragma solidity 0.8.37;

import {SafeTransfer} from "SafeTransfer.sol";

/// @title TokenStore
/// @notice Holds the escrowed funds of one operator's payments, as the canonical
/// base/commerce-payments `TokenStore` does: only the escrow that created it can move them.
/// @dev The canonical escrow clones one implementation per operator (ERC-1167). This devnet
/// look-alike is created in full by the escrow with CREATE2 (salt = the operator's address), which
/// keeps the escrow free of constructor immutables, so its runtime code works unchanged at the
/// canonical address it is placed at with `anvil_setCode`. What callers observe is the same: a
/// deterministic per-operator address from `getTokenStore`, created on first use.
contract TokenStore {
    /// @notice The escrow that created this store and alone may spend from it.
    address public immutable authCaptureEscrow;

    error OnlyAuthCaptureEscrow();

    constructor(address authCaptureEscrow_) {
        authCaptureEscrow = authCaptureEscrow_;
    }

    /// @notice Pays `amount` of `token` to `recipient` on the escrow's behalf.
    function sendTokens(address token, address recipient, uint256 amount) external returns (bool) {
        if (msg.sender != authCaptureEscrow) {
            revert OnlyAuthCaptureEscrow();
        }
        SafeTransfer.safeTransfer(token, recipient, amount);
        return true;
    }
}
