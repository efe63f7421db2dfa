"""Erasing a large key: at once for every caller, freed in small steps behind their backs."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from datetime import UTC, datetime

import anyio
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from psych_runtime.memory.inproc import InProcessMemory
from psych_runtime.memory.inproc._facts import Facts
from psych_runtime.memory.inproc._memory import ERASED_AT_ONCE
from psych_runtime.memory.inproc._reaper import REAPER, Reaper
from psych_runtime.memory.port import InvalidInputError, Memory, MemoryKey

WHEN = datetime(2024, 5, 17, 8, 30, 0, 123456, tzinfo=UTC)
BIG = MemoryKey("acme", "big")
# Large enough that erase hands the facts to the reaper, in several steps.
LARGE = 3 * ERASED_AT_ONCE + 17
THREADS = 6


def facts_of(key: MemoryKey, count: int, prefix: str = "f", content: str = "fact") -> list[Memory]:
    return [Memory(f"{prefix}{number}", key, content, WHEN) for number in range(count)]


def settled(memory: InProcessMemory) -> dict[str, Facts]:
    """The id index once every erase so far is taken apart, checked against the table."""
    assert REAPER.wait(timeout=60)
    index = memory._id_index
    assert index is not None
    held = {memory_id: facts for facts in memory._facts.values() for memory_id in facts}
    # Exactly the ids held, each naming the table that holds it: no stale
    # entry left behind, none of a live fact deleted.
    assert index.keys() == held.keys()
    assert all(index[memory_id] is facts for memory_id, facts in held.items())
    return index


pytestmark = pytest.mark.usefixtures("switch_threads_often")


def test_an_erase_racing_restores_and_recalls_keeps_every_fact_and_the_index_exact() -> None:
    memory = InProcessMemory()
    big = facts_of(BIG, LARGE)
    anyio.run(memory.restore_many, big)
    others = [MemoryKey("acme", f"other-{index}") for index in range(THREADS)]
    for key in others:
        anyio.run(memory.restore_many, facts_of(key, 50, prefix=f"{key.end_user_id}-"))
    start = threading.Barrier(THREADS + 1)
    erased: list[int] = []
    problems: list[str] = []
    # Thread i restores again every THREADS-th id of the erased key: the
    # same fact to the same key for even i, another fact to its own key for
    # odd i. Meanwhile it reads its own key, which the erase must not touch.
    again = {
        index: [fact for number, fact in enumerate(big) if number % THREADS == index]
        for index in range(THREADS)
    }

    returned = threading.Event()

    async def eraser() -> None:
        start.wait()
        erased.append(await memory.erase("acme", "big"))
        returned.set()

    async def reads(own: MemoryKey, expected: tuple[Memory, ...]) -> None:
        held = await memory.recall(own.tenant, own.end_user_id)
        if held[: len(expected)] != expected:
            problems.append(f"recall of {own} lost facts during the erase")
        page = await memory.recall_page(own.tenant, own.end_user_id, size=10)
        if page != expected[:10]:
            problems.append(f"a page of {own} changed during the erase")

    async def worker(index: int) -> None:
        own = others[index]
        expected = await memory.recall(own.tenant, own.end_user_id)
        start.wait()
        while not returned.is_set():
            await reads(own, expected)
        # Restored again while the reaper takes the erased facts apart.
        for number, fact in enumerate(again[index]):
            moved = fact if index % 2 == 0 else Memory(fact.id, own, "moved", WHEN)
            if not await memory.restore(moved):
                problems.append(f"restore of {fact.id} found it held")
            if number % 7 == 0:
                await reads(own, expected)

    threads = [threading.Thread(target=anyio.run, args=(eraser,), kwargs={"backend": "trio"})]
    threads += [
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

    assert erased == [LARGE]
    assert problems == []
    index = settled(memory)
    restored_again = {
        fact.id for index_, facts in again.items() if index_ % 2 == 0 for fact in facts
    }
    assert {memory_id for memory_id in index if memory_id.startswith("f")} == {
        fact.id for facts in again.values() for fact in facts
    }
    assert {fact.id for fact in anyio.run(memory.recall, "acme", "big")} == restored_again
    # The index entries the erase left stale name no fact: each id is free
    # again or held by what was restored since, and restore judges by that.
    for fact in big:
        if fact.id in restored_again or fact.id not in index:
            assert anyio.run(memory.restore, fact) is (fact.id not in index)
        else:
            with pytest.raises(InvalidInputError):
                anyio.run(memory.restore, fact)


entries = st.lists(
    st.tuples(st.integers(0, LARGE - 1), st.sampled_from(["same", "other key", "other content"])),
    max_size=20,
)


@settings(
    max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(again=entries, erase_again=st.booleans())
def test_a_step_of_the_reaper_never_drops_the_entry_of_a_fact_restored_since(
    again: list[tuple[int, str]], erase_again: bool
) -> None:
    memory = InProcessMemory()
    big = facts_of(BIG, LARGE)
    anyio.run(memory.restore_many, big)
    assert anyio.run(memory.erase, "acme", "big") == LARGE
    # Restored at once, while the reaper may not even have started.
    stored: dict[str, Memory] = {}
    for number, how in again:
        fact = big[number]
        if how == "other key":
            fact = Memory(fact.id, MemoryKey("acme", "elsewhere"), fact.content, WHEN)
        elif how == "other content":
            fact = Memory(fact.id, BIG, "other content", WHEN)
        if fact.id in stored and stored[fact.id] == fact:
            assert anyio.run(memory.restore, fact) is False
            continue
        if fact.id in stored:
            with pytest.raises(InvalidInputError):
                anyio.run(memory.restore, fact)
            continue
        assert anyio.run(memory.restore, fact) is True
        stored[fact.id] = fact
    if erase_again:
        # A second erase of the key, maybe before the first is taken apart.
        held = [fact for fact in stored.values() if fact.key == BIG]
        assert anyio.run(memory.erase, "acme", "big") == len(held)
        stored = {memory_id: fact for memory_id, fact in stored.items() if fact.key != BIG}
    index = settled(memory)
    assert index.keys() == stored.keys()
    for fact in stored.values():
        assert anyio.run(memory.restore, fact) is False
        with pytest.raises(InvalidInputError):
            anyio.run(memory.restore, Memory(fact.id, fact.key, "yet another", WHEN))


def test_a_small_erase_is_done_under_the_lock_and_a_large_one_by_the_reaper() -> None:
    memory = InProcessMemory()
    anyio.run(memory.restore_many, facts_of(BIG, ERASED_AT_ONCE))
    anyio.run(memory.restore_many, facts_of(MemoryKey("acme", "larger"), ERASED_AT_ONCE + 1, "g"))
    index = memory._id_index
    assert index is not None
    assert anyio.run(memory.erase, "acme", "big") == ERASED_AT_ONCE
    # Nothing left for anyone else to do.
    assert not any(memory_id.startswith("f") for memory_id in index)
    assert anyio.run(memory.erase, "acme", "larger") == ERASED_AT_ONCE + 1
    assert anyio.run(memory.recall, "acme", "larger") == ()
    assert settled(memory) == {}


def test_a_store_that_never_restored_frees_a_large_erase_without_an_index() -> None:
    memory = InProcessMemory()

    async def fill() -> None:
        for number in range(LARGE):
            await memory.remember("acme", "big", f"fact {number}")

    anyio.run(fill)
    assert anyio.run(memory.erase, "acme", "big") == LARGE
    assert REAPER.wait(timeout=60)
    assert memory._id_index is None
    assert memory._facts == {}


def test_closing_while_a_large_erase_is_taken_apart_is_harmless() -> None:
    memory = InProcessMemory()
    anyio.run(memory.restore_many, facts_of(BIG, LARGE))
    assert anyio.run(memory.erase, "acme", "big") == LARGE
    # The close drops the index the reaper's next step would clean.
    anyio.run(memory.aclose)
    assert REAPER.wait(timeout=60)
    assert memory._id_index is None


# The reaper itself.


def test_the_reaper_runs_jobs_in_order_and_reports_when_it_is_done() -> None:
    reaper = Reaper()
    done: list[int] = []

    def job(number: int) -> Iterator[None]:
        for step in range(3):
            done.append(number * 10 + step)
            yield

    for number in range(3):
        reaper.submit(job(number))
    assert reaper.wait(timeout=60)
    assert done == [0, 1, 2, 10, 11, 12, 20, 21, 22]
    reaper.submit(job(4))
    assert reaper.wait(timeout=60)
    assert done[-3:] == [40, 41, 42]


def test_a_failed_job_leaves_the_reaper_ready_for_the_next() -> None:
    reaper = Reaper()
    done: list[str] = []

    def failing() -> Iterator[None]:
        yield
        raise RuntimeError("broken job")

    def working() -> Iterator[None]:
        done.append("worked")
        yield

    reaper._jobs.append(failing())
    with pytest.raises(RuntimeError, match="broken job"):
        reaper._serve()
    assert reaper.wait(timeout=0)
    reaper.submit(working())
    assert reaper.wait(timeout=60)
    assert done == ["worked"]


def test_where_no_thread_can_start_the_caller_does_the_work(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    def refuse(thread: threading.Thread) -> None:
        raise RuntimeError("can't create new thread at interpreter shutdown")

    reaper = Reaper()
    done: list[str] = []

    def job() -> Iterator[None]:
        done.append("done")
        yield

    monkeypatch.setattr(threading.Thread, "start", refuse)
    reaper.submit(job())
    assert done == ["done"]
    assert reaper.wait(timeout=0)


def test_a_forked_child_starts_a_reaper_of_its_own() -> None:
    reaper = Reaper()
    reaper.submit(iter([None]))
    assert reaper.wait(timeout=60)
    parent_lock = reaper._lock
    assert parent_lock.acquire()
    # What the child runs after a fork, where the lock may be held.
    reaper._reset()
    assert reaper._lock is not parent_lock
    assert reaper.wait(timeout=0)
    done: list[str] = []

    def job() -> Iterator[None]:
        done.append("done")
        yield

    reaper.submit(job())
    assert reaper.wait(timeout=60)
    assert done == ["done"]


def test_two_erasures_of_one_large_key_at_once_count_it_once() -> None:
    # Each in a thread with a loop of its own, started together.
    memory = InProcessMemory()
    for _ in range(5):
        anyio.run(memory.restore_many, facts_of(BIG, 3_000))
        counts: list[int] = []
        together = threading.Barrier(2)

        def erase(counts: list[int] = counts, together: threading.Barrier = together) -> None:
            together.wait(timeout=60)
            counts.append(anyio.run(memory.erase, BIG.tenant, BIG.end_user_id))

        threads = [threading.Thread(target=erase) for _ in range(2)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(timeout=60)
        assert sorted(counts) == [0, 3_000]
        assert anyio.run(memory.recall, BIG.tenant, BIG.end_user_id) == ()
