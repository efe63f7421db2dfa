"""Concurrency: real threads with their own event loops, and many tasks."""

from __future__ import annotations

import threading
from collections import Counter

import anyio
import pytest

from psych_runtime.memory.inproc import InProcessMemory
from psych_runtime.memory.port import Memory

THREADS = 16
PER_THREAD = 300
CHURN = 1000


pytestmark = pytest.mark.usefixtures("switch_threads_often")


def test_threads_each_running_their_own_loop_lose_nothing() -> None:
    memory = InProcessMemory()
    results: list[list[Memory]] = [[] for _ in range(THREADS)]
    start = threading.Barrier(THREADS)

    async def worker(index: int) -> None:
        start.wait()
        own = f"user-{index}"
        for i in range(PER_THREAD):
            # Half the writes go to keys every thread creates at about the
            # same moment, where a missing lock would lose a table.
            user = f"shared-{i // 10}" if i % 2 else own
            results[index].append(await memory.remember("acme", user, f"{index}:{i}"))
            if i % 10 == 0:
                await memory.recall("acme", "shared", limit=5)

    threads = [
        threading.Thread(
            target=anyio.run,
            args=(worker, index),
            kwargs={"backend": ("asyncio", "trio")[index % 2]},
        )
        for index in range(THREADS)
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()

    written = [fact for facts in results for fact in facts]
    assert len(written) == THREADS * PER_THREAD
    assert len({fact.id for fact in written}) == len(written)

    for round_ in range(PER_THREAD // 10):
        user = f"shared-{round_}"
        shared = anyio.run(memory.recall, "acme", user)
        assert Counter(f.content for f in shared) == Counter(
            f.content for f in written if f.key.end_user_id == user
        )
    for index in range(THREADS):
        own = anyio.run(memory.recall, "acme", f"user-{index}")
        # Each thread's own key holds exactly its writes, in the order it made them.
        assert own == tuple(f for f in results[index] if f.key.end_user_id == f"user-{index}")


def test_threads_forgetting_and_erasing_concurrently() -> None:
    memory = InProcessMemory()
    facts = [anyio.run(memory.remember, "acme", "u1", f"fact {i}") for i in range(2000)]
    forgotten: list[int] = [0] * THREADS
    start = threading.Barrier(THREADS)

    async def worker(index: int) -> None:
        start.wait()
        for fact in facts:
            # Every thread tries every fact: each must be forgotten exactly once.
            if await memory.forget("acme", "u1", fact.id):
                forgotten[index] += 1

    threads = [
        threading.Thread(target=anyio.run, args=(worker, i), kwargs={"backend": "trio"})
        for i in range(THREADS)
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert sum(forgotten) == len(facts)
    assert anyio.run(memory.recall, "acme", "u1") == ()


@pytest.mark.anyio
async def test_thousands_of_tasks_in_one_loop() -> None:
    memory = InProcessMemory()
    written: list[Memory] = []

    async def task(index: int) -> None:
        fact = await memory.remember("acme", f"user-{index % 7}", f"fact {index}")
        written.append(fact)
        await memory.recall("acme", f"user-{index % 7}")

    async with anyio.create_task_group() as group:
        for index in range(5000):
            group.start_soon(task, index)

    assert len({fact.id for fact in written}) == 5000
    erased = 0
    for user in range(7):
        assert {f.id for f in await memory.recall("acme", f"user-{user}")} == {
            f.id for f in written if f.key.end_user_id == f"user-{user}"
        }
        erased += await memory.erase("acme", f"user-{user}")
    assert erased == 5000


def test_threads_emptying_and_refilling_one_key_lose_nothing() -> None:
    # The key's table is dropped when its last fact goes and recreated by the
    # next remember: without the lock a fact could land in a dropped table.
    memory = InProcessMemory()
    misses = [0] * THREADS
    start = threading.Barrier(THREADS)

    async def worker(index: int) -> None:
        start.wait()
        for i in range(CHURN):
            fact = await memory.remember("acme", "churn", f"{index}:{i}")
            if not await memory.forget("acme", "churn", fact.id):
                misses[index] += 1

    threads = [
        threading.Thread(target=anyio.run, args=(worker, i), kwargs={"backend": "asyncio"})
        for i in range(THREADS)
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert misses == [0] * THREADS
    assert anyio.run(memory.recall, "acme", "churn") == ()


def test_threads_adding_within_a_limit_never_pass_it() -> None:
    # Round after round, every thread adds to one fresh key at the same
    # moment, more often than the limit allows: a count and an add in two
    # steps let several threads through.
    memory = InProcessMemory()
    rounds, limit, calls = 200, 3, 2
    added = [0] * THREADS
    start = threading.Barrier(THREADS)

    async def worker(index: int) -> None:
        for round_ in range(rounds):
            start.wait()
            for call in range(calls):
                content = f"{index}:{call}"
                user = f"limited-{round_}"
                if await memory.remember_within_limit("acme", user, content, max_facts=limit):
                    added[index] += 1

    threads = [
        threading.Thread(
            target=anyio.run,
            args=(worker, index),
            kwargs={"backend": ("asyncio", "trio")[index % 2]},
        )
        for index in range(THREADS)
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert sum(added) == rounds * limit
    for round_ in range(rounds):
        assert len(anyio.run(memory.recall, "acme", f"limited-{round_}")) == limit
