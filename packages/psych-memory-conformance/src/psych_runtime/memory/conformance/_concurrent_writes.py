"""Rule 1 under concurrency: many tasks and threads remembering at once lose no fact."""

from __future__ import annotations

import threading
from collections.abc import Mapping

import anyio
import anyio.from_thread
import anyio.to_thread

from psych_runtime.memory.port import Memory, MemoryStore

from ._cases import (
    BARRIER_TIMEOUT,
    FACTS_PER_TASK,
    FACTS_PER_THREAD,
    MAIN,
    TASKS,
    THREADS,
    Pair,
    ids_of,
    key_of,
)
from ._harness import Harness
from ._rules import RuleViolationError
from ._support import check

__all__ = ["ConcurrentWriteChecks"]


class ConcurrentWriteChecks(Harness):
    """Checks of rule 1 with many writers on one key: tasks, threads, and threads' own loops.

    An unguarded read-modify-write loses facts only when writers overlap, so
    each check starts them together and then counts what every writer got.
    """

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
