"""Opening the in-process store by URL: the scheme ``memory``."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from ._memory import InProcessMemory

__all__ = ["open_url"]


@asynccontextmanager
async def open_url(url: str) -> AsyncIterator[InProcessMemory]:
    """Open a fresh, empty `InProcessMemory` named by the URL ``memory:``.

    This is the opener registered for the scheme ``memory`` in the
    entry-point group ``psych_runtime.memory.stores``, through which
    ``open_memory("memory:")`` finds it. The URL is exactly ``memory:`` (the
    scheme in any case, as URL schemes are case-insensitive): the store has
    nothing to configure. Each URL opened is a new store of its own; its
    facts are dropped when the block exits.

    Raises:
        TypeError: ``url`` is not a `str`.
        ValueError: ``url`` is anything but ``memory:``. Nothing was opened.
    """
    if not isinstance(url, str):
        raise TypeError(f"url must be a str, not {type(url).__qualname__}")
    if url.lower() != "memory:":
        # The rest of the URL is left out of the message: it is not ours to echo.
        raise ValueError(
            "url must be exactly 'memory:' for the in-process store: "
            "it takes no path, host, query or fragment"
        )
    async with InProcessMemory() as memory:
        yield memory
