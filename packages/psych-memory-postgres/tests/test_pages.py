"""Reading one end user's facts a page at a time (`PagesFacts`)."""

from __future__ import annotations

import pytest

from psych_runtime.memory.port import (
    MAX_PAGE_SIZE,
    InvalidInputError,
    InvalidKeyError,
    Memory,
    PagesFacts,
    StalePageError,
    StoreClosedError,
)
from psych_runtime.memory.postgres import PostgresMemory

pytestmark = pytest.mark.anyio


async def test_the_store_pages_facts(store: PostgresMemory) -> None:
    assert isinstance(store, PagesFacts)


@pytest.mark.parametrize("size", [1, 2, 3, 7])
async def test_pages_put_together_are_recall(store: PostgresMemory, size: int) -> None:
    facts = [await store.remember("acme", "u1", f"fact {n}") for n in range(7)]
    await store.remember("acme", "u2", "another end user")
    await store.remember("globex", "u1", "another tenant")
    read: list[Memory] = []
    after: str | None = None
    while True:
        page = await store.recall_page("acme", "u1", after=after, size=size)
        read.extend(page)
        if len(page) < size:
            break
        after = page[-1].id
    assert tuple(read) == tuple(facts) == await store.recall("acme", "u1")


async def test_an_empty_key_has_one_empty_page(store: PostgresMemory) -> None:
    assert await store.recall_page("acme", "nobody", size=5) == ()


async def test_a_fact_remembered_while_paging_comes_on_a_later_page(store: PostgresMemory) -> None:
    first = await store.remember("acme", "u1", "first")
    (page,) = [await store.recall_page("acme", "u1", size=1)]
    assert page == (first,)
    later = await store.remember("acme", "u1", "later")
    assert await store.recall_page("acme", "u1", after=first.id, size=5) == (later,)


@pytest.mark.parametrize(
    "after",
    ["forgotten", "other user", "other tenant", "erased", "never", "not an id!", ""],
)
async def test_after_not_held_by_the_key_is_a_stale_page(store: PostgresMemory, after: str) -> None:
    kept = await store.remember("acme", "u1", "kept")
    gone = await store.remember("acme", "u1", "gone")
    assert await store.forget("acme", "u1", gone.id)
    elsewhere = await store.remember("acme", "u2", "elsewhere")
    abroad = await store.remember("globex", "u1", "abroad")
    erased = await store.remember("acme", "u3", "erased")
    await store.erase("acme", "u3")
    ids = {
        "forgotten": gone.id,
        "other user": elsewhere.id,
        "other tenant": abroad.id,
        "erased": erased.id,
        "never": "0" * 32,
    }
    with pytest.raises(StalePageError) as caught:
        await store.recall_page("acme", "u1", after=ids.get(after, after), size=5)
    assert caught.value.argument == "after"
    assert await store.recall_page("acme", "u1", after=kept.id, size=5) == ()


@pytest.mark.parametrize(
    ("after", "size", "error", "argument"),
    [
        (None, 0, InvalidInputError, "size"),
        (None, MAX_PAGE_SIZE + 1, InvalidInputError, "size"),
        (None, True, TypeError, None),
        (None, 2.0, TypeError, None),
        (b"id", 5, TypeError, None),
    ],
)
async def test_arguments_are_checked_before_the_server_is_asked(
    store: PostgresMemory, after: object, size: object, error: type[Exception], argument: str | None
) -> None:
    await store.aclose()
    # Closed, so any statement would fail otherwise: the argument is refused first.
    with pytest.raises(error) as caught:
        await store.recall_page("acme", "u1", after=after, size=size)  # type: ignore[arg-type]
    if argument is not None:
        assert getattr(caught.value, "argument", None) == argument
    with pytest.raises(InvalidKeyError):
        await store.recall_page("acme", " u1", size=5)
    with pytest.raises(StoreClosedError):
        await store.recall_page("acme", "u1", after="not an id!", size=5)
