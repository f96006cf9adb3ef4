// SPDX-License-Identifier: Apache-2.0
pragma solidity 0.8.37;

import {IERC1271, SignatureCheck} from "SignatureCheck.sol";

/// @title Eip1271Wallet
/// @notice A test-only contract wallet: it holds tokens and accepts a signature when its owner EOA
/// signed the digest. It lets the devnet exercise the EIP-1271 path of `transferWithAuthorization`.
contract Eip1271Wallet is IERC1271 {
    /// @notice The EOA whose ECDSA signatures this wallet accepts.
    address public immutable owner;

    constructor(address owner_) {
        owner = owner_;
    }

    /// @inheritdoc IERC1271
    function isValidSignature(bytes32 digest, bytes calldata signature) external view returns (bytes4) {
        address recovered = SignatureCheck.recover(digest, signature);
        if (recovered != address(0) && recovered == owner) {
            return SignatureCheck.ERC1271_MAGIC_VALUE;
        }
        return 0xffffffff;
    }
}
