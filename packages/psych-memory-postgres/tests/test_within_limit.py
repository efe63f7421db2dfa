"""`remember_within_limit`: the count and the insert as one step, whoever calls at once.

Each concurrency test holds the table against writes (reads go on) while
the calls start, and lets it go only once as many calls wait on the server
as the store has connections: an implementation that counted and inserted
in two steps would then have counted, in every one of them, a key that
had no fact, and would take the key past its cap for certain. A store that
counts and inserts under the key's lock has one of them waiting on the
table and the others on that lock.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from contextlib import asynccontextmanager, contextmanager
from functools import partial
from typing import TYPE_CHECKING, Any

import anyio
import anyio.to_thread
import psycopg
import pytest
from psycopg import sql
from psycopg_pool import AsyncConnectionPool

from psych_runtime.memory.port import (
    InvalidContentError,
    InvalidInputError,
    InvalidKeyError,
    Memory,
    MemoryKey,
    RemembersWithinLimit,
    StoreClosedError,
    new_memory_id,
)
from psych_runtime.memory.postgres import PostgresMemory, StoreUnavailableError, open_url
from psych_runtime.memory.postgres import _conversations as conversations

if TYPE_CHECKING:
    from conftest import Backdoor, Pooler

# Generous: these tests wait on the server, never on a clock, but a bug
# must end them rather than hang the run.
_BOUND = 60

# How many connections each store has, all of them in use at once.
_CONNECTIONS = 8

# Calls queue on the key's lock while the table is held: far from any wait
# a test could meet.
_LOCK_WAIT = 30.0

_CALLS = 20
_MAX_FACTS = 5


def _waiting(marker: str) -> sql.Composed:
    # Backends whose current query names the test's schema and that wait
    # for a lock: the key's advisory lock, or the table held.
    return sql.SQL(
        "SELECT count(*) FROM pg_stat_activity"
        " WHERE wait_event_type = 'Lock' AND position({} in query) > 0"
    ).format(sql.Literal(marker))


class _Held:
    """Another connection's transaction holding a table against writes (``SHARE`` mode)."""

    def __init__(self, dsn: str, table: sql.Identifier) -> None:
        self._conn: psycopg.Connection[Any] | None = psycopg.connect(dsn)
        self._conn.execute(sql.SQL("LOCK TABLE {} IN SHARE MODE").format(table))

    def release(self) -> None:
        """End the transaction; again does nothing."""
        if self._conn is not None:
            self._conn.close()
            self._conn = None


@contextmanager
def _writes_held(dsn: str, table: sql.Identifier) -> Iterator[_Held]:
    """Hold ``table`` against writes until `_Held.release`, or the block's end."""
    held = _Held(dsn, table)
    try:
        yield held
    finally:
        held.release()


def _wait_until_waiting(dsn: str, marker: str, count: int) -> None:
    # Polled: the server has no way to say when one of its views changes.
    deadline = time.monotonic() + _BOUND
    with psycopg.connect(dsn, autocommit=True) as conn:
        while True:
            row = conn.execute(_waiting(marker)).fetchone()
            assert row is not None
            if row[0] >= count:
                return
            assert time.monotonic() < deadline, f"only {row[0]} of {count} calls wait"
            time.sleep(0.01)


@asynccontextmanager
async def _store(
    kind: str, postgres_dsn: str, schema: str, request: pytest.FixtureRequest
) -> AsyncIterator[PostgresMemory]:
    sizes: dict[str, Any] = {"min_size": _CONNECTIONS, "max_size": _CONNECTIONS}
    if kind in {"connect", "unprepared"}:
        async with PostgresMemory.connect(
            postgres_dsn,
            schema=schema,
            lock_timeout=_LOCK_WAIT,
            prepare_threshold=None if kind == "unprepared" else 5,
            **sizes,
        ) as store:
            await store.setup()
            yield store
    elif kind == "pooler":
        pooler: Pooler = request.getfixturevalue("pooler")
        url = pooler.url(
            schema=schema, min_size=str(_CONNECTIONS), max_size=str(_CONNECTIONS),
            lock_timeout=str(_LOCK_WAIT))  # fmt: skip
        async with open_url(url) as store:
            yield store
    else:
        # An application's own pool: its transactions, or its sessions at
        # REPEATABLE READ by default.
        kwargs: dict[str, Any] = {"autocommit": kind != "transactions"}
        if kind == "repeatable-read":
            kwargs["options"] = "-c default_transaction_isolation=repeatable\\ read"
        async with AsyncConnectionPool(postgres_dsn, kwargs=kwargs, open=False, **sizes) as pool:
            store = PostgresMemory(pool, schema=schema, lock_timeout=_LOCK_WAIT)
            await store.setup()
            yield store


_KINDS = pytest.mark.parametrize(
    ("anyio_backend", "kind"),
    [
        ("asyncio", "connect"),
        # The store's own pool is the synchronous one, in worker threads.
        ("trio", "connect"),
        ("asyncio", "unprepared"),
        ("asyncio", "transactions"),
        ("asyncio", "repeatable-read"),
        pytest.param("asyncio", "pooler", marks=pytest.mark.clusters),
        pytest.param("trio", "pooler", marks=pytest.mark.clusters),
    ],
)


@pytest.mark.anyio
@_KINDS
async def test_many_calls_at_once_on_one_key_leave_exactly_max_facts(
    postgres_dsn: str, schema: str, kind: str, request: pytest.FixtureRequest
) -> None:
    table = sql.Identifier(schema, "memories")
    with anyio.fail_after(_BOUND):
        async with _store(kind, postgres_dsn, schema, request) as store:
            # Another end user's facts, and this one's below the cap by
            # plain remember, which count.
            await store.remember("acme", "other", "not counted")
            first = await store.remember("acme", "u1", "by remember")
            answers: list[Memory | None] = []

            async def capped(number: int) -> None:
                answers.append(
                    await store.remember_within_limit(
                        "acme", "u1", f"fact {number}", max_facts=_MAX_FACTS
                    )
                )

            with _writes_held(postgres_dsn, table) as held:
                async with anyio.create_task_group() as tasks:
                    for number in range(_CALLS):
                        tasks.start_soon(capped, number)
                    await anyio.to_thread.run_sync(
                        _wait_until_waiting, postgres_dsn, schema, _CONNECTIONS
                    )
                    held.release()

            added = [answer for answer in answers if answer is not None]
            assert len(answers) == _CALLS
            assert len(added) == _MAX_FACTS - 1
            stored = await store.recall("acme", "u1")
            assert stored[0] == first
            assert sorted(stored[1:], key=lambda fact: fact.id) == sorted(
                added, key=lambda fact: fact.id
            )
            assert len(await store.recall("acme", "other")) == 1
            # At the cap: refused, and plain remember still adds.
            assert await store.remember_within_limit("acme", "u1", "more", max_facts=5) is None
            await store.remember("acme", "u1", "always added")
            assert len(await store.recall("acme", "u1")) == _MAX_FACTS + 1


_CALLER = textwrap.dedent(
    """
    import sys

    import anyio

    from psych_runtime.memory.postgres import PostgresMemory

    dsn, schema, backend, calls, max_facts, connections = sys.argv[1:7]


    async def main() -> None:
        added = 0
        async with PostgresMemory.connect(
            dsn, schema=schema, min_size=int(connections), max_size=int(connections),
            lock_timeout=30,
        ) as store:
            async def call(number: int) -> None:
                nonlocal added
                fact = await store.remember_within_limit(
                    "acme", "shared", f"{backend}-{number}", max_facts=int(max_facts)
                )
                added += fact is not None

            async with anyio.create_task_group() as tasks:
                for number in range(int(calls)):
                    tasks.start_soon(call, number)
        print(added)


    anyio.run(main, backend=backend)
    """
)


def test_two_processes_at_once_leave_exactly_max_facts(postgres_dsn: str, schema: str) -> None:
    connections, calls, max_facts = 4, 12, 5

    async def prepare() -> None:
        async with PostgresMemory.connect(postgres_dsn, schema=schema) as store:
            await store.setup()

    anyio.run(prepare)
    table = sql.Identifier(schema, "memories")
    callers: list[subprocess.Popen[str]] = []
    with _writes_held(postgres_dsn, table):
        try:
            for backend in ("asyncio", "trio"):
                arguments = (postgres_dsn, schema, backend, calls, max_facts, connections)
                callers.append(
                    subprocess.Popen(
                        [sys.executable, "-c", _CALLER, *map(str, arguments)],
                        stdout=subprocess.PIPE,
                        stderr=subprocess.PIPE,
                        text=True,
                    )
                )
            # Both processes have every connection in a call, waiting on
            # the server: the barrier.
            _wait_until_waiting(postgres_dsn, schema, 2 * connections)
        except BaseException:
            for caller in callers:
                caller.kill()
            raise
    added = 0
    for caller in callers:
        try:
            out, errors = caller.communicate(timeout=_BOUND)
        except subprocess.TimeoutExpired:
            for other in callers:
                other.kill()
            pytest.fail("a calling process did not finish in time")
        assert caller.returncode == 0, errors
        added += int(out)
    assert added == max_facts
    with psycopg.connect(postgres_dsn, autocommit=True) as conn:
        row = conn.execute(
            sql.SQL(
                "SELECT count(*) FROM {} WHERE tenant = 'acme' AND end_user_id = 'shared'"
            ).format(table)
        ).fetchone()
    assert row == (max_facts,)


@pytest.mark.anyio
@pytest.mark.parametrize(
    ("arguments", "error"),
    [
        ((("acme", "u1", "a fact"), {"max_facts": True}), TypeError),
        ((("acme", "u1", "a fact"), {"max_facts": 2.0}), TypeError),
        ((("acme", "u1", "a fact"), {"max_facts": "2"}), TypeError),
        ((("acme", "u1", "a fact"), {"max_facts": None}), TypeError),
        ((("acme", "u1", "a fact"), {"max_facts": -1}), InvalidInputError),
        ((("acme", "u1", ""), {"max_facts": 2}), InvalidContentError),
        ((("acme", "u1", "   "), {"max_facts": 2}), InvalidContentError),
        ((("acme", "u1", "x" * 4097), {"max_facts": 2}), InvalidContentError),
        ((("acme", "u1", 5), {"max_facts": 2}), TypeError),
        ((("acme", " u1", "a fact"), {"max_facts": 2}), InvalidKeyError),
        ((("", "u1", "a fact"), {"max_facts": 2}), InvalidKeyError),
        ((("acme", "u1\n", "a fact"), {"max_facts": 2}), InvalidKeyError),
    ],
)
async def test_bad_input_raises_and_stores_nothing(
    store: PostgresMemory,
    backdoor: Backdoor,
    arguments: tuple[tuple[Any, ...], dict[str, Any]],
    error: type[Exception],
) -> None:
    positional, keywords = arguments
    with pytest.raises(error):
        await store.remember_within_limit(*positional, **keywords)
    rows = await backdoor.query(sql.SQL("SELECT count(*) FROM {}").format(backdoor.table))
    assert rows == [(0,)]


@pytest.mark.anyio
async def test_the_cap_counts_the_key_alone_and_zero_refuses_without_a_statement(
    store: PostgresMemory, backdoor: Backdoor
) -> None:
    assert isinstance(store, RemembersWithinLimit)
    assert await store.remember_within_limit("acme", "u1", "one", max_facts=0) is None
    one = await store.remember_within_limit("acme", "u1", "one", max_facts=1)
    assert isinstance(one, Memory)
    assert one.key == MemoryKey("acme", "u1")
    assert one.content == "one"
    assert await store.remember_within_limit("acme", "u1", "two", max_facts=1) is None
    # Other keys, tenants and stores of other schemas are not counted.
    assert await store.remember_within_limit("acme", "u2", "one", max_facts=1) is not None
    assert await store.remember_within_limit("other", "u1", "one", max_facts=1) is not None
    # A cap no store can reach, beyond a 64-bit integer.
    assert await store.remember_within_limit("acme", "u1", "two", max_facts=2**70) is not None
    assert (await store.recall("acme", "u1"))[0] == one
    assert await backdoor.count("acme", "u1") == 2
    # Content goes through as given, quotes and backslashes included.
    odd = "it's \\'quoted\\' and 100% \"odd\"\n\ttab; SELECT 1; --"
    fact = await store.remember_within_limit("acme", "u3", odd, max_facts=3)
    assert fact is not None
    assert await store.recall("acme", "u3") == (fact,)
    await store.aclose()
    with pytest.raises(StoreClosedError):
        await store.remember_within_limit("acme", "u1", "late", max_facts=0)
    with pytest.raises(StoreClosedError):
        await store.remember_within_limit("acme", "u1", "late", max_facts=10)


@pytest.mark.anyio
async def test_a_replay_finds_the_fact_its_first_attempt_stored_at_the_cap(
    store: PostgresMemory, backdoor: Backdoor
) -> None:
    # What a replay sees when its first attempt committed before the
    # connection broke: its own fact, which took the key to the cap.
    key = MemoryKey("acme", "u1")
    memory_id = new_memory_id()
    run: Callable[[], Awaitable[Memory | None]] = partial(
        store._run,
        "remember_within_limit",
        partial(conversations.remember_within_limit, store._sql, key, "once", memory_id, 1),
        replayable=True,
    )
    first = await run()
    assert first is not None
    assert first.id == memory_id
    assert await run() == first
    assert await backdoor.count("acme", "u1") == 1
    # An id another key holds is not taken for this call's fact.
    other = await store.remember("acme", "u2", "elsewhere")
    taken = partial(
        conversations.remember_within_limit, store._sql, MemoryKey("acme", "u3"), "new", other.id, 1
    )
    fresh = await store._run("remember_within_limit", taken, replayable=True)
    assert fresh is not None
    assert fresh.id != other.id
    assert await store.recall("acme", "u2") == (other,)


@pytest.mark.anyio
@pytest.mark.parametrize("anyio_backend", ["asyncio", "trio"])
async def test_a_call_whose_connection_breaks_is_replayed_and_stores_once(
    backdoor: Backdoor,
) -> None:
    name = f"psych-limit-{new_memory_id()[:16]}"
    with anyio.fail_after(_BOUND):
        async with backdoor.threaded_store(backdoor.labelled(name), max_size=2) as store:
            await store.remember_within_limit("acme", "u1", "before", max_facts=2)
            answers: list[Memory | None] = []

            async def in_flight() -> None:
                answers.append(
                    await store.remember_within_limit("acme", "u1", "exactly once", max_facts=2)
                )

            with _writes_held(backdoor.dsn, backdoor.table) as held:
                async with anyio.create_task_group() as tasks:
                    tasks.start_soon(in_flight)
                    await backdoor.wait_for_backend(name, "wait_event_type = 'Lock'")
                    assert await backdoor.terminate(name) >= 1
                    # The replay, on a fresh connection, waits in turn.
                    await backdoor.wait_for_backend(name, "wait_event_type = 'Lock'")
                    held.release()
            (answer,) = answers
            assert answer is not None
            assert [fact.content for fact in await store.recall("acme", "u1")] == [
                "before",
                "exactly once",
            ]


@pytest.mark.anyio
@pytest.mark.parametrize("anyio_backend", ["asyncio", "trio"])
async def test_a_cancelled_call_is_decided_before_the_cancellation_arrives(
    postgres_dsn: str, schema: str, backdoor: Backdoor, request: pytest.FixtureRequest
) -> None:
    with anyio.fail_after(_BOUND):
        async with _store("connect", postgres_dsn, schema, request) as store:
            seen: list[int] = []
            scope = anyio.CancelScope()

            async def cancelled() -> None:
                with scope:
                    await store.remember_within_limit("acme", "u1", "sent", max_facts=1)
                # Cancelled while waiting on the server, after it was sent:
                # the fact is stored once the cancellation arrives here.
                seen.append(await backdoor.count("acme", "u1"))

            table = sql.Identifier(schema, "memories")
            with _writes_held(postgres_dsn, table) as held:
                async with anyio.create_task_group() as tasks:
                    tasks.start_soon(cancelled)
                    await anyio.to_thread.run_sync(_wait_until_waiting, postgres_dsn, schema, 1)
                    scope.cancel()
                    held.release()
            # (Whether the scope caught the cancellation depends on where it
            # arrived: a worker thread's call that returned is not undone.)
            assert seen == [1]
            assert await store.remember_within_limit("acme", "u1", "over", max_facts=1) is None


@pytest.mark.anyio
async def test_a_wait_for_the_keys_lock_is_bounded_by_lock_timeout(
    postgres_dsn: str, schema: str
) -> None:
    # Another session holds the key's lock (the number the docs define):
    # the call gives up after lock_timeout, having stored nothing, and
    # other keys are not held up.
    key = MemoryKey("acme", "u1")
    async with PostgresMemory.connect(
        postgres_dsn, schema=schema, max_size=2, lock_timeout=0.2
    ) as store:
        await store.setup()
        with psycopg.connect(postgres_dsn) as holder:
            holder.execute(
                "SELECT pg_advisory_xact_lock(%s)", (conversations.limit_lock(schema, key),)
            )
            with anyio.fail_after(_BOUND), pytest.raises(StoreUnavailableError) as raised:
                await store.remember_within_limit("acme", "u1", "waits", max_facts=3)
            assert raised.value.may_have_taken_effect is False
            assert await store.remember_within_limit("acme", "u2", "free", max_facts=3)
        assert await store.recall("acme", "u1") == ()
        assert await store.remember_within_limit("acme", "u1", "now", max_facts=3)
