"""Reading one end user's facts a page at a time, and times kept exactly at the range's ends.

The conformance kit's rule 13 (``test_conformance.py``) proves pages joining
into recall, around forgotten facts and other keys' facts; these tests keep
what is this adapter's own: full pages of the largest size, a store not open,
and the times as the file stores them.
"""

from __future__ import annotations

import sqlite3
from contextlib import closing
from datetime import UTC, datetime, timedelta, timezone
from pathlib import Path

import pytest

from psych_runtime.memory.port import (
    MAX_CREATED_AT,
    MAX_PAGE_SIZE,
    MIN_CREATED_AT,
    InvalidInputError,
    InvalidKeyError,
    Memory,
    MemoryKey,
    PagesFacts,
    StalePageError,
    StoreClosedError,
)
from psych_runtime.memory.sqlite import SqliteMemory

pytestmark = pytest.mark.anyio

SECRET_ID = "secret-after-5e5e"  # noqa: S105 - an id, not a password


async def every_page(memory: SqliteMemory, end_user: str, size: int) -> list[tuple[Memory, ...]]:
    pages = [await memory.recall_page("acme", end_user, size=size)]
    while len(pages[-1]) == size:
        pages.append(await memory.recall_page("acme", end_user, after=pages[-1][-1].id, size=size))
    return pages


def test_the_store_provides_pages(db_path: Path) -> None:
    assert isinstance(SqliteMemory(db_path), PagesFacts)


async def test_a_page_after_the_last_fact_is_empty_and_later_facts_follow(
    memory: SqliteMemory,
) -> None:
    first = await memory.remember("acme", "user-1", "first")
    assert await memory.recall_page("acme", "user-1", size=5) == (first,)
    assert await memory.recall_page("acme", "user-1", after=first.id, size=5) == ()
    # Pages are not a snapshot: a fact remembered since appears after.
    second = await memory.remember("acme", "user-1", "second")
    assert await memory.recall_page("acme", "user-1", after=first.id, size=5) == (second,)
    assert await memory.recall_page("acme", "nobody", size=MAX_PAGE_SIZE) == ()


async def test_a_page_holds_up_to_the_largest_size(memory: SqliteMemory, db_path: Path) -> None:
    facts = [
        Memory(f"id-{i:05d}", MemoryKey("acme", "user-1"), f"fact {i}", datetime.now(UTC))
        for i in range(MAX_PAGE_SIZE + 5)
    ]
    assert await memory.restore_many(facts) == len(facts)
    page = await memory.recall_page("acme", "user-1", size=MAX_PAGE_SIZE)
    assert page == tuple(facts[:MAX_PAGE_SIZE])
    rest = await memory.recall_page("acme", "user-1", after=page[-1].id, size=MAX_PAGE_SIZE)
    assert rest == tuple(facts[MAX_PAGE_SIZE:])


async def test_after_a_fact_the_key_does_not_hold_is_stale(memory: SqliteMemory) -> None:
    mine = await memory.remember("acme", "user-1", "mine")
    kept = await memory.remember("acme", "user-1", "kept")
    theirs = await memory.remember("acme", "user-2", "another end user's")
    tenants = await memory.remember("beta", "user-1", "another tenant's")
    assert await memory.forget("acme", "user-1", mine.id)
    for after in (mine.id, theirs.id, tenants.id, SECRET_ID, "", "not an id at all"):
        with pytest.raises(StalePageError) as caught:
            await memory.recall_page("acme", "user-1", after=after, size=10)
        assert caught.value.argument == "after"
        assert isinstance(caught.value, InvalidInputError)
        assert SECRET_ID not in str(caught.value)
    assert await memory.recall_page("acme", "user-1", after=kept.id, size=10) == ()
    assert await memory.erase("acme", "user-1") == 1
    with pytest.raises(StalePageError):
        await memory.recall_page("acme", "user-1", after=kept.id, size=10)


@pytest.mark.parametrize(
    ("after", "size", "error", "argument"),
    [
        (None, 0, InvalidInputError, "size"),
        (None, MAX_PAGE_SIZE + 1, InvalidInputError, "size"),
        (None, -1, InvalidInputError, "size"),
        (None, True, TypeError, "size"),
        (None, "10", TypeError, "size"),
        (None, 2.0, TypeError, "size"),
        (5, 10, TypeError, "after"),
        (b"id", 10, TypeError, "after"),
    ],
)
async def test_bad_page_arguments_are_refused_clearly(
    memory: SqliteMemory, after: object, size: object, error: type[Exception], argument: str
) -> None:
    with pytest.raises(error, match=argument):
        await memory.recall_page("acme", "user-1", after=after, size=size)  # type: ignore[arg-type]


async def test_a_bad_key_is_refused_before_the_page_arguments(memory: SqliteMemory) -> None:
    with pytest.raises(InvalidKeyError, match="end_user_id"):
        await memory.recall_page("acme", " user", size=0)
    with pytest.raises(TypeError, match="scope"):
        await memory.recall_page(42, "user-1", size=1)  # type: ignore[arg-type]


async def test_pages_of_a_store_not_open_or_closed_are_refused(db_path: Path) -> None:
    memory = SqliteMemory(db_path)
    with pytest.raises(StoreClosedError) as caught:
        await memory.recall_page("acme", "user-1", size=1)
    assert caught.value.state == "not open"
    async with memory:
        pass
    with pytest.raises(StoreClosedError) as caught:
        await memory.recall_page("acme", "user-1", size=1)
    assert caught.value.state == "closed"


# Issue: times at the ends of the port's range, and odd microseconds between.
EDGE_TIMES = (
    MIN_CREATED_AT,
    MAX_CREATED_AT,
    datetime(1600, 1, 1, 0, 0, 0, 123457, tzinfo=UTC),
    datetime(2300, 1, 1, 0, 0, 0, 1, tzinfo=UTC),
)


async def read_back(path: Path) -> tuple[tuple[Memory, ...], tuple[Memory, ...]]:
    async with SqliteMemory(path) as memory:
        return (
            await memory.recall("acme", "dated"),
            await memory.recall_page("acme", "dated", size=MAX_PAGE_SIZE),
        )


async def test_times_at_the_ends_of_the_range_read_back_exactly(db_path: Path) -> None:
    facts = tuple(
        Memory(f"dated-{i}", MemoryKey("acme", "dated"), f"dated fact {i}", when)
        for i, when in enumerate(EDGE_TIMES)
    )
    async with SqliteMemory(db_path) as memory:
        assert await memory.restore_many(facts[:2]) == 2
        for item in facts[2:]:
            assert await memory.restore(item)
        assert await memory.recall("acme", "dated") == facts
        assert await memory.recall_page("acme", "dated", size=2) == facts[:2]
        # Restoring them again is recognised as the same facts, to the microsecond.
        assert await memory.restore_many(facts) == 0
    # In a new store on the same file, as after a restart.
    recalled, paged = await read_back(db_path)
    assert recalled == paged == facts
    assert [fact.created_at for fact in recalled] == list(EDGE_TIMES)
    assert all(fact.created_at.tzinfo is UTC for fact in recalled)
    with closing(sqlite3.connect(db_path)) as raw:
        stored = [micros for (micros,) in raw.execute("SELECT created_at FROM psych_memory_fact")]
    epoch = datetime(1970, 1, 1, tzinfo=UTC)
    micros = [(when - epoch) // timedelta(microseconds=1) for when in EDGE_TIMES]
    assert sorted(stored) == sorted(micros)


@pytest.mark.parametrize(
    "when",
    [
        datetime.max.replace(tzinfo=timezone(timedelta(hours=-1))),
        datetime.min.replace(tzinfo=timezone(timedelta(hours=1))),
    ],
    ids=["after-the-last", "before-the-first"],
)
async def test_times_outside_the_range_are_refused_and_store_nothing(
    memory: SqliteMemory, when: datetime
) -> None:
    outside = Memory("outside-1", MemoryKey("acme", "dated"), "out of range", when)
    with pytest.raises(InvalidInputError, match="created_at") as caught:
        await memory.restore(outside)
    assert caught.value.argument == "memory.created_at"
    inside = Memory("inside-1", outside.key, "fine", MIN_CREATED_AT)
    with pytest.raises(InvalidInputError, match=r"memories\[1\]\.created_at"):
        await memory.restore_many([inside, outside])
    assert await memory.recall("acme", "dated") == ()
