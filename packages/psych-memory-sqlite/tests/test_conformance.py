"""The port's conformance kit, run against the SQLite adapter."""

from __future__ import annotations

import sqlite3
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager, closing

import anyio.to_thread

from psych_runtime.memory.conformance import MemoryStoreContract
from psych_runtime.memory.port import MemoryKey, MemoryStore
from psych_runtime.memory.sqlite import SqliteMemory


class TestSqliteConformance(MemoryStoreContract):
    # Each example opens a new database file; fewer examples keep the run
    # short without dropping any check.
    max_examples = 25

    @asynccontextmanager
    async def open_store(self) -> AsyncIterator[MemoryStore]:
        async with SqliteMemory(self.fresh_path(".sqlite3")) as store:
            yield store

    async def count_stored(self, store: MemoryStore, key: MemoryKey) -> int:
        assert isinstance(store, SqliteMemory)
        path = store.path

        def count() -> int:
            # A separate connection sees every committed row, hidden or not.
            with closing(sqlite3.connect(path)) as raw:
                (rows,) = raw.execute(
                    "SELECT count(*) FROM psych_memory_fact WHERE tenant = ? AND end_user_id = ?",
                    (key.tenant, key.end_user_id),
                ).fetchone()
            return int(rows)

        return await anyio.to_thread.run_sync(count)
