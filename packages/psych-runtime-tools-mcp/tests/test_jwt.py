"""JwtVerifier on its own: what it accepts, what it refuses, and the end user it names."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import jwt
import pytest
from cryptography.hazmat.primitives.asymmetric import ec, rsa
from cryptography.hazmat.primitives.serialization import Encoding, PublicFormat
from hypothesis import given
from hypothesis import strategies as st
from mcp.server.auth.provider import AccessToken

from psych_runtime.tools.mcp import IdentityError, JwtVerifier, end_user_id_of

pytestmark = pytest.mark.anyio

ISSUER = "https://idp.example"
AUDIENCE = "https://memory.example/mcp"
KEY = ec.generate_private_key(ec.SECP256R1())
RSA_KEY = rsa.generate_private_key(public_exponent=65537, key_size=2048)
PUBLIC_PEM = KEY.public_key().public_bytes(Encoding.PEM, PublicFormat.SubjectPublicKeyInfo)


def token(key: Any = KEY, algorithm: str = "ES256", **claims: Any) -> str:
    now = int(time.time())
    payload = {"iss": ISSUER, "sub": "alice", "aud": AUDIENCE, "iat": now, "exp": now + 300}
    payload |= claims
    return jwt.encode({k: v for k, v in payload.items() if v is not None}, key, algorithm=algorithm)


def verifier() -> JwtVerifier:
    return JwtVerifier(issuers=[ISSUER], audience=AUDIENCE, key=PUBLIC_PEM.decode())


async def test_a_valid_token_gives_subject_issuer_and_scopes(anyio_backend: str) -> None:
    accepted = await verifier().verify_token(token(scope="memory profile", azp="desk"))
    assert accepted is not None
    assert accepted.subject == "alice"
    assert accepted.client_id == "desk"
    assert accepted.scopes == ["memory", "profile"]
    assert accepted.resource == AUDIENCE
    assert end_user_id_of(accepted) == f"{ISSUER}#alice"
    listed = await verifier().verify_token(token(scp=["memory", 7], client_id="cli"))
    assert listed is not None
    assert (listed.scopes, listed.client_id) == (["memory"], "cli")
    bare = await verifier().verify_token(token())
    assert bare is not None
    assert (bare.scopes, bare.client_id) == ([], "alice")


@pytest.mark.parametrize(
    "claims",
    [
        {"exp": int(time.time()) - 60},
        {"nbf": int(time.time()) + 3600},
        {"iss": "https://idp.example/"},
        {"aud": "https://other.example"},
        {"sub": None},
        {"exp": None},
        {"aud": None},
        {"sub": ""},
    ],
)
async def test_tokens_breaking_a_rule_are_refused(
    claims: dict[str, Any], anyio_backend: str
) -> None:
    assert await verifier().verify_token(token(**claims)) is None


async def test_forged_and_confused_signatures_are_refused(anyio_backend: str) -> None:
    assert await verifier().verify_token(token(ec.generate_private_key(ec.SECP256R1()))) is None
    # The public key used as an HMAC secret: the classic algorithm confusion.
    header, payload, _ = token().split(".")
    assert await verifier().verify_token(f"{header}.{payload}.") is None
    assert await verifier().verify_token("a.b.c") is None


@pytest.fixture
def jwks_url() -> Iterator[str]:
    jwk = json.loads(jwt.algorithms.RSAAlgorithm.to_jwk(RSA_KEY.public_key()))
    body = json.dumps({"keys": [{**jwk, "kid": "k1", "use": "sig", "alg": "RS256"}]}).encode()

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, format: str, *args: Any) -> None:  # noqa: A002
            del format, args

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        host, port = server.server_address[:2]
        yield f"http://{host!s}:{port}/jwks.json"
    finally:
        server.shutdown()
        server.server_close()
        thread.join()


async def test_keys_from_a_jwks_url(jwks_url: str, anyio_backend: str) -> None:
    checker = JwtVerifier(issuers=[ISSUER], audience=AUDIENCE, jwks_url=jwks_url)
    signed = jwt.encode(
        {"iss": ISSUER, "sub": "bob", "aud": AUDIENCE, "exp": int(time.time()) + 60},
        RSA_KEY,
        algorithm="RS256",
        headers={"kid": "k1"},
    )
    accepted = await checker.verify_token(signed)
    assert accepted is not None
    assert accepted.subject == "bob"
    assert await checker.verify_token(token()) is None


async def test_an_unreachable_jwks_url_refuses_instead_of_failing(anyio_backend: str) -> None:
    checker = JwtVerifier(issuers=[ISSUER], audience=AUDIENCE, jwks_url="http://127.0.0.1:9/jwks")
    assert await checker.verify_token(token()) is None


@pytest.mark.parametrize(
    "kwargs",
    [
        {"issuers": [], "audience": AUDIENCE, "key": "k"},
        {"issuers": ISSUER, "audience": AUDIENCE, "key": "k"},
        {"issuers": [ISSUER], "audience": "", "key": "k"},
        {"issuers": [ISSUER], "audience": AUDIENCE},
        {"issuers": [ISSUER], "audience": AUDIENCE, "key": "k", "jwks_url": "http://x"},
    ],
)
def test_bad_settings_are_refused(kwargs: dict[str, Any]) -> None:
    with pytest.raises(ValueError, match=r"must|exactly one"):
        JwtVerifier(**kwargs)


def access(issuer: object, subject: str | None) -> AccessToken:
    return AccessToken(
        token="opaque",  # noqa: S106 - not a secret
        client_id="c",
        scopes=[],
        subject=subject,
        claims={"iss": issuer},
    )


@pytest.mark.parametrize(
    ("issuer", "subject"), [(None, "alice"), ("", "alice"), ("https://a#b", "c"), (ISSUER, None)]
)
def test_no_end_user_without_a_usable_issuer_and_subject(
    issuer: object, subject: str | None
) -> None:
    with pytest.raises(IdentityError):
        end_user_id_of(access(issuer, subject))


issuers = st.text(min_size=1).filter(lambda text: "#" not in text)


@given(issuers, st.text(min_size=1), issuers, st.text(min_size=1))
def test_different_issuer_and_subject_pairs_never_share_an_end_user(
    issuer_a: str, subject_a: str, issuer_b: str, subject_b: str
) -> None:
    same_id = end_user_id_of(access(issuer_a, subject_a)) == end_user_id_of(
        access(issuer_b, subject_b)
    )
    assert same_id == ((issuer_a, subject_a) == (issuer_b, subject_b))
