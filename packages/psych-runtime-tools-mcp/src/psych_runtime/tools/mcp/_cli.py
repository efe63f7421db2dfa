"""``psych-memory-mcp``: serve the memory tools over stdio (one user) or streamable HTTP."""

from __future__ import annotations

import argparse
import logging
import os
import re
import sys
from collections.abc import Awaitable, Callable, Sequence
from contextlib import ExitStack
from pathlib import Path
from typing import NoReturn

import anyio

from psych_runtime.memory.admin import (
    KEY_OPTIONS,
    LEDGER_KEY_VARIABLE,
    LEDGER_VARIABLE,
    CommandError,
    ExitCode,
    exit_codes_help,
    ledger_for_command,
    open_for_command,
)
from psych_runtime.memory.port import (
    InvalidKeyError,
    MemoryStore,
    memory_key,
    validate_key_part,
    validate_seconds,
)
from psych_runtime.tools.builtins import MemoryTools, ToolLimits

from ._app import (
    DEFAULT_MAX_SESSIONS,
    DEFAULT_MAX_SESSIONS_PER_USER,
    DEFAULT_SESSION_IDLE_TIMEOUT,
    SERVER_NAME,
    SessionLimits,
    http_app,
)
from ._identity import token_binder
from ._jwt import ALGORITHMS, DEFAULT_JWKS_TIMEOUT, JwtVerifier
from ._server import build_server
from ._stdio import marked_stdio
from ._uvicorn import serve_http

__all__ = ["main"]

_PROGRAM = "psych-memory-mcp"
# The exit codes of the psych-memory command's table this command can end with.
_EXIT_CODES = (
    ExitCode.DONE,
    ExitCode.FAILED,
    ExitCode.USAGE,
    ExitCode.UNAVAILABLE,
    # A deletion ledger whose key is not the one given.
    ExitCode.REFUSED,
)
_HTTP_ONLY_OPTIONS = (
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
_HTTP_ONLY_REPEATED_OPTIONS = ("issuer", "scope", "algorithm", "allowed_host", "allowed_origin")
_TOOL_LIMIT_HELP = {
    "max_facts": "the most facts one end user may hold",
    "max_fact_length": "the most characters of one fact",
    "max_prompt_chars": "the most characters of the memory block (recall, resource, prompt)",
}


class _OneLineParser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:
        # One line, so that a client showing the server's stderr shows the reason.
        self.exit(2, f"{self.prog}: error: {message}\n")


def main(argv: Sequence[str] | None = None) -> int:
    """Run the console script.

    Args:
        argv: The arguments, without the program name; ``sys.argv`` when ``None``.

    Returns:
        The exit status, an `ExitCode` of the table ``psych-memory`` shares:
        0 after a clean shutdown, 2 for a bad command line, a store URL or
        a deletion ledger refused (one line on stderr says why), 3 when the
        store or the ledger cannot be opened or reached, 5 when the ledger
        was created with another key, 1 for an unexpected failure to open
        the store. A bad command line raises ``SystemExit(2)`` instead.
    """
    parser = _parser()
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.WARNING, stream=sys.stderr)
    if args.http:
        return _main_http(parser, args)
    return _main_stdio(parser, args)


def _parser() -> _OneLineParser:
    parser = _OneLineParser(
        prog=_PROGRAM,
        description=(
            "Serve Psych memory to MCP clients. Over stdio (the default) one process "
            "serves one end user, fixed by --tenant and --user. With --http, each "
            "request's end user comes from its verified OAuth access token."
        ),
        epilog=exit_codes_help(_EXIT_CODES),
    )
    parser.add_argument(
        "--store",
        required=True,
        help="the store's URL: memory:, sqlite:///path, postgresql://... (any installed scheme)",
    )
    parser.add_argument(
        "--ledger",
        # Set but empty is refused as an empty --ledger is: never "no ledger".
        default=os.environ.get(LEDGER_VARIABLE),
        help=(
            "record every deletion in this deletion ledger before the store deletes it"
            f" (sqlite:///path, postgresql://...?schema=NAME; default: ${LEDGER_VARIABLE})"
        ),
    )
    parser.add_argument(
        "--ledger-key-file",
        type=Path,
        help=f"a file holding the ledger's key (default: ${LEDGER_KEY_VARIABLE})",
    )
    parser.add_argument("--tenant", help="the tenant (stdio; HTTP unless --tenant-claim)")
    parser.add_argument("--user", help="the end user (stdio only)")
    limits = parser.add_argument_group(
        "limits of the memory tools (each a number or 'none'; default: the tools' own)"
    )
    defaults = ToolLimits()
    for name, help_text in _TOOL_LIMIT_HELP.items():
        limits.add_argument(
            f"--{name.replace('_', '-')}",
            type=_tool_limit_value,
            default=getattr(defaults, name),
            help=help_text,
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
        type=_positive_seconds,
        help=f"the most seconds one JWKS fetch may take (default: {DEFAULT_JWKS_TIMEOUT:.0f})",
    )
    http.add_argument(
        "--max-sessions",
        type=_positive_count,
        help=f"the most sessions open at once, for all users (default: {DEFAULT_MAX_SESSIONS})",
    )
    http.add_argument(
        "--max-sessions-per-user",
        type=_positive_count,
        help=f"the most sessions one end user may hold (default: {DEFAULT_MAX_SESSIONS_PER_USER})",
    )
    http.add_argument(
        "--session-idle-timeout",
        type=_positive_seconds,
        help=(
            "seconds after which a session with no request in flight is closed "
            f"(default: {DEFAULT_SESSION_IDLE_TIMEOUT:.0f})"
        ),
    )
    http.add_argument(
        "--allowed-host",
        action="append",
        default=[],
        help=(
            "a Host header to accept besides the public URL's "
            "(repeatable; NAME:* for NAME:PORT, any port from 1 to 65535)"
        ),
    )
    http.add_argument(
        "--allowed-origin",
        action="append",
        default=[],
        help=(
            "an Origin header to accept besides the public URL's "
            "(repeatable; SCHEME://NAME:* for any port)"
        ),
    )
    return parser


def _main_stdio(parser: _OneLineParser, args: argparse.Namespace) -> int:
    for option in _HTTP_ONLY_OPTIONS:
        if getattr(args, option) is not None:
            parser.error(f"--{option.replace('_', '-')} is for --http only")
    for option in _HTTP_ONLY_REPEATED_OPTIONS:
        if getattr(args, option):
            parser.error(f"--{option.replace('_', '-')} is for --http only")
    if args.tenant is None or args.user is None:
        parser.error("--tenant and --user are required over stdio")
    try:
        key = memory_key(args.tenant, args.user)
    except InvalidKeyError as error:
        parser.error(f"{KEY_OPTIONS.get(error.argument, error.argument)}: {error.rule}")
    limits = _tool_limits(parser, args)

    async def serve(memory: MemoryStore) -> None:
        tools = MemoryTools(memory, key, limits=limits)
        # As memory_server, but trusting ARGUMENTS_AS_SENT, which marked_stdio sets and strips.
        server = build_server(lambda: tools, name=SERVER_NAME, arguments_as_sent=True)
        async with marked_stdio() as (read_stream, write_stream):
            await server.run(read_stream, write_stream, server.create_initialization_options())

    return anyio.run(_serve_store, args, serve)


def _main_http(parser: _OneLineParser, args: argparse.Namespace) -> int:
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
    sessions = _session_limits(parser, args)
    if args.tenant is not None:
        try:
            validate_key_part(args.tenant, "tenant")
        except InvalidKeyError as error:
            parser.error(f"{KEY_OPTIONS[error.argument]}: {error.rule}")
    try:
        key = args.jwt_key_file.read_text() if args.jwt_key_file is not None else None
    except (OSError, UnicodeDecodeError) as error:
        parser.error(f"--jwt-key-file: cannot be read ({_why_unreadable(error)})")
    limits = _tool_limits(parser, args)
    verifier = JwtVerifier(
        issuers=args.issuer,
        audience=args.audience,
        jwks_url=args.jwks_url,
        key=key,
        algorithms=args.algorithm or ALGORITHMS,
        jwks_timeout=args.jwks_timeout or DEFAULT_JWKS_TIMEOUT,
    )

    async def serve(memory: MemoryStore) -> None:
        # Every setting is checked above, each refusal worded for the command line.
        app = http_app(
            token_binder(memory, tenant=args.tenant, tenant_claim=args.tenant_claim, limits=limits),
            verifier=verifier,
            issuer_url=args.issuer[0],
            resource_server_url=args.resource_url or args.audience,
            required_scopes=args.scope,
            host=args.host,
            path=args.path,
            sessions=sessions,
            allowed_hosts=args.allowed_host,
            allowed_origins=args.allowed_origin,
        )
        await serve_http(app, host=args.host, port=args.port, path=args.path)

    # uvicorn runs on asyncio only.
    return anyio.run(_serve_store, args, serve, backend="asyncio")


def _tool_limit_value(text: str) -> int | None:
    if text.lower() == "none":
        return None
    try:
        return int(text)
    except ValueError:
        raise argparse.ArgumentTypeError("must be a whole number or 'none'") from None


def _positive_count(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError("must be a whole number") from None
    if value < 1:
        raise argparse.ArgumentTypeError("must be at least 1")
    return value


def _positive_seconds(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError("must be a number of seconds") from None
    try:
        return validate_seconds(value, "it")
    except ValueError as error:
        # The port's rule, in the option's words: argparse names the option.
        raise argparse.ArgumentTypeError(str(error).removeprefix("it ")) from None


def _session_limits(parser: _OneLineParser, args: argparse.Namespace) -> SessionLimits:
    try:
        return SessionLimits(
            args.max_sessions or DEFAULT_MAX_SESSIONS,
            args.max_sessions_per_user or DEFAULT_MAX_SESSIONS_PER_USER,
            args.session_idle_timeout or DEFAULT_SESSION_IDLE_TIMEOUT,
        )
    except ValueError:
        # The options' types refuse every other bad value.
        parser.error("--max-sessions-per-user must not exceed --max-sessions")


def _tool_limits(parser: _OneLineParser, args: argparse.Namespace) -> ToolLimits:
    # Checked before any store is opened, so a bad limit creates nothing.
    try:
        return ToolLimits(args.max_facts, args.max_fact_length, args.max_prompt_chars)
    except (TypeError, ValueError) as error:
        parser.error(f"a limit is refused: {_option_words(str(error))}")


def _option_words(message: str) -> str:
    # The tools' message speaks to a Python caller (max_facts must be None
    # or ...); here each limit is an option, and no limit is the value 'none'.
    for name in _TOOL_LIMIT_HELP:
        message = re.sub(rf"\b{name}\b", f"--{name.replace('_', '-')}", message)
    return re.sub(r"\bNone\b", "'none'", message)


async def _serve_store(
    args: argparse.Namespace, serve: Callable[[MemoryStore], Awaitable[None]]
) -> int:
    # The store is opened, and each refusal worded, as psych-memory does it.
    url: str = args.store
    entered = False
    try:
        with ExitStack() as ledger_open:
            # Opened first and closed last: every deletion the tools make
            # while the store is open is recorded before it is made.
            attach = (
                None
                if args.ledger is None
                else ledger_open.enter_context(
                    ledger_for_command(args.ledger, args.ledger_key_file, store_url=url)
                )
            )
            # Leaving the block closes the store: shutdown never leaves it open.
            async with open_for_command(url, "--store", must_exist=False) as memory:
                entered = True
                await serve(memory if attach is None else attach(memory))
    except CommandError as error:
        _fail(f"{error.argument}: {error.rule}")
        return error.code
    except Exception as error:
        if entered:
            raise
        # Neither the port's nor the opener's: a driver's or the file
        # system's, whose message might hold a password, named by type only.
        _fail(f"--store: cannot be opened ({type(error).__qualname__}); unexpected failure")
        return ExitCode.FAILED
    return ExitCode.DONE


def _fail(message: str) -> None:
    print(f"{_PROGRAM}: error: {message}", file=sys.stderr)


def _why_unreadable(error: OSError | UnicodeDecodeError) -> str:
    """Why a file cannot be read, in the system's words; never its path or content."""
    if isinstance(error, UnicodeDecodeError):
        return "not text: a PEM key is text"
    return (error.strerror or "unreadable").lower()
