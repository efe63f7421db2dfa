"""Behaviour specific to the SQLite adapter: persistence, order, lifecycle, threads."""

from __future__ import annotations

import sqlite3
import threading
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import anyio
import pytest

from psych_runtime.memory.port import Memory, MemoryKey, StoreClosedError
from psych_runtime.memory.sqlite import SqliteMemory

pytestmark = pytest.mark.anyio


async def test_facts_survive_closing_and_reopening(db_path: Path) -> None:
    async with SqliteMemory(db_path) as memory:
        first = await memory.remember("acme", "user-1", "prefers the Berlin warehouse")
        second = await memory.remember("acme", "user-1", "zahlt per Rechnung\nund in Euro")
        other = await memory.remember("beta", "user-1", "another tenant")
    async with SqliteMemory(db_path) as memory:
        assert await memory.recall("acme", "user-1") == (first, second)
        assert await memory.recall("beta", "user-1") == (other,)
        assert await memory.forget("acme", "user-1", first.id)
    async with SqliteMemory(db_path) as memory:
        assert await memory.recall("acme", "user-1") == (second,)


async def test_recalled_facts_equal_what_remember_returned(memory: SqliteMemory) -> None:
    stored = await memory.remember("acme", "user-1", "ünïcødé 🎉 and a\ttab")
    (recalled,) = await memory.recall("acme", "user-1")
    assert recalled == stored
    assert recalled.created_at.tzinfo is not None
    assert recalled.created_at.utcoffset() is not None
    assert recalled.key == MemoryKey("acme", "user-1")


async def test_order_comes_from_insertion_not_from_timestamps(
    memory: SqliteMemory, db_path: Path
) -> None:
    facts = [await memory.remember("acme", "user-1", f"fact {i}") for i in range(5)]
    # Make the timestamps lie: newest fact gets the oldest time, and two tie.
    with sqlite3.connect(db_path) as raw:
        raw.execute("UPDATE psych_memory_fact SET created_at = 1000 - seq")
        raw.execute("UPDATE psych_memory_fact SET created_at = 7 WHERE seq <= 2")
    raw.close()
    recalled = await memory.recall("acme", "user-1")
    assert [fact.id for fact in recalled] == [fact.id for fact in facts]
    assert [fact.id for fact in await memory.recall("acme", "user-1", limit=2)] == [
        facts[0].id,
        facts[1].id,
    ]


async def test_deleting_the_newest_fact_reuses_no_id_and_keeps_the_order(
    memory: SqliteMemory,
) -> None:
    oldest = await memory.remember("acme", "user-1", "oldest")
    newest = await memory.remember("acme", "user-1", "newest")
    assert await memory.forget("acme", "user-1", newest.id)
    again = await memory.remember("acme", "user-1", "newest")
    assert again.id not in (oldest.id, newest.id)
    assert not await memory.forget("acme", "user-1", newest.id)
    assert await memory.recall("acme", "user-1") == (oldest, again)


async def test_limit_beyond_any_sql_integer_means_all(memory: SqliteMemory) -> None:
    facts = [await memory.remember("acme", "user-1", f"fact {i}") for i in range(3)]
    assert await memory.recall("acme", "user-1", limit=2**80) == tuple(facts)
    assert await memory.recall("acme", "user-1", limit=0) == ()


@pytest.mark.parametrize(
    "memory_id",
    ["", "0" * 31, "F" * 32, "\ud800" * 32, "x" * 10_000, "' OR 1=1 --"],
)
async def test_ids_this_adapter_never_hands_out_match_nothing(
    memory: SqliteMemory, memory_id: str
) -> None:
    fact = await memory.remember("acme", "user-1", "kept")
    assert await memory.forget("acme", "user-1", memory_id) is False
    assert await memory.recall("acme", "user-1") == (fact,)


async def test_an_id_of_another_key_deletes_nothing(memory: SqliteMemory) -> None:
    fact = await memory.remember("acme", "user-1", "kept")
    assert not await memory.forget("acme", "user-2", fact.id)
    assert not await memory.forget("beta", "user-1", fact.id)
    assert await memory.erase("acme", "user-2") == 0
    assert await memory.recall("acme", "user-1") == (fact,)


async def test_invalid_input_changes_nothing(memory: SqliteMemory, db_path: Path) -> None:
    fact = await memory.remember("acme", "user-1", "kept")
    before = await anyio.Path(db_path).read_bytes()
    with pytest.raises(ValueError, match="content"):
        await memory.remember("acme", "user-1", "bad\x00byte")
    with pytest.raises(ValueError, match="end_user_id"):
        await memory.erase("acme", " user-1")
    with pytest.raises(TypeError, match="limit"):
        await memory.recall("acme", "user-1", limit=True)
    assert await memory.recall("acme", "user-1") == (fact,)
    assert await anyio.Path(db_path).read_bytes() == before


async def test_two_stores_on_one_file_see_each_other(db_path: Path) -> None:
    async with SqliteMemory(db_path) as left, SqliteMemory(db_path) as right:
        fact = await left.remember("acme", "user-1", "shared")
        assert await right.recall("acme", "user-1") == (fact,)
        assert await right.forget("acme", "user-1", fact.id)
        assert await left.recall("acme", "user-1") == ()


class _RecordingConnection(sqlite3.Connection):
    threads: set[int]

    def execute(self, *args: Any, **kwargs: Any) -> sqlite3.Cursor:
        _RecordingConnection.threads.add(threading.get_ident())
        return super().execute(*args, **kwargs)


@pytest.fixture
def recorded_threads(monkeypatch: pytest.MonkeyPatch) -> set[int]:
    connect = sqlite3.connect
    threads: set[int] = set()
    _RecordingConnection.threads = threads

    def recording_connect(*args: Any, **kwargs: Any) -> sqlite3.Connection:
        return connect(*args, factory=_RecordingConnection, **kwargs)

    monkeypatch.setattr(sqlite3, "connect", recording_connect)
    return threads


async def test_sqlite_is_never_called_on_the_event_loop_thread(
    db_path: Path, recorded_threads: set[int]
) -> None:
    loop_thread = threading.get_ident()
    async with SqliteMemory(db_path) as memory:
        fact = await memory.remember("acme", "user-1", "fact")
        await memory.recall("acme", "user-1")
        await memory.forget("acme", "user-1", fact.id)
        await memory.erase("acme", "user-1")
    assert recorded_threads
    assert loop_thread not in recorded_threads


async def test_many_tasks_lose_nothing_and_keep_their_order(memory: SqliteMemory) -> None:
    tasks, per_task = 20, 15
    results: dict[int, list[Memory]] = {task: [] for task in range(tasks)}

    async def writer(task: int) -> None:
        for i in range(per_task):
            results[task].append(await memory.remember("acme", "shared", f"{task}:{i}"))

    async with anyio.create_task_group() as group:
        for task in range(tasks):
            group.start_soon(writer, task)

    recalled = await memory.recall("acme", "shared")
    assert len(recalled) == tasks * per_task
    assert len({fact.id for fact in recalled}) == tasks * per_task
    for task in range(tasks):
        mine = [fact for fact in recalled if fact.content.startswith(f"{task}:")]
        assert mine == results[task]


def test_threads_with_their_own_loops_share_one_store(db_path: Path) -> None:
    threads, per_thread = 6, 20
    start = threading.Barrier(threads)
    ids: list[list[str]] = [[] for _ in range(threads)]

    async def main() -> None:
        async with SqliteMemory(db_path) as memory:

            async def worker(index: int) -> None:
                start.wait()
                for i in range(per_thread):
                    fact = await memory.remember("acme", "shared", f"{index}:{i}")
                    ids[index].append(fact.id)

            def run(index: int) -> None:
                anyio.run(worker, index, backend=("asyncio", "trio")[index % 2])

            workers = [threading.Thread(target=run, args=(i,)) for i in range(threads)]
            for thread in workers:
                thread.start()
            for thread in workers:
                thread.join()
            recalled = await memory.recall("acme", "shared")
            assert {fact.id for fact in recalled} == {i for row in ids for i in row}
            assert len(recalled) == threads * per_thread

    anyio.run(main)


async def test_lifecycle(db_path: Path) -> None:
    memory = SqliteMemory(db_path)
    assert not await anyio.Path(db_path).exists()  # constructing touches nothing
    with pytest.raises(StoreClosedError, match="not open") as caught:
        await memory.recall("acme", "user-1")
    assert (caught.value.operation, caught.value.state) == ("recall", "not open")
    await memory.open()
    await memory.open()  # opening an open store does nothing
    fact = await memory.remember("acme", "user-1", "fact")
    async with memory as entered:  # neither does entering it
        assert entered is memory
        assert await memory.recall("acme", "user-1") == (fact,)
    # Leaving the block closed it; closing again is harmless.
    await memory.aclose()
    await memory.aclose()
    calls: list[Callable[[], Awaitable[object]]] = [
        lambda: memory.remember("acme", "user-1", "fact"),
        lambda: memory.recall("acme", "user-1"),
        lambda: memory.forget("acme", "user-1", fact.id),
        lambda: memory.forget("acme", "user-1", "not an id"),
        lambda: memory.erase("acme", "user-1"),
        memory.scrub,
        memory.tenants,
        lambda: memory.end_users("acme"),
        lambda: memory.restore(fact),
    ]
    for call in calls:
        with pytest.raises(StoreClosedError, match="closed") as caught:
            await call()
        assert caught.value.state == "closed"
    with pytest.raises(StoreClosedError, match="closed"):
        await memory.open()
    with pytest.raises(StoreClosedError, match="closed"):
        async with memory:
            pass
    assert "closed" in repr(memory)


async def test_failed_open_leaves_the_store_closed(tmp_path: Path) -> None:
    memory = SqliteMemory(tmp_path / "missing" / "memory.sqlite3")
    with pytest.raises(FileNotFoundError):
        await memory.open()
    with pytest.raises(StoreClosedError, match="closed"):
        await memory.remember("acme", "user-1", "fact")


def test_options_are_checked_at_construction(tmp_path: Path) -> None:
    path = tmp_path / "memory.sqlite3"
    memory = SqliteMemory(path, busy_timeout=0.5, durability="normal")
    assert (memory.path, memory.busy_timeout, memory.durability) == (path, 0.5, "normal")
    assert SqliteMemory(str(path)).durability == "full"
    assert SqliteMemory("relative.sqlite3").path.is_absolute()
    with pytest.raises(TypeError, match="path"):
        SqliteMemory(b"memory.sqlite3")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="path"):
        SqliteMemory("")
    with pytest.raises(ValueError, match="path"):
        SqliteMemory("a\x00b")
    with pytest.raises(TypeError, match="busy_timeout"):
        SqliteMemory(path, busy_timeout="5")  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="busy_timeout"):
        SqliteMemory(path, busy_timeout=True)
    for bad in (-1, float("nan"), float("inf")):
        with pytest.raises(ValueError, match="busy_timeout"):
            SqliteMemory(path, busy_timeout=bad)
    with pytest.raises(ValueError, match="durability"):
        SqliteMemory(path, durability="off")  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="durability"):
        SqliteMemory(path, durability=1)  # type: ignore[arg-type]
    assert not path.exists()


async def test_closing_while_opening_leaves_nothing_open(db_path: Path) -> None:
    # A rollback-journal database held under an exclusive lock keeps open()
    # waiting inside SQLite until the lock is released.
    holder = sqlite3.connect(db_path, isolation_level=None)
    try:
        holder.execute("BEGIN EXCLUSIVE")
        memory = SqliteMemory(db_path, busy_timeout=30)
        async with anyio.create_task_group() as group:
            group.start_soon(memory.open)
            await anyio.wait_all_tasks_blocked()
            await memory.aclose()
            holder.execute("COMMIT")
    finally:
        holder.close()
    with pytest.raises(StoreClosedError, match="closed"):
        await memory.recall("acme", "user-1")


async def test_lifecycle_calls_never_wait_for_a_call_in_progress(db_path: Path) -> None:
    # A call blocked inside SQLite holds the store's connection; opening
    # again must not block the event loop behind it.
    async with SqliteMemory(db_path, busy_timeout=30) as memory:
        holder = sqlite3.connect(db_path, isolation_level=None, check_same_thread=False)
        finished = anyio.Event()
        try:
            holder.execute("BEGIN IMMEDIATE")
            async with anyio.create_task_group() as group:

                async def blocked() -> None:
                    await memory.remember("acme", "user-1", "waits for the lock")
                    finished.set()

                group.start_soon(blocked)
                await anyio.wait_all_tasks_blocked()
                await memory.open()  # already open: returns at once
                assert not memory.scrub_pending
                assert not finished.is_set()
                holder.execute("COMMIT")
        finally:
            holder.close()
        assert finished.is_set()
