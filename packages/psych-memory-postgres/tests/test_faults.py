"""Connection faults, for real: backends terminated by the server mid-run.

Every store here labels its connections with an application name of its
own, and only backends with that name are terminated, so other tests and
other users of the server are never touched.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable, Coroutine
from contextlib import asynccontextmanager
from typing import TYPE_CHECKING, Any
from uuid import uuid4

import anyio
import anyio.to_thread
import psycopg
import pytest
from psycopg import sql
from psycopg.conninfo import make_conninfo
from psycopg_pool import AsyncConnectionPool

from psych_runtime.memory import port
from psych_runtime.memory.port import Memory
from psych_runtime.memory.postgres import PostgresMemory, StoreUnavailableError
from psych_runtime.memory.postgres._conversations import FEW_FACTS

if TYPE_CHECKING:
    from conftest import Backdoor, Pooler

pytestmark = pytest.mark.anyio

# Generous bounds: these tests wait on the server, never on a clock, but a
# bug must end them rather than hang the run.
_BOUND = 60


# The store's own pool (threads, on both backends) and an application's
# asynchronous pool (asyncio only): each has its own code path to test.
_POOLS = pytest.mark.parametrize(
    ("anyio_backend", "pool_kind"),
    [("asyncio", "threads"), ("trio", "threads"), ("asyncio", "async")],
)


# The same, plus the store's own pool through PgBouncer in transaction mode
# (each backend), for the tests of calls whose server connection dies.
_POOLS_AND_POOLER = pytest.mark.parametrize(
    ("anyio_backend", "pool_kind"),
    [
        ("asyncio", "threads"),
        ("trio", "threads"),
        ("asyncio", "async"),
        pytest.param("asyncio", "pooler", marks=pytest.mark.clusters),
        pytest.param("trio", "pooler", marks=pytest.mark.clusters),
    ],
)


@pytest.fixture
def through(request: pytest.FixtureRequest, pool_kind: str) -> Pooler | None:
    """The PgBouncer of the ``pooler`` kind (checked after the test), else ``None``."""
    if pool_kind != "pooler":
        return None
    pooler: Pooler = request.getfixturevalue("pooler")
    return pooler


@asynccontextmanager
async def _labelled_store(
    backdoor: Backdoor, pool_kind: str, *, max_size: int = 4, through: Pooler | None = None
) -> AsyncIterator[tuple[PostgresMemory, str]]:
    min_size = min(2, max_size)
    name = f"psych-fault-{uuid4().hex[:16]}"
    dsn = backdoor.labelled(name)
    if through is not None:
        # PgBouncer passes the client's application_name on to the server
        # connection it lends: the backends are found by it all the same.
        async with PostgresMemory.connect(
            make_conninfo(through.dsn, application_name=name),
            schema=backdoor.schema,
            min_size=min_size,
            max_size=max_size,
            prepare_threshold=None,
        ) as store:
            await store.setup()
            yield store, name
    elif pool_kind == "threads":
        async with backdoor.threaded_store(dsn, min_size=min_size, max_size=max_size) as store:
            yield store, name
    else:
        async with AsyncConnectionPool(
            dsn,
            min_size=min_size,
            max_size=max_size,
            timeout=20,
            kwargs={"autocommit": True},
            open=False,
        ) as pool:
            store = PostgresMemory(pool, schema=backdoor.schema)
            await store.setup()
            yield store, name


@_POOLS
async def test_next_call_succeeds_after_idle_connections_were_terminated(
    backdoor: Backdoor, pool_kind: str
) -> None:
    with anyio.fail_after(_BOUND):
        async with _labelled_store(backdoor, pool_kind) as (store, name):
            fact = await store.remember("acme", "u1", "before the restart")
            assert await backdoor.terminate(name) >= 1
            # Every connection the pool holds is dead now; none of these
            # calls may see it.
            assert await store.recall("acme", "u1") == (fact,)
            again = await store.remember("acme", "u1", "after the restart")
            async with anyio.create_task_group() as tasks:
                for _ in range(4):
                    tasks.start_soon(store.recall, "acme", "u1")
            assert await store.recall("acme", "u1") == (fact, again)


@_POOLS
async def test_a_pool_of_one_connection_recovers_too(backdoor: Backdoor, pool_kind: str) -> None:
    # The only connection is dead: there is no other to try, so the call
    # waits for the pool's replacement instead.
    with anyio.fail_after(_BOUND):
        async with _labelled_store(backdoor, pool_kind, max_size=1) as (store, name):
            fact = await store.remember("acme", "u1", "before")
            assert await backdoor.terminate(name) == 1
            await store.setup()
            assert await backdoor.terminate(name) == 1
            assert await store.recall("acme", "u1") == (fact,)


class _Locked:
    """A transaction of another connection holding the locks ``statement`` takes."""

    def __init__(self, dsn: str, statement: sql.Composed) -> None:
        self._dsn = dsn
        self._statement = statement
        self._conn: psycopg.Connection[Any] | None = None

    def acquire(self) -> None:
        self._conn = psycopg.connect(self._dsn)
        self._conn.execute(self._statement)

    def release(self) -> None:
        if self._conn is not None:
            self._conn.rollback()
            self._conn.close()
            self._conn = None


def _whole_table(table: sql.Identifier) -> sql.Composed:
    return sql.SQL("LOCK TABLE {} IN ACCESS EXCLUSIVE MODE").format(table)


async def _wait_until_blocked(backdoor: Backdoor, name: str) -> None:
    # The call is in flight once its backend waits for the lock.
    await backdoor.wait_for_backend(name, "wait_event_type = 'Lock'")


async def _killed_then_replayed(
    backdoor: Backdoor, name: str, lock: _Locked, in_flight: Callable[[], Coroutine[Any, Any, None]]
) -> None:
    # ``lock`` is held: the call blocks, its backend is terminated, and the
    # replay waits for the lock in turn; once it is free, the call completes
    # as if nothing had happened.
    try:
        async with anyio.create_task_group() as tasks:
            tasks.start_soon(in_flight)
            await _wait_until_blocked(backdoor, name)
            assert await backdoor.terminate(name) >= 1
            await _wait_until_blocked(backdoor, name)
            await anyio.to_thread.run_sync(lock.release)
    finally:
        await anyio.to_thread.run_sync(lock.release)


@_POOLS_AND_POOLER
@pytest.mark.parametrize("operation", ["forget", "erase"])
async def test_a_forget_or_small_erase_in_flight_is_not_replayed_and_says_it_may_have_happened(
    backdoor: Backdoor, pool_kind: str, through: Pooler | None, operation: str
) -> None:
    with anyio.fail_after(_BOUND):
        async with _labelled_store(backdoor, pool_kind, through=through) as (store, name):
            facts = [await store.remember("acme", "u1", f"fact {n}") for n in range(3)]
            calls: dict[str, Callable[[], Awaitable[object]]] = {
                "forget": lambda: store.forget("acme", "u1", facts[1].id),
                # Three facts: the erase is its single statement.
                "erase": lambda: store.erase("acme", "u1"),
            }
            lock = _Locked(backdoor.dsn, _whole_table(backdoor.table))
            await anyio.to_thread.run_sync(lock.acquire)
            failures: list[BaseException] = []

            async def in_flight() -> None:
                try:
                    await calls[operation]()
                except StoreUnavailableError as exc:
                    failures.append(exc)

            try:
                async with anyio.create_task_group() as tasks:
                    tasks.start_soon(in_flight)
                    await _wait_until_blocked(backdoor, name)
                    assert await backdoor.terminate(name) >= 1
            finally:
                await anyio.to_thread.run_sync(lock.release)

            (failure,) = failures
            assert isinstance(failure, port.StoreUnavailableError)
            assert failure.operation == operation
            # The DELETE was sent and its connection broke: a replay could
            # answer False or 0 for a deletion the first attempt made.
            assert failure.may_have_taken_effect is True
            assert isinstance(failure.__cause__, psycopg.OperationalError)
            # Here the statement died before it could commit: all three
            # facts are there, exactly as before.
            assert await store.recall("acme", "u1") == tuple(facts)
            assert await backdoor.count("acme", "u1") == 3


@_POOLS_AND_POOLER
@pytest.mark.parametrize("operation", ["remember", "recall"])
async def test_a_read_or_an_insert_is_replayed_on_a_fresh_connection(
    backdoor: Backdoor, pool_kind: str, through: Pooler | None, operation: str
) -> None:
    with anyio.fail_after(_BOUND):
        async with _labelled_store(backdoor, pool_kind, through=through) as (store, name):
            facts = [await store.remember("acme", "u1", f"fact {n}") for n in range(3)]
            lock = _Locked(backdoor.dsn, _whole_table(backdoor.table))
            await anyio.to_thread.run_sync(lock.acquire)
            answers: list[object] = []

            async def in_flight() -> None:
                if operation == "remember":
                    answers.append(await store.remember("acme", "u1", "exactly once"))
                else:
                    answers.append(await store.recall("acme", "u1"))

            await _killed_then_replayed(backdoor, name, lock, in_flight)

            (answer,) = answers
            if operation == "remember":
                assert isinstance(answer, Memory)
                assert await store.recall("acme", "u1") == (*facts, answer)
                assert await backdoor.count("acme", "u1") == 4
            else:
                assert answer == tuple(facts)


@_POOLS_AND_POOLER
async def test_an_erase_of_many_facts_broken_before_commit_is_replayed_on_a_fresh_connection(
    backdoor: Backdoor, pool_kind: str, through: Pooler | None
) -> None:
    facts = FEW_FACTS + 1
    with anyio.fail_after(_BOUND):
        async with _labelled_store(backdoor, pool_kind, through=through) as (store, name):
            await backdoor.load("u1", facts)
            # A lock on the key's last fact: the single statement only counts
            # (too many), and the batches then wait for it inside their
            # transaction.
            lock = _Locked(
                backdoor.dsn,
                sql.SQL(
                    "SELECT FROM {} WHERE tenant = 'acme' AND end_user_id = 'u1'"
                    " ORDER BY seq DESC LIMIT 1 FOR UPDATE"
                ).format(backdoor.table),
            )
            await anyio.to_thread.run_sync(lock.acquire)
            answers: list[int] = []

            async def in_flight() -> None:
                answers.append(await store.erase("acme", "u1"))

            await _killed_then_replayed(backdoor, name, lock, in_flight)

            # Its transaction never reached COMMIT: the server rolled it
            # back, so the replay counts every fact again.
            assert answers == [facts]
            assert await backdoor.count("acme", "u1") == 0


class _Worker:
    """One end user's calls during the storm, and what each call answered."""

    def __init__(self, store: PostgresMemory, number: int) -> None:
        self.store = store
        self.user = f"user-{number}"
        self.number = number
        self.attempted: list[str] = []
        self.stored: dict[str, str] = {}
        self.forgotten: set[str] = set()
        self.other: list[Exception] = []

    async def step(self, n: int) -> None:
        try:
            if n % 3 == 2 and self.stored:
                victim = next(iter(self.stored))
                # Deleted or not, it is whole either way: forget the outcome
                # until it answers.
                del self.stored[victim]
                if await self.store.forget("acme", self.user, victim):
                    self.forgotten.add(victim)
            else:
                content = f"w{self.number}-{n}"
                self.attempted.append(content)
                fact = await self.store.remember("acme", self.user, content)
                self.stored[fact.id] = content
                await self.store.recall("acme", self.user, limit=5)
        except StoreUnavailableError:
            pass
        except Exception as exc:  # noqa: BLE001 - any other error is the failure
            self.other.append(exc)

    async def check(self) -> None:
        assert self.other == []
        recalled = await self.store.recall("acme", self.user)
        contents = [m.content for m in recalled]
        # Only whole facts that were asked for, none twice, in order.
        assert len(contents) == len(set(contents))
        assert set(contents) <= set(self.attempted)
        assert contents == sorted(contents, key=lambda c: int(c.rsplit("-", 1)[1]))
        ids = {m.id for m in recalled}
        assert set(self.stored) <= ids
        assert not ids & self.forgotten


@_POOLS_AND_POOLER
async def test_terminations_during_concurrent_operations(
    backdoor: Backdoor, pool_kind: str, through: Pooler | None
) -> None:
    workers, rounds, per_worker = 8, 5, 40
    thresholds = [anyio.Event() for _ in range(rounds)]
    every = workers * per_worker // (rounds + 1)
    done = [0]
    killed: list[int] = []

    async def run(worker: _Worker) -> None:
        for n in range(per_worker):
            await worker.step(n)
            done[0] += 1
            # Terminations are paced by progress, not by a clock.
            for index, event in enumerate(thresholds):
                if done[0] >= every * (index + 1):
                    event.set()

    async def terminator(name: str) -> None:
        for event in thresholds:
            await event.wait()
            killed.append(await backdoor.terminate(name))

    labelled = _labelled_store(backdoor, pool_kind, max_size=8, through=through)
    with anyio.fail_after(_BOUND):
        async with labelled as (store, name):
            team = [_Worker(store, number) for number in range(workers)]
            async with anyio.create_task_group() as tasks:
                tasks.start_soon(terminator, name)
                for worker in team:
                    tasks.start_soon(run, worker)
            assert sum(killed) >= rounds
            for worker in team:
                await worker.check()
            # And the store works normally afterwards.
            fact = await store.remember("acme", "after", "all is well")
            assert await store.recall("acme", "after") == (fact,)


async def test_an_unreachable_server_fails_clearly() -> None:
    # Nothing listens on port 1 of the loopback interface.
    with anyio.fail_after(_BOUND), pytest.raises(StoreUnavailableError, match="connect"):
        async with PostgresMemory.connect(
            "postgresql://postgres@127.0.0.1:1/test?connect_timeout=2", pool_timeout=1
        ):
            pytest.fail("the store opened without a server")


@_POOLS_AND_POOLER
async def test_terminations_cost_no_remember_or_recall_and_duplicate_nothing(
    backdoor: Backdoor, pool_kind: str, through: Pooler | None
) -> None:
    # The target of honest replays: while the server is up, terminating the
    # store's backends again and again fails none of these calls.
    workers, per_worker, rounds = 16, 40, 8
    every = workers * per_worker // (rounds + 1)
    thresholds = [anyio.Event() for _ in range(rounds)]
    done = [0]
    killed: list[int] = []
    stored: dict[str, list[Memory]] = {}

    async def run(user: str) -> None:
        for n in range(per_worker):
            fact = await store.remember("acme", user, f"{user}-{n}")
            stored.setdefault(user, []).append(fact)
            recalled = await store.recall("acme", user, limit=3)
            assert recalled == tuple(stored[user][:3])
            done[0] += 1
            for index, event in enumerate(thresholds):
                if done[0] >= every * (index + 1):
                    event.set()

    async def terminator(name: str) -> None:
        for event in thresholds:
            await event.wait()
            killed.append(await backdoor.terminate(name))

    labelled = _labelled_store(backdoor, pool_kind, max_size=8, through=through)
    with anyio.fail_after(_BOUND):
        async with labelled as (store, name):
            async with anyio.create_task_group() as tasks:
                tasks.start_soon(terminator, name)
                for number in range(workers):
                    tasks.start_soon(run, f"user-{number}")
            assert len(killed) == rounds
            assert sum(killed) >= rounds
            for user, facts in stored.items():
                # Every fact exactly once, in order: none lost, none doubled.
                assert await store.recall("acme", user) == tuple(facts)
                assert await backdoor.count("acme", user) == per_worker


async def test_a_call_the_pool_gave_no_connection_in_time_is_replayed_on_one_of_its_own(
    postgres_dsn: str, schema: str
) -> None:
    # The pool's one connection is held past the pool's wait bound: the
    # call waited, sent nothing, and is replayed rather than failed.
    reasons: list[object] = []
    with anyio.fail_after(_BOUND):
        async with PostgresMemory.connect(
            postgres_dsn, schema=schema, min_size=1, max_size=1, pool_timeout=0.5
        ) as store:
            await store.setup()
            pool = store.pool
            token = port.store_events.set(
                lambda _name, attributes: reasons.append(attributes["psych_memory.reason"])
            )
            try:
                if isinstance(pool, AsyncConnectionPool):
                    async with pool.connection():
                        fact = await store.remember("acme", "u1", "waited")
                else:
                    held = await anyio.to_thread.run_sync(pool.getconn)
                    try:
                        fact = await store.remember("acme", "u1", "waited")
                    finally:
                        await anyio.to_thread.run_sync(pool.putconn, held)
            finally:
                port.store_events.reset(token)
            assert await store.recall("acme", "u1") == (fact,)
    assert reasons == ["no connection"]
