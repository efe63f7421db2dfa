"""``psych-memory-mcp``: serve the memory tools over stdio (one user) or streamable HTTP."""

from __future__ import annotations

import argparse
import contextlib
import logging
import math
import sys
from collections.abc import Awaitable, Callable, Sequence
from pathlib import Path
from typing import NoReturn

import anyio

from psych_runtime.memory.admin import StoreBackendError, open_memory
from psych_runtime.memory.inproc import InProcessMemory
from psych_runtime.memory.port import (
    InvalidKeyError,
    MemoryStore,
    MemoryStoreError,
    memory_key,
    validate_key_part,
)
from psych_runtime.tools.builtins import memory_tools

from ._app import (
    DEFAULT_MAX_SESSIONS,
    DEFAULT_MAX_SESSIONS_PER_USER,
    DEFAULT_SESSION_IDLE_TIMEOUT,
    SERVER_NAME,
    check_sessions,
    memory_http_app,
)
from ._jwt import ALGORITHMS, DEFAULT_JWKS_TIMEOUT, JwtVerifier
from ._server import build_server
from ._stdio import marked_stdio
from ._uvicorn import serve_http

__all__ = ["main"]

_PROG = "psych-memory-mcp"
_OPTION_OF_ARGUMENT = {"end_user_id": "--user"}
_HTTP_ONLY = (
    "tenant_claim",
    "audience",
    "jwks_url",
    "jwt_key_file",
    "resource_url",
    "jwks_timeout",
    "max_sessions",
    "max_sessions_per_user",
    "session_idle_timeout",
)
_HTTP_ONLY_LISTS = ("issuer", "scope", "algorithm", "allowed_host", "allowed_origin")
_LIMITS = {
    "max_facts": "the most facts one end user may hold",
    "max_fact_length": "the most characters of one fact",
    "max_prompt_chars": "the most characters of the memory block (recall, resource, prompt)",
}


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:
        # One line, so that a client showing the server's stderr shows the reason.
        self.exit(2, f"{self.prog}: error: {message}\n")


def main(argv: Sequence[str] | None = None) -> int:
    """Run the console script.

    Args:
        argv: The arguments, without the program name; ``sys.argv`` when ``None``.

    Returns:
        The exit status: 0 after a clean shutdown, 1 when the store cannot be
        opened, 2 for a bad command line (one line on stderr says why).
    """
    parser = _parser()
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.WARNING, stream=sys.stderr)
    if args.http:
        return _main_http(parser, args)
    return _main_stdio(parser, args)


def _parser() -> _Parser:
    parser = _Parser(
        prog=_PROG,
        description=(
            "Serve Psych memory to MCP clients. Over stdio (the default) one process "
            "serves one end user, fixed by --tenant and --user. With --http, each "
            "request's end user comes from its verified OAuth access token."
        ),
    )
    parser.add_argument(
        "--store",
        required=True,
        help="the store's URL: memory:, sqlite:///path, postgresql://... (any installed scheme)",
    )
    parser.add_argument("--tenant", help="the tenant (stdio; HTTP unless --tenant-claim)")
    parser.add_argument("--user", help="the end user (stdio only)")
    limits = parser.add_argument_group(
        "limits of the memory tools (each a number or 'none'; default: the tools' own)"
    )
    for name, help_text in _LIMITS.items():
        # Left out of the namespace unless given, so that "none" stays distinct.
        limits.add_argument(
            f"--{name.replace('_', '-')}", type=_limit, default=argparse.SUPPRESS, help=help_text
        )
    http = parser.add_argument_group("streamable HTTP")
    http.add_argument("--http", action="store_true", help="serve streamable HTTP, not stdio")
    http.add_argument("--host", default="127.0.0.1")
    http.add_argument("--port", type=int, default=8000, help="0 picks a free port")
    http.add_argument("--path", default="/mcp", help="the MCP endpoint's path")
    http.add_argument("--tenant-claim", help="the token claim holding the tenant")
    http.add_argument("--issuer", action="append", default=[], help="an accepted issuer")
    http.add_argument("--audience", help="the audience tokens must name")
    http.add_argument("--jwks-url", help="the issuer's JWKS URL")
    http.add_argument("--jwt-key-file", type=Path, help="a PEM public key, instead of --jwks-url")
    http.add_argument("--resource-url", help="this endpoint's public URL (default: --audience)")
    http.add_argument("--scope", action="append", default=[], help="a scope tokens must carry")
    http.add_argument(
        "--algorithm",
        action="append",
        default=[],
        choices=ALGORITHMS,
        metavar="ALG",
        help=f"an accepted signature algorithm (repeatable; default: all, {', '.join(ALGORITHMS)})",
    )
    http.add_argument(
        "--jwks-timeout",
        type=_seconds,
        help=f"the most seconds one JWKS fetch may take (default: {DEFAULT_JWKS_TIMEOUT:.0f})",
    )
    http.add_argument(
        "--max-sessions",
        type=_count,
        help=f"the most sessions open at once, for all users (default: {DEFAULT_MAX_SESSIONS})",
    )
    http.add_argument(
        "--max-sessions-per-user",
        type=_count,
        help=f"the most sessions one end user may hold (default: {DEFAULT_MAX_SESSIONS_PER_USER})",
    )
    http.add_argument(
        "--session-idle-timeout",
        type=_seconds,
        help=(
            "seconds after which a session with no request in flight is closed "
            f"(default: {DEFAULT_SESSION_IDLE_TIMEOUT:.0f})"
        ),
    )
    http.add_argument(
        "--allowed-host",
        action="append",
        default=[],
        help="a Host header to accept besides the public URL's (repeatable; NAME:* for any port)",
    )
    http.add_argument(
        "--allowed-origin",
        action="append",
        default=[],
        help="an Origin header to accept besides the public URL's (repeatable)",
    )
    return parser


def _main_stdio(parser: _Parser, args: argparse.Namespace) -> int:
    for option in _HTTP_ONLY:
        if getattr(args, option) is not None:
            parser.error(f"--{option.replace('_', '-')} is for --http only")
    for option in _HTTP_ONLY_LISTS:
        if getattr(args, option):
            parser.error(f"--{option.replace('_', '-')} is for --http only")
    if args.tenant is None or args.user is None:
        parser.error("--tenant and --user are required over stdio")
    try:
        memory_key(args.tenant, args.user)
    except InvalidKeyError as error:
        parser.error(f"{_OPTION_OF_ARGUMENT.get(error.argument, '--tenant')} {error.rule}")

    limits = _checked_limits(parser, args)

    async def serve(memory: MemoryStore) -> None:
        tools = memory_tools(memory, scope=args.tenant, end_user_id=args.user, **limits)
        # As memory_server, but trusting ARGUMENTS_AS_SENT, which marked_stdio sets and strips.
        server = build_server(lambda: tools, name=SERVER_NAME, arguments_as_sent=True)
        async with marked_stdio() as (read_stream, write_stream):
            await server.run(read_stream, write_stream, server.create_initialization_options())

    return anyio.run(_with_store, parser, args.store, serve)


def _main_http(parser: _Parser, args: argparse.Namespace) -> int:
    if args.user is not None:
        parser.error("--user is for stdio only: over HTTP the access token names the user")
    if (args.tenant is None) == (args.tenant_claim is None):
        parser.error("give exactly one of --tenant and --tenant-claim")
    if not args.issuer or not args.audience:
        parser.error("--issuer and --audience are required with --http")
    if any("#" in issuer for issuer in args.issuer):
        parser.error("--issuer must not contain '#' (it separates issuer and subject)")
    if (args.jwks_url is None) == (args.jwt_key_file is None):
        parser.error("give exactly one of --jwks-url and --jwt-key-file")
    if args.jwt_key_file is not None and args.jwks_timeout is not None:
        parser.error("--jwks-timeout is for --jwks-url only")
    max_sessions, per_user, idle_timeout = _checked_sessions(parser, args)
    if args.tenant is not None:
        try:
            validate_key_part(args.tenant, "tenant")
        except InvalidKeyError as error:
            parser.error(f"--tenant {error.rule}")
    try:
        key = args.jwt_key_file.read_text() if args.jwt_key_file is not None else None
    except OSError as error:
        parser.error(f"--jwt-key-file cannot be read ({type(error).__name__})")
    limits = _checked_limits(parser, args)
    verifier = JwtVerifier(
        issuers=args.issuer,
        audience=args.audience,
        jwks_url=args.jwks_url,
        key=key,
        algorithms=args.algorithm or ALGORITHMS,
        jwks_timeout=args.jwks_timeout or DEFAULT_JWKS_TIMEOUT,
    )

    async def serve(memory: MemoryStore) -> None:
        app = memory_http_app(
            memory,
            verifier=verifier,
            issuer_url=args.issuer[0],
            resource_server_url=args.resource_url or args.audience,
            tenant=args.tenant,
            tenant_claim=args.tenant_claim,
            required_scopes=args.scope,
            host=args.host,
            path=args.path,
            allowed_hosts=args.allowed_host,
            allowed_origins=args.allowed_origin,
            max_sessions=max_sessions,
            max_sessions_per_user=per_user,
            session_idle_timeout=idle_timeout,
            **limits,
        )
        await serve_http(app, host=args.host, port=args.port, path=args.path)

    # uvicorn runs on asyncio only.
    return anyio.run(_with_store, parser, args.store, serve, backend="asyncio")


def _limit(text: str) -> int | None:
    if text.lower() == "none":
        return None
    try:
        return int(text)
    except ValueError:
        raise argparse.ArgumentTypeError("must be a whole number or 'none'") from None


def _count(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError("must be a whole number") from None
    if value < 1:
        raise argparse.ArgumentTypeError("must be at least 1")
    return value


def _seconds(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError("must be a number of seconds") from None
    if not (math.isfinite(value) and value > 0):
        raise argparse.ArgumentTypeError("must be a positive, finite number of seconds")
    return value


def _checked_sessions(parser: _Parser, args: argparse.Namespace) -> tuple[int, int, float]:
    total: int = args.max_sessions or DEFAULT_MAX_SESSIONS
    per_user: int = args.max_sessions_per_user or DEFAULT_MAX_SESSIONS_PER_USER
    idle: float = args.session_idle_timeout or DEFAULT_SESSION_IDLE_TIMEOUT
    try:
        check_sessions(total, per_user, idle)
    except ValueError:
        parser.error("--max-sessions-per-user must not exceed --max-sessions")
    return total, per_user, idle


def _checked_limits(parser: _Parser, args: argparse.Namespace) -> dict[str, int | None]:
    # Only the limits given are passed on: the others keep the tools' defaults.
    limits: dict[str, int | None] = {
        name: getattr(args, name) for name in _LIMITS if hasattr(args, name)
    }
    try:
        # Checked before any store is opened, so a bad limit creates nothing.
        memory_tools(InProcessMemory(), scope="launch-check", end_user_id="launch-check", **limits)
    except (TypeError, ValueError) as error:
        parser.error(f"a limit is refused: {error}")
    return limits


async def _with_store(
    parser: _Parser, url: str, serve: Callable[[MemoryStore], Awaitable[None]]
) -> int:

    async with contextlib.AsyncExitStack() as stack:
        try:
            memory = await stack.enter_async_context(open_memory(url))
        except ValueError as error:
            parser.error(f"--store: {error}")
        except Exception as error:  # noqa: BLE001 - any failure to open is one line
            # The port's and the opener's errors never hold a password; others
            # (a driver's, the file system's) are named by type only.
            shown = str(error) if isinstance(error, MemoryStoreError | StoreBackendError) else ""
            reason = f"{type(error).__name__}: {shown}" if shown else type(error).__name__
            print(f"{_PROG}: error: the store cannot be opened ({reason})", file=sys.stderr)
            return 1
        # Leaving the stack closes the store: shutdown never leaves it open.
        await serve(memory)
    return 0
