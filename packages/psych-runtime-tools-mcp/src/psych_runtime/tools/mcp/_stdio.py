"""Stdio with repeated argument keys marked: each line is read before the SDK parses it."""

from __future__ import annotations

import io
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import anyio

from mcp.server.stdio import stdio_server

from ._repeats import mark_repeats

__all__ = ["marked_stdio"]


@asynccontextmanager
async def marked_stdio() -> AsyncIterator[tuple[Any, Any]]:
    """The SDK's stdio transport, with every line of stdin passed through `mark_repeats`.

    Yields:
        The read and write streams, as ``stdio_server`` yields them.
    """
    # UTF-8 whatever the platform's encoding, as the SDK reads it.
    text = io.TextIOWrapper(sys.stdin.buffer, encoding="utf-8", errors="replace")
    try:
        async with stdio_server(stdin=_MarkedLines(anyio.wrap_file(text))) as streams:  # type: ignore[arg-type]
            yield streams
    finally:
        # The buffer is the process's stdin: it is not this wrapper's to close.
        text.detach()


class _MarkedLines:
    __slots__ = ("_lines",)

    def __init__(self, lines: anyio.AsyncFile[str]) -> None:
        self._lines = lines

    async def __aiter__(self) -> AsyncIterator[str]:
        async for line in self._lines:
            marked = mark_repeats(line.encode("utf-8", "surrogatepass"))
            yield line if marked is None else marked.decode() + "\n"
