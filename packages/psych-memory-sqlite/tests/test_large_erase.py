"""Erasing a large end user in batches: other calls between them, resumable, not cut short.

Another process writing during a large erase is in test_processes.py.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable
from contextlib import AbstractContextManager
from pathlib import Path

import anyio
import anyio.lowlevel
import anyio.to_thread
import pytest

from psych_runtime.memory.port import Memory, StalePageError, StoreClosedError
from psych_runtime.memory.sqlite import DatabaseUnavailableError, SqliteMemory

pytestmark = pytest.mark.anyio

Stored = Callable[[Path, str], int]
Load = Callable[[Path, str, int], None]
LockAfterFirstBatch = Callable[[Path, Callable[[], int]], AbstractContextManager[list[int]]]

# Enough facts for several batches at any speed: each batch may at most
# double the last, from a thousand facts.
MEDIUM = 20_000


async def first_batch_committed(stored: Stored, db_path: Path) -> int:
    """Wait until an erase of "big" has committed a batch; return how many facts are left."""
    while (left := stored(db_path, "big")) == MEDIUM:
        await anyio.lowlevel.checkpoint()
    return left


async def test_an_erase_that_fails_between_batches_is_finished_by_a_retry(
    db_path: Path, load: Load, stored: Stored, lock_after_first_batch: LockAfterFirstBatch
) -> None:
    async with SqliteMemory(db_path, busy_timeout=0.2) as memory:
        load(db_path, "big", MEDIUM)
        with (
            lock_after_first_batch(db_path, lambda: stored(db_path, "big")) as holding,
            pytest.raises(DatabaseUnavailableError) as caught,
        ):
            await memory.erase("acme", "big")
        error = caught.value
        assert error.operation == "erase"
        assert error.may_have_taken_effect is True
        assert "erase again" in error.reason
        assert "big" not in str(error)
        assert isinstance(error.__cause__, sqlite3.OperationalError)
        # The batches committed before the failure stay committed.
        left = stored(db_path, "big")
        assert holding == [left]
        assert 0 < left < MEDIUM
        assert await memory.erase("acme", "big") == left
        assert stored(db_path, "big") == 0
        assert await memory.recall("acme", "big") == ()


async def test_a_cancelled_erase_still_deletes_every_fact(
    memory: SqliteMemory, db_path: Path, load: Load, stored: Stored
) -> None:
    load(db_path, "big", MEDIUM)
    seen: list[int] = []
    counted: list[int] = []
    with anyio.CancelScope() as scope:
        async with anyio.create_task_group() as group:

            async def cancel_part_way() -> None:
                seen.append(await first_batch_committed(stored, db_path))
                scope.cancel()

            group.start_soon(cancel_part_way)
            counted.append(await memory.erase("acme", "big"))
            # The cancellation reaches the caller at its next checkpoint.
            await anyio.lowlevel.checkpoint()
            pytest.fail("the cancellation was lost")
    assert scope.cancelled_caught
    # It came while the erase was part-way; the worker thread went on to the
    # end, and the call returned the whole count, before the caller saw it.
    assert 0 < seen[0] < MEDIUM
    assert counted == [MEDIUM]
    assert stored(db_path, "big") == 0


async def test_closing_waits_for_an_erase_in_progress(
    db_path: Path, load: Load, stored: Stored
) -> None:
    memory = SqliteMemory(db_path)
    await memory.open()
    load(db_path, "big", MEDIUM)
    counted: list[int] = []
    async with anyio.create_task_group() as group:

        async def erase_big() -> None:
            counted.append(await memory.erase("acme", "big"))

        group.start_soon(erase_big)
        left = await first_batch_committed(stored, db_path)
        await memory.aclose()
        assert stored(db_path, "big") == 0
    assert 0 < left < MEDIUM
    assert counted == [MEDIUM]
    with pytest.raises(StoreClosedError):
        await memory.recall("acme", "big")


async def test_calls_during_a_large_erase_see_its_progress_and_later_facts_are_kept(
    memory: SqliteMemory, db_path: Path, load: Load, stored: Stored
) -> None:
    load(db_path, "big", MEDIUM)
    (oldest,) = await memory.recall_page("acme", "big", size=1)
    counted: list[int] = []
    kept: list[Memory] = []
    seen: list[str] = []
    done = anyio.Event()
    async with anyio.create_task_group() as group:

        async def erase_big() -> None:
            counted.append(await memory.erase("acme", "big"))
            done.set()

        group.start_soon(erase_big)
        await first_batch_committed(stored, db_path)
        # The oldest facts went first: a page after one of them is stale.
        with pytest.raises(StalePageError):
            await memory.recall_page("acme", "big", after=oldest.id, size=1)
        # This store's own calls get in between two batches.
        while not done.is_set():
            seen.extend(fact.content for fact in await memory.recall("acme", "big", limit=1))
            kept.append(await memory.remember("acme", "big", f"remembered during {len(kept)}"))
    # Facts remembered after the erase began are neither deleted nor counted.
    assert counted == [MEDIUM]
    assert await memory.recall("acme", "big") == tuple(kept)
    # A recall part-way saw the newest facts of the key only.
    assert any(content != "big 1" and content.startswith("big ") for content in seen), seen
