// SPDX-License-Identifier: Apache-2.0
pragma solidity 0.8.37;

import {Permit2} from "Permit2.sol";
import {X402Permit2ProxyBase} from "X402Permit2ProxyBase.sol";

/// @title X402ExactPermit2Proxy
/// @notice The devnet look-alike of `x402ExactPermit2Proxy` (canonical address
/// `0x402085c248EeA27D92E8b30b2C58ed07f9E20001`): moves exactly `permit.permitted.amount` to the
/// witness's `to`.
contract X402ExactPermit2Proxy is X402Permit2ProxyBase {
    struct Witness {
        address to;
        uint256 validAfter;
    }

    string public constant WITNESS_TYPE_STRING =
        "Witness witness)TokenPermissions(address token,uint256 amount)Witness(address to,uint256 validAfter)";
    bytes32 public constant WITNESS_TYPEHASH = keccak256("Witness(address to,uint256 validAfter)");

    constructor(address permit2) X402Permit2ProxyBase(permit2) {}

    function settle(
        Permit2.PermitTransferFrom calldata permit,
        address owner,
        Witness calldata witness,
        bytes calldata signature
    ) external nonReentrant {
        transfer(permit, owner, witness, signature);
        emit Settled();
    }

    function settleWithPermit(
        EIP2612Permit calldata permit2612,
        Permit2.PermitTransferFrom calldata permit,
        address owner,
        Witness calldata witness,
        bytes calldata signature
    ) external nonReentrant {
        submitPermit(permit.permitted.token, owner, permit2612, permit.permitted.amount);
        transfer(permit, owner, witness, signature);
        emit SettledWithPermit();
    }

    function transfer(
        Permit2.PermitTransferFrom calldata permit,
        address owner,
        Witness calldata witness,
        bytes calldata signature
    ) private {
        bytes32 witnessHash = keccak256(abi.encode(WITNESS_TYPEHASH, witness.to, witness.validAfter));
        transferWithWitness(
            permit,
            permit.permitted.amount,
            owner,
            witness.to,
            witness.validAfter,
            witnessHash,
            WITNESS_TYPE_STRING,
            signature
        );
    }
}
