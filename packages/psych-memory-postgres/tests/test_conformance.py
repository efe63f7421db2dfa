"""The conformance kit, against the real server: every rule of the port.

Each store the kit opens gets a schema of its own (a random name), dropped
when the kit is done with it, so runs on several Pythons and both backends
at once never meet.
"""

from __future__ import annotations

import os
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import ClassVar
from uuid import uuid4

import anyio.to_thread
import psycopg
import pytest
from psycopg import sql

from psych_runtime.memory.conformance import MemoryStoreContract
from psych_runtime.memory.port import MemoryKey, MemoryStore
from psych_runtime.memory.postgres import PostgresMemory

# Always set: the root conftest gives it its default.
DSN = os.environ["PSYCH_MEMORY_TEST_POSTGRES_DSN"]


def _admin(statement: sql.Composed, params: tuple[object, ...] = ()) -> int:
    with psycopg.connect(DSN, autocommit=True) as conn:
        cursor = conn.execute(statement, params)
        row = cursor.fetchone() if cursor.description is not None else None
        return 0 if row is None else int(row[0])


@pytest.mark.usefixtures("postgres_dsn")  # skips, or fails under CI=true, without a server
class TestPostgresConformance(MemoryStoreContract):
    # Every example opens a pool and builds a schema: fewer examples keep
    # the run short, and every check still runs.
    max_examples: ClassVar[int] = 25

    # psycopg's default: the store's own pool prepares its statements.
    prepare_threshold: ClassVar[int | None] = 5

    @asynccontextmanager
    async def open_store(self) -> AsyncIterator[MemoryStore]:
        schema = f"psych_kit_{uuid4().hex}"
        try:
            async with PostgresMemory.connect(
                DSN, schema=schema, max_size=8, prepare_threshold=self.prepare_threshold
            ) as store:
                await store.setup()
                yield store
        finally:
            await anyio.to_thread.run_sync(
                _admin, sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(sql.Identifier(schema))
            )

    async def count_stored(self, store: MemoryStore, key: MemoryKey) -> int:
        assert isinstance(store, PostgresMemory)
        return await anyio.to_thread.run_sync(
            _admin,
            sql.SQL("SELECT count(*) FROM {} WHERE tenant = %s AND end_user_id = %s").format(
                sql.Identifier(store.schema, "memories")
            ),
            (key.tenant, key.end_user_id),
        )


class TestPostgresConformanceUnprepared(TestPostgresConformance):
    """The kit on a store that never prepares, as behind a transaction pooler.

    Its statements go after their ``SET LOCAL`` bounds in one simple query,
    and an erase calls the schema's function instead of sending the
    ``DELETE`` itself.
    """

    max_examples: ClassVar[int] = 10
    prepare_threshold: ClassVar[int | None] = None
