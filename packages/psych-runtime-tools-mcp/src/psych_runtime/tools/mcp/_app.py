"""Servers for the two transports: one key fixed at launch, or one key per access token."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Final

from starlette.applications import Starlette

from mcp.server import Server
from mcp.server.auth.provider import TokenVerifier
from mcp.server.auth.settings import AuthSettings
from psych_runtime.memory.port import MemoryStore, Scope, validate_key_part
from psych_runtime.tools.builtins import memory_tools

from ._identity import token_binder
from ._server import build_server

__all__ = ["SERVER_NAME", "memory_http_app", "memory_server"]

SERVER_NAME: Final = "psych-memory"
"""The name the server announces to clients."""


def memory_server(
    memory: MemoryStore, *, scope: Scope, end_user_id: str, **limits: int | None
) -> Server[Any]:
    """Serve one end user's memory: the key is fixed here and no request can change it.

    This is the server behind ``psych-memory-mcp`` over stdio, where one
    process serves one person. Run it with any MCP transport, or hand it to
    ``mcp.Client`` to talk to it in-process.

    Args:
        memory: The store. The caller opens and closes it.
        scope: The tenant, as for `memory_tools`.
        end_user_id: The end user, as for `memory_tools`.
        **limits: The limits `memory_tools` takes (``max_facts``,
            ``max_fact_length``, ``max_prompt_chars``), passed on unchanged;
            what is not given keeps the tools' default.

    Returns:
        The server.

    Raises:
        TypeError: ``memory`` is not a `MemoryStore`, the key has the wrong
            type, or a limit is not one `memory_tools` takes.
        InvalidKeyError: The tenant or end-user id breaks a key rule.
        ValueError: A limit is out of range.
    """
    tools = memory_tools(memory, scope=scope, end_user_id=end_user_id, **limits)
    return build_server(lambda: tools, name=SERVER_NAME)


def memory_http_app(  # noqa: PLR0913 - keyword-only settings
    memory: MemoryStore,
    *,
    verifier: TokenVerifier,
    issuer_url: str,
    resource_server_url: str,
    tenant: str | None = None,
    tenant_claim: str | None = None,
    required_scopes: Sequence[str] = (),
    host: str = "127.0.0.1",
    path: str = "/mcp",
    **limits: int | None,
) -> Starlette:
    """Serve every signed-in end user's own memory over streamable HTTP.

    Each request must carry a bearer token that ``verifier`` accepts; others
    get HTTP 401. The end user is `end_user_id_of` the verified token (its
    issuer and subject); the tenant is ``tenant`` for everyone, or the string
    in the token's ``tenant_claim``. Two tokens with different end users
    never reach each other's facts, and sessions stay bound to the token that
    opened them.

    Args:
        memory: The store shared by all users. The caller opens and closes it.
        verifier: Checks bearer tokens (`JwtVerifier`, or any object with the
            SDK's ``TokenVerifier`` method ``verify_token``). It must check the
            token's audience itself and return an ``AccessToken`` with
            ``subject`` and ``claims["iss"]`` set.
        issuer_url: The authorization server, announced in the protected
            resource metadata.
        resource_server_url: This server's public URL (the MCP endpoint).
        tenant: The tenant of every user.
        tenant_claim: The claim holding the tenant, instead of ``tenant``.
        required_scopes: Scopes every token must carry.
        host: The host the app will be served on; for a loopback host the
            SDK's DNS-rebinding protection is switched on.
        path: The path of the MCP endpoint.
        **limits: The limits `memory_tools` takes, for every user's tools.

    Returns:
        A Starlette app; serve it with any ASGI server (the console script
        uses uvicorn).

    Raises:
        TypeError: ``memory`` is not a `MemoryStore`, ``tenant`` is not a
            `str`, or a limit is not one `memory_tools` takes.
        ValueError: Not exactly one of ``tenant`` and ``tenant_claim`` is
            given, or a limit is out of range.
        InvalidKeyError: ``tenant`` breaks a key rule.
    """
    if not isinstance(memory, MemoryStore):
        raise TypeError(f"memory must be a MemoryStore, not {type(memory).__qualname__}")
    if (tenant is None) == (tenant_claim is None):
        raise ValueError("give exactly one of tenant and tenant_claim")
    if tenant is not None:
        # Checked now, so a bad tenant fails at launch and not on each request.
        validate_key_part(tenant, "tenant")
    # Built once here so that a bad limit fails now, not on each request.
    memory_tools(memory, scope=tenant or "launch-check", end_user_id="launch-check", **limits)
    bind = token_binder(memory, tenant=tenant, tenant_claim=tenant_claim, limits=limits)
    server = build_server(bind, name=SERVER_NAME)
    auth = AuthSettings(
        issuer_url=issuer_url,  # type: ignore[arg-type]
        resource_server_url=resource_server_url,  # type: ignore[arg-type]
        required_scopes=list(required_scopes) or None,
        # The verifier checks the audience; see JwtVerifier.
        validate_token_resource=False,
    )
    return server.streamable_http_app(
        streamable_http_path=path, host=host, auth=auth, token_verifier=verifier
    )
