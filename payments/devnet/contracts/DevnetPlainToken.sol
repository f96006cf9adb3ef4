// SPDX-License-Identifier: Apache-2.0
pragma solidity 0.8.37;

/// @title DevnetPlainToken
/// @notice hiregate's devnet stand-in for the plainest ERC-20: 6 decimals, no EIP-3009, no
/// EIP-2612 (no `permit`, `nonces` or domain `version`). A holder approves Permit2 only with an
/// `approve` transaction of its own, which the `erc20ApprovalGasSponsoring` extension lets a
/// facilitator broadcast (and fund) for it.
/// @dev Test-only: the deployer can mint without limit. Never deploy this on a public chain.
contract DevnetPlainToken {
    uint8 public constant decimals = 6;

    string public name;
    string public symbol;
    address public immutable owner;

    uint256 public totalSupply;
    mapping(address account => uint256) public balanceOf;
    mapping(address holder => mapping(address spender => uint256)) public allowance;

    event Transfer(address indexed from, address indexed to, uint256 value);
    event Approval(address indexed owner, address indexed spender, uint256 value);

    error NotOwner(address caller);
    error InvalidReceiver(address to);
    error InsufficientBalance(address account, uint256 balance, uint256 needed);
    error InsufficientAllowance(address spender, uint256 allowance, uint256 needed);

    constructor(string memory name_, string memory symbol_) {
        name = name_;
        symbol = symbol_;
        owner = msg.sender;
    }

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
