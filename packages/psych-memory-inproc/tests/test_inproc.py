"""InProcessMemory: the four operations, the key boundary and bad input."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC

import pytest

from psych_runtime.memory.inproc import InProcessMemory
from psych_runtime.memory.port import (
    InvalidContentError,
    InvalidKeyError,
    InvalidLimitError,
    MemoryKey,
    MemoryStore,
)

pytestmark = pytest.mark.anyio


@dataclass(frozen=True)
class RuntimeScope:
    tenant: str


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


async def test_remember_always_adds(memory: InProcessMemory) -> None:
    first = await memory.remember("acme", "u1", "likes tea")
    second = await memory.remember("acme", "u1", "likes tea")
    assert first.id != second.id
    assert await memory.recall("acme", "u1") == (first, second)


async def test_recall_is_oldest_first_and_limit_keeps_the_oldest(memory: InProcessMemory) -> None:
    facts = [await memory.remember("acme", "u1", f"fact {i}") for i in range(5)]
    assert await memory.recall("acme", "u1") == tuple(facts)
    assert await memory.recall("acme", "u1", limit=None) == tuple(facts)
    assert await memory.recall("acme", "u1", limit=2) == tuple(facts[:2])
    assert await memory.recall("acme", "u1", limit=0) == ()
    assert await memory.recall("acme", "u1", limit=99) == tuple(facts)
    assert await memory.recall("acme", "nobody", limit=3) == ()


async def test_forget_deletes_once(memory: InProcessMemory) -> None:
    keep = await memory.remember("acme", "u1", "keep")
    drop = await memory.remember("acme", "u1", "drop")
    assert await memory.forget("acme", "u1", drop.id) is True
    assert await memory.forget("acme", "u1", drop.id) is False
    assert await memory.forget("acme", "u1", "no such id") is False
    assert await memory.recall("acme", "u1") == (keep,)


async def test_forget_refuses_another_keys_fact(memory: InProcessMemory) -> None:
    fact = await memory.remember("acme", "u1", "mine")
    assert await memory.forget("acme", "u2", fact.id) is False
    assert await memory.forget("other", "u1", fact.id) is False
    assert await memory.recall("acme", "u1") == (fact,)


async def test_erase_counts_and_is_complete(memory: InProcessMemory) -> None:
    facts = [await memory.remember("acme", "u1", f"fact {i}") for i in range(3)]
    other = await memory.remember("acme", "u2", "someone else")
    assert await memory.erase("acme", "u1") == 3
    assert await memory.recall("acme", "u1") == ()
    for fact in facts:
        assert await memory.forget("acme", "u1", fact.id) is False
    assert await memory.erase("acme", "u1") == 0
    assert await memory.recall("acme", "u2") == (other,)


async def test_emptied_keys_leave_no_trace(memory: InProcessMemory) -> None:
    fact = await memory.remember("acme", "u1", "fact")
    await memory.forget("acme", "u1", fact.id)
    await memory.remember("acme", "u2", "fact")
    await memory.erase("acme", "u2")
    assert memory._facts == {}


async def test_scope_object_and_string_address_the_same_key(memory: InProcessMemory) -> None:
    fact = await memory.remember(RuntimeScope("acme"), "u1", "fact")
    assert await memory.recall("acme", "u1") == (fact,)
    assert await memory.forget(RuntimeScope("acme"), "u1", fact.id) is True


async def test_keys_are_exact(memory: InProcessMemory) -> None:
    await memory.remember("acme", "u1", "fact")
    assert await memory.recall("Acme", "u1") == ()
    assert await memory.recall("acme", "U1") == ()
    assert await memory.recall("u1", "acme") == ()


async def _snapshot(memory: InProcessMemory) -> dict[MemoryKey, tuple[object, ...]]:
    return {key: tuple(facts.values()) for key, facts in memory._facts.items()}


@pytest.mark.parametrize(
    ("call", "error"),
    [
        (lambda m: m.remember("acme", "u1", ""), InvalidContentError),
        (lambda m: m.remember("acme", "u1", "x" * 4097), InvalidContentError),
        (lambda m: m.remember("acme", "u1", 42), TypeError),
        (lambda m: m.remember("", "u1", "fact"), InvalidKeyError),
        (lambda m: m.remember("acme", " u1", "fact"), InvalidKeyError),
        (lambda m: m.remember(None, "u1", "fact"), TypeError),
        (lambda m: m.forget("acme", "u1", None), TypeError),
        (lambda m: m.forget("acme", "", "id"), InvalidKeyError),
        (lambda m: m.recall("acme", "u1", limit=-1), InvalidLimitError),
        (lambda m: m.recall("acme", "u1", limit=True), TypeError),
        (lambda m: m.erase("acme", "u1\n"), InvalidKeyError),
        (lambda m: m.erase("acme", 1), TypeError),
    ],
)
async def test_invalid_input_raises_and_changes_nothing(
    memory: InProcessMemory, call: object, error: type[Exception]
) -> None:
    await memory.remember("acme", "u1", "existing")
    before = await _snapshot(memory)
    with pytest.raises(error):
        await call(memory)  # type: ignore[operator]
    assert await _snapshot(memory) == before
