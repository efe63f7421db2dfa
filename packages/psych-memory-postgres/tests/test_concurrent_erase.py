"""Two erasures of one large end user at once: one counts every fact, the other none.

An end user of more facts than one statement deletes is erased in batches
within one transaction; a second erasure of the key waits on its rows and
then finds them gone. In one store shared by two tasks and in two stores.
The two processes of the installed command are in the admin's tests.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import anyio
import pytest

from psych_runtime.memory.port import Memory, MemoryKey, new_memory_id
from psych_runtime.memory.postgres import PostgresMemory
from psych_runtime.memory.postgres._conversations import FEW_FACTS

pytestmark = pytest.mark.anyio

FACTS = 3 * FEW_FACTS  # erased in batches, not by the one statement
ROUNDS = 3


def facts_of(end_user: str) -> list[Memory]:
    key = MemoryKey("acme", end_user)
    start = datetime(2026, 1, 1, tzinfo=UTC)
    return [
        Memory(new_memory_id(), key, f"fact {n}", start + timedelta(seconds=n))
        for n in range(FACTS)
    ]


@pytest.mark.parametrize("shared", [True, False], ids=["one-store", "two-stores"])
async def test_two_erasures_of_one_end_user_at_once_count_it_once(
    store: PostgresMemory, postgres_dsn: str, schema: str, shared: bool
) -> None:
    async with PostgresMemory.connect(postgres_dsn, schema=schema, max_size=4) as other:
        second = store if shared else other
        for _ in range(ROUNDS):
            assert await store.restore_many(facts_of("victim")) == FACTS
            counts: list[int] = []

            async def erase(memory: PostgresMemory, counts: list[int] = counts) -> None:
                counts.append(await memory.erase("acme", "victim"))

            async with anyio.create_task_group() as group:
                group.start_soon(erase, store)
                group.start_soon(erase, second)
            assert sorted(counts) == [0, FACTS]
            assert await store.recall("acme", "victim") == ()
