"""A store's own pool carries the bounds in its sessions and prepares; others set nothing.

What the server holds is read from the pool's connection (a pool of one):
``pg_prepared_statements`` and ``pg_settings``, never the adapter's state.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import anyio.to_thread
import pytest
from psycopg import sql
from psycopg_pool import AsyncConnectionPool

from psych_runtime.memory.port import store_events
from psych_runtime.memory.postgres import PostgresMemory

if TYPE_CHECKING:
    from conftest import Backdoor

pytestmark = pytest.mark.anyio

_PREPARED = sql.SQL("SELECT statement FROM pg_prepared_statements")
_BOUNDS = sql.SQL(
    "SELECT name, setting, source FROM pg_settings"
    " WHERE name IN ('statement_timeout', 'lock_timeout') ORDER BY name"
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


async def _prepared_deletes(store: PostgresMemory) -> list[str]:
    # Statements that are a DELETE (setup's CREATE FUNCTION holds one too).
    return [
        row[0]
        for row in await _on_the_connection(store, _PREPARED)
        if str(row[0]).startswith("DELETE")
    ]


async def test_the_stores_own_sessions_carry_the_bounds_and_prepare_the_common_path(
    postgres_dsn: str, schema: str
) -> None:
    async with PostgresMemory.connect(
        postgres_dsn,
        schema=schema,
        max_size=1,
        statement_timeout=1.25,
        lock_timeout=0.5,
        prepare_threshold=0,
    ) as store:
        await store.setup()
        await _every_operation(store)
        await _every_operation(store)
        # From the session's start, as the client asked: not set by a call.
        assert await _on_the_connection(store, _BOUNDS) == [
            ("lock_timeout", "500", "client"),
            ("statement_timeout", "1250", "client"),
        ]
        # forget's and erase's DELETE, prepared once each however often run.
        deletes = await _prepared_deletes(store)
    assert len(deletes) == len(set(deletes)) == 2


@pytest.mark.parametrize("how", ["never prepares", "application's pool"])
async def test_no_statement_or_setting_is_left_where_the_store_may_not(
    postgres_dsn: str, schema: str, backdoor: Backdoor, how: str
) -> None:
    names = ("lock_timeout", "statement_timeout")
    defaults = await backdoor.server_defaults(*names)
    if how == "never prepares":
        async with PostgresMemory.connect(
            postgres_dsn, schema=schema, max_size=1, prepare_threshold=None
        ) as store:
            await store.setup()
            await _every_operation(store)
            assert await _prepared_deletes(store) == []
            assert await backdoor.settings_of(store, *names) == defaults
        return
    async with backdoor.threaded_store(postgres_dsn, max_size=1) as store:
        await _every_operation(store)
        assert await _prepared_deletes(store) == []
        assert await backdoor.settings_of(store, *names) == defaults


async def test_the_options_of_the_connection_string_are_kept_beside_the_bounds(
    postgres_dsn: str, schema: str
) -> None:
    dsn = f"{postgres_dsn}{'&' if '?' in postgres_dsn else '?'}options=-c%20work_mem%3D5MB"
    async with PostgresMemory.connect(dsn, schema=schema, max_size=1) as store:
        rows = await _on_the_connection(store, b"SHOW work_mem")
        bounds = await _on_the_connection(store, _BOUNDS)
    assert rows == [("5MB",)]
    assert [row[1] for row in bounds] == ["2000", "5000"]


@pytest.mark.parametrize("how", ["DEALLOCATE ALL", "one by one"])
async def test_a_call_answers_after_the_sessions_prepared_statements_were_deallocated(
    postgres_dsn: str, schema: str, how: str
) -> None:
    replays: list[object] = []
    async with PostgresMemory.connect(
        postgres_dsn, schema=schema, max_size=1, prepare_threshold=0
    ) as store:
        await store.setup()
        fact = await store.remember("acme", "u1", "kept")
        other = await store.remember("acme", "u1", "to forget")
        assert await store.recall("acme", "u1") == (fact, other)
        if how == "DEALLOCATE ALL":
            # psycopg notices this one itself, on its newer versions.
            await _on_the_connection(store, b"DEALLOCATE ALL")
        else:
            # psycopg never notices this: its record of the session's
            # prepared statements is out of date, and the server refuses
            # the next call's statement before running it.
            names = await _on_the_connection(store, b"SELECT name FROM pg_prepared_statements")
            for (name,) in names:
                deallocate = sql.SQL("DEALLOCATE {}").format(sql.Identifier(name))
                await _on_the_connection(store, deallocate)
        token = store_events.set(lambda name, attributes: replays.append(attributes))
        try:
            later = await store.remember("acme", "u1", "added")
            assert await store.forget("acme", "u1", other.id) is True
            assert await store.recall("acme", "u1") == (fact, later)
        finally:
            store_events.reset(token)
    if how == "one by one":
        assert replays
        assert {attributes["psych_memory.reason"] for attributes in replays} == {  # type: ignore[index]
            "prepared statement unknown"
        }
