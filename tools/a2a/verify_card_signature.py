"""Verifies an A2A Agent Card's signature with the official A2A SDK's own verifier
(`a2a.utils.signing.create_signature_verifier`, PyPI `a2a-sdk`), as an A2A client would.

Input on stdin: `{"card": <the card as served>, "jwks": <the signer's JWKS>}`. The card is
parsed into `a2a.v1.AgentCard` exactly as a client receives it (unknown fields refused), and
the SDK verifier canonicalizes it its own way (protobuf field presence, empty values dropped,
RFC 8785) and checks the JWS against the key the protected header's `kid` names in the JWKS,
with EdDSA, the gateway's algorithm, as the only accepted one.

Prints `valid`, or why not (the SDK's own error); the exit code says which. Also prints the
protected header, decoded, on a second line, so a caller can check `typ`/`kid`/`alg`."""

import base64
import json
import sys

from a2a.types.a2a_pb2 import AgentCard
from a2a.utils.signing import SignatureVerificationError, create_signature_verifier
from google.protobuf import json_format
from jwt import PyJWK


def key_provider_for(jwks):
    def key_provider(kid, _jku):
        for key in jwks.get("keys", []):
            if key.get("kid") == kid:
                return PyJWK(key)
        raise SignatureVerificationError(f"no key {kid!r} in the JWKS")

    return key_provider


def protected_header(card):
    signatures = card.get("signatures") or [{}]
    encoded = signatures[0].get("protected", "")
    padded = encoded + "=" * (-len(encoded) % 4)
    try:
        return json.loads(base64.urlsafe_b64decode(padded))
    except ValueError:
        return None


def main():
    document = json.load(sys.stdin)
    card = document["card"]
    message = AgentCard()
    try:
        json_format.ParseDict(card, message, ignore_unknown_fields=False)
    except json_format.ParseError as error:
        print(f"not an a2a.v1.AgentCard: {error}")
        return 1
    verify = create_signature_verifier(key_provider_for(document["jwks"]), ["EdDSA"])
    try:
        verify(message)
    except SignatureVerificationError as error:
        print(f"{type(error).__name__}: {error}")
        print(json.dumps(protected_header(card)))
        return 1
    print("valid")
    print(json.dumps(protected_header(card)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
