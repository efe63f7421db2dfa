"""Write calls queued together commit as one group, each keeping its own outcome.

A gate holds the writer inside a first call (a temporary trigger on the
store's own connection calls a function that waits), so the calls made
meanwhile are certainly queued, and are taken as the next group.
"""

from __future__ import annotations

import sqlite3
import threading
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from contextlib import asynccontextmanager, contextmanager
from datetime import UTC, datetime
from functools import partial
from pathlib import Path

import anyio
import anyio.to_thread
import pytest

from psych_runtime.memory.port import Memory, memory_key, new_memory_id
from psych_runtime.memory.sqlite import SqliteMemory, StoreUnavailableError

pytestmark = pytest.mark.anyio

Stored = Callable[[Path, str], int]
Outcome = object

GATED = "held at the gate"
REFUSED = "refused by a trigger"
DEADLINE = 60.0


class Gate:
    """Holds the store's writer inside the call that remembers `GATED`."""

    def __init__(self) -> None:
        self.entered = threading.Event()
        self.opened = threading.Event()

    def wait_here(self) -> int:
        self.entered.set()
        self.opened.wait(DEADLINE)
        return 0


@contextmanager
def gate_on(memory: SqliteMemory) -> Iterator[Gate]:
    gate = Gate()
    # The store's writer connection: where its groups run.
    conn: sqlite3.Connection = memory._conn  # type: ignore[assignment]
    conn.create_function("test_gate", 0, gate.wait_here)
    conn.execute(
        "CREATE TEMP TRIGGER test_gate BEFORE INSERT ON main.psych_memory_fact "
        f"WHEN NEW.content = '{GATED}' BEGIN SELECT test_gate(); END"
    )
    try:
        yield gate
    finally:
        gate.opened.set()


def refuse_content(db_path: Path) -> None:
    """Make every insert of `REFUSED` fail, on any connection."""
    with sqlite3.connect(db_path) as raw:
        raw.execute(
            "CREATE TRIGGER test_refuse BEFORE INSERT ON psych_memory_fact "
            f"WHEN NEW.content = '{REFUSED}' BEGIN SELECT RAISE(ABORT, 'refused'); END"
        )
    raw.close()


@asynccontextmanager
async def behind_the_gate(
    memory: SqliteMemory,
) -> AsyncIterator[Callable[[str, Callable[[], Awaitable[object]]], Awaitable[None]]]:
    """Run the calls queued in the block as one group, after a gated first call.

    Yields ``await queue(name, call)``; each call's result or store error lands in
    ``outcomes[name]`` once the block has ended.
    """
    with gate_on(memory) as gate:
        async with anyio.create_task_group() as group:

            async def first() -> None:
                await memory.remember("acme", "gatekeeper", GATED)

            group.start_soon(first)
            await anyio.to_thread.run_sync(gate.entered.wait, DEADLINE)
            assert gate.entered.is_set()

            async def queue(name: str, call: Callable[[], Awaitable[object]]) -> None:
                async def run() -> None:
                    try:
                        outcomes[name] = await call()
                    except StoreUnavailableError as exc:
                        outcomes[name] = exc

                group.start_soon(run)
                # Queued once its task waits: the next call queues after it.
                await anyio.wait_all_tasks_blocked()

            yield queue
            gate.opened.set()


outcomes: dict[str, object] = {}


@pytest.fixture(autouse=True)
def _fresh_outcomes() -> None:
    outcomes.clear()


async def test_a_call_that_fails_in_a_group_is_rolled_back_alone(
    memory: SqliteMemory, db_path: Path, stored: Stored
) -> None:
    refuse_content(db_path)
    key = memory_key("acme", "user-2")
    # All or none: the first of these is written before the second fails.
    pair = [
        Memory(new_memory_id(), key, "restored first", datetime.now(UTC)),
        Memory(new_memory_id(), key, REFUSED, datetime.now(UTC)),
    ]
    async with behind_the_gate(memory) as queue:
        await queue("before", lambda: memory.remember("acme", "user-1", "before the refusal"))
        await queue("refused", lambda: memory.remember("acme", "user-1", REFUSED))
        await queue("pair", lambda: memory.restore_many(pair))
        await queue("after", lambda: memory.remember("acme", "user-1", "after the refusal"))
    for name in ("refused", "pair"):
        refused = outcomes[name]
        assert isinstance(refused, StoreUnavailableError), name
        assert refused.may_have_taken_effect is False
        assert isinstance(refused.__cause__, sqlite3.IntegrityError)
        assert REFUSED not in str(refused)
    facts = await memory.recall("acme", "user-1")
    assert facts == (outcomes["before"], outcomes["after"])
    assert stored(db_path, "user-1") == 2
    assert stored(db_path, "user-2") == 0


async def capped(memory: SqliteMemory, index: int) -> Memory | None:
    return await memory.remember_within_limit("acme", "user-2", f"capped {index}", max_facts=2)


async def test_calls_in_a_group_see_the_effects_of_those_queued_before(
    memory: SqliteMemory,
) -> None:
    restored = Memory(new_memory_id(), memory_key("acme", "user-1"), "restored", datetime.now(UTC))
    async with behind_the_gate(memory) as queue:
        await queue("restore", lambda: memory.restore(restored))
        await queue("forget", lambda: memory.forget("acme", "user-1", restored.id))
        for index in range(4):
            await queue(f"capped {index}", partial(capped, memory, index))
    assert outcomes["restore"] is True
    assert outcomes["forget"] is True
    assert await memory.recall("acme", "user-1") == ()
    added = [outcomes[f"capped {index}"] for index in range(4)]
    # Queued in this order, so the first two fill the cap.
    assert [fact is not None for fact in added] == [True, True, False, False]
    assert await memory.recall("acme", "user-2") == tuple(added[:2])


async def test_a_call_cancelled_while_queued_never_runs(
    memory: SqliteMemory, db_path: Path, stored: Stored
) -> None:
    scope = anyio.CancelScope()
    caught: list[bool] = []
    async with behind_the_gate(memory) as queue:

        async def cancelled() -> object:
            with scope:
                await memory.remember("acme", "user-1", "never written")
            caught.append(scope.cancelled_caught)
            return None

        await queue("cancelled", cancelled)
        await queue("kept", lambda: memory.remember("acme", "user-2", "written"))
        await anyio.wait_all_tasks_blocked()
        scope.cancel()
    assert caught == [True]
    assert stored(db_path, "user-1") == 0
    assert stored(db_path, "user-2") == 1
    # The store goes on as before.
    assert len(await memory.recall("acme", "gatekeeper")) == 1


async def test_a_caller_cancelled_once_its_group_runs_gets_the_outcome(
    memory: SqliteMemory, db_path: Path, stored: Stored
) -> None:
    with gate_on(memory) as gate:
        async with anyio.create_task_group() as group:
            got: list[object] = []

            async def gated() -> None:
                with anyio.CancelScope() as scope:
                    group.start_soon(cancel_when_entered, scope)
                    got.append(await memory.remember("acme", "user-1", GATED))

            async def cancel_when_entered(scope: anyio.CancelScope) -> None:
                await anyio.to_thread.run_sync(gate.entered.wait, DEADLINE)
                scope.cancel()
                await anyio.wait_all_tasks_blocked()
                gate.opened.set()

            group.start_soon(gated)
    # The call ran to its end and answered; the fact is there.
    assert len(got) == 1
    assert isinstance(got[0], Memory)
    assert stored(db_path, "user-1") == 1


async def test_a_commit_that_fails_tells_every_call_of_the_group(
    memory: SqliteMemory, db_path: Path, stored: Stored
) -> None:
    # A foreign key checked at commit, which a trigger breaks for one
    # content: the group's commit fails, after every call of it ran.
    with sqlite3.connect(db_path) as raw:
        raw.executescript(
            "CREATE TABLE test_parent (id INTEGER PRIMARY KEY);"
            "CREATE TABLE test_child (parent INTEGER REFERENCES test_parent (id) "
            "DEFERRABLE INITIALLY DEFERRED);"
            "CREATE TRIGGER test_dangle AFTER INSERT ON psych_memory_fact "
            "WHEN NEW.content = 'breaks the commit' "
            "BEGIN INSERT INTO test_child VALUES (42); END;"
        )
    raw.close()
    writer: sqlite3.Connection = memory._conn  # type: ignore[assignment]
    writer.execute("PRAGMA foreign_keys = ON")
    async with behind_the_gate(memory) as queue:
        await queue("one", lambda: memory.remember("acme", "user-1", "an innocent fact"))
        await queue("breaks", lambda: memory.remember("acme", "user-1", "breaks the commit"))
        await queue("two", lambda: memory.remember("acme", "user-2", "another innocent fact"))
    for name in ("one", "breaks", "two"):
        failure = outcomes[name]
        assert isinstance(failure, StoreUnavailableError), name
        assert failure.may_have_taken_effect is True
        assert isinstance(failure.__cause__, sqlite3.IntegrityError)
    assert stored(db_path, "user-1") == stored(db_path, "user-2") == 0
    # The writer is usable again: the failed group left no transaction open.
    writer.execute("PRAGMA foreign_keys = OFF")
    await memory.remember("acme", "user-1", "after the failure")
    assert stored(db_path, "user-1") == 1


async def test_many_threads_with_loops_of_their_own_share_one_store(
    memory: SqliteMemory, db_path: Path, stored: Stored
) -> None:
    threads, tasks, facts = 4, 8, 15

    def one_thread(number: int) -> None:
        async def main() -> None:
            async def task(user: str) -> None:
                for index in range(facts):
                    fact = await memory.remember("acme", user, f"{user} fact {index}")
                    if index % 3 == 0:
                        assert await memory.forget("acme", user, fact.id)
                    assert len(await memory.recall("acme", user)) == index + 1 - (index // 3 + 1)

            async with anyio.create_task_group() as group:
                for task_number in range(tasks):
                    group.start_soon(task, f"user-{number}-{task_number}")

        anyio.run(main)

    await anyio.to_thread.run_sync(_in_threads, one_thread, threads)
    for number in range(threads):
        for task_number in range(tasks):
            assert stored(db_path, f"user-{number}-{task_number}") == facts - 5


def _in_threads(target: Callable[[int], None], count: int) -> None:
    errors: list[BaseException] = []

    def run(number: int) -> None:
        try:
            target(number)
        except BaseException as exc:  # noqa: BLE001 - handed to the test's thread
            errors.append(exc)

    workers = [threading.Thread(target=run, args=(number,)) for number in range(count)]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join()
    if errors:
        raise errors[0]
