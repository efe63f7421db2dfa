from __future__ import annotations

import random
import sqlite3
import threading
import uuid
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import AbstractContextManager, closing, contextmanager
from pathlib import Path

import pytest

from psych_runtime.memory.sqlite import SqliteMemory

# The fixtures' types, as the test modules spell them.
Stored = Callable[[Path, str], int]
Load = Callable[[Path, str, int], None]
LockAfterFirstBatch = Callable[[Path, Callable[[], int]], AbstractContextManager[list[int]]]

# How long a test's helper thread waits at most for its turn or its release.
_DEADLINE = 60.0


@pytest.fixture
def db_path(tmp_path: Path) -> Path:
    return tmp_path / "memory.sqlite3"


@pytest.fixture
async def memory(db_path: Path, anyio_backend: str) -> AsyncIterator[SqliteMemory]:
    async with SqliteMemory(db_path) as store:
        yield store


def _stored(db_path: Path, end_user: str) -> int:
    # A separate connection sees every committed row.
    with closing(sqlite3.connect(db_path)) as raw:
        (count,) = raw.execute(
            "SELECT count(*) FROM psych_memory_fact WHERE end_user_id = ?", (end_user,)
        ).fetchone()
    return int(count)


@pytest.fixture
def stored() -> Stored:
    """How many facts of an end user of tenant "acme" the file holds, committed."""
    return _stored


def _load(db_path: Path, end_user: str, count: int) -> None:
    rng = random.Random(end_user)
    with closing(sqlite3.connect(db_path, isolation_level=None)) as raw:
        raw.execute("BEGIN IMMEDIATE")
        raw.executemany(
            "INSERT INTO psych_memory_fact (tenant, end_user_id, seq, id, content, created_at) "
            "VALUES ('acme', ?, ?, ?, ?, 0)",
            (
                (end_user, seq, uuid.UUID(int=rng.getrandbits(128)).hex, f"{end_user} {seq}")
                for seq in range(1, count + 1)
            ),
        )
        raw.execute("COMMIT")


@pytest.fixture
def load() -> Load:
    """Give a new end user of tenant "acme" facts at once, as years of remember calls would.

    The file must be laid out already; the i-th fact (from 1) reads "<end user> <i>".
    """
    return _load


@contextmanager
def _lock_after_first_batch(db_path: Path, left: Callable[[], int]) -> Iterator[list[int]]:
    release = threading.Event()
    holding: list[int] = []
    whole = left()

    def hold_the_write_lock() -> None:
        # Waits for its turn like any writer, which a batched deletion gives
        # between two batches, and then keeps the lock past the store's busy
        # timeout.
        with closing(sqlite3.connect(db_path, timeout=_DEADLINE, isolation_level=None)) as raw:
            while left() == whole:
                pass
            raw.execute("BEGIN IMMEDIATE")
            holding.append(left())
            release.wait(_DEADLINE)
            raw.execute("ROLLBACK")

    holder = threading.Thread(target=hold_the_write_lock)
    holder.start()
    try:
        yield holding
    finally:
        release.set()
        holder.join()


@pytest.fixture
def lock_after_first_batch() -> LockAfterFirstBatch:
    """Take the file's write lock once a batch has committed, until the block ends.

    ``left()`` counts the facts still to delete; the block gets a list that
    holds, once the lock is taken, how many were left at that moment.
    """
    return _lock_after_first_batch
