"""The conformance kit, run against the in-process adapter.

`StoreBackedMemory`, the runtime's spelling of it, only adds a constructor
(``test_store_backed.py`` holds it to that), so this run proves it too.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from psych_runtime.memory.conformance import MemoryStoreContract
from psych_runtime.memory.inproc import InProcessMemory
from psych_runtime.memory.port import MemoryKey, MemoryStore


class TestInProcessMemory(MemoryStoreContract):
    @asynccontextmanager
    async def open_store(self) -> AsyncIterator[MemoryStore]:
        yield InProcessMemory()

    async def count_stored(self, store: MemoryStore, key: MemoryKey) -> int:
        # The backdoor reads the adapter's own table: a fact hidden from recall
        # but still held would show up here.
        assert isinstance(store, InProcessMemory)
        facts = store._facts.get(key)
        return 0 if facts is None else len(facts)
