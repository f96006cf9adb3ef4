// SPDX-License-Identifier: Apache-2.0
pragma solidity 0.8.37;

import {Permit2} from "Permit2.sol";

/// @notice EIP-2612 `permit`, which `settleWithPermit` calls on the token for the holder.
interface IERC20Permit {
    function permit(address owner, address spender, uint256 value, uint256 deadline, uint8 v, bytes32 r, bytes32 s)
        external;
}

/// @title X402Permit2ProxyBase
/// @notice What hiregate's devnet look-alikes of the x402 Permit2 proxies share, written in this
/// repository to the interface the official x402 EVM facilitator (npm package 2.27) calls (`PERMIT2`,
/// `WITNESS_TYPEHASH`, `WITNESS_TYPE_STRING`, `settle`, `settleWithPermit`, the `Settled` /
/// `SettledWithPermit` events and the custom errors). A proxy is the `spender` a payer names in its
/// Permit2 signature; the signed witness binds the recipient (`to`) and the earliest settlement
/// time (`validAfter`), so whoever submits the call cannot send the funds anywhere else.
///
/// Checks before the transfer: a positive amount (`InvalidAmount`), a non-zero owner
/// (`InvalidOwner`) and recipient (`InvalidDestination`), `block.timestamp >= validAfter`
/// (`PaymentTooEarly`). `settleWithPermit` first submits the holder's EIP-2612 permit approving
/// Permit2 for exactly the permitted amount (`Permit2612AmountMismatch` otherwise); a permit that
/// fails (already used, or the token lacks EIP-2612) does not stop the settlement, which then
/// needs the allowance to exist already.
/// @dev Test-only deployments; the canonical audited proxies are what real chains use.
abstract contract X402Permit2ProxyBase {
    struct EIP2612Permit {
        uint256 value;
        uint256 deadline;
        bytes32 r;
        bytes32 s;
        uint8 v;
    }

    /// @notice The Permit2 contract the proxy moves tokens through.
    Permit2 public immutable PERMIT2;

    /// @dev Transient reentrancy lock (EIP-1153).
    bool private transient entered;

    event Settled();
    event SettledWithPermit();

    error InvalidPermit2Address();
    error InvalidDestination();
    error PaymentTooEarly();
    error InvalidOwner();
    error InvalidAmount();
    error Permit2612AmountMismatch();
    error ReentrancyGuardReentrantCall();

    constructor(address permit2) {
        if (permit2 == address(0)) {
            revert InvalidPermit2Address();
        }
        PERMIT2 = Permit2(permit2);
    }

    modifier nonReentrant() {
        if (entered) {
            revert ReentrancyGuardReentrantCall();
        }
        entered = true;
        _;
        entered = false;
    }

    function transferWithWitness(
        Permit2.PermitTransferFrom calldata permit,
        uint256 amount,
        address owner,
        address to,
        uint256 validAfter,
        bytes32 witnessHash,
        string memory witnessTypeString,
        bytes calldata signature
    ) internal {
        if (amount == 0) {
            revert InvalidAmount();
        }
        if (owner == address(0)) {
            revert InvalidOwner();
        }
        if (to == address(0)) {
            revert InvalidDestination();
        }
        if (block.timestamp < validAfter) {
            revert PaymentTooEarly();
        }
        PERMIT2.permitWitnessTransferFrom(
            permit,
            Permit2.SignatureTransferDetails({to: to, requestedAmount: amount}),
            owner,
            witnessHash,
            witnessTypeString,
            signature
        );
    }

    function submitPermit(address token, address owner, EIP2612Permit calldata permit2612, uint256 permitted)
        internal
    {
        if (permit2612.value != permitted) {
            revert Permit2612AmountMismatch();
        }
        try IERC20Permit(token).permit(
            owner, address(PERMIT2), permit2612.value, permit2612.deadline, permit2612.v, permit2612.r, permit2612.s
        ) {} catch {}
    }
}
