"""Behind a transaction pooler, and in a pool shared with other code.

A pooler in transaction mode (PgBouncer here, the pooled endpoints of
managed services alike) lends a server connection to a client for one
transaction, then to another client. So the store must neither rely on a
statement prepared on a connection (the next transaction may run on
another) nor leave a setting on one (the next client would inherit it).
The PgBouncer tests start a PgBouncer of their own (see ``conftest``); the
shared server behind it is the usual test server.
"""

from __future__ import annotations

import os
from collections.abc import AsyncIterator, Callable
from contextlib import AbstractContextManager, ExitStack, asynccontextmanager
from dataclasses import replace
from functools import partial
from typing import TYPE_CHECKING, Any, ClassVar
from uuid import uuid4

import anyio
import anyio.to_thread
import psycopg
import pytest
from psycopg import sql
from psycopg_pool import AsyncConnectionPool, ConnectionPool

from psych_runtime.memory.conformance import MemoryStoreContract
from psych_runtime.memory.port import MemoryKey, MemoryStore, store_events
from psych_runtime.memory.postgres import PostgresMemory, StoreUnavailableError, open_url

if TYPE_CHECKING:
    from conftest import Backdoor, Pooler

DSN = os.environ.get("PSYCH_MEMORY_TEST_POSTGRES_DSN", "postgresql://postgres@127.0.0.1:5432/test")

# Settings the store relies on, none of which may stay on a session.
_SETTINGS: tuple[str, ...] = (
    "statement_timeout",
    "lock_timeout",
    "TimeZone",
    "synchronous_commit",
    "DateStyle",
)

# Distinct from any server default, so a setting left behind shows.
_BOUNDS: dict[str, Any] = {"statement_timeout": 1.5, "lock_timeout": 0.75}


def _admin(statement: sql.Composed, params: tuple[object, ...] = ()) -> int:
    with psycopg.connect(DSN, autocommit=True) as conn:
        cursor = conn.execute(statement, params)
        row = cursor.fetchone() if cursor.description is not None else None
        return 0 if row is None else int(row[0])


def _drop(schema: str) -> None:
    _admin(sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(sql.Identifier(schema)))


def _sessions_through(dsn: str, count: int) -> list[tuple[str, ...]]:
    """The settings of ``count`` server sessions at once, seen by a plain client.

    Each client holds a transaction open until all have read, so a pooler
    in transaction mode must give each a server connection of its own:
    with ``count`` at least the pooler's pool size, every one it has.
    """
    query = sql.SQL("SELECT {}").format(
        sql.SQL(", ").join(sql.SQL("current_setting({})").format(name) for name in _SETTINGS)
    )
    seen = []
    with ExitStack() as stack:
        for _ in range(count):
            conn = stack.enter_context(psycopg.connect(dsn, prepare_threshold=None))
            row = conn.execute(query).fetchone()
            assert row is not None
            seen.append(tuple(str(value) for value in row))
    return seen


async def _workload(store: PostgresMemory, tasks: int, rounds: int) -> tuple[int, int]:
    """``tasks`` tasks doing remember, recall, forget and erase; the calls made and failed."""
    failures: list[BaseException] = []
    calls = 0

    async def user(n: int) -> None:
        nonlocal calls
        end_user = f"u{n}"
        for _ in range(rounds):
            try:
                kept = await store.remember("acme", end_user, "kept")
                gone = await store.remember("acme", end_user, "gone")
                assert await store.forget("acme", end_user, gone.id)
                assert await store.recall("acme", end_user) == (kept,)
                assert await store.erase("acme", end_user) == 1
            except Exception as exc:  # noqa: BLE001 - counted, and the first one shown
                failures.append(exc)
            calls += 5

    async with anyio.create_task_group() as group:
        for n in range(tasks):
            group.start_soon(user, n)
    if failures:
        raise AssertionError(f"{len(failures)} rounds failed, the first with {failures[0]!r}")
    return calls, len(failures)


# -- behind PgBouncer in transaction mode ---------------------------------


@pytest.mark.clusters
@pytest.mark.usefixtures("postgres_dsn")
class TestConformanceThroughPgBouncer(MemoryStoreContract):
    """The whole kit, on a store opened by URL through the pooler."""

    max_examples: ClassVar[int] = 10
    cancelled_calls: ClassVar[int] = 30
    pooler: Pooler

    @pytest.fixture(autouse=True)
    def _through(self, pgbouncer: Pooler) -> None:
        self.pooler = pgbouncer

    @asynccontextmanager
    async def open_store(self) -> AsyncIterator[MemoryStore]:
        schema = f"psych_kit_{uuid4().hex}"
        try:
            async with open_url(self.pooler.url(schema=schema, max_size="8")) as store:
                yield store
        finally:
            await anyio.to_thread.run_sync(_drop, schema)

    async def count_stored(self, store: MemoryStore, key: MemoryKey) -> int:
        assert isinstance(store, PostgresMemory)
        return await anyio.to_thread.run_sync(
            _admin,
            sql.SQL("SELECT count(*) FROM {} WHERE tenant = %s AND end_user_id = %s").format(
                sql.Identifier(store.schema, "memories")
            ),
            (key.tenant, key.end_user_id),
        )


@pytest.mark.clusters
@pytest.mark.anyio
async def test_concurrent_calls_through_pgbouncer_all_succeed_and_leave_no_setting(
    pgbouncer: Pooler, schema: str, backdoor: Backdoor
) -> None:
    # Without prepare_threshold=none, psycopg prepares the statements it
    # runs often and the pooler sends the next run to a server connection
    # that never saw them (SQLSTATE 26000): most calls failed so.
    defaults = await backdoor.server_defaults(*_SETTINGS)
    url = pgbouncer.url(schema=schema, max_size="12", statement_timeout="1.5", lock_timeout="0.75")
    async with open_url(url) as store:
        assert isinstance(store, PostgresMemory)
        calls, failed = await _workload(store, tasks=12, rounds=12)
    assert (calls, failed) == (720, 0)
    # Every server connection the pooler has (its pool holds 8) is handed
    # to a plain client: none carries a setting of the store.
    sessions = await anyio.to_thread.run_sync(_sessions_through, pgbouncer.dsn, 8)
    assert sessions == [defaults] * 8


@pytest.mark.clusters
@pytest.mark.anyio
async def test_the_keyword_turns_prepared_statements_off_through_pgbouncer(
    pgbouncer: Pooler, schema: str
) -> None:
    async with PostgresMemory.connect(
        pgbouncer.dsn, schema=schema, max_size=4, prepare_threshold=None
    ) as store:
        await store.setup()
        calls, failed = await _workload(store, tasks=4, rounds=8)
    assert (calls, failed) == (160, 0)


# -- a pool of the application's, shared with other code ------------------


@pytest.mark.anyio
async def test_a_shared_threaded_pool_gets_its_connections_back_as_they_were(
    postgres_dsn: str, schema: str, backdoor: Backdoor
) -> None:
    defaults = await backdoor.server_defaults(*_SETTINGS)
    pool = ConnectionPool(
        postgres_dsn, min_size=2, max_size=2, kwargs={"autocommit": True}, open=False
    )
    await anyio.to_thread.run_sync(partial(pool.open, wait=True))
    try:
        async with PostgresMemory(pool, schema=schema, **_BOUNDS) as store:
            await store.setup()
            await _workload(store, tasks=4, rounds=3)
        sessions = await anyio.to_thread.run_sync(_pool_sessions, pool)
    finally:
        await anyio.to_thread.run_sync(pool.close)
    assert sessions == [defaults] * 2


@pytest.mark.parametrize("anyio_backend", ["asyncio"])
@pytest.mark.anyio
async def test_a_shared_async_pool_gets_its_connections_back_as_they_were(
    postgres_dsn: str, schema: str, backdoor: Backdoor
) -> None:
    defaults = await backdoor.server_defaults(*_SETTINGS)
    async with AsyncConnectionPool(
        postgres_dsn, min_size=2, max_size=2, kwargs={"autocommit": True}, open=False
    ) as pool:
        await pool.open(wait=True)
        async with PostgresMemory(pool, schema=schema, **_BOUNDS) as store:
            await store.setup()
            await _workload(store, tasks=4, rounds=3)
        query = sql.SQL("SELECT {}").format(
            sql.SQL(", ").join(sql.SQL("current_setting({})").format(name) for name in _SETTINGS)
        )
        sessions = []
        async with pool.connection() as first, pool.connection() as second:
            for conn in (first, second):
                row = await (await conn.execute(query)).fetchone()
                assert row is not None
                sessions.append(tuple(str(value) for value in row))
    assert sessions == [defaults] * 2


def _pool_sessions(pool: ConnectionPool[Any]) -> list[tuple[str, ...]]:
    # Both connections at once: every connection the pool has.
    query = sql.SQL("SELECT {}").format(
        sql.SQL(", ").join(sql.SQL("current_setting({})").format(name) for name in _SETTINGS)
    )
    seen = []
    with pool.connection() as first, pool.connection() as second:
        for conn in (first, second):
            row = conn.execute(query).fetchone()
            assert row is not None
            seen.append(tuple(str(value) for value in row))
    return seen


# -- the pooler's own failures ----------------------------------------------


@pytest.mark.clusters
@pytest.mark.anyio
async def test_backends_terminated_behind_pgbouncer_cost_no_remember_or_recall(
    pgbouncer: Pooler, schema: str, backdoor: Backdoor
) -> None:
    # As directly: the server connections behind the pooler are terminated
    # again and again while calls run. A call whose server connection dies
    # under it (PgBouncer closes the client too) is replayed; one that was
    # idle is replaced by the pooler unseen. No call fails, every fact is
    # stored exactly once, in order.
    workers, rounds, steps_between = 12, 4, 40
    progress = [0]
    moved = anyio.Event()
    finished = anyio.Event()
    killed: list[int] = []
    stored: dict[str, list[Any]] = {}

    async def run(user: str) -> None:
        nonlocal moved
        n = 0
        while not finished.is_set():
            fact = await store.remember("acme", user, f"{user}-{n}")
            stored.setdefault(user, []).append(fact)
            assert await store.recall("acme", user, limit=3) == tuple(stored[user][:3])
            n += 1
            progress[0] += 1
            moved.set()

    async def terminator() -> None:
        nonlocal moved
        # Each round waits for the calls to have moved on (paced by
        # progress, not by a clock), so server connections are in use.
        for _ in range(rounds):
            start = progress[0]
            while progress[0] < start + steps_between:
                moved = anyio.Event()
                await moved.wait()
            killed.append(await backdoor.terminate_pooled(pgbouncer))
        finished.set()

    url = pgbouncer.url(schema=schema, max_size="8")
    replays: list[object] = []
    with anyio.fail_after(120):
        async with open_url(url) as store:
            token = store_events.set(lambda name, attributes: replays.append(attributes))
            try:
                async with anyio.create_task_group() as tasks:
                    tasks.start_soon(terminator)
                    for number in range(workers):
                        tasks.start_soon(run, f"user-{number}")
            finally:
                store_events.reset(token)
            assert min(killed) >= 1
            # Calls were in flight when their server connections died (a
            # run here replays 10 to 30 of them), and none failed.
            assert replays
            for user, facts in stored.items():
                assert await store.recall("acme", user) == tuple(facts)
                assert await backdoor.count("acme", user) == len(facts)


@pytest.mark.clusters
@pytest.mark.anyio
async def test_a_call_the_pooler_never_gave_a_server_changed_nothing(
    start_pooler: Callable[..., AbstractContextManager[Pooler]], schema: str
) -> None:
    # Its only server connection held by another client, the pooler closes
    # a waiting client after query_wait_timeout (08P01): the statement never
    # reached the server, so even forget, never replayed once sent, says it
    # changed nothing, and is replayed like any call never sent.
    with start_pooler(default_pool_size=1, query_wait_timeout=1) as pooler:
        async with open_url(pooler.url(schema=schema, max_size="2")) as store:
            fact = await store.remember("acme", "u1", "kept")
            holder = await anyio.to_thread.run_sync(_hold_the_server, pooler.dsn)
            replays: list[object] = []
            token = store_events.set(lambda name, attributes: replays.append(attributes))
            try:
                with pytest.raises(StoreUnavailableError) as caught:
                    await store.forget("acme", "u1", fact.id)
            finally:
                store_events.reset(token)
                await anyio.to_thread.run_sync(holder.close)
            assert caught.value.may_have_taken_effect is False
            assert "pooler" in caught.value.reason
            assert isinstance(caught.value.__cause__, psycopg.errors.ProtocolViolation)
            assert len(replays) == 2
            assert await store.recall("acme", "u1") == (fact,)


def _hold_the_server(dsn: str) -> psycopg.Connection[Any]:
    # A transaction left open keeps the pooler's server connection lent.
    conn = psycopg.connect(dsn, prepare_threshold=None)
    conn.execute("SELECT 1")
    return conn


# -- a store that never prepares, without a pooler --------------------------


@pytest.mark.anyio
async def test_a_store_that_never_prepares_keeps_every_bound_and_rule(
    postgres_dsn: str, schema: str, backdoor: Backdoor
) -> None:
    # With prepare_threshold=None each bound goes with its statement as one
    # query of the simple protocol: the bounds must still hold, and every
    # statement (the first of a transaction included) must still work.
    async with PostgresMemory.connect(
        postgres_dsn, schema=schema, max_size=2, prepare_threshold=None, lock_timeout=0.3
    ) as store:
        await store.setup()
        await backdoor.load("big", 2_500)
        fact = await store.remember("acme", "u1", "kept")
        assert await store.restore_many([replace(fact, id="1" * 32, content="restored")]) == 1
        assert [m.content for m in await store.recall("acme", "u1")] == ["kept", "restored"]
        assert await store.erase("acme", "big") == 2_500
        locked = await anyio.to_thread.run_sync(_lock_table, postgres_dsn, backdoor.table)
        try:
            with anyio.fail_after(30), pytest.raises(StoreUnavailableError) as caught:
                await store.forget("acme", "u1", fact.id)
        finally:
            await anyio.to_thread.run_sync(locked.close)
        assert "lock_timeout" in caught.value.reason
        assert caught.value.may_have_taken_effect is False
        assert await store.forget("acme", "u1", fact.id)
        # The session keeps none of it.
        assert await backdoor.settings_of(store, "lock_timeout") == (
            await backdoor.server_defaults("lock_timeout")
        )


def _lock_table(dsn: str, table: sql.Identifier) -> psycopg.Connection[Any]:
    conn = psycopg.connect(dsn)
    conn.execute(sql.SQL("LOCK TABLE {} IN ACCESS EXCLUSIVE MODE").format(table))
    return conn


@pytest.mark.anyio
async def test_bounds_given_as_none_leave_the_sessions_own(
    postgres_dsn: str, schema: str, backdoor: Backdoor
) -> None:
    # The application's pool sets lock_timeout on its sessions (as a role
    # setting would); a store told to leave the bounds uses that one.
    pool = ConnectionPool(
        postgres_dsn,
        min_size=1,
        max_size=1,
        kwargs={"autocommit": True, "options": "-c lock_timeout=300"},
        open=False,
    )
    await anyio.to_thread.run_sync(partial(pool.open, wait=True))
    try:
        async with PostgresMemory(
            pool, schema=schema, statement_timeout=None, lock_timeout=None
        ) as store:
            await store.setup()
            fact = await store.remember("acme", "u1", "kept")
            locked = await anyio.to_thread.run_sync(_lock_table, postgres_dsn, backdoor.table)
            try:
                with anyio.fail_after(30), pytest.raises(StoreUnavailableError) as caught:
                    await store.forget("acme", "u1", fact.id)
            finally:
                await anyio.to_thread.run_sync(locked.close)
            assert "lock_timeout" in caught.value.reason
            assert await backdoor.settings_of(store, "lock_timeout", "statement_timeout") == (
                "300ms",
                (await backdoor.server_defaults("statement_timeout"))[0],
            )
    finally:
        await anyio.to_thread.run_sync(pool.close)


@pytest.mark.clusters
@pytest.mark.anyio
async def test_the_durability_of_a_deletion_through_pgbouncer_is_the_servers(
    pgbouncer: Pooler, schema: str
) -> None:
    # The shared test server streams to no standby; the pooler changes
    # nothing of what the server says (its two reads may even run on two
    # server connections).
    async with open_url(pgbouncer.url(schema=schema)) as store:
        assert await store.deletion_durability() == "no_replication"
