"""Stdio with repeated keys found: each line is read before the SDK parses it."""

from __future__ import annotations

import io
import logging
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import anyio

from mcp.server.stdio import stdio_server
from mcp.shared.message import SessionMessage
from mcp.types.jsonrpc import JSONRPCError

from ._repeats import RepeatedKeyError, mark_repeats, repeated_key_answer

__all__ = ["marked_stdio"]

_logger = logging.getLogger("psych_runtime.tools.mcp")


@asynccontextmanager
async def marked_stdio() -> AsyncIterator[tuple[Any, Any]]:
    """The SDK's stdio transport, with every line of stdin passed through `mark_repeats`.

    A line that repeats a key outside a tool call's arguments never reaches
    the server: it is answered on stdout with the JSON-RPC error (-32600)
    the HTTP transport answers, with the request's id when it can be read.

    Yields:
        The read and write streams, as ``stdio_server`` yields them.
    """
    # UTF-8 whatever the platform's encoding, as the SDK reads it.
    text = io.TextIOWrapper(sys.stdin.buffer, encoding="utf-8", errors="replace")
    lines = _MarkedLines(anyio.wrap_file(text))
    try:
        async with stdio_server(stdin=lines) as streams:  # type: ignore[arg-type]
            # Set before the SDK's reader first runs: it starts only once this yields.
            lines.answers = streams[1]
            yield streams
    finally:
        # The buffer is the process's stdin: it is not this wrapper's to close.
        text.detach()


class _MarkedLines:
    __slots__ = ("_lines", "answers")

    def __init__(self, lines: anyio.AsyncFile[str]) -> None:
        self._lines = lines
        self.answers: Any = None

    async def __aiter__(self) -> AsyncIterator[str]:
        async for line in self._lines:
            try:
                marked = mark_repeats(line.encode("utf-8", "surrogatepass"))
            except RepeatedKeyError as error:
                _logger.warning("refused a request: %s", error)
                answer = JSONRPCError.model_validate(repeated_key_answer(error))
                await self.answers.send(SessionMessage(answer))
                continue
            yield line if marked is None else marked.decode() + "\n"
