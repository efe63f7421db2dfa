"""Reading one end user's facts a page at a time, whatever the store provides."""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Final, TypeVar

from psych_runtime.memory.port import Memory, MemoryKey, MemoryStore, PagesFacts, StalePageError

from ._errors import FactsForgottenError

__all__ = ["PAGE_SIZE", "count_facts", "pages", "retried"]

PAGE_SIZE: Final = 2_000
"""Facts per page: a few megabytes at the longest contents, one short query each."""


async def pages(
    store: MemoryStore, key: MemoryKey, *, after: str | None = None
) -> AsyncIterator[tuple[Memory, ...]]:
    """The facts of ``key`` after the fact ``after``, oldest first, a page at a time.

    A store providing `PagesFacts` is read with `PagesFacts.recall_page`, so
    no more than a page is ever held. Any other store can only be read whole:
    one `MemoryStore.recall`, handed out in pages, holds the whole end user.
    No page is empty.

    Raises:
        StalePageError: A fact a page was read after (``after``, or the last
            of the previous page) was forgotten or erased meanwhile.
        MemoryStoreError: The store failed.
    """
    if not isinstance(store, PagesFacts):
        facts = await store.recall(key.tenant, key.end_user_id)
        start = 0
        if after is not None:
            ids = [fact.id for fact in facts]
            if after not in ids:
                raise StalePageError
            start = ids.index(after) + 1
        for first in range(start, len(facts), PAGE_SIZE):
            yield facts[first : first + PAGE_SIZE]
        return
    while True:
        page = await store.recall_page(key.tenant, key.end_user_id, after=after, size=PAGE_SIZE)
        if page:
            yield page
        if len(page) < PAGE_SIZE:
            return
        after = page[-1].id


async def retried(work: Callable[[], Awaitable[_T]], doing: str, role: str = "store") -> _T:
    """``work()``, a read of whole keys page by page, started again if a page went stale.

    A fact forgotten between two pages makes the read start again from the
    first page, at most a few times, so that nothing is skipped or counted
    twice.

    Raises:
        FactsForgottenError: Facts kept being forgotten meanwhile (naming
            the store's ``role``; ``doing`` says what was being done).
        MemoryStoreError: The store failed.
    """
    for _ in range(_ATTEMPTS):
        try:
            return await work()
        except StalePageError:
            continue
    raise FactsForgottenError(role, doing, retried=True)


async def count_facts(store: MemoryStore, key: MemoryKey, role: str = "store") -> int:
    """How many facts ``key`` holds, read a page at a time (see `pages` and `retried`).

    Raises:
        FactsForgottenError: The key kept changing while it was counted.
        MemoryStoreError: The store failed.
    """

    async def count() -> int:
        total = 0
        async for page in pages(store, key):
            total += len(page)
        return total

    return await retried(count, "counted", role)


# Reads of a whole key before giving up: another writer forgetting facts of
# this very key between two pages, each time.
_ATTEMPTS: Final = 3
_T = TypeVar("_T")
