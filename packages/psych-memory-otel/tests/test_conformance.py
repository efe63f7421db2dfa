"""The conformance kit passes on the instrumented in-process, SQLite and PostgreSQL stores.

The spans are recorded by the SDK (and thrown away), so every path that
sets an attribute runs under the kit's checks too.
"""

from __future__ import annotations

import os
import sqlite3
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager, closing
from typing import TYPE_CHECKING, ClassVar

import anyio.to_thread
import psycopg
import pytest
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.trace import TracerProvider
from psycopg import sql

from psych_runtime.memory.conformance import MemoryStoreContract
from psych_runtime.memory.inproc import InProcessMemory
from psych_runtime.memory.otel import instrument
from psych_runtime.memory.port import MemoryKey, MemoryStore
from psych_runtime.memory.postgres import PostgresMemory
from psych_runtime.memory.sqlite import SqliteMemory

if TYPE_CHECKING:
    from conftest import StoreOpener

# Always set: the root conftest gives it its default.
DSN = os.environ["PSYCH_MEMORY_TEST_POSTGRES_DSN"]
_TRACER_PROVIDER = TracerProvider()
_METER_PROVIDER = MeterProvider()


class _Instrumented(MemoryStoreContract):
    """The kit, against a store of ``_bare_opener`` wrapped by `instrument`."""

    _bare_opener: StoreOpener
    # The bare store behind each instrumented one, for the kit's backdoor.
    _bare: ClassVar[dict[int, MemoryStore]] = {}

    @asynccontextmanager
    async def open_store(self) -> AsyncIterator[MemoryStore]:
        async with self._bare_opener() as bare:
            store = instrument(
                bare, tracer_provider=_TRACER_PROVIDER, meter_provider=_METER_PROVIDER
            )
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


class TestInstrumentedInProcess(_Instrumented):
    @pytest.fixture(autouse=True)
    def _use_bare_opener(self, open_inproc: StoreOpener) -> None:
        self._bare_opener = open_inproc

    @staticmethod
    def rows(bare: MemoryStore, key: MemoryKey) -> int:
        assert isinstance(bare, InProcessMemory)
        return len(bare._facts.get(key, ()))


class TestInstrumentedSqlite(_Instrumented):
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


class TestInstrumentedPostgres(_Instrumented):
    max_examples = 25

    @pytest.fixture(autouse=True)
    def _use_bare_opener(self, open_postgres: StoreOpener) -> None:
        self._bare_opener = open_postgres

    @staticmethod
    def rows(bare: MemoryStore, key: MemoryKey) -> int:
        assert isinstance(bare, PostgresMemory)
        with psycopg.connect(DSN, autocommit=True) as conn:
            row = conn.execute(
                sql.SQL("SELECT count(*) FROM {} WHERE tenant = %s AND end_user_id = %s").format(
                    sql.Identifier(bare.schema, "memories")
                ),
                (key.tenant, key.end_user_id),
            ).fetchone()
        assert row is not None
        return int(row[0])
