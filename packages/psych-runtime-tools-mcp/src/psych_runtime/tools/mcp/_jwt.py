"""A token verifier for JWT access tokens, signed with a key from a JWKS URL or given directly."""

from __future__ import annotations

from collections.abc import Collection, Sequence
from typing import Any, Final

import anyio.to_thread
import jwt

from mcp.server.auth.provider import AccessToken

__all__ = ["JwtVerifier"]

_DEFAULT_ALGORITHMS: Final = ("RS256", "RS384", "RS512", "PS256", "ES256", "ES384", "EdDSA")
_REQUIRED_CLAIMS: Final = ("exp", "iss", "sub", "aud")


class JwtVerifier:
    """Accept a JWT access token only if it is signed, current, from an allowed issuer, for us.

    It implements the MCP SDK's ``TokenVerifier`` protocol. A token is
    accepted when its signature checks with the configured key, it has not
    expired (and is not used before ``nbf``), its ``iss`` is one of
    ``issuers``, its ``aud`` names ``audience``, and it has a non-empty
    ``sub``. Anything else, including a key that cannot be fetched, makes
    `verify_token` return ``None`` and the request is answered with 401.

    Args:
        issuers: The issuers whose tokens are accepted (exact strings, as in
            the ``iss`` claim).
        audience: The audience this server requires in ``aud``; usually the
            MCP endpoint's public URL.
        jwks_url: Where to fetch the issuer's public keys (JWKS); keys are
            cached and looked up by the token's ``kid``.
        key: A public key in PEM, instead of ``jwks_url``.
        algorithms: The signature algorithms accepted. Only asymmetric ones
            by default; a shared secret would let anyone holding it mint tokens
            for every user.
        leeway: Seconds of clock skew allowed on ``exp`` and ``nbf``.

    Raises:
        ValueError: ``issuers`` is empty or a single string, ``audience`` is
            empty, or not exactly one of ``jwks_url`` and ``key`` is given.
    """

    __slots__ = ("_algorithms", "_audience", "_issuers", "_jwks", "_key", "_leeway")

    def __init__(  # noqa: PLR0913 - keyword-only settings
        self,
        *,
        issuers: Collection[str],
        audience: str,
        jwks_url: str | None = None,
        key: str | bytes | None = None,
        algorithms: Sequence[str] = _DEFAULT_ALGORITHMS,
        leeway: float = 0.0,
    ) -> None:
        if isinstance(issuers, str) or not issuers:
            raise ValueError("issuers must be a non-empty collection of issuer strings")
        if not audience:
            raise ValueError("audience must not be empty")
        if (jwks_url is None) == (key is None):
            raise ValueError("give exactly one of jwks_url and key")
        self._issuers = list(issuers)
        self._audience = audience
        self._algorithms = list(algorithms)
        self._leeway = leeway
        self._jwks = jwt.PyJWKClient(jwks_url) if jwks_url is not None else None
        self._key = key

    async def verify_token(self, token: str) -> AccessToken | None:
        """Check a bearer token and say who it stands for.

        Args:
            token: The bearer token of the request.

        Returns:
            The access token with ``subject`` and all claims (``iss``
            included), or ``None`` when the token is not acceptable.
        """
        try:
            key = await self._signing_key(token)
            claims: dict[str, Any] = jwt.decode(
                token,
                key,
                algorithms=self._algorithms,
                audience=self._audience,
                issuer=self._issuers,
                leeway=self._leeway,
                options={"require": list(_REQUIRED_CLAIMS)},
            )
        except jwt.PyJWTError:
            return None
        subject = claims.get("sub")
        if not isinstance(subject, str) or not subject:
            return None
        return AccessToken(
            token=token,
            client_id=_client_id(claims, subject),
            scopes=_scopes(claims),
            expires_at=int(claims["exp"]),
            resource=self._audience,
            subject=subject,
            claims=claims,
        )

    async def _signing_key(self, token: str) -> Any:
        if self._jwks is None:
            return self._key
        # PyJWKClient fetches over blocking HTTP; keep it off the event loop.
        signing_key = await anyio.to_thread.run_sync(self._jwks.get_signing_key_from_jwt, token)
        return signing_key.key


def _client_id(claims: dict[str, Any], subject: str) -> str:
    for name in ("client_id", "azp"):
        value = claims.get(name)
        if isinstance(value, str) and value:
            return value
    return subject


def _scopes(claims: dict[str, Any]) -> list[str]:
    scope = claims.get("scope")
    if isinstance(scope, str):
        return scope.split()
    scp = claims.get("scp")
    if isinstance(scp, list):
        return [item for item in scp if isinstance(item, str)]
    return []
