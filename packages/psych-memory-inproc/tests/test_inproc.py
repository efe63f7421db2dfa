"""What the in-process adapter adds to the contract (the kit checks the rest)."""

from __future__ import annotations

from datetime import UTC

import pytest

from psych_runtime.memory.inproc import InProcessMemory
from psych_runtime.memory.port import (
    MemoryKey,
    MemoryStore,
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
