"""Rule 9: a cancelled call is done or not done by the time the caller hears of it."""

from __future__ import annotations

import random
import secrets
from collections.abc import Awaitable, Callable, Collection, Iterable
from functools import partial
from typing import Final, TypeVar

import anyio
import anyio.lowlevel

from psych_runtime.memory.port import MemoryKey, MemoryStore, MemoryStoreError

from ._cases import FACTS_PER_TASK, TASKS, ids_of, key_of
from ._closing import PORT_ERRORS
from ._harness import Harness
from ._rules import RuleViolationError
from ._support import check

__all__ = ["CancellationChecks"]

_T = TypeVar("_T")
_TENANT: Final = "acme"
# Deadlines from "already passed" to a few round trips of a fast database,
# so that cancellation strikes before, during and after a call's statement.
_FIXED_TIMEOUTS: Final = (0.0, 1e-6, 1e-5, 1e-4, 3e-4, 1e-3, 3e-3)
_LONGEST_RANDOM_TIMEOUT: Final = 3e-3
# Cancelled calls counted per round of the task-group check: its writers
# are cancelled together, at about this many points in their calls.
_CALLS_PER_ROUND: Final = 10


class CancellationChecks(Harness):
    """Checks of rule 9: calls cut short by timeouts and by a cancelled task group.

    A cancellation can strike a backend while its statement is on the way to
    the server; a backend that gives up waiting for the answer and lets the
    statement commit later breaks its own erase. These checks cancel many
    calls at many points, then look at what is left after later calls
    returned. ``cancelled_calls`` sets how many calls each check cancels;
    the seed of the random timeouts is in every failure message.
    """

    async def test_rule9_a_cancelled_remember_never_lands_after_erase(self) -> None:
        """Rule 9: remember cut short by a timeout, then erase: no fact is left or appears later."""
        seed = secrets.randbits(32)
        timeouts = _timeouts(self.cancelled_calls, seed)
        users = [f"cancelled-remember-{index}" for index in range(len(timeouts))]
        async with self._open() as store:
            for user, timeout in zip(users, timeouts, strict=True):
                fact = await _cut_short(
                    f"remember (timeout {timeout:.6f} s, seed {seed})",
                    partial(store.remember, _TENANT, user, "cancelled on its way"),
                    timeout,
                )
                await _erase_and_look(
                    store,
                    user,
                    () if fact is None else (fact.id,),
                    f"a remember cancelled after {timeout:.6f} s (seed {seed})",
                )
            await self._nothing_left(store, users, f"a remember cut short (seed {seed})")

    async def test_rule9_writers_cancelled_mid_way_leave_nothing_after_erase(self) -> None:
        """Rule 9: many writers cancelled mid-way, then erase: no fact is left or appears later."""
        seed = secrets.randbits(32)
        rounds = _timeouts(max(1, self.cancelled_calls // _CALLS_PER_ROUND), seed)
        users = [f"written-by-many-{round_}" for round_ in range(len(rounds))]
        async with self._open() as store:
            for user, timeout in zip(users, rounds, strict=True):
                # The erase follows at once, while cancelled writes may
                # still be on their way.
                returned = await _cancelled_writers(store, user, timeout)
                await _erase_and_look(
                    store,
                    user,
                    returned,
                    f"{TASKS} writers of one end user cancelled mid-way (seed {seed})",
                )
            await self._nothing_left(store, users, f"a writer cancelled mid-way (seed {seed})")

    async def test_rule9_a_cancelled_forget_is_decided_when_the_caller_sees_it(self) -> None:
        """Rule 9: forget cut short by a timeout leaves its fact gone or present, for good."""
        seed = secrets.randbits(32)
        timeouts = _timeouts(self.cancelled_calls, seed)
        async with self._open() as store:
            seen: list[tuple[str, str, float, bool]] = []
            for index, timeout in enumerate(timeouts):
                user = f"cancelled-forget-{index}"
                fact = await store.remember(_TENANT, user, "forgotten, perhaps")
                answer = await _cut_short(
                    f"forget (timeout {timeout:.6f} s, seed {seed})",
                    partial(store.forget, _TENANT, user, fact.id),
                    timeout,
                )
                present = await _holds(store, user, fact.id)
                if answer is True:
                    check(not present, 2, "forget returned True but recall still returns the fact")
                seen.append((user, fact.id, timeout, present))
            # Every later call has returned since each cancelled forget; an
            # effect still on its way would show now.
            for user, memory_id, timeout, present in seen:
                now = await _holds(store, user, memory_id)
                check(
                    now == present,
                    9,
                    f"the fact of a forget cancelled after {timeout:.6f} s was "
                    f"{_state(present)} when the next recall returned, and is {_state(now)} "
                    f"after later calls (seed {seed})",
                )

    async def _nothing_left(self, store: MemoryStore, users: Iterable[str], cause: str) -> None:
        # Every later call has returned since each erase; an effect still on
        # its way would show now.
        for user in users:
            recalled = await store.recall(_TENANT, user)
            check(
                recalled == (),
                9,
                f"{cause} left {len(recalled)} fact(s) that appeared after its end user's "
                "erase returned",
            )
            stored = await self.count_stored(store, _key(user))
            check(
                stored == 0,
                4,
                f"after erase the backend still holds {stored} row(s) for a key recall shows "
                "empty (a soft delete, tombstone or retained copy)",
            )


async def _erase_and_look(
    store: MemoryStore, user: str, returned: Collection[str], cause: str
) -> None:
    # Right after erase: a fact whose remember returned is erase's own
    # failure (rule 4); any other fact is a cancelled call's effect.
    await store.erase(_TENANT, user)
    left = ids_of(await store.recall(_TENANT, user))
    if left and set(left) <= set(returned):
        raise RuleViolationError(
            4, f"erase left {len(left)} fact(s) whose remember had returned; recall returns them"
        )
    check(
        not left,
        9,
        f"{cause} left {len(left)} fact(s) that recall returns right after erase returned",
    )


def _key(user: str) -> MemoryKey:
    return key_of((_TENANT, user))


def _state(present: bool) -> str:  # noqa: FBT001
    return "present" if present else "gone"


def _timeouts(count: int, seed: int) -> list[float]:
    # Half of them fixed, from 0 up, and half random in between.
    rng = random.Random(seed)  # noqa: S311 - a spread of timeouts, no secret.
    return [
        _FIXED_TIMEOUTS[(index // 2) % len(_FIXED_TIMEOUTS)]
        if index % 2 == 0
        else rng.uniform(0.0, _LONGEST_RANDOM_TIMEOUT)
        for index in range(count)
    ]


async def _holds(store: MemoryStore, user: str, memory_id: str) -> bool:
    recalled = ids_of(await store.recall(_TENANT, user))
    check(
        recalled in ([], [memory_id]),
        9,
        f"after a cancelled forget the key holds {len(recalled)} fact(s), not its one fact or none",
    )
    return bool(recalled)


async def _cut_short(what: str, call: Callable[[], Awaitable[_T]], delay: float) -> _T | None:
    # The call's answer, or None when the deadline cut it short.
    with anyio.move_on_after(delay) as scope:
        try:
            return await call()
        except Exception as exc:
            violation = _violation(what, exc, cancelled=anyio.current_time() >= scope.deadline)
            if violation is None:
                raise
            raise violation from exc
    return None


def _violation(what: str, error: Exception, *, cancelled: bool) -> RuleViolationError | None:
    # A store error is fine when the store failed, not when it stands in for
    # the cancellation the caller asked for.
    if isinstance(error, MemoryStoreError) and cancelled:
        return RuleViolationError(
            9, f"{what} raised {type(error).__name__} instead of letting the cancellation through"
        )
    if isinstance(error, PORT_ERRORS):
        return None
    return RuleViolationError(
        8,
        f"{what} raised {type(error).__name__}, which is none of TypeError, "
        "InvalidInputError or MemoryStoreError",
    )


async def _cancelled_writers(store: MemoryStore, user: str, delay: float) -> list[str]:
    # Many writers of one end user, cancelled two ways at once: by a
    # deadline, and by their task group once half of the writes returned.
    # Returns the ids of the writes that returned.
    half = TASKS * FACTS_PER_TASK // 2
    returned: list[str] = []
    failures: list[Exception] = []
    with anyio.move_on_after(delay) as deadline:
        async with anyio.create_task_group() as group:

            async def write(task: int) -> None:
                for index in range(FACTS_PER_TASK):
                    try:
                        fact = await store.remember(_TENANT, user, f"fact {index} of {task}")
                    except Exception as exc:  # noqa: BLE001 - judged, then raised after the group.
                        cancelled = (
                            group.cancel_scope.cancel_called
                            or anyio.current_time() >= deadline.deadline
                        )
                        violation = _violation(
                            "remember by a cancelled writer", exc, cancelled=cancelled
                        )
                        if violation is not None:
                            violation.__cause__ = exc
                        # Raised after the group ends, as itself rather than in a group.
                        failures.append(exc if violation is None else violation)
                        group.cancel_scope.cancel()
                        return
                    returned.append(fact.id)
                    if len(returned) >= half:
                        group.cancel_scope.cancel()
                    await anyio.lowlevel.checkpoint()

            for task in range(TASKS):
                group.start_soon(write, task)
    if failures:
        raise failures[0]
    return returned
