//! [`PrivateKey`]: an EVM account's secp256k1 key, parsed once where it is configured (a
//! facilitator's relayer, the gateway's escrow operator, the MCP server's paying wallet) and
//! never printed.

use std::fmt;
use std::str::FromStr;

use alloy::primitives::{Address, B256};
use alloy::signers::local::PrivateKeySigner;
use serde::{Deserialize, Deserializer};

/// An EVM private key. Valid by construction; `Debug` shows only the address, so settings and
/// configurations that hold one can be printed.
#[derive(Clone)]
pub struct PrivateKey(PrivateKeySigner);

impl PrivateKey {
    /// Wraps a signer.
    #[must_use]
    pub fn new(signer: PrivateKeySigner) -> Self {
        Self(signer)
    }

    /// The account's address.
    #[must_use]
    pub fn address(&self) -> Address {
        self.0.address()
    }

    /// The signer.
    #[must_use]
    pub fn signer(&self) -> &PrivateKeySigner {
        &self.0
    }
}

impl fmt::Debug for PrivateKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PrivateKey")
            .field("address", &self.address())
            .field("key", &"<redacted>")
            .finish()
    }
}

/// Why a private key was refused. Never carries the key text.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("must be 32 bytes of hex (64 hex digits, optional 0x) and a valid secp256k1 key")]
pub struct InvalidPrivateKey;

impl FromStr for PrivateKey {
    type Err = InvalidPrivateKey;

    /// 64 hex digits with or without `0x`; surrounding whitespace (a key file's newline) is
    /// ignored.
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let s = s.trim();
        let hex = s.strip_prefix("0x").unwrap_or(s);
        if hex.len() != 64 {
            return Err(InvalidPrivateKey);
        }
        let bytes: B256 = hex.parse().map_err(|_| InvalidPrivateKey)?;
        PrivateKeySigner::from_bytes(&bytes)
            .map(Self)
            .map_err(|_| InvalidPrivateKey)
    }
}

impl<'de> Deserialize<'de> for PrivateKey {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let raw = String::deserialize(deserializer)?;
        raw.parse().map_err(serde::de::Error::custom)
    }
}
