"""Forget and erase are real deletes: once scrubbed, the text is gone from every file."""

from __future__ import annotations

import os
import sqlite3
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import anyio
import anyio.to_thread
import pytest

from psych_runtime.memory.port import Memory, MemoryKey
from psych_runtime.memory.sqlite import SqliteMemory

pytestmark = pytest.mark.anyio

SIDE_FILES = ("", "-wal", "-shm", "-journal")


def on_disk(db_path: Path) -> bytes:
    """Every byte of the database and of each side file SQLite may keep beside it."""
    found = [Path(f"{db_path}{suffix}") for suffix in SIDE_FILES]
    # Anything else SQLite might have left with the same stem counts too.
    found += [p for p in db_path.parent.glob(f"{db_path.name}*") if p not in found]
    return b"".join(p.read_bytes() for p in found if p.is_file())


def occurs(db_path: Path, text: str) -> bool:
    return text.encode() in on_disk(db_path)


# The facts of the end user the byte scans erase: one long fact spills into
# overflow pages, which must be wiped as well.
ERASED_TEXTS = (
    *(f"ERASED-{i}-c0ffee: allergic to peanuts, Grüße {i}" for i in range(25)),
    "ERASED-long-c0ffee " + "x" * 4000,
)


def filler(user: int, i: int) -> str:
    return f"filler fact {user}/{i} " * 5


async def fill(memory: SqliteMemory, users: int, facts: int) -> None:
    # Enough rows that pages split and rebalance around the facts under test.
    for user in range(users):
        for i in range(facts):
            await memory.remember("acme", f"filler-{user}", filler(user, i))


async def test_forget_leaves_no_copy_in_any_file(memory: SqliteMemory, db_path: Path) -> None:
    await fill(memory, 3, 20)
    secret = await memory.remember("acme", "user-1", "SECRET-forget-7f3a lives at Elm St 12")
    kept = await memory.remember("acme", "user-1", "KEPT-fact-91c2 likes tea")
    await fill(memory, 3, 40)
    assert occurs(db_path, "SECRET-forget-7f3a")  # the scan can see stored text

    assert await memory.forget("acme", "user-1", secret.id)
    assert await memory.scrub()

    assert not pending(memory)
    assert not occurs(db_path, "SECRET-forget-7f3a")
    assert not occurs(db_path, secret.id)
    assert occurs(db_path, "KEPT-fact-91c2")
    assert await memory.recall("acme", "user-1") == (kept,)


async def test_erase_leaves_no_copy_of_facts_or_key(memory: SqliteMemory, db_path: Path) -> None:
    await fill(memory, 2, 30)
    for text in ERASED_TEXTS:
        await memory.remember("acme", "erased-user-5d1e", text)
    kept = await memory.remember("acme", "kept-user", "KEPT-b00c prefers email")
    await fill(memory, 2, 30)
    assert occurs(db_path, "ERASED-long-c0ffee")

    assert await memory.erase("acme", "erased-user-5d1e") == len(ERASED_TEXTS)
    assert await memory.scrub()

    assert not pending(memory)
    assert not occurs(db_path, "c0ffee")
    assert not occurs(db_path, "erased-user-5d1e")
    assert occurs(db_path, "KEPT-b00c")
    assert await memory.recall("acme", "kept-user") == (kept,)


# Rows stored with this timestamp take a layout in which SQLite, moving rows
# between pages as the table grows, leaves copies of erased rows in unused
# page space, where secure_delete does not reach: only rewriting the file
# removes them.
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


async def restore_rows_that_move(memory: SqliteMemory) -> None:
    async def put(end_user_id: str, content: str) -> None:
        key = MemoryKey("acme", end_user_id)
        await memory.restore(Memory(os.urandom(16).hex(), key, content, _EPOCH))

    async def fill_restored() -> None:
        for user in range(2):
            for i in range(30):
                await put(f"filler-{user}", filler(user, i))

    await fill_restored()
    for text in ERASED_TEXTS:
        await put("erased-user-5d1e", text)
    await put("kept-user", "KEPT-b00c prefers email")
    await fill_restored()


async def test_copies_left_by_moved_rows_are_gone_after_scrub(
    memory: SqliteMemory, db_path: Path
) -> None:
    await restore_rows_that_move(memory)

    assert await memory.erase("acme", "erased-user-5d1e") == len(ERASED_TEXTS)
    assert pending(memory)
    assert await memory.scrub() is True

    assert not pending(memory)
    assert not occurs(db_path, "c0ffee")
    assert not occurs(db_path, "erased-user-5d1e")
    assert occurs(db_path, "KEPT-b00c")


async def test_copies_left_by_moved_rows_are_gone_after_closing(db_path: Path) -> None:
    memory = SqliteMemory(db_path)
    async with memory:
        await restore_rows_that_move(memory)
        assert await memory.erase("acme", "erased-user-5d1e") == len(ERASED_TEXTS)
        assert pending(memory)

    assert not pending(memory)
    assert not occurs(db_path, "c0ffee")
    assert not occurs(db_path, "erased-user-5d1e")
    async with SqliteMemory(db_path) as reopened:
        assert len(await reopened.recall("acme", "kept-user")) == 1


async def test_deleted_text_stays_gone_across_reopening(db_path: Path) -> None:
    async with SqliteMemory(db_path) as memory:
        await fill(memory, 2, 10)
        secret = await memory.remember("acme", "user-1", "SECRET-reopen-44aa")
        assert await memory.forget("acme", "user-1", secret.id)
    async with SqliteMemory(db_path) as memory:
        await fill(memory, 1, 10)
    assert not occurs(db_path, "SECRET-reopen-44aa")


async def test_forget_through_one_store_is_wiped_for_all(db_path: Path) -> None:
    async with SqliteMemory(db_path) as left, SqliteMemory(db_path) as right:
        secret = await left.remember("acme", "user-1", "SECRET-shared-9e9e")
        # The other connection has read the page holding the fact.
        assert len(await right.recall("acme", "user-1")) == 1
        assert await right.forget("acme", "user-1", secret.id)
        assert await right.scrub()
        assert not occurs(db_path, "SECRET-shared-9e9e")
        await left.remember("acme", "user-1", "after")
        assert not occurs(db_path, "SECRET-shared-9e9e")


def pending(memory: SqliteMemory) -> bool:
    # A function, so the type checker does not narrow the property between calls.
    return memory.scrub_pending


@contextmanager
def reading(db_path: Path) -> Iterator[sqlite3.Connection]:
    """Another connection holding a read transaction, as a backup or analytics tool does."""
    reader = sqlite3.connect(db_path, isolation_level=None, check_same_thread=False)
    try:
        # An open read transaction pins the snapshot that still has the facts.
        reader.execute("BEGIN")
        reader.execute("SELECT count(*) FROM psych_memory_fact").fetchone()
        yield reader
    finally:
        if reader.in_transaction:
            reader.execute("COMMIT")
        reader.close()


async def test_a_reader_holding_the_log_delays_the_wipe_but_not_the_answer(
    db_path: Path,
) -> None:
    async with SqliteMemory(db_path, busy_timeout=0.05) as memory:
        secret = await memory.remember("acme", "user-1", "SECRET-pinned-1b1b")
        assert not pending(memory)
        with reading(db_path) as reader:
            # The delete is committed, so forget says so instead of raising.
            assert await memory.forget("acme", "user-1", secret.id) is True
            assert pending(memory)
            assert occurs(db_path, "SECRET-pinned-1b1b")  # the scan sees the old page
            assert await memory.recall("acme", "user-1") == ()
            assert await memory.scrub() is False
            assert pending(memory)
            reader.execute("COMMIT")
        # The next call of the store, of any key, empties the log.
        assert await memory.recall("acme", "someone-else") == ()
        assert log_size(db_path) == 0
        assert pending(memory)  # the file is not rewritten inside a call
        assert await memory.scrub() is True
        assert not pending(memory)
        assert not occurs(db_path, "SECRET-pinned-1b1b")


def log_size(db_path: Path) -> int:
    log = Path(f"{db_path}-wal")
    return log.stat().st_size if log.exists() else 0


async def test_a_writer_holding_the_file_keeps_the_scrub_pending(db_path: Path) -> None:
    async with SqliteMemory(db_path, busy_timeout=0.05) as memory:
        secret = await memory.remember("acme", "user-1", "SECRET-written-6a6a")
        assert await memory.forget("acme", "user-1", secret.id)
        writer = sqlite3.connect(db_path, isolation_level=None)
        try:
            writer.execute("BEGIN IMMEDIATE")
            assert await memory.scrub() is False
            assert pending(memory)
            writer.execute("COMMIT")
        finally:
            writer.close()
        assert await memory.scrub() is True
        assert not pending(memory)


async def test_scrub_waits_for_the_reader_and_reports_the_outcome(db_path: Path) -> None:
    async with SqliteMemory(db_path, busy_timeout=30) as memory:
        await memory.remember("acme", "user-1", "SECRET-wait-3d3d")
        with reading(db_path) as reader:
            assert await memory.erase("acme", "user-1") == 1
            assert pending(memory)
            async with anyio.create_task_group() as group:

                async def scrub() -> None:
                    assert await memory.scrub() is True

                group.start_soon(scrub)
                # The scrub waits inside SQLite's busy handler for the reader.
                await anyio.wait_all_tasks_blocked()
                await anyio.to_thread.run_sync(reader.execute, "COMMIT")
        assert not pending(memory)
        assert not occurs(db_path, "SECRET-wait-3d3d")


async def test_a_pending_scrub_never_fails_or_stalls_other_keys(db_path: Path) -> None:
    # A long busy timeout: a call that waited for the reader would take it.
    async with SqliteMemory(db_path, busy_timeout=30) as memory:
        secret = await memory.remember("tenant-a", "user-1", "SECRET-tenant-a-4e4e")
        kept = await memory.remember("tenant-c", "user-3", "KEPT-tenant-c")
        with reading(db_path), anyio.fail_after(10):
            assert await memory.erase("tenant-a", "user-1") == 1
            assert pending(memory)
            # Each of these returned at once, truthfully, reporting nothing
            # it did not delete.
            assert await memory.forget("tenant-b", "user-2", secret.id) is False
            assert await memory.forget("tenant-b", "user-2", "not an id") is False
            assert await memory.forget("tenant-b", "user-2", "f" * 32) is False
            assert await memory.erase("tenant-c", "nobody") == 0
            fact = await memory.remember("tenant-d", "user-4", "new fact")
            assert await memory.recall("tenant-d", "user-4") == (fact,)
            assert await memory.forget("tenant-c", "user-3", kept.id) is True
            assert pending(memory)
        assert await memory.scrub() is True
        assert not occurs(db_path, "SECRET-tenant-a-4e4e")
        assert not occurs(db_path, "KEPT-tenant-c")


async def test_closing_finishes_a_pending_wipe_without_raising(db_path: Path) -> None:
    memory = SqliteMemory(db_path, busy_timeout=0.05)
    await memory.open()
    try:
        await memory.remember("acme", "user-1", "SECRET-close-2c2c")
        with reading(db_path):
            assert await memory.erase("acme", "user-1") == 1
            assert pending(memory)
    finally:
        await memory.aclose()
    assert not pending(memory)
    assert not occurs(db_path, "SECRET-close-2c2c")


async def test_closing_with_the_reader_still_there_does_not_raise(db_path: Path) -> None:
    memory = SqliteMemory(db_path, busy_timeout=0.05)
    await memory.open()
    await memory.remember("acme", "user-1", "SECRET-stuck-5f5f")
    with reading(db_path) as reader:
        assert await memory.erase("acme", "user-1") == 1
        await memory.aclose()
        assert pending(memory)  # the receipt can say "pending"
        reader.execute("COMMIT")
        # Any other store on the file can finish the job.
        async with SqliteMemory(db_path) as other:
            assert await other.scrub() is True
    assert not occurs(db_path, "SECRET-stuck-5f5f")


def commits_by_level(statements: list[str]) -> dict[str, set[str]]:
    """The statement kinds (INSERT, DELETE) committed at each ``synchronous`` level."""
    level, kind = "", ""
    committed: dict[str, set[str]] = {}
    for statement in statements:
        words = statement.split()
        if words[:3] == ["PRAGMA", "synchronous", "="]:
            level = words[3]
        elif words[0] in ("INSERT", "DELETE"):
            kind = words[0]
        elif words[0] == "COMMIT" and kind:
            committed.setdefault(level, set()).add(kind)
            kind = ""
    return committed


async def test_deletions_are_synced_at_every_durability_level(
    db_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Undone by a power cut, an erase would bring the facts back; a
    # remember may be lost with durability="normal", as documented.
    statements: list[str] = []
    connect = sqlite3.connect

    def traced(*args: Any, **kwargs: Any) -> sqlite3.Connection:
        conn: sqlite3.Connection = connect(*args, **kwargs)
        conn.set_trace_callback(statements.append)
        return conn

    monkeypatch.setattr(sqlite3, "connect", traced)
    async with SqliteMemory(db_path, durability="normal") as memory:
        fact = await memory.remember("acme", "user-1", "first")
        await memory.remember("acme", "user-1", "second")
        assert await memory.forget("acme", "user-1", fact.id)
        assert await memory.erase("acme", "user-1") == 1
        await memory.remember("acme", "user-1", "third")

    assert commits_by_level(statements) == {"NORMAL": {"INSERT"}, "FULL": {"DELETE"}}
