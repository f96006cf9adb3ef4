// SPDX-License-Identifier: Apache-2.0
pragma solidity 0.8.37;

/// @notice The ERC-20 calls the escrow contracts make.
interface IEscrowToken {
    function balanceOf(address account) external view returns (uint256);
    function transfer(address to, uint256 value) external returns (bool);
    function transferFrom(address from, address to, uint256 value) external returns (bool);
}

/// @notice ERC-20 transfers that fail loudly, for the escrow contracts. A token's own revert data
/// passes through unchanged (callers map it to reason codes); a token that answers `false`, or an
/// address without code, fails with `SafeERC20FailedOperation`, the error the canonical contracts
/// (OpenZeppelin's SafeERC20) raise in that case.
library SafeTransfer {
    error SafeERC20FailedOperation(address token);

    function safeTransfer(address token, address to, uint256 value) internal {
        callToken(token, abi.encodeCall(IEscrowToken.transfer, (to, value)));
    }

    function safeTransferFrom(address token, address from, address to, uint256 value) internal {
        callToken(token, abi.encodeCall(IEscrowToken.transferFrom, (from, to, value)));
    }

    function callToken(address token, bytes memory data) private {
        (bool success, bytes memory returned) = token.call(data);
        if (!success) {
            assembly ("memory-safe") {
                revert(add(returned, 32), mload(returned))
            }
        }
        // Tokens that return nothing (USDT-style) are fine as long as there is a contract to call.
        bool accepted = returned.length == 0 ? token.code.length > 0 : abi.decode(returned, (bool));
        if (!accepted) {
            revert SafeERC20FailedOperation(token);
        }
    }
}
