// SPDX-License-Identifier: Apache-2.0
pragma solidity 0.8.37;

import {Permit2} from "Permit2.sol";
import {X402Permit2ProxyBase} from "X402Permit2ProxyBase.sol";

/// @title X402UptoPermit2Proxy
/// @notice The devnet look-alike of `x402UptoPermit2Proxy` (canonical address
/// `0x4020A4f3b7b90ccA423B9fabCc0CE57C6C240002`): moves any `amount` up to
/// `permit.permitted.amount` (`AmountExceedsPermitted` beyond it) to the witness's `to`, and only
/// when called by the witness's `facilitator` (`UnauthorizedFacilitator` otherwise), the one
/// address the payer allowed to choose the amount.
contract X402UptoPermit2Proxy is X402Permit2ProxyBase {
    struct Witness {
        address to;
        address facilitator;
        uint256 validAfter;
    }

    string public constant WITNESS_TYPE_STRING =
        "Witness witness)TokenPermissions(address token,uint256 amount)Witness(address to,address facilitator,uint256 validAfter)";
    bytes32 public constant WITNESS_TYPEHASH =
        keccak256("Witness(address to,address facilitator,uint256 validAfter)");

    error AmountExceedsPermitted();
    error UnauthorizedFacilitator();

    constructor(address permit2) X402Permit2ProxyBase(permit2) {}

    function settle(
        Permit2.PermitTransferFrom calldata permit,
        uint256 amount,
        address owner,
        Witness calldata witness,
        bytes calldata signature
    ) external nonReentrant {
        transfer(permit, amount, owner, witness, signature);
        emit Settled();
    }

    function settleWithPermit(
        EIP2612Permit calldata permit2612,
        Permit2.PermitTransferFrom calldata permit,
        uint256 amount,
        address owner,
        Witness calldata witness,
        bytes calldata signature
    ) external nonReentrant {
        submitPermit(permit.permitted.token, owner, permit2612, permit.permitted.amount);
        transfer(permit, amount, owner, witness, signature);
        emit SettledWithPermit();
    }

    function transfer(
        Permit2.PermitTransferFrom calldata permit,
        uint256 amount,
        address owner,
        Witness calldata witness,
        bytes calldata signature
    ) private {
        if (msg.sender != witness.facilitator) {
            revert UnauthorizedFacilitator();
        }
        if (amount > permit.permitted.amount) {
            revert AmountExceedsPermitted();
        }
        bytes32 witnessHash =
            keccak256(abi.encode(WITNESS_TYPEHASH, witness.to, witness.facilitator, witness.validAfter));
        transferWithWitness(
            permit, amount, owner, witness.to, witness.validAfter, witnessHash, WITNESS_TYPE_STRING, signature
        );
    }
}
