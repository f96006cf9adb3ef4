// SPDX-License-Identifier: Apache-2.0
pragma solidity 0.8.37;

/// @title DevnetMulticall
/// @notice The subset of Multicall3 that x402 facilitators call (`tryAggregate`, `aggregate3`),
/// for a bare anvil that has no Multicall3. The devnet installs its runtime code at Multicall3's
/// canonical address (0xcA11bde05977b3631167028862bE2a173976CA11), where the official x402
/// facilitator looks for it to explain a failed simulation (nonce used, balance too low, wrong
/// domain) instead of reporting a generic simulation failure.
contract DevnetMulticall {
    struct Call {
        address target;
        bytes callData;
    }

    struct Call3 {
        address target;
        bool allowFailure;
        bytes callData;
    }

    struct Result {
        bool success;
        bytes returnData;
    }

    /// @notice A call that was required to succeed reverted.
    error CallFailed(uint256 index);

    /// @notice Runs every call; reverts on a failed one only when `requireSuccess`.
    function tryAggregate(bool requireSuccess, Call[] calldata calls)
        external
        payable
        returns (Result[] memory returnData)
    {
        returnData = new Result[](calls.length);
        for (uint256 i = 0; i < calls.length; ++i) {
            (bool success, bytes memory data) = calls[i].target.call(calls[i].callData);
            if (requireSuccess && !success) {
                revert CallFailed(i);
            }
            returnData[i] = Result(success, data);
        }
    }

    /// @notice Runs every call; reverts on a failed one unless that call allows failure.
    function aggregate3(Call3[] calldata calls) external payable returns (Result[] memory returnData) {
        returnData = new Result[](calls.length);
        for (uint256 i = 0; i < calls.length; ++i) {
            (bool success, bytes memory data) = calls[i].target.call(calls[i].callData);
            if (!success && !calls[i].allowFailure) {
                revert CallFailed(i);
            }
            returnData[i] = Result(success, data);
        }
    }
}
