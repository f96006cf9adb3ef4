// SPDX-License-Identifier: Apache-2.0
pragma solidity 0.8.37;

import {SafeTransfer} from "SafeTransfer.sol";
import {IERC1271, SignatureCheck} from "SignatureCheck.sol";

/// @title Permit2
/// @notice hiregate's devnet look-alike of Uniswap's canonical `Permit2`, its signature-transfer
/// half only, written in this repository to the published interface (`ISignatureTransfer`:
/// `permitTransferFrom`, `permitWitnessTransferFrom`, `nonceBitmap`, `invalidateUnorderedNonces`,
/// `DOMAIN_SEPARATOR`, the typehashes and custom errors) so that x402 Permit2 payments signed by
/// the official clients settle on a local chain as on the audited deployment. The devnet places
/// its runtime code at the canonical address `0x000000000022D473030F116dDEE9F6B43aC78BA3`.
///
/// - A holder approves this contract once on an ERC-20; from then on a signed permit lets the
///   permit's `spender` (the caller) move up to `permitted.amount` of that token from the holder,
///   once, before `deadline`.
/// - Nonces are unordered: bit `nonce & 0xff` of word `nonce >> 8` in the holder's bitmap. Using
///   a nonce flips its bit; a flipped bit is `InvalidNonce`. A holder can burn nonces in bulk with
///   `invalidateUnorderedNonces`.
/// - Signatures: EIP-1271 `isValidSignature` when the holder has code; otherwise ECDSA, 65 bytes
///   (r ‖ s ‖ v) or 64 bytes (EIP-2098 compact).
/// - The EIP-712 domain is `{name: "Permit2", chainId, verifyingContract}` with no version.
/// @dev Test-only deployment; the AllowanceTransfer half is not needed by x402 and is absent.
contract Permit2 {
    struct TokenPermissions {
        address token;
        uint256 amount;
    }

    struct PermitTransferFrom {
        TokenPermissions permitted;
        uint256 nonce;
        uint256 deadline;
    }

    struct SignatureTransferDetails {
        address to;
        uint256 requestedAmount;
    }

    bytes32 public constant _TOKEN_PERMISSIONS_TYPEHASH = keccak256("TokenPermissions(address token,uint256 amount)");
    bytes32 public constant _PERMIT_TRANSFER_FROM_TYPEHASH = keccak256(
        "PermitTransferFrom(TokenPermissions permitted,address spender,uint256 nonce,uint256 deadline)TokenPermissions(address token,uint256 amount)"
    );
    /// @dev The witness variant's type string starts with this; the caller supplies the rest
    /// (`"<Witness> witness)<referenced types, sorted>"`).
    string public constant _PERMIT_TRANSFER_FROM_WITNESS_TYPEHASH_STUB =
        "PermitWitnessTransferFrom(TokenPermissions permitted,address spender,uint256 nonce,uint256 deadline,";

    bytes32 private constant DOMAIN_TYPEHASH = keccak256("EIP712Domain(string name,uint256 chainId,address verifyingContract)");
    bytes32 private constant NAME_HASH = keccak256("Permit2");

    /// @notice Used nonces per holder: bit `nonce & 0xff` of word `nonce >> 8`.
    mapping(address owner => mapping(uint256 wordPos => uint256 bitmap)) public nonceBitmap;

    event UnorderedNonceInvalidation(address indexed owner, uint256 word, uint256 mask);

    error InvalidNonce();
    error SignatureExpired(uint256 signatureDeadline);
    error InvalidAmount(uint256 maxAmount);
    error InvalidSignatureLength();
    error InvalidSignature();
    error InvalidSigner();
    error InvalidContractSignature();

    /// @notice The EIP-712 separator, computed for the running chain and this contract's address
    /// (the code runs at the canonical address, wherever it was compiled).
    function DOMAIN_SEPARATOR() public view returns (bytes32) {
        return keccak256(abi.encode(DOMAIN_TYPEHASH, NAME_HASH, block.chainid, address(this)));
    }

    /// @notice Moves `transferDetails.requestedAmount` (at most `permit.permitted.amount`) of the
    /// permitted token from `owner` to `transferDetails.to`, on `owner`'s signature of the permit
    /// naming the caller as spender.
    function permitTransferFrom(
        PermitTransferFrom calldata permit,
        SignatureTransferDetails calldata transferDetails,
        address owner,
        bytes calldata signature
    ) external {
        bytes32 structHash = keccak256(
            abi.encode(
                _PERMIT_TRANSFER_FROM_TYPEHASH, hashTokenPermissions(permit.permitted), msg.sender, permit.nonce, permit.deadline
            )
        );
        transferWithSignature(permit, transferDetails, owner, structHash, signature);
    }

    /// @notice As `permitTransferFrom`, for a permit whose signed struct also carries a witness:
    /// `witness` is the witness struct's EIP-712 hash and `witnessTypeString` completes the type
    /// string after the stub.
    function permitWitnessTransferFrom(
        PermitTransferFrom calldata permit,
        SignatureTransferDetails calldata transferDetails,
        address owner,
        bytes32 witness,
        string calldata witnessTypeString,
        bytes calldata signature
    ) external {
        bytes32 typeHash = keccak256(abi.encodePacked(_PERMIT_TRANSFER_FROM_WITNESS_TYPEHASH_STUB, witnessTypeString));
        bytes32 structHash = keccak256(
            abi.encode(
                typeHash, hashTokenPermissions(permit.permitted), msg.sender, permit.nonce, permit.deadline, witness
            )
        );
        transferWithSignature(permit, transferDetails, owner, structHash, signature);
    }

    /// @notice Burns the caller's nonces whose bits are set in `mask` within word `wordPos`.
    function invalidateUnorderedNonces(uint256 wordPos, uint256 mask) external {
        nonceBitmap[msg.sender][wordPos] |= mask;
        emit UnorderedNonceInvalidation(msg.sender, wordPos, mask);
    }

    function transferWithSignature(
        PermitTransferFrom calldata permit,
        SignatureTransferDetails calldata transferDetails,
        address owner,
        bytes32 structHash,
        bytes calldata signature
    ) private {
        if (block.timestamp > permit.deadline) {
            revert SignatureExpired(permit.deadline);
        }
        if (transferDetails.requestedAmount > permit.permitted.amount) {
            revert InvalidAmount(permit.permitted.amount);
        }
        useNonce(owner, permit.nonce);
        bytes32 digest = keccak256(abi.encodePacked("\x19\x01", DOMAIN_SEPARATOR(), structHash));
        checkSignature(owner, digest, signature);
        SafeTransfer.safeTransferFrom(permit.permitted.token, owner, transferDetails.to, transferDetails.requestedAmount);
    }

    function useNonce(address owner, uint256 nonce) private {
        uint256 bit = 1 << (nonce & 0xff);
        uint256 before = nonceBitmap[owner][nonce >> 8];
        if (before & bit != 0) {
            revert InvalidNonce();
        }
        nonceBitmap[owner][nonce >> 8] = before | bit;
    }

    function checkSignature(address owner, bytes32 digest, bytes calldata signature) private view {
        if (owner.code.length > 0) {
            (bool ok, bytes memory answer) =
                owner.staticcall(abi.encodeCall(IERC1271.isValidSignature, (digest, signature)));
            if (!ok || answer.length < 32 || abi.decode(answer, (bytes4)) != SignatureCheck.ERC1271_MAGIC_VALUE) {
                revert InvalidContractSignature();
            }
            return;
        }
        bytes32 r;
        bytes32 s;
        uint8 v;
        if (signature.length == 65) {
            r = bytes32(signature[0:32]);
            s = bytes32(signature[32:64]);
            v = uint8(signature[64]);
        } else if (signature.length == 64) {
            // EIP-2098: the top bit of the second word is the recovery id.
            r = bytes32(signature[0:32]);
            bytes32 vs = bytes32(signature[32:64]);
            s = vs & bytes32(0x7fffffffffffffffffffffffffffffffffffffffffffffffffffffffffffffff);
            v = uint8(uint256(vs >> 255)) + 27;
        } else {
            revert InvalidSignatureLength();
        }
        address signer = ecrecover(digest, v, r, s);
        if (signer == address(0)) {
            revert InvalidSignature();
        }
        if (signer != owner) {
            revert InvalidSigner();
        }
    }

    function hashTokenPermissions(TokenPermissions calldata permitted) private pure returns (bytes32) {
        return keccak256(abi.encode(_TOKEN_PERMISSIONS_TYPEHASH, permitted.token, permitted.amount));
    }
}
