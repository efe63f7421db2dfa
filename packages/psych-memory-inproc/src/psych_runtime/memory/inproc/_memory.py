"""The in-process adapter: a table in this process's memory, behind one lock."""

from __future__ import annotations

import os
import threading
from datetime import UTC, datetime
from itertools import islice

from psych_runtime.memory.port import (
    Memory,
    MemoryKey,
    MemoryStore,
    Scope,
    StoreClosedError,
    memory_key,
    validate_content,
    validate_limit,
    validate_memory_id,
)

__all__ = ["InProcessMemory"]


class InProcessMemory(MemoryStore):
    """Facts kept in a dictionary in this process, lost when it ends.

    Meant for tests and single-process deployments. Each key's facts live in
    their own insertion-ordered table, so every operation costs the same
    however much other end users have stored: `remember` and `forget` are
    O(1), `recall` is O(facts of the key, or ``limit``), `erase` is O(facts
    of the key).

    One `threading.Lock` guards the table. It is held only for the few
    dictionary operations of a call and never across an ``await``, so the
    store is safe to share between tasks on asyncio or trio and between
    threads that each run their own event loop.

    There is nothing to open: ``async with InProcessMemory() as memory:`` and
    a bare ``InProcessMemory()`` are both ready. Closing drops every fact at
    once; afterwards each call raises `StoreClosedError`.
    """

    __slots__ = ("_closed", "_facts", "_lock")

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._facts: dict[MemoryKey, dict[str, Memory]] = {}
        self._closed = False

    async def aclose(self) -> None:
        """Close the store and drop every fact it held; closing again does nothing."""
        with self._lock:
            self._closed = True
            self._facts = {}

    async def remember(self, scope: Scope, end_user_id: str, content: str) -> Memory:
        key = memory_key(scope, end_user_id)
        content = validate_content(content)
        # 128 random bits: unguessable across tenants, and never repeated in
        # practice; os.urandom is several times cheaper than uuid4().
        memory = Memory(os.urandom(16).hex(), key, content, datetime.now(UTC))
        with self._lock:
            if self._closed:
                raise StoreClosedError("remember")
            table = self._facts
            facts = table.get(key)
            if facts is None:
                facts = table[key] = {}
            facts[memory.id] = memory
        return memory

    async def forget(self, scope: Scope, end_user_id: str, memory_id: str) -> bool:
        key = memory_key(scope, end_user_id)
        memory_id = validate_memory_id(memory_id)
        with self._lock:
            if self._closed:
                raise StoreClosedError("forget")
            table = self._facts
            facts = table.get(key)
            if facts is None or facts.pop(memory_id, None) is None:
                return False
            if not facts:
                # An end user with no facts leaves no trace in the table.
                del table[key]
            return True

    async def recall(
        self, scope: Scope, end_user_id: str, *, limit: int | None = None
    ) -> tuple[Memory, ...]:
        key = memory_key(scope, end_user_id)
        limit = validate_limit(limit)
        with self._lock:
            if self._closed:
                raise StoreClosedError("recall")
            table = self._facts
            facts = table.get(key)
            if facts is None:
                return ()
            if limit is None:
                return tuple(facts.values())
            return tuple(islice(facts.values(), limit))

    async def erase(self, scope: Scope, end_user_id: str) -> int:
        key = memory_key(scope, end_user_id)
        with self._lock:
            if self._closed:
                raise StoreClosedError("erase")
            table = self._facts
            facts = table.pop(key, None)
        return 0 if facts is None else len(facts)
