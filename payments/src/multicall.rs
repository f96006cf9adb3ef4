//! The part of Multicall3 (`aggregate3`, deployed at the same address on most EVM chains) that
//! the relayer's settlement batches and verification's coalesced simulations use.

alloy::sol! {
    interface IMulticall3 {
        struct Call3 {
            address target;
            bool allowFailure;
            bytes callData;
        }

        struct Result {
            bool success;
            bytes returnData;
        }

        function aggregate3(Call3[] calldata calls) external payable returns (Result[] memory returnData);
    }
}
