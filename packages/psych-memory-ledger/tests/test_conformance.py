"""The conformance kit passes on the in-process and SQLite stores with a ledger attached.

Every erase and forget the kit makes goes through the ledger's three
writes, so the kit's checks on results, errors and lifecycle hold with the
ledger in the way.
"""

from __future__ import annotations

import sqlite3
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager, closing
from pathlib import Path
from typing import TYPE_CHECKING, ClassVar

import anyio.to_thread
import pytest

from psych_runtime.memory.conformance import MemoryStoreContract
from psych_runtime.memory.inproc import InProcessMemory
from psych_runtime.memory.ledger import DeletionLedger, LedgerKey, open_ledger, with_ledger
from psych_runtime.memory.port import MemoryKey, MemoryStore
from psych_runtime.memory.sqlite import SqliteMemory

if TYPE_CHECKING:
    from conftest import StoreOpener


class _Ledgered(MemoryStoreContract):
    """The kit, against a store of ``_bare_opener`` with a ledger attached."""

    _bare_opener: StoreOpener
    _ledger: DeletionLedger
    _bare: ClassVar[dict[int, MemoryStore]] = {}

    @pytest.fixture(autouse=True)
    def _use_ledger(self, tmp_path: Path, key: LedgerKey) -> None:
        self._ledger = open_ledger(f"sqlite:///{tmp_path / 'kit-ledger.sqlite3'}", key)

    @asynccontextmanager
    async def open_store(self) -> AsyncIterator[MemoryStore]:
        async with self._bare_opener() as bare:
            store = with_ledger(bare, self._ledger)
            self._bare[id(store)] = bare
            try:
                yield store
            finally:
                del self._bare[id(store)]

    async def count_stored(self, store: MemoryStore, key: MemoryKey) -> int:
        return await anyio.to_thread.run_sync(self.rows, self._bare[id(store)], key)

    @staticmethod
    def rows(bare: MemoryStore, key: MemoryKey) -> int:
        """The rows the bare store holds for the key, read past it (even once closed)."""
        raise NotImplementedError


class TestLedgeredInProcess(_Ledgered):
    # Each deletion waits for three writes to reach the ledger's disk.
    max_examples = 25

    @pytest.fixture(autouse=True)
    def _use_bare_opener(self, open_inproc: StoreOpener) -> None:
        self._bare_opener = open_inproc

    @staticmethod
    def rows(bare: MemoryStore, key: MemoryKey) -> int:
        assert isinstance(bare, InProcessMemory)
        return len(bare._facts.get(key, ()))


class TestLedgeredSqlite(_Ledgered):
    max_examples = 25

    @pytest.fixture(autouse=True)
    def _use_bare_opener(self, open_sqlite: StoreOpener) -> None:
        self._bare_opener = open_sqlite

    @staticmethod
    def rows(bare: MemoryStore, key: MemoryKey) -> int:
        assert isinstance(bare, SqliteMemory)
        with closing(sqlite3.connect(bare.path)) as raw:
            (found,) = raw.execute(
                "SELECT count(*) FROM psych_memory_fact WHERE tenant = ? AND end_user_id = ?",
                (key.tenant, key.end_user_id),
            ).fetchone()
        return int(found)
