"""What the in-process adapter adds to the contract (the kit checks the rest)."""

from __future__ import annotations

from datetime import UTC

import pytest

from psych_runtime.memory.inproc import InProcessMemory
from psych_runtime.memory.port import (
    MemoryKey,
    MemoryStore,
    StoreClosedError,
)

pytestmark = pytest.mark.anyio


@pytest.fixture
def memory() -> InProcessMemory:
    return InProcessMemory()


def test_is_a_memory_store() -> None:
    assert isinstance(InProcessMemory(), MemoryStore)


async def test_remember_returns_the_stored_fact(memory: InProcessMemory) -> None:
    fact = await memory.remember("acme", "u1", "  likes tea\n")
    assert fact.key == MemoryKey("acme", "u1")
    assert fact.content == "  likes tea\n"
    assert fact.created_at.tzinfo is UTC
    assert await memory.recall("acme", "u1") == (fact,)


async def test_emptied_keys_leave_no_trace(memory: InProcessMemory) -> None:
    fact = await memory.remember("acme", "u1", "fact")
    await memory.forget("acme", "u1", fact.id)
    await memory.remember("acme", "u2", "fact")
    await memory.erase("acme", "u2")
    assert memory._facts == {}


async def test_closing_drops_every_fact_and_refuses_later_calls() -> None:
    async with InProcessMemory() as memory:
        fact = await memory.remember("acme", "u1", "fact")
    assert memory._facts == {}
    await memory.aclose()  # closing twice is harmless
    calls = [
        memory.remember("acme", "u1", "fact"),
        memory.forget("acme", "u1", fact.id),
        memory.recall("acme", "u1"),
        memory.erase("acme", "u1"),
    ]
    for call, name in zip(calls, ["remember", "forget", "recall", "erase"], strict=True):
        with pytest.raises(StoreClosedError) as caught:
            await call
        assert caught.value.operation == name
