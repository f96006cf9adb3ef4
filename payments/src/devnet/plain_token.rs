//! The devnet's plainest ERC-20 ([`DevnetPlainToken`]: no EIP-3009, no EIP-2612), deployed on
//! demand by the tests that need a token a payer can approve Permit2 for only by transaction
//! (the `erc20ApprovalGasSponsoring` extension). Deployed after everything else, so the other
//! contracts' addresses do not depend on whether a test asked for it.

use alloy::primitives::{Address, U256};

use super::bindings::DevnetPlainToken;
use super::{Devnet, DevnetError};

/// The plain token's ERC-20 name and symbol.
pub const PLAIN_TOKEN_NAME: &str = "hiregate Devnet Plain USD";

impl Devnet {
    /// Deploys a fresh [`DevnetPlainToken`] (6 decimals, owned by the deployer) and returns its
    /// address.
    pub async fn deploy_plain_token(&self) -> Result<Address, DevnetError> {
        let _serialised = self.deployer_lock.lock().await;
        let token = DevnetPlainToken::deploy(
            self.deployer.clone(),
            PLAIN_TOKEN_NAME.to_owned(),
            "hPLAIN".to_owned(),
        )
        .await
        .map_err(DevnetError::contract("deploy DevnetPlainToken"))?;
        Ok(*token.address())
    }

    /// Mints `amount` atomic units of the plain token at `token` to `to`, waiting until mined.
    pub async fn mint_plain_token(
        &self,
        token: Address,
        to: Address,
        amount: U256,
    ) -> Result<(), DevnetError> {
        const CALL: &str = "DevnetPlainToken.mint";
        let _serialised = self.deployer_lock.lock().await;
        let receipt = DevnetPlainToken::new(token, &self.deployer)
            .mint(to, amount)
            .send()
            .await
            .map_err(DevnetError::contract(CALL))?
            .get_receipt()
            .await
            .map_err(DevnetError::confirmation(CALL))?;
        if !receipt.status() {
            return Err(DevnetError::Reverted {
                call: CALL,
                tx_hash: receipt.transaction_hash,
            });
        }
        Ok(())
    }

    /// Balance of `who` in any ERC-20 at `token`, in atomic units.
    pub async fn erc20_balance(&self, token: Address, who: Address) -> Result<U256, DevnetError> {
        DevnetPlainToken::new(token, &self.reader)
            .balanceOf(who)
            .call()
            .await
            .map_err(DevnetError::contract("balanceOf"))
    }
}
