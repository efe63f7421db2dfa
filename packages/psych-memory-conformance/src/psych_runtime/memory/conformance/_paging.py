"""Rule 13: reading one key's facts a page at a time, on a store that provides it."""

from __future__ import annotations

from typing import Any, Final, cast

from psych_runtime.memory.port import (
    MAX_PAGE_SIZE,
    InvalidInputError,
    InvalidKeyError,
    Memory,
    MemoryStore,
    PagesFacts,
    StalePageError,
)

from ._cases import (
    ISOLATION_KEYS,
    MAIN,
    MARKER,
    SAME_END_USER,
    SAME_TENANT,
    Pair,
    ids_of,
    key_of,
)
from ._harness import Harness
from ._rules import RuleViolationError
from ._support import check, not_applicable

__all__ = ["PagingChecks", "pages_of"]

# More facts than a page of a few sizes holds, so that pages start at the
# first fact, in the middle and at the last; and more than an adapter may
# keep in a small table before it switches to another layout.
_HELD: Final = 70

_BAD_SIZES: Final[tuple[tuple[str, object, type[Exception]], ...]] = (
    ("0", 0, InvalidInputError),
    ("-1", -1, InvalidInputError),
    ("MAX_PAGE_SIZE + 1", MAX_PAGE_SIZE + 1, InvalidInputError),
    ("True", True, TypeError),
    ("a float", 2.0, TypeError),
    ("a str", "2", TypeError),
    ("None", None, TypeError),
)
_BAD_AFTERS: Final[tuple[tuple[str, object], ...]] = (
    ("bytes", MARKER.encode()),
    ("an int", 1),
    ("a Memory rather than its id", object()),
)
# Ids no key holds in any sane store. Lone surrogates cannot be encoded as
# UTF-8: a store that hands them to its driver unchecked fails with the
# driver's encoding error instead of StalePageError.
_GARBAGE: Final = (
    "", " ", "0", "unknown", "' OR '1'='1", "%", f"{MARKER}-x" * 300, "\x00",
    "\ud800", f"{MARKER}\udfff",
)  # fmt: skip


def _pager(store: MemoryStore) -> PagesFacts:
    if not isinstance(store, PagesFacts):
        not_applicable("PagesFacts")
    return store


async def _page(
    pager: PagesFacts, pair: Pair, after: str | None, size: int, what: str
) -> tuple[Memory, ...]:
    """One page, judged as a tuple of at most ``size`` facts of the key.

    Raises:
        RuleViolationError: Rule 13, for a page of the wrong shape or an error.
    """
    try:
        page: object = await pager.recall_page(*pair, after=after, size=size)
    except StalePageError as exc:
        raise RuleViolationError(
            13, f"{what} raised StalePageError although the key holds the fact 'after' names"
        ) from exc
    check(type(page) is tuple, 13, f"{what} returned a {type(page).__name__}, not a tuple")
    facts = cast("tuple[object, ...]", page)
    check(
        all(isinstance(fact, Memory) for fact in facts),
        13,
        f"{what} returned something other than Memory objects",
    )
    check(len(facts) <= size, 13, f"{what} returned {len(facts)} facts, more than size={size}")
    return cast("tuple[Memory, ...]", facts)


async def pages_of(pager: PagesFacts, pair: Pair, size: int, held: int) -> list[tuple[Memory, ...]]:
    """Every page of ``pair``, each read after the last fact of the one before.

    ``held`` is how many facts `MemoryStore.recall` returned: reading more
    than that, a page of repeats would never end.

    Raises:
        RuleViolationError: Rule 13, for a page of the wrong shape or too many facts.
    """
    pages = [await _page(pager, pair, None, size, f"the first page of size {size}")]
    while len(pages[-1]) == size:
        read = sum(len(page) for page in pages)
        check(
            read <= held,
            13,
            f"pages of size {size} went on past the {held} facts recall returned",
        )
        pages.append(
            await _page(
                pager, pair, pages[-1][-1].id, size, f"page {len(pages) + 1} of size {size}"
            )
        )
    return pages


class PagingChecks(Harness):
    """Checks of rule 13, each skipped as not applicable without `PagesFacts`.

    Pages are judged against `MemoryStore.recall` of the same key, read
    while nothing else changes the store.
    """

    async def test_rule13_pages_of_every_size_join_into_recall(self) -> None:
        """Rule 13: pages of any size, each after the last, are recall's facts in order."""
        async with self._open() as store:
            pager = _pager(store)
            check(
                await _page(pager, MAIN, None, 1, "a page of a key without facts") == (),
                13,
                "a page of a key without facts was not empty",
            )
            held = [await store.remember(*MAIN, f"paged fact {number}") for number in range(_HELD)]
            await store.remember(*SAME_TENANT, "another end user's fact")
            # Gaps where facts were forgotten: the first, one inside, the last.
            for gone in (held[0], held[_HELD // 2], held[-1]):
                check(
                    await self._forget(store, *MAIN, gone.id),
                    2,
                    "forget of a stored fact's id returned False",
                )
            recalled = await store.recall(*MAIN)
            for size in (*range(1, len(recalled) + 2), MAX_PAGE_SIZE):
                pages = await pages_of(pager, MAIN, size, len(recalled))
                joined = tuple(fact for page in pages for fact in page)
                check(
                    joined == recalled,
                    13,
                    f"pages of size {size} joined gave ids {ids_of(joined)}, not recall's "
                    f"{ids_of(recalled)} with their contents and times",
                )
                check(
                    len(pages[-1]) < size,
                    13,
                    f"the last page of size {size} was full",
                )

    async def test_rule13_a_page_resumes_after_any_fact_the_key_holds(self) -> None:
        """Rule 13: after=the id of any fact gives the facts that follow it in recall's order."""
        async with self._open() as store:
            pager = _pager(store)
            for number in range(_HELD):
                await store.remember(*MAIN, f"paged fact {number}")
            recalled = await store.recall(*MAIN)
            for index, fact in enumerate(recalled):
                page = await _page(pager, MAIN, fact.id, 3, f"a page after fact {index}")
                check(
                    page == recalled[index + 1 : index + 4],
                    13,
                    f"the page of size 3 after fact {index} of {len(recalled)} gave ids "
                    f"{ids_of(page)}, not {ids_of(recalled[index + 1 : index + 4])}",
                )

    async def test_rule13_an_after_the_key_does_not_hold_is_stale(self) -> None:
        """Rule 13: after=a forgotten, erased, other key's or made-up id raises StalePageError."""
        async with self._open() as store:
            pager = _pager(store)
            held = [await store.remember(*MAIN, f"paged fact {number}") for number in range(5)]
            forgotten = held[2]
            check(
                await self._forget(store, *MAIN, forgotten.id),
                2,
                "forget of a stored fact's id returned False",
            )
            erased_pair = ("acme", "erased-user")
            erased = await store.remember(*erased_pair, "erased fact")
            await store.erase(*erased_pair)
            others = [await store.remember(*pair, "other") for pair in (SAME_TENANT, SAME_END_USER)]
            stale = [
                ("a forgotten fact's id", forgotten.id),
                ("an erased key's fact id", erased.id),
                ("the id of another end user's fact", others[0].id),
                ("the id of another tenant's fact", others[1].id),
                *((f"made-up id {index}", garbage) for index, garbage in enumerate(_GARBAGE)),
            ]
            before = await self._watched(store)
            for what, after in stale:
                for pair in (MAIN, ("acme", "no-facts-user")):
                    await _stale(pager, pair, after, f"a page of {pair!r} after {what}")
            check(
                await self._watched(store) == before,
                13,
                "a page refused as stale changed stored facts",
            )

    async def test_rule13_invalid_arguments_are_refused_and_change_nothing(self) -> None:
        """Rule 13: a wrong size or after, or an invalid key, is refused; nothing changes."""
        async with self._open() as store:
            pager = _pager(store)
            held = [await store.remember(*MAIN, f"paged fact {number}") for number in range(3)]
            before = await self._watched(store)
            call = cast("Any", pager.recall_page)
            refusals: list[tuple[str, dict[str, object], type[Exception]]] = [
                (f"size={label}", {"size": size}, error) for label, size, error in _BAD_SIZES
            ]
            refusals += [
                (f"after={label}", {"after": after, "size": 2}, TypeError)
                for label, after in _BAD_AFTERS
            ]
            refusals += [
                ("an empty tenant", {"scope": "", "size": 2}, InvalidKeyError),
                ("an end user with a NUL", {"end_user_id": "u\x00", "size": 2}, InvalidKeyError),
                ("a None end user", {"end_user_id": None, "size": 2}, TypeError),
            ]
            for what, given, expected in refusals:
                arguments: dict[str, object] = {
                    "scope": MAIN[0],
                    "end_user_id": MAIN[1],
                    "after": held[0].id,
                }
                arguments.update(given)
                scope, user = arguments.pop("scope"), arguments.pop("end_user_id")
                try:
                    await call(scope, user, **arguments)
                except expected as exc:
                    check(
                        not isinstance(exc, StalePageError),
                        13,
                        f"a page with {what} raised StalePageError, not a refusal of the argument",
                    )
                    continue
                except Exception as exc:
                    raise RuleViolationError(
                        13,
                        f"a page with {what} raised {type(exc).__name__}; it must raise "
                        f"{expected.__name__}",
                    ) from exc
                raise RuleViolationError(
                    13, f"a page with {what} answered; it must raise {expected.__name__}"
                )
            check(
                await self._watched(store) == before,
                13,
                "a refused page changed stored facts",
            )

    async def test_rule13_pages_touch_only_their_own_key(self) -> None:
        """Rule 13: pages of each key hold its facts alone; other keys' ids are stale there."""
        async with self._open() as store:
            pager = _pager(store)
            held = {
                pair: [
                    await store.remember(*pair, f"fact {number} of {index}") for number in range(3)
                ]
                for index, pair in enumerate(ISOLATION_KEYS)
            }
            for pair in ISOLATION_KEYS:
                recalled = await store.recall(*pair)
                joined = tuple(
                    fact for page in await pages_of(pager, pair, 2, len(recalled)) for fact in page
                )
                check(
                    joined == recalled == tuple(held[pair]),
                    13,
                    f"pages of {pair!r} gave ids {ids_of(joined)}, not its own "
                    f"{ids_of(held[pair])}",
                )
                check(
                    all(fact.key == key_of(pair) for fact in joined),
                    13,
                    f"a page of {pair!r} holds a fact of another key",
                )
                for other in ISOLATION_KEYS:
                    if other != pair:
                        await _stale(
                            pager,
                            pair,
                            held[other][0].id,
                            f"a page of {pair!r} after a fact of {other!r}",
                        )

    async def _watched(self, store: MemoryStore) -> list[tuple[tuple[Memory, ...], int]]:
        return [
            (await store.recall(*pair), await self.count_stored(store, key_of(pair)))
            for pair in (MAIN, SAME_TENANT, SAME_END_USER)
        ]


async def _stale(pager: PagesFacts, pair: Pair, after: str, what: str) -> None:
    try:
        page = await pager.recall_page(*pair, after=after, size=2)
    except StalePageError as exc:
        check(
            exc.argument == "after",
            13,
            f"{what} raised StalePageError naming {exc.argument!r}, not 'after'",
        )
        check(
            MARKER not in str(exc),
            13,
            f"the error of {what} repeats the id it refused",
        )
        return
    except Exception as exc:
        raise RuleViolationError(
            13, f"{what} raised {type(exc).__name__}; it must raise StalePageError"
        ) from exc
    raise RuleViolationError(13, f"{what} returned {len(page)} facts; it must raise StalePageError")
