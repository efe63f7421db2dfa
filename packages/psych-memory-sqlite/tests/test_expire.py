"""Retention on SQLite: expire deletes in bounded batches, for real, beside other callers."""

from __future__ import annotations

import sqlite3
import threading
import uuid
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, closing, contextmanager
from datetime import UTC, datetime, timedelta, timezone
from pathlib import Path

import anyio
import anyio.lowlevel
import anyio.to_thread
import pytest

from psych_runtime.memory.port import InvalidInputError, Memory, MemoryKey, StoreClosedError
from psych_runtime.memory.sqlite import DatabaseUnavailableError, SqliteMemory

pytestmark = pytest.mark.anyio

_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
# Old facts at one microsecond apart from 2001 on; the cutoff falls among them.
_OLD_START = datetime(2001, 1, 1, tzinfo=UTC)
LARGE = 5_000
USERS = 50
LockAfterFirstBatch = Callable[[Path, Callable[[], int]], AbstractContextManager[list[int]]]
WRITER_PACE = 0.02


def load_aged(db_path: Path, tenant: str, count: int, users: int = USERS) -> None:
    """Give ``tenant`` ``count`` facts spread over ``users`` end users, made 1 µs apart from 2001.

    The i-th fact (from 0) reads "<tenant> fact <i>"; end user ``u-<i % users>`` holds it.
    """
    start = (_OLD_START - _EPOCH) // timedelta(microseconds=1)
    with closing(sqlite3.connect(db_path, isolation_level=None)) as raw:
        raw.execute("BEGIN IMMEDIATE")
        raw.executemany(
            "INSERT INTO psych_memory_fact (tenant, end_user_id, seq, id, content, created_at) "
            "VALUES (?, ?, ?, ?, ?, ?)",
            (
                (
                    tenant,
                    f"u-{index % users}",
                    index // users + 1,
                    uuid.uuid4().hex,
                    f"{tenant} fact {index}",
                    start + index,
                )
                for index in range(count)
            ),
        )
        raw.execute("COMMIT")


def held(db_path: Path, tenant: str) -> int:
    with closing(sqlite3.connect(db_path)) as raw:
        (count,) = raw.execute(
            "SELECT count(*) FROM psych_memory_fact WHERE tenant = ?", (tenant,)
        ).fetchone()
    return int(count)


def on_disk(db_path: Path) -> bytes:
    """Every byte of the database and of the files SQLite keeps beside it."""
    return b"".join(
        path.read_bytes() for path in db_path.parent.glob(f"{db_path.name}*") if path.is_file()
    )


def pending(memory: SqliteMemory) -> bool:
    # Read through a call, so that each reading is a fresh one to the type checker.
    return memory.scrub_pending


def made(index: int) -> datetime:
    return _OLD_START + timedelta(microseconds=index)


@contextmanager
def statements(memory: SqliteMemory) -> Iterator[list[str]]:
    # What the store's own connection runs, as SQLite reports it.
    seen: list[str] = []
    conn = memory._conn
    assert conn is not None
    conn.set_trace_callback(seen.append)
    try:
        yield seen
    finally:
        conn.set_trace_callback(None)


async def test_expire_deletes_a_large_tenant_in_bounded_batches(db_path: Path) -> None:
    async with SqliteMemory(db_path) as memory:
        load_aged(db_path, "acme", LARGE)
        load_aged(db_path, "globex", 100)
        cutoff = made(LARGE - 1)
        assert await memory.count_expired("acme", before=cutoff) == LARGE - 1
        with statements(memory) as seen:
            assert await memory.expire("acme", before=cutoff) == LARGE - 1
        commits = [statement for statement in seen if statement == "COMMIT"]
        # Each batch its own transaction, the first of a thousand rows, later
        # ones at most twice the one before.
        assert len(commits) >= 3, len(commits)
        assert held(db_path, "acme") == 1
        assert held(db_path, "globex") == 100
        (kept,) = await memory.recall("acme", f"u-{(LARGE - 1) % USERS}")
        assert kept.created_at == cutoff
        assert await memory.count_expired("acme", before=cutoff) == 0
        assert await memory.expire("acme", before=cutoff) == 0


async def test_the_cutoff_counts_in_microseconds_and_other_zones(db_path: Path) -> None:
    async with SqliteMemory(db_path) as memory:
        load_aged(db_path, "acme", 10, users=3)
        east = made(4).astimezone(timezone(timedelta(hours=9)))
        assert await memory.expire("acme", before=east) == 4
        left: list[datetime] = []
        for user in range(3):
            left += [fact.created_at for fact in await memory.recall("acme", f"u-{user}")]
        left.sort()
        assert left == [made(index) for index in range(4, 10)]


async def test_expired_text_is_wiped_by_the_rules_of_erase(db_path: Path) -> None:
    async with SqliteMemory(db_path) as memory:
        load_aged(db_path, "acme", 300, users=7)
        kept = await memory.remember("acme", "u-1", "KEPT-71d2 prefers email")
        assert b"acme fact 12" in on_disk(db_path)
        assert await memory.expire("acme", before=kept.created_at) == 300
        assert pending(memory)
        assert await memory.scrub() is True
        assert not pending(memory)
    assert b"acme fact" not in on_disk(db_path)
    assert b"KEPT-71d2" in on_disk(db_path)


async def test_a_bad_cutoff_or_tenant_is_refused_before_the_file_is_touched(
    db_path: Path,
) -> None:
    async with SqliteMemory(db_path) as memory:
        load_aged(db_path, "acme", 10)
        with statements(memory) as seen:
            with pytest.raises(InvalidInputError, match="must not be in the future"):
                await memory.expire("acme", before=datetime.now(UTC) + timedelta(hours=1))
            with pytest.raises(InvalidInputError, match="timezone-aware"):
                await memory.count_expired("acme", before=datetime(2030, 1, 1))
            with pytest.raises(TypeError, match="before must be a timezone-aware datetime"):
                await memory.expire("acme", before="2001-01-01")  # type: ignore[arg-type]
        assert seen == []
        assert held(db_path, "acme") == 10
    with pytest.raises(StoreClosedError):
        await memory.expire("acme", before=made(5))


async def test_an_expire_interrupted_between_batches_is_finished_by_a_rerun(
    db_path: Path, lock_after_first_batch: LockAfterFirstBatch
) -> None:
    async with SqliteMemory(db_path, busy_timeout=0.2) as memory:
        load_aged(db_path, "acme", LARGE)
        with (
            lock_after_first_batch(db_path, lambda: held(db_path, "acme")) as holding,
            pytest.raises(DatabaseUnavailableError) as caught,
        ):
            await memory.expire("acme", before=made(LARGE))
        error = caught.value
        assert error.operation == "expire"
        assert error.may_have_taken_effect is True
        assert "expire again" in error.reason
        left = held(db_path, "acme")
        assert holding == [left]
        assert 0 < left < LARGE
        assert await memory.expire("acme", before=made(LARGE)) == left
        assert held(db_path, "acme") == 0


async def test_a_writer_every_20_ms_on_another_connection_never_fails_during_expire(
    db_path: Path,
) -> None:
    # Both sides wait at most 0.2 s for the file: the expiry must leave the
    # writer its turn between batches, far more often than that. The writer
    # writes every 20 ms, the pace of an application's end user.
    async with SqliteMemory(db_path, busy_timeout=0.2) as memory:
        load_aged(db_path, "acme", LARGE * 2)
        done = threading.Event()
        failures: list[BaseException] = []
        written: list[Memory] = []

        def write_meanwhile() -> None:
            async def writer() -> None:
                async with SqliteMemory(db_path, busy_timeout=0.2) as other:
                    while not done.is_set():
                        try:
                            written.append(await other.remember("acme", "writer", "new fact"))
                        except Exception as exc:  # noqa: BLE001 - every failure is counted.
                            failures.append(exc)
                        await anyio.sleep(WRITER_PACE)

            anyio.run(writer)

        thread = threading.Thread(target=write_meanwhile)
        thread.start()
        try:
            while not written:
                await anyio.lowlevel.checkpoint()
            cutoff = written[0].created_at
            deleted = await memory.expire("acme", before=cutoff)
            writes_during = len(written)
        finally:
            done.set()
            await anyio.to_thread.run_sync(thread.join)
        assert failures == []
        assert deleted == LARGE * 2
        assert writes_during > 1
        assert len(await memory.recall("acme", "writer")) == len(written)


async def test_two_expiries_at_once_delete_each_fact_once(db_path: Path) -> None:
    async with SqliteMemory(db_path) as one, SqliteMemory(db_path) as two:
        load_aged(db_path, "acme", LARGE)
        counts: list[int] = []

        async def run(store: SqliteMemory) -> None:
            counts.append(await store.expire("acme", before=made(LARGE)))

        async with anyio.create_task_group() as group:
            group.start_soon(run, one)
            group.start_soon(run, two)
            group.start_soon(run, one)
        assert sum(counts) == LARGE
        assert held(db_path, "acme") == 0


async def test_closing_waits_for_an_expire_in_progress(db_path: Path) -> None:
    memory = SqliteMemory(db_path)
    await memory.open()
    load_aged(db_path, "acme", LARGE)
    results: list[int] = []

    async def expire_all() -> None:
        results.append(await memory.expire("acme", before=made(LARGE)))

    async with anyio.create_task_group() as group:
        group.start_soon(expire_all)
        while held(db_path, "acme") == LARGE:
            await anyio.lowlevel.checkpoint()
        await memory.aclose()
        assert held(db_path, "acme") == 0
    assert results == [LARGE]


async def test_restored_facts_are_judged_by_their_own_time(db_path: Path) -> None:
    async with SqliteMemory(db_path) as memory:
        key = MemoryKey("acme", "moved")
        facts = [
            Memory(f"old-{index}", key, f"restored {index}", made(index)) for index in range(5)
        ]
        await memory.restore_many(facts)
        now = await memory.remember("acme", "moved", "made today")
        assert await memory.expire("acme", before=made(3)) == 3
        assert await memory.recall("acme", "moved") == (*facts[3:], now)
