"""Rule 15: adding a fact only below a limit, atomically, on a store that provides it."""

from __future__ import annotations

import threading
from collections.abc import Awaitable, Callable
from functools import partial
from typing import Any, Final, cast

import anyio
import anyio.to_thread

from psych_runtime.memory.port import (
    InvalidContentError,
    InvalidInputError,
    InvalidKeyError,
    Memory,
    MemoryStore,
    RemembersWithinLimit,
    memory_key,
)

from ._cases import (
    BAD_CONTENTS,
    BAD_KEY_PARTS,
    BARRIER_TIMEOUT,
    MAIN,
    MARKER,
    NEAR_MISS_KEYS,
    SAME_END_USER,
    SAME_TENANT,
    THREADS,
    Pair,
    ScopeObject,
    ids_of,
    key_of,
)
from ._harness import Harness
from ._rules import RuleViolationError
from ._support import Refusal, check, not_applicable

__all__ = ["LimitChecks"]

# Many more callers than places, started together: a store that counts and
# then adds in two steps lets several of them through.
_LIMIT: Final = 5
_CALLERS: Final = 20
_TASKS_PER_THREAD: Final = 4
_ROUNDS: Final = 10
_BAD_MAX_FACTS: Final[tuple[tuple[str, object, type[Exception]], ...]] = (
    ("-1", -1, InvalidInputError),
    ("a large negative int", -(2**63), InvalidInputError),
    ("True", True, TypeError),
    ("False", False, TypeError),
    ("a float", 3.0, TypeError),
    ("a str", "3", TypeError),
    ("None", None, TypeError),
)


def _limiter(store: MemoryStore) -> RemembersWithinLimit:
    if not isinstance(store, RemembersWithinLimit):
        not_applicable("RemembersWithinLimit")
    return store


async def _within(
    limiter: RemembersWithinLimit, pair: Pair | tuple[object, str], content: str, max_facts: int
) -> Memory | None:
    """One `remember_within_limit`, its answer judged as a fact or ``None``."""
    what = f"remember_within_limit with max_facts={max_facts}"
    try:
        answer: object = await limiter.remember_within_limit(
            cast("Any", pair[0]), pair[1], content, max_facts=max_facts
        )
    except Exception as exc:
        raise RuleViolationError(15, f"{what} raised {type(exc).__name__} on valid input") from exc
    check(
        answer is None or isinstance(answer, Memory),
        15,
        f"{what} returned a {type(answer).__name__}, neither a Memory nor None",
    )
    return cast("Memory | None", answer)


class LimitChecks(Harness):
    """Checks of rule 15, each skipped as not applicable without `RemembersWithinLimit`.

    What a call stored is judged by `MemoryStore.recall` and by the backdoor
    count, so that a store that answers ``None`` but writes anyway fails.
    """

    async def test_rule15_below_the_limit_it_adds_as_remember_does_and_at_it_adds_nothing(
        self,
    ) -> None:
        """Rule 15: below max_facts a fact is added as remember adds it; at or above, None."""
        async with self._open() as store:
            limiter = _limiter(store)
            await self._refused_at_limit(store, limiter, 0, "an empty key with max_facts=0")
            added: list[Memory] = []
            # The same content twice: added twice, as remember would.
            for content in ("first fact", "same content", "same content"):
                added.append(await self._added(store, MAIN, content, 3, added))
            for max_facts in (3, 2, 1, 0):
                await self._refused_at_limit(
                    store, limiter, max_facts, f"a key holding 3 facts with max_facts={max_facts}"
                )
            # The scope object the runtime passes names the same key.
            added.append(
                await self._added(
                    store, (ScopeObject(MAIN[0]), MAIN[1]), "through a scope", 4, added
                )
            )
            # Other keys have places of their own, whatever the main key holds.
            for pair in (SAME_TENANT, SAME_END_USER):
                await self._added(store, pair, "another key's fact", 1, [])
            # A limit no integer column holds is no limit (no store holds that many).
            await self._added(store, (MAIN[0], "unlimited"), "below any limit", 2**64, [])
            check(
                await store.recall(*MAIN) == tuple(added),
                15,
                "facts added on other keys changed the main key's facts",
            )
            # The count is of the facts held now: a forgotten one frees its place.
            check(
                await self._forget(store, *MAIN, added[1].id),
                2,
                "forget of a stored fact's id returned False",
            )
            del added[1]
            added.append(await self._added(store, MAIN, "in a freed place", 4, added))
            await self._refused_at_limit(store, limiter, 4, "a key holding 4 facts again")
            await store.erase(*MAIN)
            await self._added(store, MAIN, "after erase", 1, [])

    async def test_rule15_facts_remembered_plainly_count_toward_the_limit(self) -> None:
        """Rule 15: facts added by plain remember count; plain remember is never refused."""
        async with self._open() as store:
            limiter = _limiter(store)
            held = [await store.remember(*MAIN, f"plain {number}") for number in range(2)]
            await self._refused_at_limit(store, limiter, 2, "a key holding 2 plain facts")
            held.append(await self._added(store, MAIN, "the third", 3, held))
            # Past the limit by plain remember, which always adds.
            held.append(await store.remember(*MAIN, "plain past the limit"))
            check(
                await store.recall(*MAIN) == tuple(held),
                1,
                "remember did not add a fact to a key at a remember_within_limit limit",
            )
            await self._refused_at_limit(store, limiter, 3, "a key holding 4 facts, past 3")

    async def test_rule15_invalid_input_is_refused_and_stores_nothing(self) -> None:
        """Rule 15: a bad key, content or max_facts raises the port's error; nothing is stored."""
        async with self._open() as store:
            limiter = _limiter(store)
            for pair in (*NEAR_MISS_KEYS, SAME_TENANT):
                await store.remember(*pair, "already stored")
            watched = {
                pair: await self._state(store, pair)
                for pair in (*NEAR_MISS_KEYS, SAME_TENANT, SAME_END_USER)
            }
            add = cast("Any", limiter).remember_within_limit
            calls: list[tuple[str, Callable[[], Awaitable[object]], Refusal]] = []
            for label, value, expected in BAD_KEY_PARTS:
                calls += [
                    (
                        f"remember_within_limit with scope {label}",
                        partial(add, value, MAIN[1], "a fact", max_facts=9),
                        Refusal(expected, "scope", value, rule=15),
                    ),
                    (
                        f"remember_within_limit with end_user_id {label}",
                        partial(add, MAIN[0], value, "a fact", max_facts=9),
                        Refusal(expected, "end_user_id", value, rule=15),
                    ),
                ]
            calls += [
                (
                    f"remember_within_limit with content {label}",
                    partial(add, *MAIN, value, max_facts=9),
                    Refusal(expected, "content", value, rule=15),
                )
                for label, value, expected in BAD_CONTENTS
            ]
            # A bad max_facts is refused whatever the count would say: on a
            # key holding a fact and on an empty one.
            for pair in (SAME_TENANT, SAME_END_USER):
                calls += [
                    (
                        f"remember_within_limit with max_facts {label} on key {pair!r}",
                        partial(add, *pair, "a fact", max_facts=value),
                        Refusal(expected, "max_facts", value, rule=15),
                    )
                    for label, value, expected in _BAD_MAX_FACTS
                ]
            # Checked in remember's order, then max_facts: the first bad argument is named.
            calls += [
                (
                    "remember_within_limit with a bad end_user_id, content and max_facts",
                    partial(add, MAIN[0], "", "", max_facts=-1),
                    Refusal(InvalidKeyError, "end_user_id", "", rule=15),
                ),
                (
                    "remember_within_limit with bad content and max_facts",
                    partial(add, *MAIN, f"{MARKER}\x00", max_facts=-1),
                    Refusal(InvalidContentError, "content", f"{MARKER}\x00", rule=15),
                ),
            ]
            for what, call, refusal in calls:
                error: BaseException | None = None
                try:
                    await call()
                except Exception as exc:  # noqa: BLE001 - which exception it is, is checked.
                    error = exc
                refusal.verify(what, error)
                for pair, before in watched.items():
                    after = await self._state(store, pair)
                    check(
                        after == before,
                        15,
                        f"{what} raised but changed the facts of key {pair!r} "
                        f"(recall and stored count before {before!r}, after {after!r})",
                    )

    async def test_rule15_many_tasks_at_once_never_pass_the_limit(self) -> None:
        """Rule 15: many tasks adding at once to one key leave exactly max_facts facts."""
        async with self._open() as store:
            limiter = _limiter(store)
            answers: list[Memory | None] = []
            start = anyio.Event()

            async def add(caller: int) -> None:
                await start.wait()
                answers.append(await _within(limiter, MAIN, f"caller {caller}", _LIMIT))

            async with anyio.create_task_group() as group:
                for caller in range(_CALLERS):
                    group.start_soon(add, caller)
                start.set()
            await self._exactly_the_limit(store, MAIN, answers, f"{_CALLERS} tasks at once")

    async def test_rule15_threads_with_their_own_event_loops_never_pass_the_limit(self) -> None:
        """Rule 15: threads each running their own event loop on one store never pass the limit."""
        async with self._open() as store:
            limiter = _limiter(store)
            # Round after round, a fresh key that every thread adds to at once.
            rounds = [(MAIN[0], f"{MAIN[1]}-round-{number}") for number in range(_ROUNDS)]
            answers: dict[Pair, list[Memory | None]] = {pair: [] for pair in rounds}
            failures: list[BaseException] = []
            barrier = threading.Barrier(THREADS)
            backend = self._anyio_backend_name

            async def add_some(thread: int) -> None:
                async def add(pair: Pair, task: int) -> None:
                    content = f"thread {thread} task {task}"
                    answers[pair].append(await _within(limiter, pair, content, _LIMIT))

                for pair in rounds:
                    await anyio.to_thread.run_sync(barrier.wait, BARRIER_TIMEOUT)
                    async with anyio.create_task_group() as group:
                        for task in range(_TASKS_PER_THREAD):
                            group.start_soon(add, pair, task)

            def run_own_loop(thread: int) -> None:
                try:
                    anyio.run(add_some, thread, backend=backend)
                except BaseException as exc:  # noqa: BLE001 - raised below as the rule's failure.
                    # The other threads stop waiting for this one.
                    barrier.abort()
                    # A single failure comes out of the thread's task group in a group.
                    while isinstance(exc, BaseExceptionGroup) and len(exc.exceptions) == 1:
                        exc = exc.exceptions[0]
                    failures.append(exc)

            async with anyio.create_task_group() as group:
                for thread in range(THREADS):
                    group.start_soon(anyio.to_thread.run_sync, run_own_loop, thread)
            for failure in failures:
                if isinstance(failure, RuleViolationError):
                    raise failure
            if failures:
                raise RuleViolationError(
                    15,
                    f"remember_within_limit from threads with their own event loops raised "
                    f"{type(failures[0]).__name__}",
                ) from failures[0]
            for pair in rounds:
                await self._exactly_the_limit(
                    store,
                    pair,
                    answers[pair],
                    f"{THREADS} threads with their own event loops, {_TASKS_PER_THREAD} tasks each",
                )

    async def _added(
        self,
        store: MemoryStore,
        pair: Pair | tuple[object, str],
        content: str,
        max_facts: int,
        held: list[Memory],
    ) -> Memory:
        """Add ``content`` below the limit, checking it was added as remember adds."""
        key = memory_key(cast("Any", pair[0]), pair[1])
        what = f"remember_within_limit on a key holding {len(held)} of max_facts={max_facts}"
        fact = await _within(_limiter(store), pair, content, max_facts)
        if fact is None:
            raise RuleViolationError(15, f"{what} returned None; it must add the fact")
        check(
            fact.key == key and fact.content == content,
            15,
            f"{what} returned a fact of another key or content than given",
        )
        check(
            type(fact.id) is str and fact.id not in ids_of(held),
            15,
            f"{what} returned the id of a fact the key already held, not a fresh one",
        )
        recalled = await store.recall(key.tenant, key.end_user_id)
        check(
            recalled == (*held, fact),
            15,
            f"after {what}, recall returned ids {ids_of(recalled)}, not "
            f"{[*ids_of(held), fact.id]} (the new fact last)",
        )
        stored = await self.count_stored(store, key)
        check(
            stored == len(held) + 1,
            15,
            f"after {what}, the key has {stored} rows stored, not {len(held) + 1}",
        )
        return fact

    async def _refused_at_limit(
        self, store: MemoryStore, limiter: RemembersWithinLimit, max_facts: int, where: str
    ) -> None:
        """A call on a key at or past ``max_facts``: ``None``, and nothing stored."""
        before = await self._state(store, MAIN)
        answer = await _within(limiter, MAIN, "one too many", max_facts)
        check(
            answer is None,
            15,
            f"remember_within_limit on {where} returned a fact; it must return None",
        )
        after = await self._state(store, MAIN)
        check(
            after == before,
            15,
            f"remember_within_limit on {where} returned None but changed the key's facts "
            f"(recall and stored count before {before!r}, after {after!r})",
        )

    async def _exactly_the_limit(
        self, store: MemoryStore, pair: Pair, answers: list[Memory | None], callers: str
    ) -> None:
        added = [answer for answer in answers if answer is not None]
        recalled = await store.recall(*pair)
        stored = await self.count_stored(store, key_of(pair))
        check(
            len(recalled) == _LIMIT and stored == _LIMIT,
            15,
            f"{len(answers)} remember_within_limit calls with max_facts={_LIMIT} from "
            f"{callers} left {len(recalled)} fact(s) ({stored} row(s) stored), not {_LIMIT}",
        )
        check(
            sorted(ids_of(added)) == sorted(ids_of(recalled)),
            15,
            f"{len(answers)} remember_within_limit calls with max_facts={_LIMIT} from "
            f"{callers} returned {len(added)} fact(s), not the {len(recalled)} stored",
        )

    async def _state(self, store: MemoryStore, pair: Pair) -> tuple[list[str], int]:
        return ids_of(await store.recall(*pair)), await self.count_stored(store, key_of(pair))
