"""The HTTP front around the SDK's app: Host and Origin, 503, sessions per user, repeated keys."""

from __future__ import annotations

import ipaddress
import json
import logging
import math
import re
from collections.abc import Collection, Iterator
from dataclasses import dataclass
from typing import Final
from urllib.parse import urlsplit

import anyio
from starlette.datastructures import Headers
from starlette.responses import Response
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from mcp.server.auth.middleware.bearer_auth import AuthenticatedUser
from mcp.server.auth.provider import AccessToken, TokenVerifier, principal_components
from mcp.server.transport_security import (
    DEFAULT_MAX_REQUEST_BODY_SIZE,
    TransportSecuritySettings,
)
from mcp.types.version import HANDSHAKE_PROTOCOL_VERSIONS

from ._jwt import JwtVerifier, KeysUnavailableError
from ._repeats import RepeatedKeyError, mark_repeats, repeated_key_answer

__all__ = [
    "AnswerUncheckable",
    "CheckingVerifier",
    "HostAndOrigin",
    "RepeatedKeys",
    "SessionsPerUser",
    "TokensUncheckable",
    "transport_security",
]

_SESSION_HEADER: Final = "mcp-session-id"
_VERSION_HEADER: Final = "mcp-protocol-version"
_LOOPBACK_HOSTS: Final = ("127.0.0.1:*", "localhost:*", "[::1]:*")
_LOOPBACK_ORIGINS: Final = ("http://127.0.0.1:*", "http://localhost:*", "http://[::1]:*")
_ANY_PORT: Final = ":*"
# A port as RFC 3986 writes it, without the leading zeros no client sends.
_PORT: Final = re.compile(r"[1-9][0-9]{0,4}")
_MAX_PORT: Final = 65535

_logger = logging.getLogger("psych_runtime.tools.mcp")


def transport_security(
    *,
    host: str,
    resource_server_url: str,
    allowed_hosts: Collection[str],
    allowed_origins: Collection[str],
) -> TransportSecuritySettings:
    """The SDK's Host and Origin checks, on for every bind address.

    Allowed: the host and origin of ``resource_server_url`` (the public URL,
    which a reverse proxy forwarding ``Host`` presents), the bind address
    itself on any port, the loopback names on any port when the bind address
    is loopback or a wildcard, and the hosts and origins given. A request
    without ``Origin`` (any client but a browser) passes the Origin check.
    """
    public = urlsplit(resource_server_url)
    hosts = [*allowed_hosts]
    origins = [*allowed_origins]
    if public.hostname:
        hosts += [public.netloc, f"{_bracketed(public.hostname)}:*"]
        origins.append(f"{public.scheme}://{public.netloc}")
    if not _is_wildcard(host):
        hosts.append(f"{_bracketed(host)}:*")
    if _is_loopback(host):
        hosts += _LOOPBACK_HOSTS
        origins += _LOOPBACK_ORIGINS
    elif _is_wildcard(host):
        hosts += _LOOPBACK_HOSTS
    return TransportSecuritySettings(
        enable_dns_rebinding_protection=True,
        allowed_hosts=list(dict.fromkeys(hosts)),
        allowed_origins=list(dict.fromkeys(origins)),
    )


class HostAndOrigin:
    """Refuse a request to the MCP endpoint whose ``Host`` or ``Origin`` is not allowed.

    The values are those of `transport_security`: each is accepted exactly,
    and an entry ``name:*`` accepts ``name:`` followed by a port (1 to 65535,
    digits only) and nothing else. The SDK's own check accepts any text after
    that colon (``localhost:8000.evil.com``, ``http://localhost:1@evil.com``),
    so this one runs first and is the one that refuses: 421 for ``Host``, 403
    for ``Origin``, as the SDK answers. A request without ``Origin`` passes.
    """

    def __init__(self, app: ASGIApp, *, path: str, security: TransportSecuritySettings) -> None:
        self._app = app
        self._path = path
        self._hosts = tuple(security.allowed_hosts)
        self._origins = tuple(security.allowed_origins)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if _is_endpoint(scope, self._path):
            headers = Headers(scope=scope)
            host = headers.get("host")
            origin = headers.get("origin")
            refusal = None
            if not host or not _allowed(host, self._hosts):
                refusal = Response("Invalid Host header", status_code=421)
            elif origin and not _allowed(origin, self._origins):
                refusal = Response("Invalid Origin header", status_code=403)
            if refusal is not None:
                _logger.warning("refused a request: its Host or Origin is not allowed")
                await refusal(scope, receive, send)
                return
        await self._app(scope, receive, send)


def _allowed(value: str, allowed: Collection[str]) -> bool:
    if value in allowed:
        return True
    for entry in allowed:
        if entry.endswith(_ANY_PORT):
            prefix = entry[: -len("*")]
            port = value[len(prefix) :]
            if value.startswith(prefix) and _PORT.fullmatch(port) and int(port) <= _MAX_PORT:
                return True
    return False


def _ip_address(host: str) -> ipaddress.IPv4Address | ipaddress.IPv6Address | None:
    try:
        return ipaddress.ip_address(host.strip("[]"))
    except ValueError:
        return None


def _is_loopback(host: str) -> bool:
    address = _ip_address(host)
    return host == "localhost" if address is None else address.is_loopback


def _is_wildcard(host: str) -> bool:
    address = _ip_address(host)
    return host == "" or (address is not None and address.is_unspecified)


def _bracketed(host: str) -> str:
    address = _ip_address(host)
    return f"[{address}]" if address is not None and address.version == 6 else host


class CheckingVerifier:
    """The verifier handed to the SDK: it raises `TokensUncheckable` instead of answering.

    A `JwtVerifier` is asked with `JwtVerifier.check`, which says when its
    keys cannot be fetched; any other verifier with ``verify_token``, whose
    failures (exceptions) are logged. Either way `TokensUncheckable` goes up
    to `AnswerUncheckable`, which answers 503.
    """

    __slots__ = ("_verifier",)

    def __init__(self, verifier: TokenVerifier) -> None:
        self._verifier = verifier

    async def verify_token(self, token: str) -> AccessToken | None:
        """Check ``token`` with the wrapped verifier.

        Raises:
            TokensUncheckable: The verifier could not check the token.
        """
        try:
            if isinstance(self._verifier, JwtVerifier):
                return await self._verifier.check(token)
            return await self._verifier.verify_token(token)
        except KeysUnavailableError as error:
            raise TokensUncheckable(error.retry_after) from None
        except Exception as error:
            _logger.warning("the token verifier failed", exc_info=True)
            raise TokensUncheckable(None) from error


class TokensUncheckable(Exception):  # noqa: N818 - a condition, not a programming error
    """The request's token cannot be checked now; the server answers 503."""

    def __init__(self, retry_after: float | None) -> None:
        super().__init__("access tokens cannot be checked right now")
        self.retry_after = retry_after


class AnswerUncheckable:
    """Wrap an app (outside authentication) so `TokensUncheckable` is answered with 503."""

    def __init__(self, app: ASGIApp) -> None:
        self._app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        try:
            await self._app(scope, receive, send)
        except TokensUncheckable as error:
            if scope["type"] != "http":
                raise
            headers = {}
            if error.retry_after is not None:
                headers["Retry-After"] = str(max(1, math.ceil(error.retry_after)))
            body = {
                "error": "temporarily_unavailable",
                "error_description": "access tokens cannot be checked right now; try again later",
            }
            await _send_answer(send, 503, body, headers)


async def _send_answer(send: Send, status: int, body: object, headers: dict[str, str]) -> None:
    content = json.dumps(body, separators=(",", ":")).encode()
    raw = [(b"content-type", b"application/json"), (b"content-length", b"%d" % len(content))]
    raw += [(name.lower().encode(), value.encode()) for name, value in headers.items()]
    await send({"type": "http.response.start", "status": status, "headers": raw})
    await send({"type": "http.response.body", "body": content})


def _session_owner(scope: Scope) -> tuple[str | None, ...] | None:
    user = scope.get("user")
    if not isinstance(user, AuthenticatedUser):
        return None
    client_id, issuer, subject = principal_components(user.access_token)
    # The person, whatever client they use; a verifier that names no subject
    # leaves only the client to tell tokens apart.
    return (issuer, subject) if subject is not None else (issuer, None, client_id)


@dataclass
class _Session:
    owner: tuple[str | None, ...]
    in_flight: int = 1
    idle_since: float = math.inf


class SessionsPerUser:
    """Refuse a request that would open one more session than an end user may hold.

    Counts, per end user (the token's issuer and subject), the sessions it
    opened that are alive, plus its opening requests in flight. A session
    ends when the client deletes it, when the server answers 404 for it, or
    once no request of it has been in flight for ``idle_timeout`` seconds
    (the SDK ends it then too, a little earlier, so a count is never short).
    The SDK's 503 for one session more than the server holds gets a
    ``Retry-After``: the seconds until the first idle session ends, or the
    whole idle timeout when none is idle.
    """

    def __init__(self, app: ASGIApp, *, path: str, per_user: int, idle_timeout: float) -> None:
        self._app = app
        self._path = path
        self._per_user = per_user
        self._idle_timeout = idle_timeout
        self._sessions: dict[str, _Session] = {}
        self._opening: dict[tuple[str | None, ...], int] = {}
        self._next_sweep = -math.inf

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        owner = _session_owner(scope) if _is_endpoint(scope, self._path) else None
        if owner is None:
            await self._app(scope, receive, send)
            return
        headers = Headers(scope=scope)
        session_id = headers.get(_SESSION_HEADER)
        if session_id is None:
            if scope["method"] == "POST" and _may_open_session(headers):
                await self._open(owner, scope, receive, send)
                return
        else:
            session = self._sessions.get(session_id)
            if session is not None and session.owner == owner:
                await self._serve(session_id, session, scope, receive, send)
                return
        await self._app(scope, receive, send)

    async def _open(
        self, owner: tuple[str | None, ...], scope: Scope, receive: Receive, send: Send
    ) -> None:
        now = anyio.current_time()
        self._sweep(now)
        held = sum(1 for item in self._live_sessions(now) if item.owner == owner)
        opening = self._opening.get(owner, 0)
        if held + opening >= self._per_user:
            _logger.warning("refused a session: an end user holds %d", held + opening)
            body = {
                "jsonrpc": "2.0",
                "id": None,
                "error": {"code": -32600, "message": "Too many open sessions for this user"},
            }
            await _send_answer(send, 429, body, {})
            return
        self._opening[owner] = opening + 1
        opened: list[str] = []

        async def watch(message: Message) -> None:
            if message["type"] == "http.response.start" and message["status"] < 400:
                session_id = Headers(raw=message["headers"]).get(_SESSION_HEADER)
                if session_id is not None:
                    self._sessions[session_id] = _Session(owner)
                    opened.append(session_id)
            elif message["type"] == "http.response.start" and message["status"] == 503:
                # The SDK's refusal of one session more than the server holds.
                retry_after = self._retry_after(anyio.current_time())
                headers = [*message["headers"], (b"retry-after", str(retry_after).encode())]
                message = {**message, "headers": headers}
            await send(message)

        try:
            await self._app(scope, receive, watch)
        finally:
            left = self._opening.pop(owner) - 1
            if left:
                self._opening[owner] = left
            for session_id in opened:
                session = self._sessions.get(session_id)
                if session is not None:
                    self._done(session, status=200, deleted=False, id_=session_id)

    async def _serve(
        self, session_id: str, session: _Session, scope: Scope, receive: Receive, send: Send
    ) -> None:
        session.in_flight += 1
        status: list[int] = []

        async def watch(message: Message) -> None:
            if message["type"] == "http.response.start":
                status.append(message["status"])
            await send(message)

        try:
            await self._app(scope, receive, watch)
        finally:
            code = status[0] if status else 500
            self._done(session, status=code, deleted=scope["method"] == "DELETE", id_=session_id)

    def _done(self, session: _Session, *, status: int, deleted: bool, id_: str) -> None:
        session.in_flight -= 1
        if session.in_flight == 0:
            session.idle_since = anyio.current_time()
        if status == 404 or (deleted and status < 400):
            self._sessions.pop(id_, None)

    def _retry_after(self, now: float) -> int:
        # When the first idle session ends (the SDK ends it a little earlier);
        # with none idle, a whole timeout, the soonest a busy one can end idle.
        ends = [
            session.idle_since + self._idle_timeout - now
            for session in self._live_sessions(now)
            if not session.in_flight
        ]
        return max(1, math.ceil(min(ends, default=self._idle_timeout)))

    def _live_sessions(self, now: float) -> Iterator[_Session]:
        for session in self._sessions.values():
            if session.in_flight or now - session.idle_since < self._idle_timeout:
                yield session

    def _sweep(self, now: float) -> None:
        # Forgets ended sessions at most once per idle timeout, so the table
        # never holds more than the sessions of about two timeouts.
        if now < self._next_sweep:
            return
        self._next_sweep = now + self._idle_timeout
        ended = [
            session_id
            for session_id, session in self._sessions.items()
            if not session.in_flight and now - session.idle_since >= self._idle_timeout
        ]
        for session_id in ended:
            del self._sessions[session_id]


def _is_endpoint(scope: Scope, path: str) -> bool:
    request_path: str = scope.get("path", "")
    return scope["type"] == "http" and request_path.rstrip("/") == path.rstrip("/")


def _may_open_session(headers: Headers) -> bool:
    # Requests of the newer protocol carry their version and never open a
    # session; the SDK routes them the same way.
    version = headers.get(_VERSION_HEADER)
    return version is None or version in HANDSHAKE_PROTOCOL_VERSIONS


class RepeatedKeys:
    """Refuse a request that repeats a key; mark a ``tools/call`` whose arguments do.

    The SDK parses the request body keeping only the last of two equal keys.
    This reads the body first and passes it through `mark_repeats`: a
    repeated key outside a tool call's arguments is answered with HTTP 400
    and a JSON-RPC error (-32600), and the SDK never sees the request. A
    body larger than the SDK accepts goes on unchanged (the SDK refuses it).
    """

    def __init__(self, app: ASGIApp, *, path: str) -> None:
        self._app = app
        self._path = path

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if (
            not _is_endpoint(scope, self._path)
            or scope["method"] != "POST"
            or not _session_owner(scope)
        ):
            # Without a verified token the SDK refuses the request unread.
            await self._app(scope, receive, send)
            return
        chunks: list[bytes] = []
        size = 0
        complete = False
        trailing: Message | None = None
        while size <= DEFAULT_MAX_REQUEST_BODY_SIZE:
            message = await receive()
            if message["type"] != "http.request":
                trailing = message
                break
            chunk = message.get("body", b"")
            chunks.append(chunk)
            size += len(chunk)
            if not message.get("more_body", False):
                complete = True
                break
        body = b"".join(chunks)
        if complete and size <= DEFAULT_MAX_REQUEST_BODY_SIZE:
            try:
                marked = mark_repeats(body)
            except RepeatedKeyError as error:
                _logger.warning("refused a request: %s", error)
                await _send_answer(send, 400, repeated_key_answer(error), {})
                return
            if marked is not None:
                body = marked
                scope = {**scope, "headers": _headers_with_length(scope["headers"], len(body))}
        replay: list[Message] = [{"type": "http.request", "body": body, "more_body": not complete}]
        if trailing is not None:
            replay.append(trailing)

        async def replayed() -> Message:
            return replay.pop(0) if replay else await receive()

        await self._app(scope, replayed, send)


def _headers_with_length(
    headers: list[tuple[bytes, bytes]], length: int
) -> list[tuple[bytes, bytes]]:
    kept = [(name, value) for name, value in headers if name.lower() != b"content-length"]
    return [*kept, (b"content-length", str(length).encode())]
