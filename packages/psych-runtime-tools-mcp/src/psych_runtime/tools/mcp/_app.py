"""Servers for the two transports: one key fixed at launch, or one key per access token."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Final

from starlette.applications import Starlette
from starlette.middleware import Middleware

from mcp.server import Server
from mcp.server.auth.provider import TokenVerifier
from mcp.server.auth.settings import AuthSettings
from psych_runtime.memory.port import (
    MemoryStore,
    Scope,
    memory_key,
    validate_key_part,
    validate_seconds,
)
from psych_runtime.tools.builtins import MemoryTools, ToolLimits

from ._http import (
    AnswerUncheckable,
    CheckingVerifier,
    HostAndOrigin,
    RepeatedKeys,
    SessionsPerUser,
    transport_security,
)
from ._identity import token_binder
from ._server import Binder, build_server

__all__ = [
    "DEFAULT_MAX_SESSIONS",
    "DEFAULT_MAX_SESSIONS_PER_USER",
    "DEFAULT_SESSION_IDLE_TIMEOUT",
    "SERVER_NAME",
    "SessionLimits",
    "http_app",
    "memory_http_app",
    "memory_server",
]

SERVER_NAME: Final = "psych-memory"
"""The name the server announces to clients."""

DEFAULT_MAX_SESSIONS: Final = 1000
"""The most HTTP sessions open at once, for all end users, unless told otherwise."""

DEFAULT_MAX_SESSIONS_PER_USER: Final = 16
"""The most HTTP sessions one end user may hold, unless told otherwise."""

DEFAULT_SESSION_IDLE_TIMEOUT: Final = 600.0
"""Seconds after which an idle HTTP session (no request in flight) is closed, by default."""


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
            ``max_fact_length``, ``max_prompt_chars``), as a `ToolLimits`
            holds them; what is not given keeps the tools' default.

    Returns:
        The server.

    Raises:
        TypeError: ``memory`` is not a `MemoryStore`, the key has the wrong
            type, or a limit is not one `ToolLimits` holds or has the wrong type.
        InvalidKeyError: The tenant or end-user id breaks a key rule.
        ValueError: A limit is out of range.
    """
    tools = MemoryTools(memory, memory_key(scope, end_user_id), limits=ToolLimits(**limits))
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
    max_sessions: int = DEFAULT_MAX_SESSIONS,
    max_sessions_per_user: int = DEFAULT_MAX_SESSIONS_PER_USER,
    session_idle_timeout: float = DEFAULT_SESSION_IDLE_TIMEOUT,
    allowed_hosts: Sequence[str] = (),
    allowed_origins: Sequence[str] = (),
    **limits: int | None,
) -> Starlette:
    """Serve every signed-in end user's own memory over streamable HTTP.

    Each request must carry a bearer token that ``verifier`` accepts; others
    get HTTP 401. The end user is `end_user_id_of` the verified token (its
    issuer and subject); the tenant is ``tenant`` for everyone, or the string
    in the token's ``tenant_claim``. Two tokens with different end users
    never reach each other's facts, and sessions stay bound to the token that
    opened them.

    A request whose token cannot be checked now (the verifier raises: for
    `JwtVerifier`, its JWKS cannot be fetched) gets HTTP 503 with
    ``Retry-After`` when known. A request that would open a session beyond
    ``max_sessions`` gets 503 with ``Retry-After``, beyond the end user's
    ``max_sessions_per_user`` 429. A request whose ``Host`` or ``Origin`` is
    not allowed gets 421 or 403 (see ``allowed_hosts``). A ``tools/call``
    whose arguments repeat a key is refused as the Python tools refuse it.

    Args:
        memory: The store shared by all users. The caller opens and closes it.
        verifier: Checks bearer tokens (`JwtVerifier`, or any object with the
            SDK's ``TokenVerifier`` method ``verify_token``). It must check the
            token's audience itself and return an ``AccessToken`` with
            ``subject`` and ``claims["iss"]`` set, or ``None`` to refuse; it
            may raise `KeysUnavailableError` when it cannot check tokens now.
        issuer_url: The authorization server, announced in the protected
            resource metadata.
        resource_server_url: This server's public URL (the MCP endpoint).
        tenant: The tenant of every user.
        tenant_claim: The claim holding the tenant, instead of ``tenant``.
        required_scopes: Scopes every token must carry.
        host: The address the app will be served on.
        path: The path of the MCP endpoint.
        max_sessions: The most sessions open at once, for all users.
        max_sessions_per_user: The most sessions one end user may hold.
        session_idle_timeout: Seconds after which a session with no request
            in flight is closed.
        allowed_hosts: ``Host`` values accepted besides the host of
            ``resource_server_url``, the bind address on any port and, for a
            loopback or wildcard bind, the loopback names on any port
            (``name:*`` accepts ``name:`` followed by a port, 1 to 65535,
            and nothing else).
        allowed_origins: ``Origin`` values accepted besides the origin of
            ``resource_server_url`` and, for a loopback bind, the loopback
            origins (``scheme://name:*`` as for hosts); a request without
            ``Origin`` is accepted.
        **limits: The limits `memory_tools` takes, as a `ToolLimits` holds
            them, for every user's tools.

    Returns:
        A Starlette app; serve it with any ASGI server (the console script
        uses uvicorn).

    Raises:
        TypeError: ``memory`` is not a `MemoryStore`, ``tenant`` is not a
            `str`, or a limit is not one `ToolLimits` holds or has the wrong
            type.
        ValueError: Not exactly one of ``tenant`` and ``tenant_claim`` is
            given, a limit is out of range, or a session setting is not
            positive (``max_sessions_per_user`` above ``max_sessions``
            included).
        InvalidKeyError: ``tenant`` breaks a key rule.
    """
    if not isinstance(memory, MemoryStore):
        raise TypeError(f"memory must be a MemoryStore, not {type(memory).__qualname__}")
    if (tenant is None) == (tenant_claim is None):
        raise ValueError("give exactly one of tenant and tenant_claim")
    if tenant is not None:
        # Checked now, so a bad tenant fails at launch and not on each request.
        validate_key_part(tenant, "tenant")
    sessions = SessionLimits(max_sessions, max_sessions_per_user, session_idle_timeout)
    # Checked once here, so that a bad limit fails now and not on each request.
    tool_limits = ToolLimits(**limits)
    return http_app(
        token_binder(memory, tenant=tenant, tenant_claim=tenant_claim, limits=tool_limits),
        verifier=verifier,
        issuer_url=issuer_url,
        resource_server_url=resource_server_url,
        required_scopes=required_scopes,
        host=host,
        path=path,
        sessions=sessions,
        allowed_hosts=allowed_hosts,
        allowed_origins=allowed_origins,
    )


def http_app(  # noqa: PLR0913 - keyword-only settings
    bind: Binder,
    *,
    verifier: TokenVerifier,
    issuer_url: str,
    resource_server_url: str,
    required_scopes: Sequence[str],
    host: str,
    path: str,
    sessions: SessionLimits,
    allowed_hosts: Sequence[str],
    allowed_origins: Sequence[str],
) -> Starlette:
    """Return the app `memory_http_app` serves, from settings already checked.

    ``bind`` returns the tools of each request's end user (`token_binder`)
    and ``sessions`` bounds the open sessions; every other setting is as for
    `memory_http_app`.
    """
    server = build_server(bind, name=SERVER_NAME, arguments_as_sent=True)
    auth = AuthSettings(
        issuer_url=issuer_url,  # type: ignore[arg-type]
        resource_server_url=resource_server_url,  # type: ignore[arg-type]
        required_scopes=list(required_scopes) or None,
        # The verifier checks the audience; see JwtVerifier.
        validate_token_resource=False,
    )
    security = transport_security(
        host=host,
        resource_server_url=resource_server_url,
        allowed_hosts=allowed_hosts,
        allowed_origins=allowed_origins,
    )
    app = server.streamable_http_app(
        streamable_http_path=path,
        host=host,
        auth=auth,
        token_verifier=CheckingVerifier(verifier),
        transport_security=security,
        max_sessions=sessions.max_sessions,
        session_idle_timeout=sessions.session_idle_timeout,
    )
    # Before the SDK's own check of Host and Origin, which matches name:* by prefix.
    app.user_middleware.append(Middleware(HostAndOrigin, path=path, security=security))
    # Inside authentication, which sets the user they read bodies and count sessions for.
    app.user_middleware.append(Middleware(RepeatedKeys, path=path))
    app.user_middleware.append(
        Middleware(
            SessionsPerUser,
            path=path,
            per_user=sessions.max_sessions_per_user,
            idle_timeout=sessions.session_idle_timeout,
        )
    )
    # Outside authentication, where the verifier's failure surfaces.
    app.add_middleware(AnswerUncheckable)
    return app


@dataclass(frozen=True, slots=True)
class SessionLimits:
    """The bounds on the HTTP sessions of one app, checked when this is made.

    Attributes:
        max_sessions: The most sessions open at once, for all users.
        max_sessions_per_user: The most sessions one end user may hold, at
            most ``max_sessions``.
        session_idle_timeout: Seconds after which a session with no request
            in flight is closed.

    Raises:
        TypeError: A count is not an `int`, or the timeout not a number.
        ValueError: A setting is not positive, or the per-user bound is
            above the total.
    """

    max_sessions: int = DEFAULT_MAX_SESSIONS
    max_sessions_per_user: int = DEFAULT_MAX_SESSIONS_PER_USER
    session_idle_timeout: float = DEFAULT_SESSION_IDLE_TIMEOUT

    def __post_init__(self) -> None:
        counts = (
            ("max_sessions", self.max_sessions),
            ("max_sessions_per_user", self.max_sessions_per_user),
        )
        for name, value in counts:
            if type(value) is not int:
                raise TypeError(f"{name} must be an int, not {type(value).__qualname__}")
            if value < 1:
                raise ValueError(f"{name} must be at least 1")
        if self.max_sessions_per_user > self.max_sessions:
            raise ValueError("max_sessions_per_user must not exceed max_sessions")
        validate_seconds(self.session_idle_timeout, "session_idle_timeout")
