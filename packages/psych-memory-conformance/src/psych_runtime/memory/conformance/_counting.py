"""Rule 12: counting a tenant's facts per end user, on a store that provides it."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, MutableMapping
from typing import Final, cast

from psych_runtime.memory.port import CountsFacts, MemoryStore

from ._cases import (
    LISTED_KEYS,
    MAIN,
    NO_FACTS_TENANT,
    SAME_END_USER,
    SAME_TENANT,
    Pair,
    ScopeObject,
    key_of,
)
from ._harness import Harness
from ._support import check, not_applicable, refuses_invalid_scopes

__all__ = ["CountingChecks"]

# The listed keys, and tenants that a prefix or a pattern match (LIKE with
# its "_" wildcard) would take for "acme".
_COUNTED: Final[tuple[Pair, ...]] = (
    *LISTED_KEYS,
    ("acme-corp", "user-3"),
    ("ac_e", "user-4"),
)


def _counter(store: MemoryStore) -> CountsFacts:
    if not isinstance(store, CountsFacts):
        not_applicable("CountsFacts")
    return store


class CountingChecks(Harness):
    """Checks of rule 12, each skipped as not applicable without `CountsFacts`.

    Counts are judged against `MemoryStore.recall` of every key the check
    filled, after deletes the backdoor has confirmed to be real.
    """

    async def test_rule12_counts_are_what_recall_returns_for_each_end_user(self) -> None:
        """Rule 12: fact_counts() counts exactly the tenant's end users holding facts, in order."""
        async with self._open() as store:
            counter = _counter(store)
            await _counts_are(counter, store, "a fresh store")
            # One to three facts a key, so that a count of end users or of
            # keys, instead of facts, comes out wrong.
            held = {
                pair: [
                    await store.remember(*pair, f"counted {number}")
                    for number in range(1 + index % 3)
                ]
                for index, pair in enumerate(_COUNTED)
            }
            await _counts_are(counter, store, "after remembering 1 to 3 facts on each key")
            single = [pair for pair in _COUNTED if len(held[pair]) == 1]
            several = [pair for pair in _COUNTED if len(held[pair]) == 3]
            forgotten, thinned, erased = single[1], several[0], several[-1]
            for pair, memory in ((forgotten, held[forgotten][0]), (thinned, held[thinned][1])):
                check(
                    await store.forget(*pair, memory.id),
                    2,
                    "forget of a stored fact's id returned False",
                )
            await store.erase(*erased)
            # Counts may only be judged once the deletes were real.
            for pair, rule, left in ((forgotten, 2, 0), (thinned, 2, 2), (erased, 4, 0)):
                stored = await self.count_stored(store, key_of(pair))
                check(
                    stored == left and len(await store.recall(*pair)) == left,
                    rule,
                    f"deleting facts of key {pair!r} left {stored} row(s), not {left}",
                )
            await _counts_are(
                counter,
                store,
                "after forgetting one key's only fact and one fact of another, and erasing "
                "a third key",
            )
            for pair in _COUNTED:
                await store.erase(*pair)
                check(
                    await store.recall(*pair) == ()
                    and await self.count_stored(store, key_of(pair)) == 0,
                    4,
                    f"erase of key {pair!r} left facts behind",
                )
            await _counts_are(counter, store, "after erasing every key")

    async def test_rule12_fact_counts_refuses_an_invalid_scope(self) -> None:
        """Rule 12: fact_counts() of an invalid tenant raises TypeError or InvalidKeyError."""
        async with self._open() as store:
            counter = _counter(store)
            await store.remember(*MAIN, "counted")
            await refuses_invalid_scopes(counter.fact_counts, "fact_counts", 12)

    async def test_rule12_the_counts_are_the_callers_own(self) -> None:
        """Rule 12: a mapping fact_counts() returned changes with neither the store nor the next."""
        async with self._open() as store:
            counter = _counter(store)
            for pair in (MAIN, MAIN, SAME_TENANT, SAME_END_USER):
                await store.remember(*pair, "counted")
            tenant = MAIN[0]
            kept = {MAIN[1]: 2, SAME_TENANT[1]: 1}
            first = _judge(await counter.fact_counts(tenant), kept, f"fact_counts({tenant!r})")
            await store.remember(*MAIN, "counted later")
            await store.erase(*SAME_TENANT)
            stored = await self.count_stored(store, key_of(SAME_TENANT))
            check(stored == 0, 4, f"erase of key {SAME_TENANT!r} left {stored} row(s)")
            check(
                dict(first) == kept,
                12,
                f"a remember and an erase changed the mapping an earlier fact_counts({tenant!r}) "
                f"returned, to {dict(first)!r}",
            )
            if isinstance(first, MutableMapping):
                first.clear()
                first["intruder"] = 7
            _judge(
                await counter.fact_counts(tenant),
                {MAIN[1]: 3},
                f"after the caller changed the mapping an earlier fact_counts({tenant!r}) "
                f"returned, fact_counts({tenant!r})",
            )


async def _counts_are(counter: CountsFacts, store: MemoryStore, when: str) -> None:
    # What recall returns for each key, judged tenant by tenant, both scope forms.
    recalled = {pair: len(await store.recall(*pair)) for pair in _COUNTED}
    for tenant in (*sorted({tenant for tenant, _ in _COUNTED}), NO_FACTS_TENANT):
        expected = {
            user: count
            for (owner, user), count in sorted(recalled.items())
            if owner == tenant and count
        }
        for scope in (tenant, ScopeObject(tenant)):
            counts: object = await counter.fact_counts(scope)
            _judge(counts, expected, f"{when}, fact_counts({scope!r})")


def _judge(counts: object, expected: Mapping[str, int], what: str) -> Mapping[object, object]:
    """Check one answer of fact_counts against ``expected``, and return it.

    Raises:
        RuleViolationError: Rule 12, for the first way the answer is wrong.
    """
    check(
        isinstance(counts, Mapping),
        12,
        f"{what} returned a {type(counts).__name__}, not a mapping",
    )
    answered = cast("Mapping[object, object]", counts)
    check(
        dict(answered) == expected,
        12,
        f"{what} returned {dict(answered)!r}, not {dict(expected)!r}",
    )
    check(
        all(type(user) is str and type(count) is int for user, count in answered.items()),
        12,
        f"{what} returned {_types(answered.items())}, not str: int",
    )
    order = list(answered)
    check(
        order == list(expected),
        12,
        f"{what} gave the end users in the order {order!r}, not in code-point order "
        f"{list(expected)!r}",
    )
    return answered


def _types(items: Iterable[tuple[object, object]]) -> str:
    # The kinds of entries, such as "str: bool", never the values themselves.
    kinds = {f"{type(key).__name__}: {type(value).__name__}" for key, value in items}
    return "entries of " + ", ".join(sorted(kinds))
