//! The gateway's signing key: loaded from `signing_key.path` (created there on first start), or
//! generated per process when no path is configured.
//!
//! The key signs contract tokens (sent to workers with every forwarded call) and receipts; its
//! public half is served at `GET /.well-known/jwks.json`, followed by the keys of
//! `signing_key.previous_paths` (rotated out: they sign nothing, but what they signed still
//! verifies while they are listed). The file holds JSON
//! `{"kid": "...", "ed25519_seed": "<64 hex>"}` and is created with mode 0600: whoever reads it
//! can sign as the gateway.

use std::{
    fmt,
    io::Write as _,
    path::{Path, PathBuf},
};

use hiregate_contracts::token::{GatewayKey, KeyId, KeyRing, TokenError};
use serde::{Deserialize, Serialize};

use crate::settings::SigningKeySettings;

/// The key file could not be read, parsed or written.
#[derive(Debug, thiserror::Error)]
pub enum SigningKeyError {
    /// Reading or writing the file failed.
    #[error("signing key file `{}`: {source}", path.display())]
    Io {
        /// The configured path.
        path: PathBuf,
        /// OS error.
        #[source]
        source: std::io::Error,
    },
    /// The file is not a key file of this format.
    #[error("signing key file `{}` is malformed: {reason}", path.display())]
    Malformed {
        /// The configured path.
        path: PathBuf,
        /// What is wrong (never the key material).
        reason: String,
    },
    /// The key could not be built.
    #[error("signing key unusable")]
    Key(#[from] TokenError),
}

#[derive(Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct KeyFile {
    kid: String,
    ed25519_seed: String,
}

impl fmt::Debug for KeyFile {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("KeyFile")
            .field("kid", &self.kid)
            .finish_non_exhaustive()
    }
}

/// The gateway's key ring per `settings`: the key in the configured file (created if missing),
/// or a fresh ephemeral key.
pub fn load_key_ring(settings: &SigningKeySettings) -> Result<KeyRing, SigningKeyError> {
    let key = match &settings.path {
        Some(path) if path.exists() => read_key(path)?,
        Some(path) => {
            let key = GatewayKey::generate(fresh_kid()?)?;
            write_key(path, &key)?;
            tracing::info!(path = %path.display(), kid = %key.kid(), "created gateway signing key");
            key
        }
        None => GatewayKey::generate(fresh_kid()?)?,
    };
    // Rebuild the rotation history oldest first, so the ring publishes the active key first
    // and the previous ones newest first (the order `KeyRing::rotate` keeps).
    let mut previous = settings
        .previous_paths
        .iter()
        .rev()
        .map(|path| read_key(path));
    let Some(oldest) = previous.next().transpose()? else {
        return Ok(KeyRing::new(key));
    };
    let mut ring = KeyRing::new(oldest);
    for newer in previous {
        ring.rotate(newer?)?;
    }
    ring.rotate(key)?;
    Ok(ring)
}

fn fresh_kid() -> Result<KeyId, TokenError> {
    // Time-ordered, so operators can tell which key is newer.
    format!("hg-{}", ulid::Ulid::new().to_string().to_ascii_lowercase()).parse()
}

fn read_key(path: &Path) -> Result<GatewayKey, SigningKeyError> {
    let malformed = |reason: &str| SigningKeyError::Malformed {
        path: path.to_path_buf(),
        reason: reason.to_owned(),
    };
    let text = std::fs::read_to_string(path).map_err(|source| SigningKeyError::Io {
        path: path.to_path_buf(),
        source,
    })?;
    let file: KeyFile = serde_json::from_str(&text)
        .map_err(|_| malformed("expected {\"kid\": …, \"ed25519_seed\": <64 hex digits>}"))?;
    let kid: KeyId = file
        .kid
        .parse()
        .map_err(|_| malformed("kid must be 1-64 characters of [A-Za-z0-9._-]"))?;
    let bytes =
        hex::decode(file.ed25519_seed.trim()).map_err(|_| malformed("ed25519_seed is not hex"))?;
    let seed: [u8; 32] = bytes
        .try_into()
        .map_err(|_| malformed("ed25519_seed must be 32 bytes"))?;
    Ok(GatewayKey::from_seed(kid, seed)?)
}

fn write_key(path: &Path, key: &GatewayKey) -> Result<(), SigningKeyError> {
    let io = |source| SigningKeyError::Io {
        path: path.to_path_buf(),
        source,
    };
    let file = KeyFile {
        kid: key.kid().to_string(),
        ed25519_seed: hex::encode(key.to_seed()),
    };
    let text = serde_json::to_string_pretty(&file).map_err(|e| SigningKeyError::Malformed {
        path: path.to_path_buf(),
        reason: e.to_string(),
    })?;
    let mut options = std::fs::OpenOptions::new();
    // `create_new`: never overwrite a key another process created meanwhile.
    options.write(true).create_new(true);
    #[cfg(unix)]
    {
        use std::os::unix::fs::OpenOptionsExt as _;
        options.mode(0o600);
    }
    let mut handle = options.open(path).map_err(io)?;
    handle.write_all(text.as_bytes()).map_err(io)?;
    handle.sync_all().map_err(io)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_configured_key_file_is_created_once_and_reloaded() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("gateway-key.json");
        let settings = SigningKeySettings {
            path: Some(path.clone()),
            previous_paths: Vec::new(),
        };
        let first = load_key_ring(&settings).unwrap();
        let again = load_key_ring(&settings).unwrap();
        assert_eq!(first.active_kid(), again.active_kid());
        assert_eq!(
            serde_json::to_value(first.jwks()).unwrap(),
            serde_json::to_value(again.jwks()).unwrap()
        );
        let ephemeral = load_key_ring(&SigningKeySettings {
            path: None,
            previous_paths: Vec::new(),
        })
        .unwrap();
        assert_ne!(ephemeral.active_kid(), first.active_kid());
    }

    #[test]
    fn a_malformed_key_file_is_a_clear_error() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("bad.json");
        std::fs::write(&path, r#"{"kid":"k1","ed25519_seed":"abcd"}"#).unwrap();
        let error = load_key_ring(&SigningKeySettings {
            path: Some(path),
            previous_paths: Vec::new(),
        })
        .unwrap_err();
        assert!(error.to_string().contains("32 bytes"), "{error}");
    }

    #[test]
    fn previous_keys_stay_published_but_never_sign() {
        use hiregate_contracts::{
            receipt::verify_receipt,
            token::{RECEIPT_TOKEN_TYPE, verify_signed_json},
        };
        let dir = tempfile::tempdir().unwrap();
        let old_path = dir.path().join("old.json");
        let new_path = dir.path().join("new.json");
        let old_only = SigningKeySettings {
            path: Some(old_path.clone()),
            previous_paths: Vec::new(),
        };
        let old_ring = load_key_ring(&old_only).unwrap();
        let signed_by_old = old_ring
            .sign_json(
                RECEIPT_TOKEN_TYPE,
                &serde_json::json!({"outcome": "settled"}),
            )
            .unwrap();

        let rotated = load_key_ring(&SigningKeySettings {
            path: Some(new_path.clone()),
            previous_paths: vec![old_path.clone()],
        })
        .unwrap();
        assert_ne!(rotated.active_kid(), old_ring.active_kid());
        let jwks = rotated.jwks();
        assert_eq!(
            jwks.key_ids(),
            [
                rotated.active_kid().as_str(),
                old_ring.active_kid().as_str()
            ]
        );
        let claims: serde_json::Value =
            verify_signed_json(&signed_by_old, &jwks, RECEIPT_TOKEN_TYPE).unwrap();
        assert_eq!(claims["outcome"], "settled");
        // Not a full receipt, so the receipt check refuses its shape, not its signature.
        assert!(verify_receipt(&signed_by_old, &jwks).is_err());

        // Retired (dropped from the list): what it signed stops verifying.
        let retired = load_key_ring(&SigningKeySettings {
            path: Some(new_path.clone()),
            previous_paths: Vec::new(),
        })
        .unwrap();
        assert!(
            verify_signed_json::<serde_json::Value>(
                &signed_by_old,
                &retired.jwks(),
                RECEIPT_TOKEN_TYPE
            )
            .is_err()
        );

        // Listing the active key as a previous one is a configuration mistake.
        let error = load_key_ring(&SigningKeySettings {
            path: Some(new_path.clone()),
            previous_paths: vec![new_path],
        })
        .unwrap_err();
        assert!(matches!(error, SigningKeyError::Key(_)), "{error}");
    }
}
