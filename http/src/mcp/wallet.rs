//! The MCP server's own paying wallet (`[mcp]`), used by the account tools' `hire` within its
//! spending limits.

use std::{fmt, sync::Arc};

use alloy::{primitives::U256, signers::local::PrivateKeySigner};
use hiregate_engine::settings::McpSettings;

/// The paying wallet and its limits (atomic units of the contract's asset).
#[derive(Clone)]
pub struct McpWallet {
    pub(super) signer: Arc<PrivateKeySigner>,
    pub(super) max_per_hire: U256,
    pub(super) max_per_day: U256,
    /// Held from the day-limit check until the payment is recorded, so two hires of this
    /// process cannot both pass the check with room for only one.
    pub(super) spending: Arc<tokio::sync::Mutex<()>>,
}

impl fmt::Debug for McpWallet {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("McpWallet")
            .field("address", &self.signer.address())
            .field("max_per_hire", &self.max_per_hire)
            .field("max_per_day", &self.max_per_day)
            .finish_non_exhaustive()
    }
}

impl McpWallet {
    /// The wallet of `[mcp]`, if one is configured (the key was validated with the config).
    pub fn from_settings(settings: &McpSettings) -> Option<Self> {
        let key = settings.wallet_private_key.as_ref()?;
        Some(Self {
            signer: Arc::new(key.signer().clone()),
            max_per_hire: U256::from(settings.max_per_hire),
            max_per_day: U256::from(settings.max_per_day),
            spending: Arc::new(tokio::sync::Mutex::new(())),
        })
    }
}
