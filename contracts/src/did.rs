//! DID names of the gateway's Ed25519 keys, for signatures whose `kid` must be a DID URL (the
//! x402 `offer-receipt` extension's JWS artifacts):
//!
//! - `did:key:z6Mk…#z6Mk…` ([`did_key_url`]): the public key itself (multicodec `ed25519-pub`,
//!   base58btc multibase), so any verifier reads the key from the identifier with no lookup.
//! - `did:web:<host>[%3A<port>][:<path>]#<kid>` ([`did_web`]): the gateway's domain; the
//!   verifier fetches its DID document ([`did_document`], served at `/.well-known/did.json`, or
//!   `<path>/did.json` under a path), which lists every key of the JWKS. That document is also
//!   what binds a `did:key` to the domain: its key is one of the document's.
//!
//! [`verify_ed25519`] checks a signature against a raw public key.

use ed25519_dalek::{Signature, VerifyingKey};
use serde_json::{Value, json};
use url::Url;

use crate::token::Jwks;

/// The multicodec prefix of an Ed25519 public key (`0xed`, as an unsigned varint).
const ED25519_PUB_MULTICODEC: [u8; 2] = [0xed, 0x01];

/// The base58btc multibase (`z…`) of an Ed25519 public key with its multicodec prefix.
fn multibase(public: &[u8; 32]) -> String {
    let mut bytes = ED25519_PUB_MULTICODEC.to_vec();
    bytes.extend_from_slice(public);
    format!("z{}", bs58::encode(bytes).into_string())
}

/// The `did:key` DID of an Ed25519 public key.
#[must_use]
pub fn did_key(public: &[u8; 32]) -> String {
    format!("did:key:{}", multibase(public))
}

/// The `did:key` DID URL naming the key's one verification method (`did:key:z…#z…`).
#[must_use]
pub fn did_key_url(public: &[u8; 32]) -> String {
    let encoded = multibase(public);
    format!("did:key:{encoded}#{encoded}")
}

/// The Ed25519 public key a `did:key` DID (or DID URL) encodes; `None` for anything else.
#[must_use]
pub fn ed25519_key_of_did_key(did: &str) -> Option<[u8; 32]> {
    let identifier = did.strip_prefix("did:key:")?;
    let encoded = identifier.split('#').next()?.strip_prefix('z')?;
    let bytes = bs58::decode(encoded).into_vec().ok()?;
    let key = bytes.strip_prefix(ED25519_PUB_MULTICODEC.as_slice())?;
    key.try_into().ok()
}

/// The `did:web` DID of the gateway served at `base_url`: its host (port encoded as `%3A`) and
/// path segments joined by `:`. `None` for a URL without a host.
#[must_use]
pub fn did_web(base_url: &Url) -> Option<String> {
    let host = base_url.host_str()?;
    let mut did = format!("did:web:{host}");
    if let Some(port) = base_url.port() {
        did.push_str(&format!("%3A{port}"));
    }
    for segment in base_url
        .path_segments()
        .into_iter()
        .flatten()
        .filter(|segment| !segment.is_empty())
    {
        did.push(':');
        did.push_str(segment);
    }
    Some(did)
}

/// The DID document of `did` (a [`did_web`] DID) listing every key of `jwks`, the active one
/// first, each a `JsonWebKey2020` verification method `<did>#<kid>` usable for assertions.
#[must_use]
pub fn did_document(did: &str, jwks: &Jwks) -> Value {
    let methods: Vec<Value> = jwks
        .key_ids()
        .into_iter()
        .filter_map(|kid| {
            let public = jwks.ed25519_public_key(kid)?;
            Some(json!({
                "id": format!("{did}#{kid}"),
                "type": "JsonWebKey2020",
                "controller": did,
                "publicKeyJwk": {
                    "kty": "OKP",
                    "crv": "Ed25519",
                    "x": base64_url(&public),
                },
            }))
        })
        .collect();
    let ids: Vec<Value> = methods.iter().map(|method| method["id"].clone()).collect();
    json!({
        "@context": [
            "https://www.w3.org/ns/did/v1",
            "https://w3id.org/security/suites/jws-2020/v1",
        ],
        "id": did,
        "verificationMethod": methods,
        "assertionMethod": ids,
    })
}

fn base64_url(bytes: &[u8]) -> String {
    use base64::Engine as _;
    base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(bytes)
}

/// Whether `signature` is `public`'s Ed25519 signature of `message`.
#[must_use]
pub fn verify_ed25519(public: &[u8; 32], message: &[u8], signature: &[u8]) -> bool {
    let Ok(signature) = Signature::from_slice(signature) else {
        return false;
    };
    VerifyingKey::from_bytes(public).is_ok_and(|key| key.verify_strict(message, &signature).is_ok())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::token::{GatewayKey, KeyRing};

    fn key(kid: &str, byte: u8) -> GatewayKey {
        GatewayKey::from_seed(kid.parse().unwrap(), [byte; 32]).unwrap()
    }

    #[test]
    fn a_did_key_carries_the_public_key_and_reads_back() {
        let key = key("k1", 7);
        let public = key.public_key_bytes();
        let url = did_key_url(&public);
        // Every Ed25519 did:key starts so (multicodec 0xed01 in base58btc).
        assert!(url.starts_with("did:key:z6Mk"), "{url}");
        let (did, fragment) = url.split_once('#').unwrap();
        assert_eq!(did, did_key(&public));
        assert_eq!(format!("did:key:{fragment}"), did);
        assert_eq!(ed25519_key_of_did_key(&url), Some(public));
        assert_eq!(ed25519_key_of_did_key(did), Some(public));
        assert_eq!(ed25519_key_of_did_key("did:web:example.com#k1"), None);
        assert_eq!(ed25519_key_of_did_key("did:key:z6Mk0OIl"), None);
    }

    #[test]
    fn did_web_names_host_port_and_path() {
        let did = |url: &str| did_web(&url.parse().unwrap()).unwrap();
        assert_eq!(did("https://gw.example/"), "did:web:gw.example");
        assert_eq!(did("https://gw.example:8443"), "did:web:gw.example%3A8443");
        assert_eq!(did("http://127.0.0.1:4021/"), "did:web:127.0.0.1%3A4021");
        assert_eq!(
            did("https://gw.example/hire/v1"),
            "did:web:gw.example:hire:v1"
        );
    }

    #[test]
    fn the_document_lists_every_published_key_and_signatures_verify_against_them() {
        let mut ring = KeyRing::new(key("old", 1));
        ring.rotate(key("new", 2)).unwrap();
        let document = did_document("did:web:gw.example", &ring.jwks());
        let methods = document["verificationMethod"].as_array().unwrap();
        assert_eq!(methods.len(), 2);
        assert_eq!(methods[0]["id"], "did:web:gw.example#new");
        assert_eq!(methods[1]["id"], "did:web:gw.example#old");
        assert_eq!(document["assertionMethod"][0], "did:web:gw.example#new");
        let published = ring.jwks().ed25519_public_key("new").unwrap();
        assert_eq!(published, ring.active_key().public_key_bytes());
        assert_eq!(methods[0]["publicKeyJwk"]["x"], base64_url(&published));

        let signature = ring.active_key().sign_bytes(b"offer");
        assert!(verify_ed25519(&published, b"offer", &signature));
        assert!(!verify_ed25519(&published, b"offer!", &signature));
        let old = ring.jwks().ed25519_public_key("old").unwrap();
        assert!(!verify_ed25519(&old, b"offer", &signature));
        assert!(!verify_ed25519(&published, b"offer", &signature[..63]));
    }
}
