"""JwtVerifier on its own: what it accepts, what it refuses, and the end user it names."""

from __future__ import annotations

import base64
import hashlib
import time
from typing import TYPE_CHECKING, Any

import anyio
import jwt
import pytest
from cryptography.hazmat.primitives.asymmetric import ec, ed25519, rsa
from cryptography.hazmat.primitives.serialization import Encoding, PublicFormat
from hypothesis import given
from hypothesis import strategies as st
from mcp.server.auth.provider import AccessToken

from psych_runtime.memory.port import validate_key_part
from psych_runtime.tools.mcp import (
    ALGORITHMS,
    IdentityError,
    JwtVerifier,
    KeysUnavailableError,
    end_user_id_of,
)

if TYPE_CHECKING:
    from conftest import Jwks

pytestmark = pytest.mark.anyio

ISSUER = "https://idp.example"
AUDIENCE = "https://memory.example/mcp"
KEY = ec.generate_private_key(ec.SECP256R1())
RSA_KEY = rsa.generate_private_key(public_exponent=65537, key_size=2048)
SECRET = "a shared secret no issuer should publish, 40+ bytes long"  # noqa: S105 - a test value
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


NOT_NUMBERS: dict[str, Any] = {
    "numeric string": str,
    "decimal string": lambda number: f"{number}.0",
    "true": lambda _: True,
    "false": lambda _: False,
    "null": lambda _: None,
    "list": lambda number: [number],
    "object": lambda number: {"value": number},
}


@pytest.mark.parametrize("kind", NOT_NUMBERS)
@pytest.mark.parametrize("name", ["exp", "nbf", "iat"])
async def test_a_time_claim_that_is_not_a_json_number_is_refused(
    name: str, kind: str, anyio_backend: str
) -> None:
    now = int(time.time())
    # The same claim as a number, an integer or not, is accepted.
    number = {"exp": now + 300.5, "nbf": now - 60.5, "iat": now - 60}[name]
    payload = {"iss": ISSUER, "sub": "alice", "aud": AUDIENCE, "exp": now + 300, name: number}
    assert await verifier().verify_token(jwt.encode(payload, KEY, algorithm="ES256")) is not None
    payload[name] = NOT_NUMBERS[kind](int(number))
    assert await verifier().verify_token(jwt.encode(payload, KEY, algorithm="ES256")) is None


async def test_forged_and_confused_signatures_are_refused(anyio_backend: str) -> None:
    assert await verifier().verify_token(token(ec.generate_private_key(ec.SECP256R1()))) is None
    # The public key used as an HMAC secret: the classic algorithm confusion.
    header, payload, _ = token().split(".")
    assert await verifier().verify_token(f"{header}.{payload}.") is None
    assert await verifier().verify_token("a.b.c") is None


async def test_keys_from_a_jwks_url(jwks: Jwks, anyio_backend: str) -> None:
    jwk = jwt.algorithms.RSAAlgorithm.to_jwk(RSA_KEY.public_key(), as_dict=True)
    jwks.keys = [{**jwk, "kid": "k1", "use": "sig", "alg": "RS256"}]
    checker = JwtVerifier(issuers=[ISSUER], audience=AUDIENCE, jwks_url=jwks.url)
    signed = jwt.encode(
        {"iss": ISSUER, "sub": "bob", "aud": AUDIENCE, "exp": int(time.time()) + 60},
        RSA_KEY,
        algorithm="RS256",
        headers={"kid": "k1"},
    )
    accepted = await checker.verify_token(signed)
    assert accepted is not None
    assert accepted.subject == "bob"
    # The only key serves a token without kid; a kid it does not have, nothing.
    unnamed = jwt.encode(jwt.decode(signed, options={"verify_signature": False}), RSA_KEY, "RS256")
    assert await checker.verify_token(unnamed) is not None
    assert await checker.verify_token(token()) is None
    other_kid = jwt.encode(
        jwt.decode(signed, options={"verify_signature": False}),
        RSA_KEY,
        "RS256",
        headers={"kid": "k2"},
    )
    assert await checker.verify_token(other_kid) is None
    assert jwks.hits == 1


async def test_keys_a_jwks_must_not_sign_with_are_never_used(
    jwks: Jwks, anyio_backend: str
) -> None:
    ec_jwk = jwt.algorithms.ECAlgorithm.to_jwk(KEY.public_key(), as_dict=True)
    encoded = base64.urlsafe_b64encode(SECRET.encode()).rstrip(b"=").decode()
    secret = {"kty": "oct", "k": encoded, "kid": "hmac"}
    jwks.keys = [{**ec_jwk, "kid": "enc", "use": "enc"}, secret, {"kty": "RSA", "kid": "bad"}]
    checker = JwtVerifier(issuers=[ISSUER], audience=AUDIENCE, jwks_url=jwks.url)
    assert await checker.verify_token(_with_kid(token(), "enc")) is None
    forged = jwt.encode({"iss": ISSUER, "sub": "x", "aud": AUDIENCE}, SECRET, "HS256")
    assert await checker.verify_token(_with_kid(forged, "hmac")) is None


def _with_kid(signed: str, kid: str) -> str:
    header = jwt.get_unverified_header(signed) | {"kid": kid}
    payload = jwt.decode(signed, options={"verify_signature": False})
    key = SECRET if header["alg"] == "HS256" else KEY
    return jwt.encode(payload, key, header["alg"], headers={"kid": kid})


@pytest.mark.parametrize("behaviour", ["fail", "hang"])
async def test_a_failing_jwks_is_fetched_once_for_all_waiting_requests(
    jwks: Jwks, behaviour: str, anyio_backend: str
) -> None:
    jwks.behaviour = behaviour
    checker = JwtVerifier(issuers=[ISSUER], audience=AUDIENCE, jwks_url=jwks.url, jwks_timeout=0.5)
    outcomes: list[object] = []

    async def check() -> None:
        try:
            outcomes.append(await checker.check(_with_kid(token(), "k")))
        except KeysUnavailableError as error:
            outcomes.append(error)

    async with anyio.create_task_group() as group:
        for _ in range(20):
            group.start_soon(check)
    assert jwks.hits == 1
    assert len(outcomes) == 20
    for outcome in outcomes:
        assert isinstance(outcome, KeysUnavailableError)
        assert outcome.retry_after > 0
    # Backed off: neither check nor verify_token (which answers None) fetches.
    assert await checker.verify_token(token()) is None
    with pytest.raises(KeysUnavailableError):
        await checker.check(token())
    assert jwks.hits == 1


ALGORITHM_KEYS: dict[str, Any] = {
    "RS256": RSA_KEY,
    "RS384": RSA_KEY,
    "RS512": RSA_KEY,
    "PS256": RSA_KEY,
    "PS384": RSA_KEY,
    "PS512": RSA_KEY,
    "ES256": KEY,
    "ES384": ec.generate_private_key(ec.SECP384R1()),
    "ES512": ec.generate_private_key(ec.SECP521R1()),
    "EdDSA": ed25519.Ed25519PrivateKey.generate(),
}


def _pem(private: Any) -> str:
    public = private.public_key().public_bytes(Encoding.PEM, PublicFormat.SubjectPublicKeyInfo)
    return str(public.decode())


async def test_every_algorithm_of_the_list_is_accepted_and_only_those(anyio_backend: str) -> None:
    assert tuple(ALGORITHM_KEYS) == ALGORITHMS
    for algorithm, private in ALGORITHM_KEYS.items():
        pem = _pem(private)
        accepting = JwtVerifier(issuers=[ISSUER], audience=AUDIENCE, key=pem)
        assert await accepting.verify_token(token(private, algorithm)) is not None, algorithm
        others = [name for name in ALGORITHMS if name != algorithm]
        narrowed = JwtVerifier(issuers=[ISSUER], audience=AUDIENCE, key=pem, algorithms=others)
        assert await narrowed.verify_token(token(private, algorithm)) is None, algorithm


async def test_a_header_naming_another_key_type_is_refused_not_raised(
    anyio_backend: str,
) -> None:
    for algorithm, private in ALGORITHM_KEYS.items():
        header, payload, _ = token(private, algorithm).split(".")
        for other in ALGORITHM_KEYS.values():
            if type(other) is type(private):
                continue
            checker = JwtVerifier(issuers=[ISSUER], audience=AUDIENCE, key=_pem(other))
            assert await checker.verify_token(f"{header}.{payload}.AAAA") is None


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
        {"issuers": ["https://a#b"], "audience": AUDIENCE, "key": "k"},
        {"issuers": [""], "audience": AUDIENCE, "key": "k"},
        {"issuers": [ISSUER], "audience": AUDIENCE, "key": "k", "algorithms": ["HS256"]},
        {"issuers": [ISSUER], "audience": AUDIENCE, "key": "k", "algorithms": ["none"]},
        {"issuers": [ISSUER], "audience": AUDIENCE, "key": "k", "algorithms": []},
        {"issuers": [ISSUER], "audience": AUDIENCE, "key": "k", "algorithms": "RS256"},
        {"issuers": [ISSUER], "audience": AUDIENCE, "jwks_url": "http://x", "jwks_timeout": 0},
        {"issuers": [ISSUER], "audience": AUDIENCE, "jwks_url": "http://x", "jwks_timeout": 1e999},
    ],
)
def test_bad_settings_are_refused(kwargs: dict[str, Any]) -> None:
    with pytest.raises(ValueError, match=r"must|exactly one"):
        JwtVerifier(**kwargs)


@pytest.mark.parametrize(
    ("timeout", "error"), [("1", TypeError), (True, TypeError), (10**400, ValueError)]
)
def test_a_jwks_timeout_is_a_number_of_seconds(timeout: object, error: type[Exception]) -> None:
    with pytest.raises(error, match=r"^jwks_timeout must be a"):
        JwtVerifier(issuers=[ISSUER], audience=AUDIENCE, jwks_url="http://x", jwks_timeout=timeout)  # type: ignore[arg-type]


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
# Short ones, and ones that make "<issuer>#<subject>" longer than an end-user id may be.
subjects = st.text(min_size=1) | st.text(min_size=1).map(lambda text: text + "s" * 256)


def test_a_long_issuer_and_subject_give_a_digest_of_both() -> None:
    subject = "auth0|" + "7" * 300
    expected = hashlib.sha256(f"{ISSUER}#{subject}".encode()).hexdigest()
    assert end_user_id_of(access(ISSUER, subject)) == f"sha256:{expected}"
    assert end_user_id_of(access(ISSUER, "alice")) == f"{ISSUER}#alice"
    # Neither a subject that looks like a digest nor one with a control
    # character reaches the id of another: a plain id always holds "#".
    assert end_user_id_of(access(ISSUER, f"sha256:{expected}")) == f"{ISSUER}#sha256:{expected}"
    control = end_user_id_of(access(ISSUER, "bob\x00"))
    assert control.startswith("sha256:")
    assert control != end_user_id_of(access(ISSUER, "bob"))


@given(issuers, subjects)
def test_every_issuer_and_subject_give_a_valid_end_user(issuer: str, subject: str) -> None:
    validate_key_part(end_user_id_of(access(issuer, subject)), "end_user_id")


@given(issuers, subjects, issuers, subjects)
def test_different_issuer_and_subject_pairs_never_share_an_end_user(
    issuer_a: str, subject_a: str, issuer_b: str, subject_b: str
) -> None:
    same_id = end_user_id_of(access(issuer_a, subject_a)) == end_user_id_of(
        access(issuer_b, subject_b)
    )
    assert same_id == ((issuer_a, subject_a) == (issuer_b, subject_b))
