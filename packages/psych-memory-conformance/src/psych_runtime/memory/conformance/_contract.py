"""`MemoryStoreContract`: every rule of the port, as checks pytest runs."""

from __future__ import annotations

import inspect
import threading
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable, Mapping
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from datetime import timedelta
from functools import partial
from pathlib import Path
from typing import Any, ClassVar, Final, cast

import anyio
import anyio.from_thread
import anyio.to_thread
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from hypothesis.stateful import run_state_machine_as_test

from psych_runtime.memory.port import (
    MAX_CONTENT_LENGTH,
    MAX_KEY_LENGTH,
    Memory,
    MemoryKey,
    MemoryStore,
)

from ._cancellation import CancellationChecks
from ._capability import CapabilityChecks
from ._cases import (
    BAD_CONTENTS,
    BAD_KEY_PARTS,
    BAD_LIMITS,
    BAD_MEMORY_IDS,
    BARRIER_TIMEOUT,
    CASE,
    CONTENTS,
    EXACT_CONTENTS,
    FACTS_PER_TASK,
    FACTS_PER_THREAD,
    ISOLATION_KEYS,
    JOINED_LEFT,
    JOINED_RIGHT,
    KEY_PARTS,
    MAIN,
    NEAR_MISS_KEYS,
    NORMALISED_NFC,
    NORMALISED_NFD,
    SAME_END_USER,
    SAME_TENANT,
    SWAPPED,
    TASKS,
    THREADS,
    UNKNOWN_IDS,
    BadScope,
    NoTenant,
    Pair,
    ScopeObject,
    ids_of,
    key_of,
    positions,
)
from ._failures import FailureChecks
from ._lifecycle import LifecycleChecks
from ._rules import RuleViolationError
from ._stateful import model_machine
from ._support import BlockingStore, Refusal, check

__all__ = ["MemoryStoreContract"]


class MemoryStoreContract(LifecycleChecks, FailureChecks, CancellationChecks, CapabilityChecks):
    """The port's contract as a test class: subclass it to check a backend.

    Name the subclass so pytest collects it (``TestMyStore``) and give it
    two methods: `open_store`, which yields a fresh, empty store, and
    `count_stored`, a backdoor that counts the rows a key holds in the
    backend itself. Every check then runs against the backend on asyncio and
    on trio (the kit supplies the ``anyio_backend`` fixture).

    Rules 1-6 are checked on every store, and so are 7-9 (lifecycle,
    failures, cancellation); the checks of rules 10-11 run when the store
    provides the port's `ListsEndUsers` or `RestoresFacts` capability, and
    are skipped as not applicable otherwise.

    A check can be marked expected-to-fail, with a reason, in
    `expected_failures`; it cannot be overridden, deleted or skipped: the
    class refuses to be defined, and `test_kit_is_intact` fails, if one is.

    Example:
        ```python
        class TestMyStore(MemoryStoreContract):
            max_examples = 25  # a database: fewer examples, every check

            @asynccontextmanager
            async def open_store(self) -> AsyncIterator[MemoryStore]:
                async with MyStore(self.fresh_path(".db")) as store:
                    yield store

            async def count_stored(self, store: MemoryStore, key: MemoryKey) -> int:
                return await count_rows_directly(store, key)
        ```

    Attributes:
        max_examples: Hypothesis examples per property check. Lower it for a
            backend whose `open_store` is slow; every check still runs.
        max_steps: The most operations in one example of the reference-model
            check.
        cancelled_calls: How many calls each cancellation check (rule 9)
            cuts short. Lower it for a slow backend; every check still runs.
        expected_failures: Check name to reason, for checks this backend is
            known to fail: ``"test_x"`` on both event loops, ``"test_x[trio]"``
            or ``"test_x[asyncio]"`` on one. They run, and are reported as
            expected failures; one that passes fails the run, so the entry is
            removed when the backend is fixed.
        tmp_path: The check's own temporary directory (pytest's
            ``tmp_path``), set before each check; `open_store` may put files
            there. It is shared by every example of a property check, so
            `open_store` must use a fresh name on each call (see
            `fresh_path`).
    """

    # Every check is a coroutine run by anyio's pytest plugin, on both loops.
    pytestmark: ClassVar[list[pytest.MarkDecorator]] = [pytest.mark.anyio]

    max_examples: ClassVar[int] = 100
    max_steps: ClassVar[int] = 30
    cancelled_calls: ClassVar[int] = 100
    expected_failures: ClassVar[Mapping[str, str]] = {}

    tmp_path: Path
    _anyio_backend_name: str
    _paths_handed_out: int

    def open_store(self) -> AbstractAsyncContextManager[MemoryStore]:
        """Yield a fresh, empty, open store for one check or one Hypothesis example.

        Write it as an ``@asynccontextmanager`` method; clean up after the
        ``yield``. It is entered on the event loop the check runs on. The
        lifecycle checks close the store before the ``yield`` returns;
        closing it again on the way out is harmless (rule 7).

        Raises:
            NotImplementedError: The subclass did not provide it.
        """
        raise NotImplementedError(f"{type(self).__name__} must define open_store()")

    async def count_stored(self, store: MemoryStore, key: MemoryKey) -> int:
        """Count the facts ``key`` holds in the backend, looking directly.

        This is the backdoor the port cannot offer: it must see every row,
        record or copy kept for the key, including ones a soft delete would
        hide from `MemoryStore.recall`, so that the kit can tell a real delete
        from a hidden one. It must also work once the store is closed (the
        lifecycle checks count after `MemoryStore.aclose`): count through a
        connection of its own, not the store's.

        Raises:
            NotImplementedError: The subclass did not provide it.
        """
        raise NotImplementedError(f"{type(self).__name__} must define count_stored()")

    def fresh_path(self, suffix: str = "") -> Path:
        """A path inside `tmp_path` that no earlier call returned.

        Args:
            suffix: Appended to the file name, such as ``".db"``.

        Returns:
            A path that does not exist yet, for one store's files.
        """
        self._paths_handed_out += 1
        return self.tmp_path / f"store-{self._paths_handed_out}{suffix}"

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        problems = _tampering(cls)
        if problems:
            raise TypeError(f"{cls.__qualname__}: " + "; ".join(problems))

    # The fixtures the checks rely on. They are part of the kit: overriding
    # anyio_backend would silently drop one event loop.

    @pytest.fixture(params=["asyncio", "trio"])
    def anyio_backend(self, request: pytest.FixtureRequest) -> str:
        """Run every check on asyncio and on trio, both listed explicitly."""
        return cast("str", request.param)

    @pytest.fixture(autouse=True)
    def _conformance_setup(
        self, request: pytest.FixtureRequest, tmp_path: Path, anyio_backend: str
    ) -> None:
        self._prepare(tmp_path, anyio_backend)
        check_name = request.function.__name__
        # "test_x[trio]" marks the check on one event loop, "test_x" on both.
        reason = self.expected_failures.get(f"{check_name}[{anyio_backend}]")
        if reason is None:
            reason = self.expected_failures.get(check_name)
        if reason is not None:
            request.node.add_marker(pytest.mark.xfail(reason=reason, strict=True))

    # Plumbing shared by the checks.

    def _prepare(self, tmp_path: Path, anyio_backend: str) -> None:
        self.tmp_path = tmp_path
        self._anyio_backend_name = anyio_backend
        self._paths_handed_out = 0

    @asynccontextmanager
    async def _open(self) -> AsyncIterator[MemoryStore]:
        async with self.open_store() as store:
            if not isinstance(store, MemoryStore):
                raise TypeError(
                    f"open_store() must yield a MemoryStore, not {type(store).__qualname__}"
                )
            if await store.recall(*MAIN) or await self.count_stored(store, key_of(MAIN)):
                raise AssertionError("open_store() must yield an empty store; this one has facts")
            yield store

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

    async def _forget(self, store: MemoryStore, scope: object, user: str, memory_id: str) -> bool:
        try:
            result = await store.forget(cast("Any", scope), user, memory_id)
        except Exception as exc:
            raise RuleViolationError(
                2, f"forget raised {type(exc).__name__} instead of answering True or False"
            ) from exc
        check(type(result) is bool, 2, f"forget returned {type(result).__name__}, not a bool")
        return result

    def _hypothesis_settings(self, **changes: Any) -> settings:
        # No deadline: a database round trip is slow and its speed is no rule.
        return settings(
            max_examples=self.max_examples,
            deadline=None,
            suppress_health_check=[HealthCheck.too_slow],
            **changes,
        )

    async def _in_worker_thread(
        self, body: Callable[[anyio.from_thread.BlockingPortal], object]
    ) -> None:
        # Hypothesis drives examples synchronously, so it runs in a worker
        # thread and sends every store call back to this loop through a portal.
        failure: Exception | None = None
        async with anyio.from_thread.BlockingPortal() as portal:
            try:
                await anyio.to_thread.run_sync(body, portal)
            except Exception as exc:  # noqa: BLE001 - raised again below, unwrapped.
                failure = exc
        # Raised out here, so that the report shows the broken rule itself
        # rather than an exception group of the portal's task group.
        if failure is not None:
            raise failure

    async def _examples(self, example: Callable[[BlockingStore, st.DataObject], None]) -> None:
        def body(portal: anyio.from_thread.BlockingPortal) -> None:
            @self._hypothesis_settings()
            @given(data=st.data())
            def run(data: st.DataObject) -> None:
                with portal.wrap_async_context_manager(self._open()) as store:
                    example(BlockingStore(portal, store, self.count_stored), data)

            # Tell Hypothesis's example database which check this is: every
            # property check shares this wrapper's source.
            run._hypothesis_internal_add_digest = (  # type: ignore[attr-defined]
                f"{type(self).__module__}.{type(self).__qualname__}.{example.__qualname__}"
            ).encode()
            run()

        await self._in_worker_thread(body)

    # The kit's own integrity.

    async def test_kit_is_intact(self) -> None:
        """Kit: no check of the contract is overridden, deleted or skipped."""
        problems = _tampering(type(self))
        problems += [
            f"{type(self).__qualname__} must define {name}()"
            for name in ("open_store", "count_stored")
            if inspect.getattr_static(type(self), name) is _OWN[name]
        ]
        if problems:
            raise AssertionError("; ".join(problems))

    # Rule 1: remember always adds.

    async def test_rule1_remember_returns_the_stored_fact(self) -> None:
        """Rule 1: remember returns the new fact: a str id, its key and content, a UTC time."""
        async with self._open() as store:
            fact = await store.remember(*MAIN, "prefers the Berlin warehouse")
            check(isinstance(fact, Memory), 1, f"remember returned {type(fact).__name__}")
            check(
                type(fact.id) is str and fact.id != "",
                1,
                "the id of a fact must be a non-empty str",
            )
            check(
                fact.key == key_of(MAIN),
                1,
                f"remember returned key {fact.key!r}, not {key_of(MAIN)!r}",
            )
            check(
                fact.content == "prefers the Berlin warehouse",
                1,
                "remember returned content other than what was given",
            )
            offset = fact.created_at.utcoffset()
            check(
                offset == timedelta(0),
                1,
                f"created_at must be timezone-aware UTC, got offset {offset!r}",
            )
            recalled = await store.recall(*MAIN)
            check(
                recalled == (fact,),
                1,
                "recall does not return the fact exactly as remember returned it",
            )
            check(
                await self.count_stored(store, key_of(MAIN)) == 1,
                1,
                "one remember must store exactly one fact in the backend",
            )

    async def test_rule1_duplicates_are_kept_with_distinct_ids(self) -> None:
        """Rule 1: the same content remembered three times is three facts with three ids."""
        async with self._open() as store:
            facts = [await store.remember(*MAIN, "likes tea") for _ in range(3)]
            check(
                len(set(ids_of(facts))) == 3,
                1,
                f"remembering the same content three times gave ids {ids_of(facts)}",
            )
            recalled = await store.recall(*MAIN)
            check(
                sorted(ids_of(recalled)) == sorted(ids_of(facts)),
                1,
                f"after three identical remembers recall holds {len(recalled)} fact(s), not 3",
            )
            stored = await self.count_stored(store, key_of(MAIN))
            check(stored == 3, 1, f"the backend stores {stored} row(s) for three remembers")

    async def test_rule1_content_is_stored_exactly(self) -> None:
        """Rule 1: content comes back exactly as given, never trimmed, normalised or rewritten."""
        async with self._open() as store:
            for content in EXACT_CONTENTS:
                fact = await store.remember(*MAIN, content)
                check(
                    fact.content == content,
                    1,
                    f"remember rewrote a content of {len(content)} characters",
                )
            recalled = [memory.content for memory in await store.recall(*MAIN)]
            check(
                sorted(recalled) == sorted(EXACT_CONTENTS),
                1,
                "recall returned contents that differ from what was remembered",
            )

        def example(store: BlockingStore, data: st.DataObject) -> None:
            content = data.draw(CONTENTS, label="content")
            fact = store.remember(*MAIN, content)
            (recalled,) = store.recall(*MAIN)
            check(
                fact.content == content and recalled.content == content,
                1,
                f"content {content!r} did not come back exactly",
            )

        await self._examples(example)

    async def test_rule1_ids_are_never_reused(self) -> None:
        """Rule 1: every remember gets an id no earlier fact had, even after forget and erase."""
        async with self._open() as store:
            seen: set[str] = set()
            for round_ in range(3):
                for pair in (MAIN, SAME_TENANT, SAME_END_USER):
                    for index in range(3):
                        fact = await store.remember(*pair, f"fact {index} of round {round_}")
                        check(
                            fact.id not in seen,
                            1,
                            f"id {fact.id!r} was given to two facts",
                        )
                        seen.add(fact.id)
                await self._forget(store, *MAIN, fact.id)
                await store.erase(*SAME_TENANT)

    async def test_rule1_many_tasks_remembering_on_one_key_lose_no_fact(self) -> None:
        """Rule 1: concurrent remembers by many tasks on one key keep every fact exactly once."""
        async with self._open() as store:
            returned: dict[int, list[Memory]] = {}

            async def remember_some(task: int) -> None:
                returned[task] = [
                    await store.remember(*MAIN, f"task {task} fact {index}")
                    for index in range(FACTS_PER_TASK)
                ]

            async with anyio.create_task_group() as group:
                for task in range(TASKS):
                    group.start_soon(remember_some, task)
            await self._verify_concurrent_writes(store, MAIN, returned, "tasks")

    async def test_rule1_threads_sharing_the_event_loop_lose_no_fact(self) -> None:
        """Rule 1: remembers sent from many threads into the store's event loop are all kept."""
        async with self._open() as store:
            returned: dict[int, list[Memory]] = {}
            barrier = threading.Barrier(THREADS)

            def remember_some(thread: int) -> None:
                barrier.wait(BARRIER_TIMEOUT)
                returned[thread] = [
                    anyio.from_thread.run(store.remember, *MAIN, f"thread {thread} fact {index}")
                    for index in range(FACTS_PER_THREAD)
                ]

            async with anyio.create_task_group() as group:
                for thread in range(THREADS):
                    group.start_soon(anyio.to_thread.run_sync, remember_some, thread)
            await self._verify_concurrent_writes(store, MAIN, returned, "threads")

    async def test_rule1_threads_with_their_own_event_loops_lose_no_fact(self) -> None:
        """Rule 1: threads each running their own event loop on one shared store lose no fact."""
        async with self._open() as store:
            returned: dict[int, list[Memory]] = {}
            barrier = threading.Barrier(THREADS)
            backend = self._anyio_backend_name

            async def remember_some(thread: int) -> None:
                returned[thread] = [
                    await store.remember(*MAIN, f"thread {thread} fact {index}")
                    for index in range(FACTS_PER_THREAD)
                ]

            def run_own_loop(thread: int) -> None:
                barrier.wait(BARRIER_TIMEOUT)
                anyio.run(remember_some, thread, backend=backend)

            async with anyio.create_task_group() as group:
                for thread in range(THREADS):
                    group.start_soon(anyio.to_thread.run_sync, run_own_loop, thread)
            await self._verify_concurrent_writes(store, MAIN, returned, "threads")

    async def _verify_concurrent_writes(
        self,
        store: MemoryStore,
        pair: Pair,
        returned: Mapping[int, list[Memory]],
        workers: str,
    ) -> None:
        every = [fact for facts in returned.values() for fact in facts]
        check(
            len(set(ids_of(every))) == len(every),
            1,
            f"{len(every)} concurrent remembers from {len(returned)} {workers} "
            f"returned only {len(set(ids_of(every)))} distinct ids",
        )
        recalled = await store.recall(*pair)
        check(
            sorted(ids_of(recalled)) == sorted(ids_of(every)),
            1,
            f"{len(every)} concurrent remembers from {len(returned)} {workers} "
            f"left {len(recalled)} fact(s) ({len(set(ids_of(recalled)))} distinct); "
            "facts were lost or duplicated",
        )
        stored = await self.count_stored(store, key_of(pair))
        check(
            stored == len(every),
            1,
            f"{len(every)} concurrent remembers left {stored} row(s) in the backend",
        )
        position = {memory.id: index for index, memory in enumerate(recalled)}
        for worker, facts in returned.items():
            order = [position[fact.id] for fact in facts]
            if order != sorted(order):
                raise RuleViolationError(
                    3,
                    f"the facts one of the {workers} ({worker}) remembered one after "
                    "another come back out of order",
                )

    # Rule 2: forget answers True or False and deletes only its own fact.

    async def test_rule2_forget_deletes_exactly_that_fact(self) -> None:
        """Rule 2: forget of a stored id returns True and deletes that fact and no other."""
        async with self._open() as store:
            facts = [await store.remember(*MAIN, f"fact {index}") for index in range(3)]
            check(
                await self._forget(store, *MAIN, facts[1].id),
                2,
                "forget of a stored fact's id returned False",
            )
            remaining = ids_of(await store.recall(*MAIN))
            check(
                sorted(remaining) == sorted([facts[0].id, facts[2].id]),
                2,
                f"after forgetting the middle one of 3 facts recall returned {len(remaining)}",
            )
            stored = await self.count_stored(store, key_of(MAIN))
            check(
                stored == 2,
                2,
                f"forget returned True but the backend still holds {stored} row(s) of 2 "
                "remaining facts (a soft delete keeps what forget must delete)",
            )

    async def test_rule2_forget_of_a_gone_id_is_false(self) -> None:
        """Rule 2: forget of an id already forgotten or erased returns False and deletes nothing."""
        async with self._open() as store:
            first = await store.remember(*MAIN, "first")
            kept = await store.remember(*MAIN, "kept")
            check(await self._forget(store, *MAIN, first.id), 2, "forget of a stored id gave False")
            check(
                not await self._forget(store, *MAIN, first.id),
                2,
                "forgetting the same id twice returned True the second time",
            )
            check(
                ids_of(await store.recall(*MAIN)) == [kept.id],
                2,
                "a second forget of a gone id deleted another fact",
            )
            await store.erase(*MAIN)
            check(await store.recall(*MAIN) == (), 4, "erase left facts that recall still returns")
            check(
                not await self._forget(store, *MAIN, kept.id),
                2,
                "forget of an erased fact's id returned True",
            )

    async def test_rule2_forget_of_an_unknown_id_is_false(self) -> None:
        """Rule 2: forget of an unknown or malformed id returns False and deletes nothing."""
        async with self._open() as store:
            facts = [await store.remember(*MAIN, f"fact {index}") for index in range(2)]
            near = facts[0].id
            candidates = [
                *UNKNOWN_IDS,
                near + " ",
                " " + near,
                "0" + near,
                near + "\x00",
                near[:-1],
                near.upper() if near.upper() != near else near.lower(),
            ]
            for candidate in candidates:
                if candidate in ids_of(facts):
                    continue
                check(
                    not await self._forget(store, *MAIN, candidate),
                    2,
                    f"forget of an id no fact has ({len(candidate)} characters) returned True",
                )
            check(
                sorted(ids_of(await store.recall(*MAIN))) == sorted(ids_of(facts)),
                2,
                "forget of unknown ids deleted facts",
            )
            check(
                await self.count_stored(store, key_of(MAIN)) == 2,
                2,
                "forget of unknown ids changed the rows stored for the key",
            )
            check(
                not await self._forget(store, *SAME_TENANT, "unknown"),
                2,
                "forget on a key with no facts returned True",
            )

    async def test_rule2_forget_of_another_keys_id_is_false(self) -> None:
        """Rule 2: forget under another end user or tenant returns False and keeps the fact."""
        async with self._open() as store:
            fact = await store.remember(*MAIN, "belongs to acme/user-1")
            for other in (SAME_TENANT, SAME_END_USER, SWAPPED, CASE):
                check(
                    not await self._forget(store, *other, fact.id),
                    2,
                    f"forget under key {other!r} of a fact of key {MAIN!r} returned True",
                )
            check(
                ids_of(await store.recall(*MAIN)) == [fact.id],
                2,
                "forget under another key deleted the owner's fact",
            )
            check(
                await self.count_stored(store, key_of(MAIN)) == 1,
                2,
                "forget under another key changed the owner's stored rows",
            )

    async def test_rule2_many_tasks_forgetting_one_fact_succeed_once(self) -> None:
        """Rule 2: of many concurrent forgets of one id exactly one returns True."""
        async with self._open() as store:
            target = await store.remember(*MAIN, "forgotten concurrently")
            kept = await store.remember(*MAIN, "kept")
            answers: list[bool] = []

            async def forget_it() -> None:
                answers.append(await self._forget(store, *MAIN, target.id))

            async with anyio.create_task_group() as group:
                for _ in range(TASKS):
                    group.start_soon(forget_it)
            check(
                answers.count(True) == 1,
                2,
                f"{len(answers)} concurrent forgets of one id returned True "
                f"{answers.count(True)} times",
            )
            check(
                ids_of(await store.recall(*MAIN)) == [kept.id],
                2,
                "concurrent forgets of one id deleted another fact",
            )

    # Rule 3: recall returns every fact, oldest first; limit truncates.

    async def test_rule3_recall_is_oldest_first(self) -> None:
        """Rule 3: recall returns every fact of the key in insertion order, oldest first."""
        async with self._open() as store:
            # Remembered back to back, many share a timestamp at any clock
            # resolution; only insertion order can put them right.
            facts = [await store.remember(*MAIN, f"fact {index:02}") for index in range(30)]
            recalled = await store.recall(*MAIN)
            check(type(recalled) is tuple, 3, f"recall returned a {type(recalled).__name__}")
            check(
                ids_of(recalled) == ids_of(facts),
                3,
                "recall did not return the facts oldest first in insertion order "
                f"(insertion positions {positions(facts, recalled)})",
            )

    async def test_rule3_limit_takes_the_oldest(self) -> None:
        """Rule 3: recall with limit=n returns the n oldest facts; limit=None all; limit=0 ()."""
        async with self._open() as store:
            facts = [await store.remember(*MAIN, f"fact {index}") for index in range(5)]
            for limit in (None, 0, 1, 2, 4, 5, 6, 100):
                recalled = await store.recall(*MAIN, limit=limit)
                expected = facts if limit is None else facts[:limit]
                check(
                    type(recalled) is tuple and ids_of(recalled) == ids_of(expected),
                    3,
                    f"recall(limit={limit}) of 5 facts returned insertion positions "
                    f"{positions(facts, recalled)}, expected {list(range(len(expected)))}",
                )

    async def test_rule3_recall_of_an_empty_key_is_empty(self) -> None:
        """Rule 3: recall of a key with no facts returns (), with or without a limit."""
        async with self._open() as store:
            await store.remember(*SAME_TENANT, "someone else's fact")
            for limit in (None, 0, 3):
                recalled = await store.recall(*MAIN, limit=limit)
                check(
                    recalled == () and type(recalled) is tuple,
                    3,
                    f"recall(limit={limit}) of a key with no facts returned {recalled!r}",
                )

    async def test_rule3_order_survives_forget(self) -> None:
        """Rule 3: after forgetting some facts the rest keep their insertion order."""
        async with self._open() as store:
            facts = [await store.remember(*MAIN, f"fact {index}") for index in range(8)]
            for index in (0, 3, 7):
                await self._forget(store, *MAIN, facts[index].id)
            later = await store.remember(*MAIN, "remembered after the forgets")
            expected = [facts[index].id for index in (1, 2, 4, 5, 6)] + [later.id]
            check(
                ids_of(await store.recall(*MAIN)) == expected,
                3,
                "after forgetting facts 0, 3 and 7 of 8 and adding one, recall is out of order",
            )
            check(
                ids_of(await store.recall(*MAIN, limit=2)) == expected[:2],
                3,
                "after forgets, recall(limit=2) did not return the two oldest remaining facts",
            )

    async def test_rule3_recall_changes_nothing(self) -> None:
        """Rule 3: recall only reads; repeated recalls return the same facts and delete none."""
        async with self._open() as store:
            facts = [await store.remember(*MAIN, f"fact {index}") for index in range(3)]
            for limit in (None, 1, 0, None):
                await store.recall(*MAIN, limit=limit)
            check(
                ids_of(await store.recall(*MAIN)) == ids_of(facts),
                3,
                "repeated recalls changed the facts of the key",
            )
            check(
                await self.count_stored(store, key_of(MAIN)) == 3,
                3,
                "recall changed the rows stored for the key",
            )

    # Rule 4: erase deletes everything of the key, for good, and counts it.

    async def test_rule4_erase_counts_and_deletes_everything(self) -> None:
        """Rule 4: erase returns how many facts it deleted and leaves none, not even hidden rows."""
        async with self._open() as store:
            facts = [await store.remember(*MAIN, f"fact {index}") for index in range(4)]
            await self._forget(store, *MAIN, facts[0].id)
            erased = await store.erase(*MAIN)
            check(
                type(erased) is int and erased == 3,
                4,
                f"erase of a key holding 3 facts (one more forgotten) returned {erased!r}",
            )
            check(await store.recall(*MAIN) == (), 4, "recall after erase is not ()")
            stored = await self.count_stored(store, key_of(MAIN))
            check(
                stored == 0,
                4,
                f"after erase the backend still holds {stored} row(s) for the key "
                "(a soft delete, tombstone or retained copy)",
            )
            for fact in facts:
                check(
                    not await self._forget(store, *MAIN, fact.id),
                    4,
                    "forget of an erased fact's id returned True",
                )

    async def test_rule4_erase_of_an_empty_key_is_zero(self) -> None:
        """Rule 4: erase of a key with no facts, or erased already, returns 0."""
        async with self._open() as store:
            erased = await store.erase(*MAIN)
            check(erased == 0, 4, f"erase of a key that never had facts returned {erased!r}")
            await store.remember(*MAIN, "fact")
            check(await store.erase(*MAIN) == 1, 4, "erase of a key with 1 fact did not return 1")
            erased = await store.erase(*MAIN)
            check(erased == 0, 4, f"a second erase of the same key returned {erased!r}")

    async def test_rule4_erased_facts_never_come_back(self) -> None:
        """Rule 4: after erase, new facts of the key start from nothing; old ones never reappear."""
        async with self._open() as store:
            old = [await store.remember(*MAIN, f"old {index}") for index in range(3)]
            await store.erase(*MAIN)
            new = await store.remember(*MAIN, "new")
            check(
                ids_of(await store.recall(*MAIN)) == [new.id],
                4,
                "after erase and one remember, recall holds more than the new fact",
            )
            check(new.id not in ids_of(old), 1, "a fact remembered after erase reused an old id")
            stored = await self.count_stored(store, key_of(MAIN))
            check(stored == 1, 4, f"after erase and one remember the backend holds {stored} rows")

    async def test_rule4_erase_racing_remembers_counts_every_fact_once(self) -> None:
        """Rule 4: erases racing remembers count every fact that is not left, exactly once."""
        async with self._open() as store:
            remembered: list[Memory] = []
            erased: list[int] = []

            async def remember_some(task: int) -> None:
                remembered.extend(
                    [
                        await store.remember(*MAIN, f"task {task} fact {index}")
                        for index in range(FACTS_PER_TASK)
                    ]
                )

            async def erase_once() -> None:
                erased.append(await store.erase(*MAIN))

            async with anyio.create_task_group() as group:
                for task in range(TASKS):
                    group.start_soon(remember_some, task)
                    if task % 8 == 0:
                        group.start_soon(erase_once)
            left = await store.recall(*MAIN)
            check(
                sum(erased) + len(left) == len(remembered),
                4,
                f"{len(remembered)} facts were remembered while erase ran {len(erased)} times: "
                f"the erases counted {sum(erased)} and {len(left)} are left",
            )
            stored = await self.count_stored(store, key_of(MAIN))
            check(
                stored == len(left),
                4,
                f"recall shows {len(left)} fact(s) but the backend holds {stored} row(s)",
            )

    # Rule 5: every call touches only its own key.

    async def test_rule5_tenants_and_end_users_are_isolated(self) -> None:
        """Rule 5: remember, recall, forget and erase on one key never touch another key's facts."""
        async with self._open() as store:
            facts = {
                pair: await store.remember(*pair, f"fact of {pair!r}") for pair in ISOLATION_KEYS
            }
            for pair, fact in facts.items():
                memories = await store.recall(*pair)
                check(
                    all(memory.key == key_of(pair) for memory in memories),
                    5,
                    f"recall of key {pair!r} returned a fact carrying another key",
                )
                recalled = ids_of(memories)
                check(
                    recalled == [fact.id],
                    5,
                    f"recall of key {pair!r} returned {len(recalled)} fact(s); it holds exactly 1 "
                    "(keys are mixed up)",
                )
                check(fact.key == key_of(pair), 5, f"a fact of {pair!r} carries key {fact.key!r}")
            for pair, fact in facts.items():
                for other in ISOLATION_KEYS:
                    if other != pair:
                        check(
                            not await self._forget(store, *other, fact.id),
                            5,
                            f"forget under key {other!r} deleted a fact of key {pair!r}",
                        )
            await store.erase(*MAIN)
            for pair, fact in facts.items():
                if pair == MAIN:
                    continue
                check(
                    ids_of(await store.recall(*pair)) == [fact.id]
                    and await self.count_stored(store, key_of(pair)) == 1,
                    5,
                    f"erase of {MAIN!r} touched the facts of key {pair!r}",
                )

    async def test_rule5_a_scope_object_and_its_tenant_string_are_one_key(self) -> None:
        """Rule 5: a scope object with `tenant` addresses the same key as that tenant string."""
        async with self._open() as store:
            tenant, user = MAIN
            by_object = await store.remember(
                ScopeObject(tenant), user, "stored through a scope object"
            )
            by_string = await store.remember(tenant, user, "stored through a string")
            check(
                by_object.key == key_of(MAIN),
                5,
                f"remember with a scope object gave key {by_object.key!r}, not {key_of(MAIN)!r}",
            )
            expected = sorted([by_object.id, by_string.id])
            for scope in (
                tenant,
                ScopeObject(tenant),
                ScopeObject(tenant, thread="another conversation"),
            ):
                check(
                    sorted(ids_of(await store.recall(scope, user))) == expected,
                    5,
                    f"recall with scope {scope!r} does not see the facts of tenant {tenant!r}",
                )
            check(
                await store.recall(ScopeObject(SAME_END_USER[0]), user) == (),
                5,
                "a scope object of another tenant sees this tenant's facts",
            )
            check(
                await self._forget(store, ScopeObject(tenant), user, by_string.id),
                5,
                "forget with a scope object could not delete a fact stored with its tenant string",
            )
            await store.remember(tenant, user, "stored through a string again")
            check(
                await store.erase(ScopeObject(tenant, thread="other"), user) > 0,
                5,
                "erase with a scope object did not reach the facts stored with its tenant string",
            )

    async def test_rule5_keys_are_compared_exactly(self) -> None:
        """Rule 5: keys differing only in case, Unicode normalisation or separators never meet."""
        async with self._open() as store:
            for left, right in (
                (MAIN, CASE),
                (NORMALISED_NFC, NORMALISED_NFD),
                (JOINED_LEFT, JOINED_RIGHT),
            ):
                fact = await store.remember(*left, "left")
                check(
                    await store.recall(*right) == (),
                    5,
                    f"key {right!r} sees the facts of key {left!r}",
                )
                check(
                    await store.erase(*right) == 0
                    and ids_of(await store.recall(*left)) == [fact.id],
                    5,
                    f"erase of key {right!r} deleted the facts of key {left!r}",
                )

        def example(store: BlockingStore, data: st.DataObject) -> None:
            first = (data.draw(KEY_PARTS, label="tenant"), data.draw(KEY_PARTS, label="end user"))
            second = (data.draw(KEY_PARTS, label="tenant"), data.draw(KEY_PARTS, label="end user"))
            fact = store.remember(*first, "fact")
            check(fact.key == key_of(first), 5, f"remember under {first!r} gave key {fact.key!r}")
            check(
                ids_of(store.recall(*first)) == [fact.id],
                5,
                f"recall under {first!r} does not return its one fact",
            )
            if second != first:
                check(
                    store.recall(*second) == (),
                    5,
                    f"key {second!r} sees the facts of key {first!r}",
                )
                check(
                    not store.forget(*second, fact.id),
                    5,
                    f"forget under {second!r} deleted a fact of {first!r}",
                )

        await self._examples(example)

    async def test_rule5_many_tasks_on_separate_keys_stay_apart(self) -> None:
        """Rule 5: concurrent calls on many keys leave each key exactly its own facts."""
        async with self._open() as store:
            kept: dict[int, list[str]] = {}

            async def work(task: int) -> None:
                pair = ("acme", f"user-{task}")
                facts = [
                    await store.remember(*pair, f"fact {index}") for index in range(FACTS_PER_TASK)
                ]
                await self._forget(store, *pair, facts[1].id)
                kept[task] = [fact.id for index, fact in enumerate(facts) if index != 1]

            async with anyio.create_task_group() as group:
                for task in range(TASKS):
                    group.start_soon(work, task)
            for task, expected in kept.items():
                pair = ("acme", f"user-{task}")
                recalled = ids_of(await store.recall(*pair))
                check(
                    sorted(recalled) == sorted(expected),
                    5,
                    f"after concurrent work on {TASKS} keys, key {pair!r} holds "
                    f"{len(recalled)} fact(s) instead of its own {len(expected)}",
                )

    # Rule 6: invalid input raises and changes nothing.

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
        async with self._open() as store:
            await store.remember(*MAIN, "already stored")
            baseline = await self._snapshot(store, (MAIN,))
            for label, value, expected in BAD_CONTENTS:
                await self._refused(
                    store,
                    f"remember with content {label}",
                    partial(cast("Any", store).remember, *MAIN, value),
                    Refusal(expected, "content", value),
                    baseline,
                )

    async def test_rule6_invalid_limit_is_refused(self) -> None:
        """Rule 6: a negative, bool or non-int limit raises InvalidLimitError or TypeError."""
        async with self._open() as store:
            await store.remember(*MAIN, "already stored")
            baseline = await self._snapshot(store, (MAIN,))
            for label, value, expected in BAD_LIMITS:
                await self._refused(
                    store,
                    f"recall with limit {label}",
                    partial(cast("Any", store).recall, *MAIN, limit=value),
                    Refusal(expected, "limit", value),
                    baseline,
                )

    async def test_rule6_invalid_memory_id_is_refused_and_deletes_nothing(self) -> None:
        """Rule 6: a memory_id that is not a str raises TypeError and deletes nothing."""
        async with self._open() as store:
            await store.remember(*MAIN, "already stored")
            baseline = await self._snapshot(store, (MAIN,))
            for label, value in BAD_MEMORY_IDS:
                await self._refused(
                    store,
                    f"forget with memory_id {label}",
                    partial(cast("Any", store).forget, *MAIN, value),
                    Refusal(TypeError, "memory_id", value),
                    baseline,
                )
            fact = (await store.recall(*MAIN))[0]
            await self._refused(
                store,
                "forget with a stored fact's id as bytes",
                partial(cast("Any", store).forget, *MAIN, fact.id.encode()),
                Refusal(TypeError, "memory_id", None),
                baseline,
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

    # All rules at once, against a model.

    async def test_rules_hold_for_random_call_sequences(self) -> None:
        """Rules 1-6: random interleavings of calls on four keys match a reference model."""
        options = self._hypothesis_settings(stateful_step_count=self.max_steps)

        def body(portal: anyio.from_thread.BlockingPortal) -> None:
            machine = model_machine(portal, self._open, self.count_stored)
            run_state_machine_as_test(machine, settings=options)

        await self._in_worker_thread(body)


def _kit_members() -> dict[str, object]:
    # The contract class and the groups of checks it inherits, the class's
    # own definitions winning, as attribute lookup would have it.
    members: dict[str, object] = {}
    for klass in reversed(MemoryStoreContract.__mro__[:-1]):
        members.update(vars(klass))
    return members


# The kit's own members a subclass must leave alone: every check, and the
# fixtures that run them on both event loops.
_OWN: Final[Mapping[str, object]] = _kit_members()
_PROTECTED: Final = tuple(
    name
    for name in _OWN
    if name.startswith("test") or name in {"anyio_backend", "_conformance_setup"}
)
CHECKS: Final = tuple(name for name in _PROTECTED if name.startswith("test"))


def _tampering(cls: type) -> list[str]:
    problems: list[str] = []
    for name in _PROTECTED:
        found = inspect.getattr_static(cls, name, None)
        if found is not _OWN[name]:
            problems.append(
                f"{name} is a check of the conformance kit and cannot be overridden or "
                "deleted; list it in expected_failures with a reason instead"
            )
    failures = getattr(cls, "expected_failures", {})
    if not isinstance(failures, Mapping):
        problems.append("expected_failures must map check names to reasons")
    else:
        for name, reason in failures.items():
            check_name, bracket, loop = str(name).partition("[")
            if check_name not in CHECKS or (bracket and loop not in {"asyncio]", "trio]"}):
                problems.append(f"expected_failures names {name!r}, which is no check of the kit")
            elif not isinstance(reason, str) or not reason.strip():
                problems.append(f"expected_failures[{name!r}] needs a reason")
    if any(getattr(mark, "name", None) in {"skip", "skipif"} for mark in _marks(cls)):
        problems.append(
            "a contract class cannot be skipped; mark single checks in expected_failures"
        )
    for setting in ("max_examples", "max_steps", "cancelled_calls"):
        value = getattr(cls, setting, None)
        if type(value) is not int or value < 1:
            problems.append(f"{setting} must be an int >= 1")
    return problems


def _marks(cls: type) -> list[object]:
    marks = getattr(cls, "pytestmark", [])
    return list(marks) if isinstance(marks, list | tuple) else [marks]
