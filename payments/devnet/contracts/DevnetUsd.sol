// SPDX-License-Identifier: Apache-2.0
pragma solidity 0.8.37;

import {SignatureCheck} from "SignatureCheck.sol";

/// @title DevnetUsd
/// @notice hiregate's devnet stablecoin: a minimal USDC-like ERC-20 with 6 decimals and EIP-3009
/// transfers by signed authorization, so x402 `exact` payments can be verified and settled on a
/// local chain. The EIP-712 domain name and version are fixed at deployment, which lets tests
/// reproduce the "wrong domain" failures seen with real USDC deployments.
/// @dev Test-only: the deployer can mint without limit. Never deploy this on a public chain.
contract DevnetUsd {
    bytes32 public constant TRANSFER_WITH_AUTHORIZATION_TYPEHASH = keccak256(
        "TransferWithAuthorization(address from,address to,uint256 value,uint256 validAfter,uint256 validBefore,bytes32 nonce)"
    );
    bytes32 public constant RECEIVE_WITH_AUTHORIZATION_TYPEHASH = keccak256(
        "ReceiveWithAuthorization(address from,address to,uint256 value,uint256 validAfter,uint256 validBefore,bytes32 nonce)"
    );
    bytes32 public constant CANCEL_AUTHORIZATION_TYPEHASH =
        keccak256("CancelAuthorization(address authorizer,bytes32 nonce)");
    bytes32 private constant EIP712_DOMAIN_TYPEHASH =
        keccak256("EIP712Domain(string name,string version,uint256 chainId,address verifyingContract)");

    /// @notice Atomic units per whole token, as USDC.
    uint8 public constant decimals = 6;

    /// @notice EIP-712 domain name (also the ERC-20 name).
    string public name;
    /// @notice EIP-712 domain version.
    string public version;
    string public symbol;
    /// @notice The only account allowed to mint.
    address public immutable owner;

    uint256 public totalSupply;
    mapping(address account => uint256) public balanceOf;
    mapping(address holder => mapping(address spender => uint256)) public allowance;
    mapping(address authorizer => mapping(bytes32 nonce => bool)) private usedOrCanceled;

    // The separator depends on the chain id; it is cached for the deployment chain and recomputed
    // after a fork so signatures for one chain never verify on another.
    uint256 private immutable deploymentChainId;
    bytes32 private immutable deploymentDomainSeparator;

    event Transfer(address indexed from, address indexed to, uint256 value);
    event Approval(address indexed owner, address indexed spender, uint256 value);
    event AuthorizationUsed(address indexed authorizer, bytes32 indexed nonce);
    event AuthorizationCanceled(address indexed authorizer, bytes32 indexed nonce);

    error NotOwner(address caller);
    error InvalidReceiver(address to);
    error InsufficientBalance(address account, uint256 balance, uint256 needed);
    error InsufficientAllowance(address spender, uint256 allowance, uint256 needed);
    error AuthorizationNotYetValid(uint256 validAfter, uint256 blockTimestamp);
    error AuthorizationExpired(uint256 validBefore, uint256 blockTimestamp);
    error AuthorizationUsedOrCanceled(address authorizer, bytes32 nonce);
    error InvalidSignature();
    error CallerMustBePayee(address caller, address payee);

    constructor(string memory name_, string memory version_, string memory symbol_) {
        name = name_;
        version = version_;
        symbol = symbol_;
        owner = msg.sender;
        deploymentChainId = block.chainid;
        deploymentDomainSeparator = computeDomainSeparator();
    }

    // ---------------------------------------------------------------- ERC-20

    function transfer(address to, uint256 value) external returns (bool) {
        moveTokens(msg.sender, to, value);
        return true;
    }

    function approve(address spender, uint256 value) external returns (bool) {
        allowance[msg.sender][spender] = value;
        emit Approval(msg.sender, spender, value);
        return true;
    }

    function transferFrom(address from, address to, uint256 value) external returns (bool) {
        uint256 allowed = allowance[from][msg.sender];
        if (allowed != type(uint256).max) {
            if (allowed < value) {
                revert InsufficientAllowance(msg.sender, allowed, value);
            }
            allowance[from][msg.sender] = allowed - value;
        }
        moveTokens(from, to, value);
        return true;
    }

    /// @notice Create `value` new tokens for `to`. Owner only; for tests and the demo.
    function mint(address to, uint256 value) external {
        if (msg.sender != owner) {
            revert NotOwner(msg.sender);
        }
        if (to == address(0)) {
            revert InvalidReceiver(to);
        }
        totalSupply += value;
        balanceOf[to] += value;
        emit Transfer(address(0), to, value);
    }

    // ---------------------------------------------------------------- EIP-712

    function DOMAIN_SEPARATOR() public view returns (bytes32) {
        return block.chainid == deploymentChainId ? deploymentDomainSeparator : computeDomainSeparator();
    }

    /// @notice EIP-5267 description of the signing domain (name, version, chainId, verifyingContract).
    function eip712Domain()
        external
        view
        returns (
            bytes1 fields,
            string memory domainName,
            string memory domainVersion,
            uint256 chainId,
            address verifyingContract,
            bytes32 salt,
            uint256[] memory extensions
        )
    {
        return (hex"0f", name, version, block.chainid, address(this), bytes32(0), new uint256[](0));
    }

    // ---------------------------------------------------------------- EIP-3009

    /// @notice True once `nonce` of `authorizer` has been used or canceled.
    function authorizationState(address authorizer, bytes32 nonce) external view returns (bool) {
        return usedOrCanceled[authorizer][nonce];
    }

    function transferWithAuthorization(
        address from,
        address to,
        uint256 value,
        uint256 validAfter,
        uint256 validBefore,
        bytes32 nonce,
        uint8 v,
        bytes32 r,
        bytes32 s
    ) external {
        Authorization memory authorization = Authorization(from, to, value, validAfter, validBefore, nonce);
        executeAuthorization(TRANSFER_WITH_AUTHORIZATION_TYPEHASH, authorization, abi.encodePacked(r, s, v));
    }

    /// @notice The `bytes signature` form: a 65-byte ECDSA signature for an EOA `from`, or any
    /// signature the `from` contract accepts through EIP-1271.
    function transferWithAuthorization(
        address from,
        address to,
        uint256 value,
        uint256 validAfter,
        uint256 validBefore,
        bytes32 nonce,
        bytes memory signature
    ) external {
        Authorization memory authorization = Authorization(from, to, value, validAfter, validBefore, nonce);
        executeAuthorization(TRANSFER_WITH_AUTHORIZATION_TYPEHASH, authorization, signature);
    }

    /// @notice Like `transferWithAuthorization`, but only the payee may submit it, which stops a
    /// front-runner from spending the authorization in another context.
    function receiveWithAuthorization(
        address from,
        address to,
        uint256 value,
        uint256 validAfter,
        uint256 validBefore,
        bytes32 nonce,
        uint8 v,
        bytes32 r,
        bytes32 s
    ) external {
        if (to != msg.sender) {
            revert CallerMustBePayee(msg.sender, to);
        }
        Authorization memory authorization = Authorization(from, to, value, validAfter, validBefore, nonce);
        executeAuthorization(RECEIVE_WITH_AUTHORIZATION_TYPEHASH, authorization, abi.encodePacked(r, s, v));
    }

    function receiveWithAuthorization(
        address from,
        address to,
        uint256 value,
        uint256 validAfter,
        uint256 validBefore,
        bytes32 nonce,
        bytes memory signature
    ) external {
        if (to != msg.sender) {
            revert CallerMustBePayee(msg.sender, to);
        }
        Authorization memory authorization = Authorization(from, to, value, validAfter, validBefore, nonce);
        executeAuthorization(RECEIVE_WITH_AUTHORIZATION_TYPEHASH, authorization, signature);
    }

    /// @notice Burn an unused nonce so an authorization signed with it can never be executed.
    function cancelAuthorization(address authorizer, bytes32 nonce, uint8 v, bytes32 r, bytes32 s) external {
        cancel(authorizer, nonce, abi.encodePacked(r, s, v));
    }

    function cancelAuthorization(address authorizer, bytes32 nonce, bytes memory signature) external {
        cancel(authorizer, nonce, signature);
    }

    // ---------------------------------------------------------------- internals

    struct Authorization {
        address from;
        address to;
        uint256 value;
        uint256 validAfter;
        uint256 validBefore;
        bytes32 nonce;
    }

    function executeAuthorization(bytes32 typehash, Authorization memory authorization, bytes memory signature)
        private
    {
        // Same bounds as USDC: valid strictly after `validAfter` and strictly before `validBefore`.
        if (block.timestamp <= authorization.validAfter) {
            revert AuthorizationNotYetValid(authorization.validAfter, block.timestamp);
        }
        if (block.timestamp >= authorization.validBefore) {
            revert AuthorizationExpired(authorization.validBefore, block.timestamp);
        }
        requireUnused(authorization.from, authorization.nonce);
        bytes32 structHash = keccak256(
            abi.encode(
                typehash,
                authorization.from,
                authorization.to,
                authorization.value,
                authorization.validAfter,
                authorization.validBefore,
                authorization.nonce
            )
        );
        if (!SignatureCheck.isValidSignatureNow(authorization.from, typedDataDigest(structHash), signature)) {
            revert InvalidSignature();
        }
        usedOrCanceled[authorization.from][authorization.nonce] = true;
        emit AuthorizationUsed(authorization.from, authorization.nonce);
        moveTokens(authorization.from, authorization.to, authorization.value);
    }

    function cancel(address authorizer, bytes32 nonce, bytes memory signature) private {
        requireUnused(authorizer, nonce);
        bytes32 structHash = keccak256(abi.encode(CANCEL_AUTHORIZATION_TYPEHASH, authorizer, nonce));
        if (!SignatureCheck.isValidSignatureNow(authorizer, typedDataDigest(structHash), signature)) {
            revert InvalidSignature();
        }
        usedOrCanceled[authorizer][nonce] = true;
        emit AuthorizationCanceled(authorizer, nonce);
    }

    function requireUnused(address authorizer, bytes32 nonce) private view {
        if (usedOrCanceled[authorizer][nonce]) {
            revert AuthorizationUsedOrCanceled(authorizer, nonce);
        }
    }

    function moveTokens(address from, address to, uint256 value) private {
        if (to == address(0)) {
            revert InvalidReceiver(to);
        }
        uint256 balance = balanceOf[from];
        if (balance < value) {
            revert InsufficientBalance(from, balance, value);
        }
        unchecked {
            balanceOf[from] = balance - value;
        }
        balanceOf[to] += value;
        emit Transfer(from, to, value);
    }

    function typedDataDigest(bytes32 structHash) private view returns (bytes32) {
        return keccak256(abi.encodePacked("\x19\x01", DOMAIN_SEPARATOR(), structHash));
    }

    function computeDomainSeparator() private view returns (bytes32) {
        return keccak256(
            abi.encode(
                EIP712_DOMAIN_TYPEHASH,
                keccak256(bytes(name)),
                keccak256(bytes(version)),
                block.chainid,
                address(this)
            )
        );
    }
}
