"""Reading one end user's facts a page at a time (`PagesFacts`), as this adapter keeps them.

The conformance kit's rule 13 (``test_conformance.py``) proves the pages of
both spellings in general: a page after any fact, the largest size, the key
checked, stale and invalid arguments. These tests go where the adapter's own
layout changes: either side of the size at which a key links its facts.
"""

from __future__ import annotations

from datetime import UTC, datetime

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from psych_runtime.memory.inproc import InProcessMemory
from psych_runtime.memory.inproc._facts import LINKED_ABOVE
from psych_runtime.memory.port import (
    MAX_PAGE_SIZE,
    InvalidInputError,
    Memory,
    MemoryKey,
    PagesFacts,
    StalePageError,
    StoreClosedError,
)
from psych_runtime.memory.store_backed import StoreBackedMemory

pytestmark = pytest.mark.anyio

WHEN = datetime(2024, 5, 17, 8, 30, 0, 123456, tzinfo=UTC)


@pytest.fixture
def memory() -> InProcessMemory:
    return InProcessMemory()


async def pages(memory: InProcessMemory, size: int, user: str = "u1") -> list[tuple[Memory, ...]]:
    """Every page of the key, each read after the last fact of the one before."""
    read = [await memory.recall_page("acme", user, size=size)]
    while len(read[-1]) == size:
        read.append(await memory.recall_page("acme", user, after=read[-1][-1].id, size=size))
    return read


def test_both_spellings_page_facts() -> None:
    assert isinstance(InProcessMemory(), PagesFacts)
    assert isinstance(StoreBackedMemory(object()), PagesFacts)


@pytest.mark.parametrize("held", [0, 1, 5, LINKED_ABOVE, LINKED_ABOVE + 1, 3 * LINKED_ABOVE + 7])
@pytest.mark.parametrize("size", [1, 2, 7, LINKED_ABOVE, 1000])
async def test_pages_of_every_size_are_recall_cut_in_pieces(
    memory: InProcessMemory, held: int, size: int
) -> None:
    # Either side of the size at which a key starts linking its facts.
    for number in range(held):
        await memory.remember("acme", "u1", f"fact {number}")
    await memory.remember("acme", "u2", "another key's fact")
    read = await pages(memory, size)
    assert all(len(page) == size for page in read[:-1])
    assert len(read[-1]) < size
    assert tuple(fact for page in read for fact in page) == await memory.recall("acme", "u1")


operations = st.lists(
    st.tuples(st.sampled_from(["remember", "restore", "forget"]), st.integers(0, 10**6)),
    max_size=3 * LINKED_ABOVE,
)


@settings(suppress_health_check=[HealthCheck.function_scoped_fixture], max_examples=60)
@given(steps=operations, size=st.integers(1, LINKED_ABOVE + 3))
async def test_pages_follow_recall_through_remembers_restores_and_forgets(
    anyio_backend: str, steps: list[tuple[str, int]], size: int
) -> None:
    # Forgets unlink facts anywhere: first, last, the only one, inside.
    memory = InProcessMemory()
    for number, (operation, choice) in enumerate(steps):
        held = await memory.recall("acme", "u1")
        if operation == "forget" and held:
            assert await memory.forget("acme", "u1", held[choice % len(held)].id)
        elif operation == "restore":
            await memory.restore(Memory(f"r{number}", MemoryKey("acme", "u1"), "restored", WHEN))
        else:
            await memory.remember("acme", "u1", f"fact {number}")
        read = await pages(memory, size)
        assert tuple(fact for page in read for fact in page) == await memory.recall("acme", "u1")


@pytest.mark.parametrize("held", [3, 2 * LINKED_ABOVE])
async def test_an_after_the_key_does_not_hold_is_stale(memory: InProcessMemory, held: int) -> None:
    facts = [await memory.remember("acme", "u1", f"fact {n}") for n in range(held)]
    other = await memory.remember("acme", "u2", "another key's fact")
    elsewhere = await memory.remember("globex", "u1", "another tenant's fact")
    await memory.forget("acme", "u1", facts[1].id)
    erased = await memory.remember("acme", "u3", "erased")
    await memory.erase("acme", "u3")
    stale = [facts[1].id, other.id, elsewhere.id, erased.id, "", "garbage", "x" * 10_000]
    for after in stale:
        with pytest.raises(StalePageError) as raised:
            await memory.recall_page("acme", "u1", after=after, size=5)
        assert raised.value.argument == "after"
        assert after not in str(raised.value) or not after
        # A key without facts holds no id at all.
        with pytest.raises(StalePageError):
            await memory.recall_page("acme", "nobody", after=after, size=5)
    assert await memory.recall_page("acme", "nobody", size=5) == ()
    assert await memory.recall("acme", "u1") == (facts[0], *facts[2:])


@pytest.mark.parametrize(
    ("after", "size", "error", "argument"),
    [
        (None, 0, InvalidInputError, "size"),
        (None, MAX_PAGE_SIZE + 1, InvalidInputError, "size"),
        (None, -1, InvalidInputError, "size"),
        (None, True, TypeError, "size"),
        (None, 2.0, TypeError, "size"),
        (None, "2", TypeError, "size"),
        (b"id", 2, TypeError, "after"),
        (7, 2, TypeError, "after"),
    ],
)
async def test_invalid_arguments_are_refused_and_change_nothing(
    memory: InProcessMemory, after: object, size: object, error: type[Exception], argument: str
) -> None:
    fact = await memory.remember("acme", "u1", "fact")
    with pytest.raises(error, match=argument):
        await memory.recall_page("acme", "u1", after=after, size=size)  # type: ignore[arg-type]
    assert await memory.recall("acme", "u1") == (fact,)


async def test_a_closed_store_refuses_pages(memory: InProcessMemory) -> None:
    await memory.remember("acme", "u1", "fact")
    await memory.aclose()
    with pytest.raises(StoreClosedError, match="recall_page"):
        await memory.recall_page("acme", "u1", size=5)
