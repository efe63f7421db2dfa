"""Cancellation: a cancelled call's effect is decided before the caller sees it.

The defect these tests were written for: on psycopg's asynchronous pool a
``remember`` cancelled mid-statement was committed by the server after a
later ``erase`` of the same end user had returned, so a fact outlived its
erasure. Each test cancels calls the way applications do (short timeouts,
fixed and random, anyio scopes and plain asyncio ones, a task group torn
down under many writers), erases after each, and then looks at the table
itself: no fact may exist once the erase returned.
"""

from __future__ import annotations

import asyncio
import random
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import TYPE_CHECKING

import anyio
import pytest
from psycopg import sql
from psycopg_pool import AsyncConnectionPool

from psych_runtime.memory.postgres import PostgresMemory

if TYPE_CHECKING:
    from conftest import Backdoor

_BOUND = 120
_USERS = 120

# Both pool kinds, on every event loop they run on. The module mixes runners,
# so each test names its own: anyio for these, pytest-asyncio for what only
# asyncio can run.
_POOLS = pytest.mark.parametrize(
    ("anyio_backend", "pool_kind"),
    [("asyncio", "threads"), ("trio", "threads"), ("asyncio", "async")],
)


@asynccontextmanager
async def _store(
    postgres_dsn: str, schema: str, pool_kind: str, backdoor: Backdoor
) -> AsyncIterator[PostgresMemory]:
    if pool_kind == "threads":
        async with backdoor.threaded_store(postgres_dsn) as store:
            yield store
    else:
        async with AsyncConnectionPool(
            postgres_dsn, max_size=8, kwargs={"autocommit": True}, open=False
        ) as pool:
            store = PostgresMemory(pool, schema=schema)
            await store.setup()
            yield store


async def _left_in_tenant(backdoor: Backdoor, tenant: str) -> int:
    rows = await backdoor.query(
        sql.SQL("SELECT count(*) FROM {} WHERE tenant = %s").format(backdoor.table), (tenant,)
    )
    return int(rows[0][0])


@pytest.mark.anyio
@_POOLS
async def test_short_timeouts_then_erase_leave_no_fact(
    postgres_dsn: str, schema: str, backdoor: Backdoor, pool_kind: str
) -> None:
    chance = random.Random(20261203)
    timeouts = [0.0, 0.0003, 0.001] + [chance.uniform(0.0, 0.004) for _ in range(3)]
    with anyio.fail_after(_BOUND):
        async with _store(postgres_dsn, schema, pool_kind, backdoor) as store:
            for number in range(_USERS):
                user = f"user-{number}"
                for timeout in timeouts:
                    with anyio.move_on_after(timeout):
                        await store.remember("acme", user, "cancelled, perhaps")
                    await store.erase("acme", user)
                    # Once erase returned, nothing of this user may remain
                    # or appear later (the final count looks again).
                    assert await store.recall("acme", user) == ()
            assert await _left_in_tenant(backdoor, "acme") == 0


@pytest.mark.asyncio
@pytest.mark.parametrize("pool_kind", ["threads", "async"])
async def test_plain_asyncio_timeouts_then_erase_leave_no_fact(
    postgres_dsn: str, schema: str, backdoor: Backdoor, pool_kind: str
) -> None:
    # asyncio.timeout cancels the task itself, past any anyio cancel scope.
    chance = random.Random(7)
    with anyio.fail_after(_BOUND):
        async with _store(postgres_dsn, schema, pool_kind, backdoor) as store:
            for number in range(_USERS):
                user = f"user-{number}"
                for timeout in (0.0, 0.0003, chance.uniform(0.0, 0.004)):
                    try:
                        async with asyncio.timeout(timeout):
                            await store.remember("acme", user, "cancelled, perhaps")
                    except TimeoutError:
                        pass
                    await store.erase("acme", user)
            assert await _left_in_tenant(backdoor, "acme") == 0


class _Writers:
    """Writers remembering facts until they are cancelled."""

    def __init__(self, store: PostgresMemory, tenant: str, writers: int) -> None:
        self.store = store
        self.tenant = tenant
        self.writers = writers
        self.written = 0
        self.in_flow = anyio.Event()

    async def write(self, user: str) -> None:
        while True:
            await self.store.remember(self.tenant, user, "written until cancelled")
            self.written += 1
            if self.written >= self.writers:
                self.in_flow.set()


@pytest.mark.anyio
@_POOLS
async def test_a_task_group_torn_down_under_many_writers_then_erase_leaves_no_fact(
    postgres_dsn: str, schema: str, backdoor: Backdoor, pool_kind: str
) -> None:
    writers, rounds = 32, 12
    with anyio.fail_after(_BOUND):
        async with _store(postgres_dsn, schema, pool_kind, backdoor) as store:
            for round_number in range(rounds):
                tenant = f"round-{round_number}"
                writing = _Writers(store, tenant, writers)
                async with anyio.create_task_group() as tasks:
                    for number in range(writers):
                        tasks.start_soon(writing.write, f"user-{number}")
                    # Cancelled once the writers are in full flow, so many
                    # of them are mid-statement at that moment.
                    await writing.in_flow.wait()
                    tasks.cancel_scope.cancel()
                for number in range(writers):
                    await store.erase(tenant, f"user-{number}")
                assert await _left_in_tenant(backdoor, tenant) == 0


@pytest.mark.anyio
@_POOLS
async def test_cancelled_reads_leave_the_store_working(
    postgres_dsn: str, schema: str, backdoor: Backdoor, pool_kind: str
) -> None:
    # A read has no effect to decide, so it may be interrupted anywhere; the
    # connections it held must still come back, or be replaced, every time.
    chance = random.Random(11)
    with anyio.fail_after(_BOUND):
        async with _store(postgres_dsn, schema, pool_kind, backdoor) as store:
            fact = await store.remember("acme", "u1", "read again and again")
            for _ in range(200):
                with anyio.move_on_after(chance.uniform(0.0, 0.003)):
                    await store.recall("acme", "u1")
            async with anyio.create_task_group() as tasks:
                for _ in range(16):
                    tasks.start_soon(store.recall, "acme", "u1")
            assert await store.recall("acme", "u1") == (fact,)
