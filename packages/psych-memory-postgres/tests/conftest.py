"""Fixtures for the PostgreSQL adapter's tests: a real server, a schema each.

The server (``postgres_dsn``) and a fresh schema per test
(``postgres_schema``) come from the repository's root conftest, which skips
the tests without a server and fails them under ``CI=true``.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from functools import partial
from typing import Any

import anyio.to_thread
import psycopg
import pytest
from psycopg import sql
from psycopg.conninfo import make_conninfo
from psycopg_pool import AsyncConnectionPool, ConnectionPool

from psych_runtime.memory.postgres import DEFAULT_STATEMENT_TIMEOUT, PostgresMemory


@pytest.fixture
def schema(postgres_schema: str) -> str:
    """The test's own schema (the root conftest's `postgres_schema`), by its short name here."""
    return postgres_schema


@pytest.fixture
async def store(postgres_dsn: str, schema: str) -> AsyncIterator[PostgresMemory]:
    """A set-up store with a pool of its own, in a schema of its own."""
    async with PostgresMemory.connect(postgres_dsn, schema=schema, max_size=8) as memory:
        await memory.setup()
        yield memory


class Backdoor:
    """A separate connection to the server, past the store under test.

    Tests read the table through it (the store offers no such view), and use
    it to lock, count and terminate. Every method runs in a worker thread, so
    the event loop, and the store's own calls, keep running meanwhile.
    """

    def __init__(self, dsn: str, schema: str) -> None:
        self.dsn = dsn
        self.schema = schema
        self.table = sql.Identifier(schema, "memories")

    def labelled(self, application_name: str) -> str:
        """The server's address, with connections labelled so they can be found."""
        return make_conninfo(self.dsn, application_name=application_name)

    async def query(
        self, statement: sql.SQL | sql.Composed, params: tuple[Any, ...] = ()
    ) -> list[Any]:
        """Run one statement on a fresh autocommit connection; return its rows."""

        def run() -> list[Any]:
            with psycopg.connect(self.dsn, autocommit=True) as conn:
                cursor = conn.execute(statement, params)
                return cursor.fetchall() if cursor.description is not None else []

        return await anyio.to_thread.run_sync(run)

    async def load(self, end_user_id: str, count: int) -> None:
        """Give the end user ``end_user_id`` of tenant ``acme`` ``count`` facts, in one statement.

        Straight into the table: the store's own calls would take minutes
        for a big key.
        """
        await self.query(
            sql.SQL(
                "INSERT INTO {} (id, tenant, end_user_id, content)"
                " SELECT md5(%s::text || g), 'acme', %s, 'fact ' || g"
                " FROM generate_series(1, %s) AS g"
            ).format(self.table),
            (end_user_id, end_user_id, count),
        )

    async def count(self, tenant: str, end_user_id: str) -> int:
        """How many facts of this key the table holds."""
        rows = await self.query(
            sql.SQL("SELECT count(*) FROM {} WHERE tenant = %s AND end_user_id = %s").format(
                self.table
            ),
            (tenant, end_user_id),
        )
        return int(rows[0][0])

    @asynccontextmanager
    async def threaded_store(
        self,
        dsn: str,
        *,
        min_size: int = 1,
        max_size: int = 8,
        wait: float = 20,
        statement_timeout: float = DEFAULT_STATEMENT_TIMEOUT,
    ) -> AsyncIterator[PostgresMemory]:
        """A set-up store in this schema on a synchronous pool (worker threads).

        `PostgresMemory.connect` picks the asynchronous pool on asyncio; this
        is the threaded path there, built as an application would. ``dsn``
        may carry a label (`labelled`).
        """
        pool = ConnectionPool(
            dsn,
            min_size=min_size,
            max_size=max_size,
            timeout=wait,
            kwargs={"autocommit": True},
            open=False,
        )
        await anyio.to_thread.run_sync(partial(pool.open, wait=True, timeout=wait))
        try:
            async with PostgresMemory(
                pool, schema=self.schema, statement_timeout=statement_timeout
            ) as store:
                await store.setup()
                yield store
        finally:
            await anyio.to_thread.run_sync(pool.close)

    async def settings_of(self, store: PostgresMemory, *names: str) -> tuple[str, ...]:
        """Settings of a connection of the store's pool (one it has used, when it has one)."""
        query = sql.SQL("SELECT {}").format(
            sql.SQL(", ").join(sql.SQL("current_setting({})").format(name) for name in names)
        )
        pool = store.pool
        if isinstance(pool, AsyncConnectionPool):
            async with pool.connection() as conn:
                row = await (await conn.execute(query)).fetchone()
        else:

            def read() -> Any:
                with pool.connection() as conn:
                    return conn.execute(query).fetchone()

            row = await anyio.to_thread.run_sync(read)
        assert row is not None
        return tuple(str(value) for value in row)

    async def wait_for_backend(self, application_name: str, condition: str) -> None:
        """Return once a backend serving that application meets ``condition``.

        ``condition`` is SQL over ``pg_stat_activity``: the server's own
        view is the only way to see where a call in flight has got to.
        """
        query = sql.SQL(
            "SELECT count(*) FROM pg_stat_activity WHERE application_name = %s AND ({})"
        ).format(sql.SQL(condition))
        while True:
            rows = await self.query(query, (application_name,))
            if rows[0][0] >= 1:
                return
            await anyio.sleep(0.01)

    async def terminate(self, application_name: str) -> int:
        """Terminate every backend serving that application, and wait until they are gone."""
        rows = await self.query(
            sql.SQL(
                "SELECT count(*) FILTER (WHERE pg_terminate_backend(pid, 10000))"
                " FROM pg_stat_activity WHERE application_name = %s"
            ),
            (application_name,),
        )
        return int(rows[0][0])


@pytest.fixture
def backdoor(postgres_dsn: str, schema: str) -> Backdoor:
    """The back door into the schema of the test's store."""
    return Backdoor(postgres_dsn, schema)
