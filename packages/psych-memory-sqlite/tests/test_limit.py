"""remember_within_limit: one write transaction, whatever shares the file."""

from __future__ import annotations

import random
from collections.abc import Callable
from pathlib import Path

import anyio
import pytest

from psych_runtime.memory.port import InvalidContentError, InvalidKeyError, StoreClosedError
from psych_runtime.memory.sqlite import SqliteMemory

Stored = Callable[[Path, str], int]

LIMIT = 5
CALLS = 10


@pytest.mark.anyio
async def test_two_stores_on_one_file_never_pass_the_limit(db_path: Path, stored: Stored) -> None:
    async with SqliteMemory(db_path) as first, SqliteMemory(db_path) as second:
        await first.remember("acme", "user-1", "remembered plainly")
        answers = []

        async def add(store: SqliteMemory, call: int) -> None:
            answers.append(
                await store.remember_within_limit("acme", "user-1", f"call {call}", max_facts=LIMIT)
            )

        async with anyio.create_task_group() as group:
            for call in range(2 * CALLS):
                group.start_soon(add, (first, second)[call % 2], call)
    assert stored(db_path, "user-1") == LIMIT
    assert len([answer for answer in answers if answer is not None]) == LIMIT - 1


@pytest.mark.anyio
async def test_a_closed_store_refuses_after_checking_the_input(db_path: Path) -> None:
    memory = SqliteMemory(db_path)
    with pytest.raises(StoreClosedError) as caught:
        await memory.remember_within_limit("acme", "user-1", "a fact", max_facts=1)
    assert (caught.value.operation, caught.value.state) == ("remember_within_limit", "not open")
    async with memory:
        pass
    with pytest.raises(StoreClosedError) as caught:
        await memory.remember_within_limit("acme", "user-1", "a fact", max_facts=1)
    assert (caught.value.operation, caught.value.state) == ("remember_within_limit", "closed")
    # Input is checked first, as remember checks it, then max_facts.
    with pytest.raises(InvalidKeyError):
        await memory.remember_within_limit("acme", " ", "\x00", max_facts=-1)
    with pytest.raises(InvalidContentError):
        await memory.remember_within_limit("acme", "user-1", "\x00", max_facts=-1)
    with pytest.raises(TypeError, match="max_facts"):
        await memory.remember_within_limit("acme", "user-1", "a fact", max_facts=True)


@pytest.mark.anyio
async def test_a_cancelled_call_is_decided_and_never_passes_the_limit(
    memory: SqliteMemory, db_path: Path, stored: Stored
) -> None:
    rng = random.Random("cancelled-within-limit")
    cancelled = 0
    for index in range(100):
        end_user = f"user-{index}"
        with anyio.move_on_after(rng.choice([0, 1e-6, 1e-4, 3e-4, 1e-3])) as scope:
            for _ in range(2 * LIMIT):
                await memory.remember_within_limit("acme", end_user, "a fact", max_facts=LIMIT)
        cancelled += scope.cancelled_caught
        assert stored(db_path, end_user) <= LIMIT
        # Every cancelled call has finished: nothing lands after the erase.
        await memory.erase("acme", end_user)
        assert stored(db_path, end_user) == 0, end_user
        assert await memory.recall("acme", end_user) == ()
    assert cancelled > 50
