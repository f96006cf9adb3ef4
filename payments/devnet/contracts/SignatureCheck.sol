// SPDX-License-Identifier: Apache-2.0
pragma solidity 0.8.37;

/// @notice What an EIP-1271 contract wallet answers for a signature it accepts.
interface IERC1271 {
    function isValidSignature(bytes32 digest, bytes calldata signature) external view returns (bytes4 magicValue);
}

/// @notice Signature checks shared by the devnet token and the test wallet.
library SignatureCheck {
    /// @dev EIP-1271 magic value: `bytes4(keccak256("isValidSignature(bytes32,bytes)"))`.
    bytes4 internal constant ERC1271_MAGIC_VALUE = 0x1626ba7e;

    /// @dev Half the secp256k1 group order. Signatures with a larger `s` are the malleable twin of
    /// a valid one; refusing them keeps one signature per authorization, as USDC does.
    uint256 internal constant SECP256K1_HALF_ORDER =
        0x7FFFFFFFFFFFFFFFFFFFFFFFFFFFFFFF5D576E7357A4501DDFE92F46681B20A0;

    /// @notice The address that signed `digest` with the 65-byte `signature` (r ‖ s ‖ v), or the
    /// zero address when the signature is malformed, malleable or does not recover.
    function recover(bytes32 digest, bytes memory signature) internal pure returns (address) {
        if (signature.length != 65) {
            return address(0);
        }
        bytes32 r;
        bytes32 s;
        uint8 v;
        assembly ("memory-safe") {
            r := mload(add(signature, 0x20))
            s := mload(add(signature, 0x40))
            v := byte(0, mload(add(signature, 0x60)))
        }
        if (uint256(s) > SECP256K1_HALF_ORDER) {
            return address(0);
        }
        // Some signers emit the recovery id (0/1) instead of Ethereum's 27/28.
        if (v < 27) {
            v += 27;
        }
        if (v != 27 && v != 28) {
            return address(0);
        }
        return ecrecover(digest, v, r, s);
    }

    /// @notice True when `signer` authorised `digest`: through EIP-1271 `isValidSignature` when
    /// `signer` is a contract, through ECDSA recovery otherwise.
    function isValidSignatureNow(address signer, bytes32 digest, bytes memory signature)
        internal
        view
        returns (bool)
    {
        if (signer.code.length > 0) {
            (bool ok, bytes memory answer) =
                signer.staticcall(abi.encodeCall(IERC1271.isValidSignature, (digest, signature)));
            return ok && answer.length >= 32 && abi.decode(answer, (bytes4)) == ERC1271_MAGIC_VALUE;
        }
        address recovered = recover(digest, signature);
        return recovered != address(0) && recovered == signer;
    }
}
