"""Store failures: locked past the busy timeout, a file deleted or replaced, a damaged file."""

from __future__ import annotations

import os
import pickle
import sqlite3
from collections.abc import Awaitable, Callable, Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from pathlib import Path

import anyio
import pytest

from psych_runtime.memory.port import Memory, MemoryKey, MemoryStoreError, StoreUnavailableError
from psych_runtime.memory.sqlite import (
    DatabaseFileError,
    DatabaseFileMovedError,
    DatabaseUnavailableError,
    SqliteMemory,
)

pytestmark = pytest.mark.anyio

SECRET = "SECRET-failure-8a8a"  # noqa: S105 - a fact, not a password
KEY = "end-user-7b7b"

Call = Callable[[SqliteMemory], Awaitable[object]]

WRITES: dict[str, Call] = {
    "remember": lambda memory: memory.remember("acme", KEY, SECRET),
    "remember_within_limit": lambda memory: memory.remember_within_limit(
        "acme", KEY, SECRET, max_facts=5
    ),
    "forget": lambda memory: memory.forget("acme", KEY, "0" * 32),
    "erase": lambda memory: memory.erase("acme", KEY),
    "restore": lambda memory: memory.restore(
        Memory("restored-1", MemoryKey("acme", KEY), SECRET, datetime.now(UTC))
    ),
}
READS: dict[str, Call] = {
    "recall": lambda memory: memory.recall("acme", KEY),
    "tenants": lambda memory: memory.tenants(),
    "end_users": lambda memory: memory.end_users("acme"),
    "recall_page": lambda memory: memory.recall_page("acme", KEY, size=10),
}


@contextmanager
def write_locked(db_path: Path) -> Iterator[None]:
    """Another connection holding the write lock, as a long transaction elsewhere does."""
    holder = sqlite3.connect(db_path, isolation_level=None)
    try:
        holder.execute("BEGIN IMMEDIATE")
        yield
    finally:
        holder.execute("ROLLBACK")
        holder.close()


def rows(db_path: Path) -> list[tuple[object, ...]]:
    with sqlite3.connect(db_path) as raw:
        found = raw.execute("SELECT * FROM psych_memory_fact ORDER BY id").fetchall()
    raw.close()
    return found


@pytest.mark.parametrize("operation", sorted(WRITES))
async def test_a_write_locked_past_the_busy_timeout_is_unavailable_and_changes_nothing(
    db_path: Path, operation: str
) -> None:
    async with SqliteMemory(db_path, busy_timeout=0.05) as memory:
        await memory.remember("acme", KEY, "already there")
        before = rows(db_path)
        with write_locked(db_path), pytest.raises(DatabaseUnavailableError) as caught:
            await WRITES[operation](memory)
        error = caught.value
        assert isinstance(error, StoreUnavailableError)
        assert error.operation == operation
        assert error.may_have_taken_effect is False
        assert "busy timeout" in error.reason
        assert isinstance(error.__cause__, sqlite3.OperationalError)
        assert SECRET not in str(error)
        assert KEY not in str(error)
        assert rows(db_path) == before
        # Nothing is left half-done: the same call succeeds once the lock is gone.
        await WRITES[operation](memory)


async def test_store_failures_pickle_with_their_attributes(db_path: Path) -> None:
    async with SqliteMemory(db_path, busy_timeout=0) as memory:
        with write_locked(db_path), pytest.raises(DatabaseUnavailableError) as caught:
            await memory.remember("acme", KEY, SECRET)
    again = pickle.loads(pickle.dumps(caught.value))
    assert type(again) is DatabaseUnavailableError
    assert (again.operation, again.reason, again.may_have_taken_effect) == (
        "remember",
        caught.value.reason,
        False,
    )
    assert str(again) == str(caught.value)
    moved = DatabaseFileMovedError("forget", "gone", may_have_taken_effect=False)
    assert type(pickle.loads(pickle.dumps(moved))) is DatabaseFileMovedError


def replace_with_another_database(db_path: Path) -> None:
    other = db_path.with_name("other.sqlite3")

    async def make() -> None:
        async with SqliteMemory(other) as store:
            await store.remember("acme", "someone", "the other file's fact")

    anyio.run(make)
    other.replace(db_path)


async def contents(path: Path) -> bytes | None:
    file = anyio.Path(path)
    return await file.read_bytes() if await file.exists() else None


def delete_the_file(db_path: Path) -> None:
    db_path.unlink()


@pytest.mark.parametrize("accident", [delete_the_file, replace_with_another_database])
async def test_a_file_deleted_or_replaced_while_open_refuses_every_call(
    db_path: Path, accident: Callable[[Path], None]
) -> None:
    async with SqliteMemory(db_path) as memory:
        fact = await memory.remember("acme", KEY, "written before the accident")
        await anyio.to_thread.run_sync(accident, db_path)
        before = await contents(db_path)
        calls: dict[str, Call] = {
            **WRITES,
            **READS,
            "forget a stored fact": lambda m: m.forget("acme", KEY, fact.id),
            "scrub": lambda m: m.scrub(),
        }
        for name, call in calls.items():
            with pytest.raises(DatabaseFileMovedError, match="deleted or replaced") as caught:
                await call(memory)
            assert caught.value.may_have_taken_effect is False, name
            assert KEY not in str(caught.value)
        # An id no store could hand out is answered without touching the file.
        assert await memory.forget("acme", KEY, "not an id") is False
        # The file now at the path was not written to.
        assert await contents(db_path) == before
    # Closing the store is still harmless.
    await memory.aclose()


async def test_calls_work_again_once_the_file_is_back(db_path: Path, tmp_path: Path) -> None:
    async with SqliteMemory(db_path) as memory:
        fact = await memory.remember("acme", KEY, "kept")
        aside = anyio.Path(tmp_path / "aside.sqlite3")
        await aside.hardlink_to(db_path)
        await anyio.Path(db_path).unlink()
        with pytest.raises(DatabaseFileMovedError):
            await memory.recall("acme", KEY)
        await aside.replace(db_path)  # the same file again
        assert await memory.recall("acme", KEY) == (fact,)


async def test_a_damaged_memory_file_is_refused_at_open_and_left_unchanged(
    db_path: Path,
) -> None:
    # This project's header, but the table is gone.
    with sqlite3.connect(db_path) as raw:
        raw.execute("PRAGMA application_id = 1349733733")
        raw.execute("PRAGMA user_version = 1")
    raw.close()
    before = await anyio.Path(db_path).read_bytes()
    with pytest.raises(DatabaseFileError, match="table is missing") as caught:
        await SqliteMemory(db_path).open()
    assert isinstance(caught.value, MemoryStoreError)
    # Not switched to write-ahead logging, nor changed in any other way.
    assert await anyio.Path(db_path).read_bytes() == before
    assert [p.name async for p in anyio.Path(db_path.parent).iterdir()] == [db_path.name]


def test_a_path_that_is_not_utf8_is_refused_clearly(tmp_path: Path) -> None:
    name = os.fsdecode(b"memory-\xff.sqlite3")
    with pytest.raises(ValueError, match=r"path must be valid UTF-8"):
        SqliteMemory(tmp_path / name)
    with pytest.raises(ValueError, match=r"path must be valid UTF-8"):
        SqliteMemory("\ud800.sqlite3")
    assert list(tmp_path.iterdir()) == []


async def test_a_directory_replaced_by_a_file_counts_as_a_moved_file(tmp_path: Path) -> None:
    folder = anyio.Path(tmp_path / "folder")
    await folder.mkdir()
    async with SqliteMemory(folder / "memory.sqlite3") as memory:
        await memory.remember("acme", KEY, "fact")
        await folder.rename(tmp_path / "elsewhere")
        await folder.write_text("now a plain file")
        with pytest.raises(DatabaseFileMovedError):
            await memory.remember("acme", KEY, "lost if acknowledged")
