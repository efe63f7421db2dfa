"""A cancelled call's effect is decided before the cancellation reaches the caller."""

from __future__ import annotations

import random
import sqlite3
from collections.abc import Callable
from pathlib import Path

import anyio
import anyio.lowlevel
import anyio.to_thread
import pytest

from psych_runtime.memory.sqlite import DatabaseUnavailableError, SqliteMemory

Stored = Callable[[Path, str], int]

pytestmark = pytest.mark.anyio

END_USERS = 100


async def test_no_fact_survives_an_erase_after_a_cancelled_remember(
    memory: SqliteMemory, db_path: Path, stored: Stored
) -> None:
    rng = random.Random("cancelled-remember")
    cancelled = 0
    for index in range(END_USERS):
        end_user = f"user-{index}"
        # Timeouts from "already expired" to about one call's duration.
        with anyio.move_on_after(rng.choice([0, 1e-6, 1e-4, 3e-4, 1e-3])) as scope:
            for _ in range(3):
                await memory.remember("acme", end_user, "a fact about to be erased")
        cancelled += scope.cancelled_caught
        await memory.erase("acme", end_user)
        assert stored(db_path, end_user) == 0, end_user
        assert await memory.recall("acme", end_user) == ()
    # The timeouts did interrupt calls: otherwise this test would prove nothing.
    assert cancelled > END_USERS // 2


async def test_no_fact_survives_an_erase_after_a_cancelled_task_group(
    memory: SqliteMemory, db_path: Path, stored: Stored
) -> None:
    for round_ in range(10):
        end_user = f"group-{round_}"
        async with anyio.create_task_group() as group:

            async def write(index: int, end_user: str = end_user) -> None:
                while True:
                    await memory.remember("acme", end_user, f"fact {index}")

            for index in range(20):
                group.start_soon(write, index)
            # Let the writers store a few facts, then cancel them mid-flight.
            while stored(db_path, end_user) < 20:
                await anyio.lowlevel.checkpoint()
            group.cancel_scope.cancel()
        # Every cancelled call has finished: nothing lands after the erase.
        await memory.erase("acme", end_user)
        assert stored(db_path, end_user) == 0
        await memory.remember("acme", "marker", "a later write")
        assert stored(db_path, end_user) == 0


async def test_a_timeout_cannot_cut_a_call_short_but_the_busy_timeout_bounds_it(
    db_path: Path, stored: Stored
) -> None:
    async with SqliteMemory(db_path, busy_timeout=0.2) as memory:
        holder = sqlite3.connect(db_path, isolation_level=None, check_same_thread=False)
        try:
            holder.execute("BEGIN IMMEDIATE")
            # The caller's scope expires while the call waits inside SQLite;
            # the call still ends with the store's own verdict.
            with anyio.move_on_after(0.01), pytest.raises(DatabaseUnavailableError) as caught:
                await memory.remember("acme", "user-1", "waits for the lock")
            assert caught.value.may_have_taken_effect is False
        finally:
            holder.execute("ROLLBACK")
            holder.close()
        assert stored(db_path, "user-1") == 0
