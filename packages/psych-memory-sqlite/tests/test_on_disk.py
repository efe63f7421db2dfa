"""Forget and erase are real deletes: the text is gone from every file, byte for byte."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

from psych_runtime.memory.sqlite import EraseIncompleteError, SqliteMemory

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


async def fill(memory: SqliteMemory, users: int, facts: int) -> None:
    # Enough rows that pages split and rebalance around the facts under test.
    for user in range(users):
        for i in range(facts):
            await memory.remember("acme", f"filler-{user}", f"filler fact {user}/{i} " * 5)


async def test_forget_leaves_no_copy_in_any_file(memory: SqliteMemory, db_path: Path) -> None:
    await fill(memory, 3, 20)
    secret = await memory.remember("acme", "user-1", "SECRET-forget-7f3a lives at Elm St 12")
    kept = await memory.remember("acme", "user-1", "KEPT-fact-91c2 likes tea")
    await fill(memory, 3, 40)
    assert occurs(db_path, "SECRET-forget-7f3a")  # the scan can see stored text

    assert await memory.forget("acme", "user-1", secret.id)

    assert not occurs(db_path, "SECRET-forget-7f3a")
    assert not occurs(db_path, secret.id)
    assert occurs(db_path, "KEPT-fact-91c2")
    assert await memory.recall("acme", "user-1") == (kept,)


async def test_erase_leaves_no_copy_of_facts_or_key(memory: SqliteMemory, db_path: Path) -> None:
    await fill(memory, 2, 30)
    texts = [f"ERASED-{i}-c0ffee: allergic to peanuts, Grüße {i}" for i in range(25)]
    # One long fact spills into overflow pages, which must be wiped as well.
    texts.append("ERASED-long-c0ffee " + "x" * 4000)
    for text in texts:
        await memory.remember("acme", "erased-user-5d1e", text)
    kept = await memory.remember("acme", "kept-user", "KEPT-b00c prefers email")
    await fill(memory, 2, 30)
    assert occurs(db_path, "ERASED-long-c0ffee")

    assert await memory.erase("acme", "erased-user-5d1e") == len(texts)

    assert not occurs(db_path, "c0ffee")
    assert not occurs(db_path, "erased-user-5d1e")
    assert occurs(db_path, "KEPT-b00c")
    assert await memory.recall("acme", "kept-user") == (kept,)


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
        assert not occurs(db_path, "SECRET-shared-9e9e")
        await left.remember("acme", "user-1", "after")
        assert not occurs(db_path, "SECRET-shared-9e9e")


async def test_a_reader_holding_the_log_delays_the_wipe_but_not_forever(
    db_path: Path,
) -> None:
    async with SqliteMemory(db_path, busy_timeout=0.05) as memory:
        secret = await memory.remember("acme", "user-1", "SECRET-pinned-1b1b")
        reader = sqlite3.connect(db_path, isolation_level=None)
        try:
            # An open read transaction pins the snapshot that still has the fact.
            reader.execute("BEGIN")
            reader.execute("SELECT count(*) FROM psych_memory_fact").fetchone()
            with pytest.raises(EraseIncompleteError, match="write-ahead log"):
                await memory.forget("acme", "user-1", secret.id)
            # The delete itself is committed.
            assert await memory.recall("acme", "user-1") == ()
            reader.execute("COMMIT")
        finally:
            reader.close()
        # The next forget, even of nothing, finishes the wipe.
        assert await memory.forget("acme", "user-1", secret.id) is False
        assert not occurs(db_path, "SECRET-pinned-1b1b")


async def test_closing_finishes_a_pending_wipe(db_path: Path) -> None:
    memory = SqliteMemory(db_path, busy_timeout=0.05)
    await memory.open()
    try:
        await memory.remember("acme", "user-1", "SECRET-close-2c2c")
        reader = sqlite3.connect(db_path, isolation_level=None)
        try:
            reader.execute("BEGIN")
            reader.execute("SELECT count(*) FROM psych_memory_fact").fetchone()
            with pytest.raises(EraseIncompleteError):
                await memory.erase("acme", "user-1")
            reader.execute("COMMIT")
        finally:
            reader.close()
    finally:
        await memory.aclose()
    assert not occurs(db_path, "SECRET-close-2c2c")
