"""Rule 6: invalid input is refused with a clear error before anything changes."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterable, Mapping
from functools import partial
from typing import Any, cast

from psych_runtime.memory.port import MAX_CONTENT_LENGTH, MAX_KEY_LENGTH, Memory, MemoryStore

from ._cases import (
    BAD_CONTENTS,
    BAD_KEY_PARTS,
    BAD_LIMITS,
    BAD_MEMORY_IDS,
    MAIN,
    NEAR_MISS_KEYS,
    SAME_TENANT,
    BadScope,
    NoTenant,
    Pair,
    ids_of,
    key_of,
)
from ._harness import Harness
from ._support import Refusal, check

__all__ = ["ValidationChecks"]


class ValidationChecks(Harness):
    """Checks of rule 6: each bad argument of each method, and the limits themselves.

    Every refused call is followed by a look at the watched keys, through
    `recall` and the backdoor: a refusal that changed anything breaks the rule.
    """

    async def test_rule6_invalid_keys_are_refused_and_change_nothing(self) -> None:
        """Rule 6: a bad tenant or end-user id raises TypeError or InvalidKeyError everywhere."""
        async with self._open() as store:
            watched = (*NEAR_MISS_KEYS, SAME_TENANT)
            for pair in watched:
                await store.remember(*pair, "already stored")
            known = (await store.recall(*MAIN))[0].id
            baseline = await self._snapshot(store, watched)
            user = MAIN[1]
            scopes: list[tuple[str, object, Refusal]] = [
                (f"scope {label}", value, Refusal(expected, "scope", value))
                for label, value, expected in BAD_KEY_PARTS
            ]
            scopes += [
                (
                    f"a scope object whose tenant is {label}",
                    BadScope(value),
                    Refusal(expected, "scope", value),
                )
                for label, value, expected in BAD_KEY_PARTS
            ]
            scopes.append(
                ("a scope object without tenant", NoTenant(), Refusal(TypeError, "scope", None))
            )
            calls: list[tuple[str, Callable[[object, object], Awaitable[object]]]] = [
                ("remember", lambda s, u: cast("Any", store).remember(s, u, "a fact")),
                ("forget", lambda s, u: cast("Any", store).forget(s, u, known)),
                ("recall", lambda s, u: cast("Any", store).recall(s, u)),
                ("erase", lambda s, u: cast("Any", store).erase(s, u)),
            ]
            for method, call in calls:
                for label, scope, refusal in scopes:
                    await self._refused(
                        store,
                        f"{method} with {label}",
                        partial(call, scope, user),
                        refusal,
                        baseline,
                    )
                for label, value, expected in BAD_KEY_PARTS:
                    await self._refused(
                        store,
                        f"{method} with end_user_id {label}",
                        partial(call, MAIN[0], value),
                        Refusal(expected, "end_user_id", value),
                        baseline,
                    )

    async def test_rule6_invalid_content_is_refused_and_stores_nothing(self) -> None:
        """Rule 6: bad content raises TypeError or InvalidContentError and stores nothing."""
        await self._each_refused(
            "remember",
            "content",
            lambda store, value: store.remember(*MAIN, value),
            lambda _: BAD_CONTENTS,
        )

    async def test_rule6_invalid_limit_is_refused(self) -> None:
        """Rule 6: a negative, bool or non-int limit raises InvalidLimitError or TypeError."""
        await self._each_refused(
            "recall",
            "limit",
            lambda store, value: store.recall(*MAIN, limit=value),
            lambda _: BAD_LIMITS,
        )

    async def test_rule6_invalid_memory_id_is_refused_and_deletes_nothing(self) -> None:
        """Rule 6: a memory_id that is not a str raises TypeError and deletes nothing."""
        await self._each_refused(
            "forget",
            "memory_id",
            lambda store, value: store.forget(*MAIN, value),
            lambda stored: [
                *((label, value, TypeError) for label, value in BAD_MEMORY_IDS),
                ("the stored fact's id as bytes", stored.id.encode(), TypeError),
            ],
        )

    async def test_rule6_values_at_the_limits_are_accepted(self) -> None:
        """Rule 6: keys of 256 characters and content of 4096 characters are valid and stored."""
        async with self._open() as store:
            longest = ("t" * MAX_KEY_LENGTH, "u" * MAX_KEY_LENGTH)
            fact = await store.remember(*longest, "c" * MAX_CONTENT_LENGTH)
            check(
                fact.key == key_of(longest) and len(fact.content) == MAX_CONTENT_LENGTH,
                6,
                "a key of 256-character parts with 4096 characters of content was not "
                "stored as given",
            )
            check(
                ids_of(await store.recall(*longest)) == [fact.id],
                6,
                "recall under a key of 256-character parts does not find its fact",
            )
            single = ("t", "u")
            other = await store.remember(*single, "c")
            check(
                ids_of(await store.recall(*single)) == [other.id],
                6,
                "one-character key parts and content were not stored",
            )

    async def _refused(
        self,
        store: MemoryStore,
        what: str,
        call: Callable[[], Awaitable[object]],
        refusal: Refusal,
        baseline: Mapping[Pair, tuple[list[str], int]],
    ) -> None:
        error: BaseException | None = None
        try:
            await call()
        except Exception as exc:  # noqa: BLE001 - which exception it is, is checked below.
            error = exc
        refusal.verify(what, error)
        for pair, before in baseline.items():
            after = await self._state(store, pair)
            check(
                after == before,
                6,
                f"{what} raised but changed the facts of key {pair!r} "
                f"(recall and stored count before {before!r}, after {after!r})",
            )

    async def _snapshot(
        self, store: MemoryStore, pairs: Iterable[Pair]
    ) -> dict[Pair, tuple[list[str], int]]:
        return {pair: await self._state(store, pair) for pair in pairs}

    async def _state(self, store: MemoryStore, pair: Pair) -> tuple[list[str], int]:
        return ids_of(await store.recall(*pair)), await self.count_stored(store, key_of(pair))

    async def _each_refused(
        self,
        method: str,
        argument: str,
        call: Callable[[Any, object], Awaitable[object]],
        cases: Callable[[Memory], Iterable[tuple[str, object, type[Exception]]]],
    ) -> None:
        """Call ``method`` with each bad ``argument`` on a store holding one fact.

        Args:
            method: The method's name, for the failure message.
            argument: The argument's name, which the error must name.
            call: Makes the call on the store (typed loosely: the values are
                deliberately wrong) with one bad value.
            cases: Label, bad value and the error it must raise, given the
                stored fact (a bad value can be made from its id).
        """
        async with self._open() as store:
            stored = await store.remember(*MAIN, "already stored")
            baseline = await self._snapshot(store, (MAIN,))
            for label, value, expected in cases(stored):
                await self._refused(
                    store,
                    f"{method} with {argument} {label}",
                    partial(call, store, value),
                    Refusal(expected, argument, value),
                    baseline,
                )
