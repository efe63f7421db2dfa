"""A token verifier for JWT access tokens, signed with a key from a JWKS URL or given directly."""

from __future__ import annotations

import math
from collections.abc import Collection, Sequence
from typing import Any, Final

import jwt

from mcp.server.auth.provider import AccessToken
from psych_runtime.memory.port import validate_seconds

from ._jwks import JwksCache, KeysUnavailableError

__all__ = ["ALGORITHMS", "DEFAULT_JWKS_TIMEOUT", "JwtVerifier", "KeysUnavailableError"]

ALGORITHMS: Final = (
    "RS256",
    "RS384",
    "RS512",
    "PS256",
    "PS384",
    "PS512",
    "ES256",
    "ES384",
    "ES512",
    "EdDSA",
)
"""Every signature algorithm `JwtVerifier` can accept: all asymmetric."""

DEFAULT_JWKS_TIMEOUT: Final = 5.0
"""The most seconds one fetch of the JWKS may take, unless told otherwise."""

_REQUIRED_CLAIMS: Final = ("exp", "iss", "sub", "aud")
# RFC 7519 makes these NumericDate values, JSON numbers; PyJWT reads them with
# int(), which also takes a numeric string or a bool.
_TIME_CLAIMS: Final = ("exp", "nbf", "iat")
_ISSUER_SEPARATOR: Final = "#"


class JwtVerifier:
    """Accept a JWT access token only if it is signed, current, from an allowed issuer, for us.

    It implements the MCP SDK's ``TokenVerifier`` protocol. A token is
    accepted when its signature checks with the configured key, it has not
    expired (and is not used before ``nbf``), its ``exp`` and any ``nbf`` and
    ``iat`` are JSON numbers (RFC 7519's NumericDate), its ``iss`` is one of
    ``issuers``, its ``aud`` names ``audience``, and it has a non-empty
    ``sub``. Anything else makes `verify_token` return ``None`` (the request
    is answered with 401): a malformed token, a header naming an algorithm
    that does not fit the key, a ``kid`` the issuer does not publish, or keys
    that cannot be fetched. `verify_token` never raises.

    Args:
        issuers: The issuers whose tokens are accepted (exact strings, as in
            the ``iss`` claim). None may contain ``#``, which separates the
            issuer from the subject in `end_user_id_of`.
        audience: The audience this server requires in ``aud``; usually the
            MCP endpoint's public URL.
        jwks_url: Where to fetch the issuer's public keys (JWKS); keys are
            cached and looked up by the token's ``kid``, fetched once for
            all requests waiting at the same time, and not fetched again for
            a while after a failure.
        key: A public key in PEM, instead of ``jwks_url``.
        algorithms: The signature algorithms accepted, a subset of
            `ALGORITHMS` (all of them by default). Only asymmetric ones can be
            given: a shared secret would let anyone holding it mint tokens
            for every user.
        leeway: Seconds of clock skew allowed on ``exp`` and ``nbf``.
        jwks_timeout: The most seconds one fetch of the JWKS may take.

    Raises:
        ValueError: ``issuers`` is empty, a single string, or holds an issuer
            that is empty or contains ``#``; ``audience`` is empty; not
            exactly one of ``jwks_url`` and ``key`` is given; ``algorithms`` is
            empty or names one outside `ALGORITHMS`; ``jwks_timeout`` is not
            a positive, finite number of seconds.
        TypeError: ``jwks_timeout`` is not a number.
    """

    __slots__ = ("_algorithms", "_audience", "_issuers", "_jwks", "_key", "_leeway")

    def __init__(  # noqa: PLR0913 - keyword-only settings
        self,
        *,
        issuers: Collection[str],
        audience: str,
        jwks_url: str | None = None,
        key: str | bytes | None = None,
        algorithms: Sequence[str] = ALGORITHMS,
        leeway: float = 0.0,
        jwks_timeout: float = DEFAULT_JWKS_TIMEOUT,
    ) -> None:
        if isinstance(issuers, str) or not issuers:
            raise ValueError("issuers must be a non-empty collection of issuer strings")
        if any(not issuer or _ISSUER_SEPARATOR in issuer for issuer in issuers):
            raise ValueError("issuers must not be empty or contain '#'")
        if not audience:
            raise ValueError("audience must not be empty")
        if (jwks_url is None) == (key is None):
            raise ValueError("give exactly one of jwks_url and key")
        if isinstance(algorithms, str) or not algorithms:
            raise ValueError("algorithms must be a non-empty collection of algorithm names")
        if any(name not in ALGORITHMS for name in algorithms):
            raise ValueError(f"algorithms must be among {', '.join(ALGORITHMS)}")
        validate_seconds(jwks_timeout, "jwks_timeout")
        self._issuers = list(issuers)
        self._audience = audience
        self._algorithms = frozenset(algorithms)
        self._leeway = leeway
        self._jwks = JwksCache(jwks_url, timeout=jwks_timeout) if jwks_url is not None else None
        self._key = key

    async def verify_token(self, token: str) -> AccessToken | None:
        """Check a bearer token and say who it stands for.

        Args:
            token: The bearer token of the request.

        Returns:
            The access token with ``subject`` and all claims (``iss``
            included), or ``None`` when the token is not acceptable or the
            keys to check it cannot be fetched.
        """
        try:
            return await self.check(token)
        except KeysUnavailableError:
            return None

    async def check(self, token: str) -> AccessToken | None:
        """Like `verify_token`, but say when the keys cannot be fetched.

        `memory_http_app` calls this, so that such a request is answered
        with 503 (try again later) instead of 401 (sign in again).

        Args:
            token: The bearer token of the request.

        Returns:
            As `verify_token`.

        Raises:
            KeysUnavailableError: The JWKS cannot be fetched now and no key
                of an earlier fetch has the token's ``kid``.
        """
        try:
            return await self._check(token)
        except KeysUnavailableError:
            raise
        except Exception:  # noqa: BLE001 - a hostile token can make the library raise anything
            # Not only PyJWTError: a header naming another key type than the
            # key's makes PyJWT raise TypeError or ValueError, for example.
            return None

    async def _check(self, token: str) -> AccessToken | None:
        header = jwt.get_unverified_header(token)
        algorithm = header.get("alg")
        kid = header.get("kid")
        if algorithm not in self._algorithms or not isinstance(kid, str | None):
            return None
        key = await self._signing_key(kid)
        if key is None:
            return None
        claims: dict[str, Any] = jwt.decode(
            token,
            key,
            algorithms=[algorithm],
            audience=self._audience,
            issuer=self._issuers,
            leeway=self._leeway,
            options={"require": list(_REQUIRED_CLAIMS)},
        )
        subject = claims.get("sub")
        if not isinstance(subject, str) or not subject:
            return None
        if not all(_is_numeric_date(claims[name]) for name in _TIME_CLAIMS if name in claims):
            return None
        return AccessToken(
            token=token,
            client_id=_client_id(claims, subject),
            scopes=_token_scopes(claims),
            expires_at=int(claims["exp"]),
            resource=self._audience,
            subject=subject,
            claims=claims,
        )

    async def _signing_key(self, kid: str | None) -> Any:
        if self._jwks is None:
            return self._key
        try:
            return (await self._jwks.key(kid)).key
        except LookupError:
            return None


def _is_numeric_date(value: object) -> bool:
    # bool is an int in Python, but true and false are not numbers in JSON.
    return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)


def _client_id(claims: dict[str, Any], subject: str) -> str:
    for name in ("client_id", "azp"):
        value = claims.get(name)
        if isinstance(value, str) and value:
            return value
    return subject


def _token_scopes(claims: dict[str, Any]) -> list[str]:
    scope = claims.get("scope")
    if isinstance(scope, str):
        return scope.split()
    scp = claims.get("scp")
    if isinstance(scp, list):
        return [item for item in scp if isinstance(item, str)]
    return []
