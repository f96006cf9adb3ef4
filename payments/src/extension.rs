//! The `payment-identifier` extension: a client-chosen idempotency key for a payment.
//!
//! The server declares `{info: {required}, schema}` in `PaymentRequired.extensions`; the
//! client echoes it in `PaymentPayload.extensions` with `info.id` added. Same id and same
//! payload means the same request; same id and another payload is a conflict (the gateway
//! answers 409).

use std::fmt;
use std::str::FromStr;

use serde_json::{Value, json};

use crate::wire::{Extensions, PaymentPayload};

/// Extension key of `payment-identifier`.
pub const PAYMENT_IDENTIFIER: &str = "payment-identifier";

const MIN_LEN: usize = 16;
const MAX_LEN: usize = 128;

/// A payment identifier: 16–128 characters of `[A-Za-z0-9_-]`.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct PaymentIdentifier(String);

impl PaymentIdentifier {
    /// The identifier text.
    #[must_use]
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for PaymentIdentifier {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// Why the extension could not be read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PaymentIdentifierError {
    /// `info.id` is not 16–128 characters of `[A-Za-z0-9_-]`.
    #[error("payment identifier must be {MIN_LEN}-{MAX_LEN} characters of [A-Za-z0-9_-]")]
    InvalidId,
    /// The extension entry is not `{info: {id: string, ...}}`.
    #[error("payment-identifier extension is not an object with info.id")]
    Malformed,
}

impl FromStr for PaymentIdentifier {
    type Err = PaymentIdentifierError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let valid = (MIN_LEN..=MAX_LEN).contains(&s.len())
            && s.bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_');
        if valid {
            Ok(Self(s.to_owned()))
        } else {
            Err(PaymentIdentifierError::InvalidId)
        }
    }
}

/// The declaration a server puts under `extensions["payment-identifier"]` in its 402.
#[must_use]
pub fn declare_payment_identifier(required: bool) -> Value {
    json!({
        "info": { "required": required },
        "schema": {
            "$schema": "https://json-schema.org/draft/2020-12/schema",
            "type": "object",
            "properties": {
                "id": {
                    "type": "string",
                    "minLength": MIN_LEN,
                    "maxLength": MAX_LEN,
                    "pattern": "^[a-zA-Z0-9_-]+$"
                }
            },
            "required": ["id"]
        }
    })
}

/// Adds `id` to an echoed `payment-identifier` declaration (client side), creating the entry
/// when the server's declaration is absent.
pub fn set_payment_identifier(extensions: &mut Extensions, id: &PaymentIdentifier) {
    let entry = extensions
        .entry(PAYMENT_IDENTIFIER)
        .or_insert_with(|| declare_payment_identifier(false));
    if !entry.is_object() {
        *entry = declare_payment_identifier(false);
    }
    if let Some(object) = entry.as_object_mut() {
        let info = object
            .entry("info")
            .or_insert_with(|| Value::Object(serde_json::Map::new()));
        if !info.is_object() {
            *info = Value::Object(serde_json::Map::new());
        }
        if let Some(info) = info.as_object_mut() {
            info.insert("id".into(), Value::String(id.0.clone()));
        }
    }
}

impl PaymentPayload {
    /// The client's `payment-identifier`, if it sent one.
    ///
    /// `Ok(None)` when the extension is absent or carries no `id` (an echoed declaration);
    /// an error when an `id` is present but invalid, or the entry is not an object.
    pub fn payment_identifier(&self) -> Result<Option<PaymentIdentifier>, PaymentIdentifierError> {
        let Some(entry) = self.extensions.get(PAYMENT_IDENTIFIER) else {
            return Ok(None);
        };
        let info = entry
            .as_object()
            .ok_or(PaymentIdentifierError::Malformed)?
            .get("info");
        let id = match info {
            None | Some(Value::Null) => return Ok(None),
            Some(Value::Object(info)) => info.get("id"),
            Some(_) => return Err(PaymentIdentifierError::Malformed),
        };
        match id {
            None | Some(Value::Null) => Ok(None),
            Some(Value::String(id)) => id.parse().map(Some),
            Some(_) => Err(PaymentIdentifierError::Malformed),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::wire::{Network, PaymentRequirements, TokenDomain, UnknownFields, X402Version2};
    use alloy::primitives::{Address, U256};

    fn payload(extensions: Extensions) -> PaymentPayload {
        PaymentPayload {
            x402_version: X402Version2,
            resource: None,
            accepted: PaymentRequirements::exact_evm(
                Network::eip155(1).unwrap(),
                U256::from(1u64),
                Address::ZERO,
                Address::ZERO,
                60,
                &TokenDomain {
                    name: "USD Coin".into(),
                    version: "2".into(),
                },
            ),
            payload: json!({}),
            extensions,
            unknown: UnknownFields::new(),
        }
    }

    #[test]
    fn id_validation_follows_the_extension_schema() {
        assert!("pay_7d5d747be160e280".parse::<PaymentIdentifier>().is_ok());
        assert!("a".repeat(128).parse::<PaymentIdentifier>().is_ok());
        for bad in [
            "short_id_15char",
            "pay 7d5d747be160e280",
            &"a".repeat(129),
            "pay_7d5d747be160e28!",
        ] {
            assert_eq!(
                bad.parse::<PaymentIdentifier>(),
                Err(PaymentIdentifierError::InvalidId),
                "{bad}"
            );
        }
    }

    #[test]
    fn reads_the_id_the_client_added_to_the_echoed_declaration() {
        let id: PaymentIdentifier = "pay_0123456789abcdef".parse().unwrap();
        let mut extensions = Extensions::new();
        extensions.insert(PAYMENT_IDENTIFIER.into(), declare_payment_identifier(true));
        assert_eq!(payload(extensions.clone()).payment_identifier(), Ok(None));

        set_payment_identifier(&mut extensions, &id);
        assert_eq!(extensions[PAYMENT_IDENTIFIER]["info"]["required"], true);
        assert_eq!(payload(extensions).payment_identifier(), Ok(Some(id)));
    }

    #[test]
    fn absent_and_malformed_extension() {
        assert_eq!(payload(Extensions::new()).payment_identifier(), Ok(None));
        let mut extensions = Extensions::new();
        extensions.insert(PAYMENT_IDENTIFIER.into(), json!({"info": {"id": 42}}));
        assert_eq!(
            payload(extensions).payment_identifier(),
            Err(PaymentIdentifierError::Malformed)
        );
        let mut extensions = Extensions::new();
        extensions.insert(PAYMENT_IDENTIFIER.into(), json!({"info": {"id": "bad id"}}));
        assert_eq!(
            payload(extensions).payment_identifier(),
            Err(PaymentIdentifierError::InvalidId)
        );
    }
}
