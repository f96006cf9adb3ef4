// SPDX-License-Identifier: Apache-2.0
pragma solidity 0.8.37;

import {SignatureCheck} from "SignatureCheck.sol";

/// @title DevnetPermitToken
/// @notice hiregate's devnet stand-in for "any ERC-20": a plain token with 6 decimals and no
/// EIP-3009, so the only gasless way to pay with it is x402 `exact` or `upto` over Permit2. It has
/// EIP-2612 `permit`, which the `eip2612GasSponsoring` extension uses to approve Permit2 without a
/// transaction from the holder; a holder can also `approve` Permit2 itself.
/// @dev Test-only: the deployer can mint without limit. Never deploy this on a public chain.
contract DevnetPermitToken {
    bytes32 public constant PERMIT_TYPEHASH =
        keccak256("Permit(address owner,address spender,uint256 value,uint256 nonce,uint256 deadline)");
    bytes32 private constant EIP712_DOMAIN_TYPEHASH =
        keccak256("EIP712Domain(string name,string version,uint256 chainId,address verifyingContract)");

    uint8 public constant decimals = 6;

    /// @notice ERC-20 name, also the EIP-712 domain name of `permit`.
    string public name;
    /// @notice EIP-712 domain version of `permit`.
    string public version;
    string public symbol;
    address public immutable owner;

    uint256 public totalSupply;
    mapping(address account => uint256) public balanceOf;
    mapping(address holder => mapping(address spender => uint256)) public allowance;
    /// @notice EIP-2612 nonces, one sequence per holder.
    mapping(address holder => uint256) public nonces;

    event Transfer(address indexed from, address indexed to, uint256 value);
    event Approval(address indexed owner, address indexed spender, uint256 value);

    error NotOwner(address caller);
    error InvalidReceiver(address to);
    error InsufficientBalance(address account, uint256 balance, uint256 needed);
    error InsufficientAllowance(address spender, uint256 allowance, uint256 needed);
    error ERC2612ExpiredSignature(uint256 deadline);
    error ERC2612InvalidSigner(address signer, address owner);

    constructor(string memory name_, string memory version_, string memory symbol_) {
        name = name_;
        version = version_;
        symbol = symbol_;
        owner = msg.sender;
    }

    function transfer(address to, uint256 value) external returns (bool) {
        moveTokens(msg.sender, to, value);
        return true;
    }

    function approve(address spender, uint256 value) external returns (bool) {
        setAllowance(msg.sender, spender, value);
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

    /// @notice EIP-2612: sets `allowance[holder][spender] = value` on the holder's signature,
    /// consuming the holder's next nonce.
    function permit(address holder, address spender, uint256 value, uint256 deadline, uint8 v, bytes32 r, bytes32 s)
        external
    {
        if (block.timestamp > deadline) {
            revert ERC2612ExpiredSignature(deadline);
        }
        bytes32 structHash = keccak256(abi.encode(PERMIT_TYPEHASH, holder, spender, value, nonces[holder], deadline));
        bytes32 digest = keccak256(abi.encodePacked("\x19\x01", DOMAIN_SEPARATOR(), structHash));
        address signer = SignatureCheck.recover(digest, abi.encodePacked(r, s, v));
        if (signer == address(0) || signer != holder) {
            revert ERC2612InvalidSigner(signer, holder);
        }
        nonces[holder] += 1;
        setAllowance(holder, spender, value);
    }

    function DOMAIN_SEPARATOR() public view returns (bytes32) {
        return keccak256(
            abi.encode(
                EIP712_DOMAIN_TYPEHASH, keccak256(bytes(name)), keccak256(bytes(version)), block.chainid, address(this)
            )
        );
    }

    function setAllowance(address holder, address spender, uint256 value) private {
        allowance[holder][spender] = value;
        emit Approval(holder, spender, value);
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
}
