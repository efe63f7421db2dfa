"""A memory backend that keeps facts in a JSON-lines file.

The adapter that "Write a backend" builds step by step: one fact per line, in
insertion order; forget and erase rewrite the file without the deleted lines,
so nothing deleted stays behind in it. Every call reads and writes the file in
a worker thread under one lock, so the adapter is safe on asyncio and trio and
from several threads. Each call costs O(facts in the file): fine for a small
single-process deployment, and the reason a database adapter exists.
"""

from __future__ import annotations

import json
import os
import threading
from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import TypeVar
from uuid import uuid4

import anyio.to_thread

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

__all__ = ["JsonLinesMemory"]

_T = TypeVar("_T")


# --8<-- [start:format]
def _line(fact: Memory) -> str:
    # ensure_ascii keeps every line plain ASCII, so no encoding question arises.
    record = {
        "id": fact.id,
        "tenant": fact.key.tenant,
        "end_user_id": fact.key.end_user_id,
        "content": fact.content,
        "created_at": fact.created_at.isoformat(),
    }
    return json.dumps(record, ensure_ascii=True) + "\n"


def _fact(line: str) -> Memory:
    record = json.loads(line)
    return Memory(
        id=record["id"],
        key=MemoryKey(record["tenant"], record["end_user_id"]),
        content=record["content"],
        created_at=datetime.fromisoformat(record["created_at"]),
    )


# --8<-- [end:format]


class JsonLinesMemory(MemoryStore):
    """Facts about end users in one JSON-lines file, one fact per line.

    The file's line order is the insertion order, which is the order `recall`
    returns. `forget` and `erase` rewrite the file without the deleted facts
    (through a temporary file and an atomic rename), so no copy of them stays
    in it.

    There is nothing to open. `aclose` (or leaving ``async with``) closes
    the store; afterwards every call raises `StoreClosedError`.

    Args:
        path: The file. It is created on the first `remember`.
    """

    # --8<-- [start:init]
    def __init__(self, path: Path) -> None:
        self._path = path
        # Held only inside worker threads, never across an await.
        self._lock = threading.Lock()
        self._closed = False

    @property
    def path(self) -> Path:
        """The file the facts are kept in."""
        return self._path

    async def _locked(self, operation: str, work: Callable[[], _T]) -> _T:
        def run() -> _T:
            with self._lock:
                if self._closed:
                    raise StoreClosedError(operation)
                return work()

        return await anyio.to_thread.run_sync(run)

    async def aclose(self) -> None:
        """Close the store; closing again does nothing (see `MemoryStore.aclose`)."""

        def close() -> None:
            # Under the lock: a call already writing finishes first, and no
            # call starts writing after this returns.
            with self._lock:
                self._closed = True

        await anyio.to_thread.run_sync(close)

    def _read(self) -> Iterator[Memory]:
        if self._path.exists():
            with self._path.open(encoding="ascii") as lines:
                for line in lines:
                    yield _fact(line)

    # --8<-- [end:init]

    # --8<-- [start:remember]
    async def remember(self, scope: Scope, end_user_id: str, content: str) -> Memory:
        """Append a new fact to the file and return it (see `MemoryStore.remember`)."""
        key = memory_key(scope, end_user_id)
        content = validate_content(content)
        fact = Memory(uuid4().hex, key, content, datetime.now(UTC))

        def append() -> None:
            with self._path.open("a", encoding="ascii") as file:
                file.write(_line(fact))
                file.flush()
                os.fsync(file.fileno())

        await self._locked("remember", append)
        return fact

    # --8<-- [end:remember]

    # --8<-- [start:recall]
    async def recall(
        self, scope: Scope, end_user_id: str, *, limit: int | None = None
    ) -> tuple[Memory, ...]:
        """Return the key's facts in file order, oldest first (see `MemoryStore.recall`)."""
        key = memory_key(scope, end_user_id)
        limit = validate_limit(limit)

        def select() -> tuple[Memory, ...]:
            if limit == 0:
                return ()
            found: list[Memory] = []
            for fact in self._read():
                if fact.key == key:
                    found.append(fact)
                    if len(found) == limit:
                        break
            return tuple(found)

        return await self._locked("recall", select)

    # --8<-- [end:recall]

    # --8<-- [start:delete]
    async def forget(self, scope: Scope, end_user_id: str, memory_id: str) -> bool:
        """Delete one fact of this key for good (see `MemoryStore.forget`)."""
        key = memory_key(scope, end_user_id)
        memory_id = validate_memory_id(memory_id)
        deleted = await self._locked(
            "forget", lambda: self._rewrite_without(lambda f: f.key == key and f.id == memory_id)
        )
        return deleted == 1

    async def erase(self, scope: Scope, end_user_id: str) -> int:
        """Delete every fact of this key for good (see `MemoryStore.erase`)."""
        key = memory_key(scope, end_user_id)
        return await self._locked("erase", lambda: self._rewrite_without(lambda f: f.key == key))

    def _rewrite_without(self, doomed: Callable[[Memory], bool]) -> int:
        kept: list[str] = []
        deleted = 0
        for fact in self._read():
            if doomed(fact):
                deleted += 1
            else:
                kept.append(_line(fact))
        if deleted:
            # A new file renamed over the old one: a crash leaves either the
            # old file or the new one, never half of each.
            fresh = self._path.with_name(self._path.name + ".tmp")
            with fresh.open("w", encoding="ascii") as file:
                file.writelines(kept)
                file.flush()
                os.fsync(file.fileno())
            fresh.replace(self._path)
        return deleted

    # --8<-- [end:delete]
