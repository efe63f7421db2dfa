"""Open a store from a URL given on the command line."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from pathlib import Path

from psych_runtime.memory.inproc import InProcessMemory
from psych_runtime.memory.port import MemoryStore
from psych_runtime.memory.sqlite import SqliteMemory

__all__ = ["open_store"]

_SQLITE = "sqlite:///"


@contextlib.asynccontextmanager
async def open_store(url: str) -> AsyncIterator[MemoryStore]:
    """Yield a ready store for ``url`` and close it on exit.

    Args:
        url: ``memory:`` or ``sqlite:///path``.

    Yields:
        The open store.

    Raises:
        ValueError: The URL has no scheme this opener knows; the message
            names ``url`` and never repeats it.
    """
    if url == "memory:":
        async with InProcessMemory() as memory:
            yield memory
    elif url.startswith(_SQLITE) and len(url) > len(_SQLITE):
        async with SqliteMemory(Path(url.removeprefix(_SQLITE))) as store:
            yield store
    else:
        raise ValueError("url must be memory: or sqlite:///path")
