"""Two erasures of one large end user at once: one counts every fact, the other none.

A key of more than a thousand facts is erased in batches, with other
writers let in between; a second erasure of the key must not take part
of it. In two processes, in two stores of one process, and in one store
shared by two tasks.
"""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path

import anyio
import pytest

from psych_runtime.memory.port import MemoryKey, StoreClosedError
from psych_runtime.memory.sqlite import SqliteMemory, StoreUnavailableError
from psych_runtime.memory.sqlite._erasing import lock_path

pytestmark = pytest.mark.anyio

Stored = Callable[[Path, str], int]
Load = Callable[[Path, str, int], None]

ERASER = Path(__file__).with_name("_eraser.py")
DEADLINE = 60.0  # seconds any one child may live
FACTS = 3_000  # three batches at least: the first holds a thousand
ROUNDS = 5


@contextmanager
def eraser(db_path: Path, user: str) -> Iterator[subprocess.Popen[str]]:
    """A child process that erases ``user`` when told to; killed if it outlives the test."""
    process = subprocess.Popen(
        [sys.executable, str(ERASER), str(db_path), user],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        yield process
    finally:
        if process.poll() is None:
            process.kill()
        process.communicate(timeout=DEADLINE)


def leftover_locks(db_path: Path) -> list[str]:
    return sorted(p.name for p in db_path.parent.iterdir() if "-erase-" in p.name)


@pytest.mark.parametrize("anyio_backend", ["asyncio"])
@pytest.mark.parametrize("round_", range(ROUNDS))
async def test_two_processes_erasing_one_end_user_at_once_count_it_once(
    memory: SqliteMemory, db_path: Path, load: Load, stored: Stored, round_: int
) -> None:
    load(db_path, "victim", FACTS)
    with ExitStack() as stack:
        children = [stack.enter_context(eraser(db_path, "victim")) for _ in range(2)]
        for child in children:
            assert child.stdout is not None
            assert child.stdout.readline() == "ready\n", child.stderr
        for child in children:
            assert child.stdin is not None
            child.stdin.write("go\n")
            child.stdin.flush()
        counts = []
        for child in children:
            out, err = child.communicate(timeout=DEADLINE)
            assert child.returncode == 0, err
            assert out.startswith("erased "), out
            counts.append(int(out.split()[1]))
    assert sorted(counts) == [0, FACTS]
    assert stored(db_path, "victim") == 0
    assert leftover_locks(db_path) == []


@pytest.mark.parametrize("shared", [True, False], ids=["one-store", "two-stores"])
async def test_two_tasks_erasing_one_end_user_at_once_count_it_once(
    db_path: Path, load: Load, stored: Stored, shared: bool
) -> None:
    async with SqliteMemory(db_path) as first, SqliteMemory(db_path) as second:
        for _ in range(ROUNDS):
            load(db_path, "victim", FACTS)
            counts: list[int] = []

            async def erase(memory: SqliteMemory, counts: list[int] = counts) -> None:
                counts.append(await memory.erase("acme", "victim"))

            async with anyio.create_task_group() as group:
                group.start_soon(erase, first)
                group.start_soon(erase, first if shared else second)
            assert sorted(counts) == [0, FACTS]
            assert stored(db_path, "victim") == 0
    assert leftover_locks(db_path) == []


async def test_a_lock_file_left_by_a_killed_erasure_is_taken_over_and_removed(
    memory: SqliteMemory, db_path: Path, load: Load, stored: Stored
) -> None:
    lock = lock_path(db_path, MemoryKey("acme", "victim"))
    lock.touch()
    load(db_path, "victim", FACTS)
    assert await memory.erase("acme", "victim") == FACTS
    assert not lock.exists()
    assert stored(db_path, "victim") == 0


async def test_a_lock_file_that_cannot_be_created_fails_the_erase_before_it_deletes(
    memory: SqliteMemory, db_path: Path, load: Load, stored: Stored
) -> None:
    lock_path(db_path, MemoryKey("acme", "victim")).mkdir()
    load(db_path, "victim", 10)
    with pytest.raises(StoreUnavailableError) as caught:
        await memory.erase("acme", "victim")
    assert caught.value.may_have_taken_effect is False
    assert "erasure lock file" in caught.value.reason
    assert "victim" not in str(caught.value)
    assert stored(db_path, "victim") == 10


async def test_an_erase_of_a_closed_store_touches_no_lock_file(db_path: Path) -> None:
    memory = SqliteMemory(db_path)
    with pytest.raises(StoreClosedError):
        await memory.erase("acme", "victim")
    assert leftover_locks(db_path) == []
