"""A third-party memory backend: facts in a dictionary, opened as ``thirdparty:``."""

from __future__ import annotations

import itertools
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from datetime import UTC, datetime

from psych_runtime.memory.port import (
    Memory,
    MemoryKey,
    MemoryStore,
    Scope,
    memory_key,
    validate_content,
    validate_limit,
    validate_memory_id,
)

__all__ = ["DictMemory", "open_url"]


class DictMemory(MemoryStore):
    """Facts in nested dictionaries, ids counted up."""

    def __init__(self) -> None:
        self._facts: dict[MemoryKey, dict[str, Memory]] = {}
        self._ids = itertools.count(1)

    async def remember(self, scope: Scope, end_user_id: str, content: str) -> Memory:
        key, content = memory_key(scope, end_user_id), validate_content(content)
        fact = Memory(f"tp-{next(self._ids)}", key, content, datetime.now(UTC))
        self._facts.setdefault(key, {})[fact.id] = fact
        return fact

    async def forget(self, scope: Scope, end_user_id: str, memory_id: str) -> bool:
        key, memory_id = memory_key(scope, end_user_id), validate_memory_id(memory_id)
        return self._facts.get(key, {}).pop(memory_id, None) is not None

    async def recall(
        self, scope: Scope, end_user_id: str, *, limit: int | None = None
    ) -> tuple[Memory, ...]:
        key, limit = memory_key(scope, end_user_id), validate_limit(limit)
        return tuple(self._facts.get(key, {}).values())[:limit]

    async def erase(self, scope: Scope, end_user_id: str) -> int:
        return len(self._facts.pop(memory_key(scope, end_user_id), {}))


# --8<-- [start:open-url]
@asynccontextmanager
async def open_url(url: str) -> AsyncIterator[MemoryStore]:
    """Open a fresh `DictMemory` for the URL ``thirdparty:``.

    Raises:
        ValueError: The URL is anything else.
    """
    if url.lower() != "thirdparty:":
        raise ValueError("url must be exactly 'thirdparty:'")
    async with DictMemory() as store:
        yield store


# --8<-- [end:open-url]
