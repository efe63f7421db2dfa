"""A store's own pool runs the common path prepared, and survives any state of the server's copy.

What the server holds is read from ``pg_prepared_statements`` of the pool's
connection (a pool of one), never from the adapter.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import anyio.to_thread
import pytest
from psycopg import sql
from psycopg_pool import AsyncConnectionPool

from psych_runtime.memory.postgres import PostgresMemory
from psych_runtime.memory.postgres._runner import _PreparedForm
from psych_runtime.memory.postgres._schema import Statements

if TYPE_CHECKING:
    from conftest import Backdoor

pytestmark = pytest.mark.anyio

_NAMES = sql.SQL(
    "SELECT name FROM pg_prepared_statements WHERE name LIKE 'psych\\_memory\\_%' ORDER BY name"
)


async def _on_the_connection(store: PostgresMemory, query: sql.Composable | bytes) -> list[Any]:
    """Run ``query`` on the connection of the store's pool of one; its rows."""
    pool = store.pool
    if isinstance(pool, AsyncConnectionPool):
        async with pool.connection() as conn:
            cursor = await conn.execute(query, prepare=False)
            return await cursor.fetchall() if cursor.description is not None else []

    def run() -> list[Any]:
        with pool.connection() as conn:
            cursor = conn.execute(query, prepare=False)
            return cursor.fetchall() if cursor.description is not None else []

    return await anyio.to_thread.run_sync(run)


async def _every_operation(store: PostgresMemory) -> None:
    fact = await store.remember("acme", "u1", "first")
    later = await store.remember("acme", "u1", "second")
    assert await store.recall("acme", "u1") == (fact, later)
    assert await store.recall_page("acme", "u1", after=fact.id, size=5) == (later,)
    assert await store.forget("acme", "u1", fact.id) is True
    assert await store.erase("acme", "u1") == 1
    assert await store.recall("acme", "u1") == ()


async def test_the_common_path_is_prepared_once_on_the_stores_own_connection(
    postgres_dsn: str, schema: str
) -> None:
    async with PostgresMemory.connect(postgres_dsn, schema=schema, max_size=1) as store:
        await store.setup()
        await _every_operation(store)
        await _every_operation(store)
        names = [row[0] for row in await _on_the_connection(store, _NAMES)]
    # remember, recall, recall_page, forget, erase: one each, however often run.
    assert len(names) == len(set(names)) == 5


@pytest.mark.parametrize("how", ["never prepares", "application's pool"])
async def test_no_statement_is_left_prepared_where_the_store_may_not(
    postgres_dsn: str, schema: str, backdoor: Backdoor, how: str
) -> None:
    if how == "never prepares":
        async with PostgresMemory.connect(
            postgres_dsn, schema=schema, max_size=1, prepare_threshold=None
        ) as store:
            await store.setup()
            await _every_operation(store)
            assert await _on_the_connection(store, _NAMES) == []
        return
    async with backdoor.threaded_store(postgres_dsn, max_size=1) as store:
        await _every_operation(store)
        assert await _on_the_connection(store, _NAMES) == []


@pytest.mark.parametrize("state", ["deallocated", "prepared by someone else"])
async def test_a_call_answers_whatever_became_of_the_servers_prepared_statements(
    postgres_dsn: str, schema: str, state: str
) -> None:
    async with PostgresMemory.connect(postgres_dsn, schema=schema, max_size=1) as store:
        await store.setup()
        fact = await store.remember("acme", "u1", "kept")
        assert await store.recall("acme", "u1") == (fact,)
        if state == "deallocated":
            # The store believes both prepared; the server holds neither.
            await _on_the_connection(store, b"DEALLOCATE ALL")
        else:
            # The server holds one the store never prepared: the query that
            # prepares it is refused before anything runs.
            recall_page = _PreparedForm.of(Statements.for_schema(schema).page)
            await _on_the_connection(store, recall_page.prepare.replace(b"%%", b"%")[:-2])
            assert await store.recall_page("acme", "u1", after=fact.id, size=5) == ()
        later = await store.remember("acme", "u1", "added")
        assert await store.recall("acme", "u1") == (fact, later)
        assert await store.forget("acme", "u1", fact.id) is True
        assert await store.recall("acme", "u1") == (later,)
