"""Whose memory a request reaches: fixed at launch, or taken from the verified access token."""

from __future__ import annotations

import hashlib

from mcp.server.auth.middleware.auth_context import get_access_token
from mcp.server.auth.provider import AccessToken
from psych_runtime.memory.port import InvalidKeyError, MemoryStore, memory_key, validate_key_part
from psych_runtime.tools.builtins import MemoryTools, ToolLimits

from ._server import Binder, IdentityError

__all__ = ["end_user_id_of", "token_binder"]

# The issuer is cut off at its first "#", so one may never contain it.
_SEPARATOR = "#"
# Has no "#", so a digest is never the plain id of another issuer and subject.
_DIGEST_PREFIX = "sha256:"


def end_user_id_of(token: AccessToken) -> str:
    """Return the end-user id a verified access token stands for.

    A subject is unique only within its issuer, so the id is both:
    ``"<issuer>#<subject>"``, with the issuer from the ``iss`` claim. When
    that text is not a valid end-user id (longer than 256 characters, as
    some providers' subjects make it, or holding a control character, or
    starting or ending with whitespace) the id is instead ``"sha256:"``
    followed by the 64 lowercase hex digits of the SHA-256 of that text in
    UTF-8 (a lone surrogate encoded as by ``surrogatepass``). An issuer never
    contains ``#`` (such a token is refused) and a digest never does, so two
    different issuer and subject pairs never give the same id.

    Args:
        token: What the server's token verifier returned. It must carry
            ``subject`` and an ``iss`` entry in ``claims``.

    Returns:
        The end-user id, always a valid one.

    Raises:
        IdentityError: The token has no subject or no usable issuer.
    """
    issuer = (token.claims or {}).get("iss")
    subject = token.subject
    if not isinstance(issuer, str) or not issuer or _SEPARATOR in issuer:
        raise IdentityError("the access token has no usable issuer")
    if not isinstance(subject, str) or not subject:
        raise IdentityError("the access token has no subject")
    plain = f"{issuer}{_SEPARATOR}{subject}"
    try:
        return validate_key_part(plain, "end_user_id")
    except InvalidKeyError:
        digest = hashlib.sha256(plain.encode("utf-8", "surrogatepass")).hexdigest()
        return f"{_DIGEST_PREFIX}{digest}"


def token_binder(
    memory: MemoryStore,
    *,
    tenant: str | None,
    tenant_claim: str | None,
    limits: ToolLimits,
) -> Binder:
    """Bind each request to the end user of its verified access token.

    Args:
        memory: The store.
        tenant: The tenant of every user, or ``None`` to read ``tenant_claim``.
        tenant_claim: The claim holding the tenant, when ``tenant`` is ``None``.
        limits: The limits of every user's tools.

    Returns:
        The binder; it raises `IdentityError` when the request has no
        verified token or the token gives no valid key.
    """

    def bind() -> MemoryTools:
        token = get_access_token()
        if token is None:
            raise IdentityError("the request carries no verified access token")
        scope = tenant if tenant is not None else (token.claims or {}).get(str(tenant_claim))
        if not isinstance(scope, str):
            raise IdentityError("the access token names no tenant")
        try:
            key = memory_key(scope, end_user_id_of(token))
        except InvalidKeyError:
            raise IdentityError("the access token gives no valid tenant and end user") from None
        return MemoryTools(memory, key, limits=limits)

    return bind
