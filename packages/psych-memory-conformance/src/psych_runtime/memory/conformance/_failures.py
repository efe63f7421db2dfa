"""Rule 8: only the port's errors escape, and every one of them pickles."""

from __future__ import annotations

import pickle
from collections.abc import Awaitable, Callable
from functools import partial
from typing import Any, Final, cast

from psych_runtime.memory.port import MemoryStore

from ._cases import BAD_CONTENTS, BAD_KEY_PARTS, BAD_LIMITS, BAD_MEMORY_IDS, MAIN
from ._closing import OPERATIONS, PORT_ERRORS, valid_calls
from ._harness import Harness
from ._rules import RuleViolationError
from ._support import check

__all__ = ["FailureChecks"]

_Call = Callable[[], Awaitable[object]]
_MISSING: Final = object()


class FailureChecks(Harness):
    """Checks of rule 8, with every error the kit can provoke without a fault.

    The kit cannot make an arbitrary backend fail (unplug its server, lock
    its file), so it provokes what any store must answer: invalid input, and
    calls on a closed store.
    """

    async def test_rule8_no_foreign_exception_escapes_a_closed_store(self) -> None:
        """Rule 8: calls on a closed store, valid or not, raise only the port's errors."""
        async with self._open() as store:
            fact = await store.remember(*MAIN, "remembered before closing")
            await store.aclose()
            calls = [
                (f"{operation} with valid input", call)
                for operation, call in valid_calls(store, fact.id).items()
            ]
            calls += _invalid_calls(store, fact.id)
            for what, call in calls:
                try:
                    await call()
                except PORT_ERRORS:
                    continue
                except Exception as exc:
                    raise RuleViolationError(
                        8,
                        f"{what} on a closed store raised {type(exc).__name__}, which is none "
                        "of TypeError, InvalidInputError or MemoryStoreError",
                    ) from exc

    async def test_rule8_errors_survive_pickling(self) -> None:
        """Rule 8: every error the kit provokes unpickles as its own type with its attributes."""
        async with self._open() as store:
            fact = await store.remember(*MAIN, "remembered before closing")
            provoked = await _raised(_invalid_calls(store, fact.id))
            await store.aclose()
            provoked += await _raised(
                [
                    (f"{operation} on a closed store", call)
                    for operation, call in valid_calls(store, fact.id).items()
                ]
            )
            provoked += await _raised(
                [
                    (f"{what} on a closed store", call)
                    for what, call in _invalid_calls(store, fact.id)
                ]
            )
            for what, error in provoked:
                _survives_pickling(what, error)


def _invalid_calls(store: MemoryStore, memory_id: str) -> list[tuple[str, _Call]]:
    loose = cast("Any", store)
    tenant, user = MAIN
    calls: list[tuple[str, _Call]] = []
    for label, value, _ in BAD_KEY_PARTS:
        for operation in OPERATIONS:
            method = getattr(loose, operation)
            extra: tuple[object, ...] = {
                "remember": ("a fact",),
                "forget": (memory_id,),
            }.get(operation, ())
            calls.append(
                (f"{operation} with end_user_id {label}", partial(method, tenant, value, *extra))
            )
            calls.append((f"{operation} with scope {label}", partial(method, value, user, *extra)))
    calls += [
        (f"remember with content {label}", partial(loose.remember, tenant, user, value))
        for label, value, _ in BAD_CONTENTS
    ]
    calls += [
        (f"recall with limit {label}", partial(loose.recall, tenant, user, limit=value))
        for label, value, _ in BAD_LIMITS
    ]
    calls += [
        (f"forget with memory_id {label}", partial(loose.forget, tenant, user, value))
        for label, value in BAD_MEMORY_IDS
    ]
    return calls


async def _raised(calls: list[tuple[str, _Call]]) -> list[tuple[str, Exception]]:
    raised: list[tuple[str, Exception]] = []
    for what, call in calls:
        try:
            await call()
        except Exception as exc:  # noqa: BLE001 - every error is pickled; rule 8 checks types.
            raised.append((what, exc))
    return raised


def _survives_pickling(what: str, error: Exception) -> None:
    kind = type(error).__name__
    try:
        # Loads only what the line before just dumped, in this process.
        copy = pickle.loads(pickle.dumps(error))  # noqa: S301
    except Exception as exc:
        raise RuleViolationError(
            8, f"the {kind} of {what} cannot be pickled and unpickled ({type(exc).__name__})"
        ) from exc
    check(type(copy) is type(error), 8, f"the {kind} of {what} unpickles as {type(copy).__name__}")
    before, after = vars(error), vars(copy)
    changed = sorted(
        name
        for name in before.keys() | after.keys()
        if before.get(name, _MISSING) != after.get(name, _MISSING)
    )
    check(
        not changed,
        8,
        f"the {kind} of {what} lost or changed attribute(s) {changed} when pickled",
    )
    check(str(copy) == str(error), 8, f"the {kind} of {what} says something else once unpickled")
