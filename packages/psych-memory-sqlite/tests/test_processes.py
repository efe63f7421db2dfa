"""Real processes: a writer killed at random points, writers sharing a file, a large erase."""

from __future__ import annotations

import random
import signal
import subprocess
import sys
import threading
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager
from pathlib import Path

import anyio
import pytest

from psych_runtime.memory.sqlite import SqliteMemory

WRITER = Path(__file__).with_name("_writer.py")
PACED_WRITER = Path(__file__).with_name("_paced_writer.py")
LIMITED_WRITER = Path(__file__).with_name("_limited_writer.py")
CROWD_WRITER = Path(__file__).with_name("_crowd_writer.py")
CROWD_TASKS = 16
LIMIT = 5
LIMITED_CALLS = 10  # per end user and per process: twice the limit each
LIMITED_END_USERS = 10
DEADLINE = 60.0  # seconds any one child may live
KILLS = 6
COUNT = 10_000  # more than any child gets to write before it is killed
# Long enough to spread facts over many pages, and checkable byte for byte.
PAYLOAD = "payload " * 40


def content_of(user: str, index: int) -> str:
    return f"{user}:{index}:{PAYLOAD}"


@contextmanager
def bounded_child(script: Path, *args: str) -> Iterator[subprocess.Popen[str]]:
    """Run ``script`` in a child Python; it is killed after `DEADLINE` at most."""
    process = subprocess.Popen(
        [sys.executable, str(script), *args],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=script.parent,
    )
    # Every read from a child is bounded: a hung child is killed, and the test
    # fails on its output instead of hanging CI.
    watchdog = threading.Timer(DEADLINE, process.kill)
    watchdog.start()
    try:
        yield process
    finally:
        watchdog.cancel()
        if process.poll() is None:
            process.kill()
        process.communicate(timeout=DEADLINE)


def writer(
    db: Path,
    user: str,
    count: int,
    *,
    durability: str = "full",
    backend: str = "asyncio",
    forget_every: int = 0,
    payload: str = PAYLOAD,
) -> AbstractContextManager[subprocess.Popen[str]]:
    args = (str(db), user, str(count), durability, str(forget_every), payload, backend)
    return bounded_child(WRITER, *args)


def tell(process: subprocess.Popen[str], line: str) -> None:
    assert process.stdin is not None
    process.stdin.write(f"{line}\n")
    process.stdin.flush()


def start(process: subprocess.Popen[str]) -> None:
    assert process.stdout is not None
    assert process.stdout.readline() == "ready\n"
    tell(process, "go")


def recall_all(db: Path, user: str) -> list[tuple[str, str]]:
    async def main() -> list[tuple[str, str]]:
        async with SqliteMemory(db) as memory:
            return [(fact.id, fact.content) for fact in await memory.recall("acme", user)]

    return anyio.run(main)


@pytest.mark.parametrize("durability", ["full", "normal"])
def test_every_acknowledged_fact_survives_sigkill(tmp_path: Path, durability: str) -> None:
    db = tmp_path / "crash.sqlite3"
    rng = random.Random(f"sigkill-{durability}")
    acknowledged: dict[str, str] = {}  # id -> content
    for round_ in range(KILLS):
        user = f"user-{round_}"
        with writer(db, user, COUNT, durability=durability) as child:
            start(child)
            assert child.stdout is not None
            # Kill right after a random acknowledgement: the child is then
            # somewhere inside the next remember (or between two of them).
            lines = [child.stdout.readline() for _ in range(rng.randrange(1, 150))]
            child.send_signal(signal.SIGKILL)
            # Read through the same buffered reader: it may hold lines already.
            rest = child.stdout.read()
            assert child.wait(timeout=DEADLINE) == -signal.SIGKILL
            # Acknowledgements still in the pipe were given before the kill too.
            for line in [*lines, *rest.splitlines()]:
                assert line.startswith("ack "), line
                _, index, memory_id = line.split()
                acknowledged[memory_id] = content_of(user, int(index))

    for round_ in range(KILLS):
        user = f"user-{round_}"
        stored = recall_all(db, user)
        stored_ids = {memory_id for memory_id, _ in stored}
        mine = {i: c for i, c in acknowledged.items() if c.startswith(f"{user}:")}
        # Every acknowledged fact is there, intact; at most the one in flight is extra.
        assert mine.keys() <= stored_ids
        for memory_id, content in stored:
            if memory_id in mine:
                assert content == mine[memory_id]
            else:
                assert content == content_of(user, len(mine))
        assert len(stored) - len(mine) in (0, 1)
        # Insertion order survived as well.
        assert [content for _, content in stored] == [
            content_of(user, i) for i in range(len(stored))
        ]


@pytest.mark.parametrize(("durability", "backend"), [("full", "asyncio"), ("normal", "trio")])
def test_sigkill_amid_groups_keeps_every_answer_true(
    tmp_path: Path, durability: str, backend: str
) -> None:
    db = tmp_path / "crowd.sqlite3"
    rng = random.Random(f"crowd-{durability}")
    remembered: dict[str, dict[int, str]] = {}  # user -> index -> id
    forgotten: dict[str, set[int]] = {}
    for round_ in range(KILLS):
        prefix = f"round-{round_}"
        args = (str(db), prefix, str(CROWD_TASKS), PAYLOAD, durability, backend)
        with bounded_child(CROWD_WRITER, *args) as child:
            start(child)
            assert child.stdout is not None
            # Many tasks write at once, so the kill lands inside a group.
            lines = [child.stdout.readline() for _ in range(rng.randrange(20, 400))]
            child.send_signal(signal.SIGKILL)
            lines += child.stdout.read().splitlines()
            assert child.wait(timeout=DEADLINE) == -signal.SIGKILL
        for line in lines:
            kind, number, position, *rest = line.split()
            user = f"{prefix}-{number}"
            if kind == "ack":
                remembered.setdefault(user, {})[int(position)] = rest[0]
            else:
                assert kind == "forgot", line
                forgotten.setdefault(user, set()).add(int(position))

    async def check() -> None:
        async with SqliteMemory(db) as memory:
            for user, facts in remembered.items():
                stored = {fact.id: fact.content for fact in await memory.recall("acme", user)}
                for index, memory_id in facts.items():
                    if index in forgotten.get(user, set()):
                        # A forget that answered is never undone.
                        assert memory_id not in stored, (user, index)
                    elif index % 3 != 0:
                        # A remember that answered is there, intact; every
                        # third fact may have been forgotten when the kill came.
                        assert stored.get(memory_id) == content_of(user, index), (user, index)
                assert all(content.startswith(f"{user}:") for content in stored.values())
            assert await memory.scrub()

    anyio.run(check)
    # Once scrubbed, no byte of a fact whose forget answered is left in any file.
    files = b"".join(
        path.read_bytes() for path in tmp_path.iterdir() if path.name.startswith(db.name)
    )
    for user, indices in forgotten.items():
        for index in indices:
            assert content_of(user, index).encode() not in files, (user, index)


def test_two_processes_writing_one_key_at_once_lose_nothing(tmp_path: Path) -> None:
    db = tmp_path / "shared.sqlite3"
    count, forget_every = 300, 7
    # Both write to the same end user, so they contend for the same pages and
    # the same sequence of positions; the payload tells their facts apart.
    payloads = {"left": f"L {PAYLOAD}", "right": f"R {PAYLOAD}"}
    with (
        writer(db, "shared", count, payload=payloads["left"], forget_every=forget_every) as left,
        writer(
            db,
            "shared",
            count,
            payload=payloads["right"],
            backend="trio",
            forget_every=forget_every,
        ) as right,
    ):
        start(left)
        start(right)
        outputs = []
        for child in (left, right):
            assert child.stdout is not None
            assert child.stderr is not None
            out, err = child.stdout.read(), child.stderr.read()
            assert child.wait(timeout=DEADLINE) == 0, err
            assert "locked" not in err
            outputs.append(out)

    stored = recall_all(db, "shared")
    assert len({memory_id for memory_id, _ in stored}) == len(stored)
    for side, out in zip(("left", "right"), outputs, strict=True):
        acks = [line.split() for line in out.splitlines() if line.startswith("ack ")]
        assert len(acks) == count
        kept = [
            (memory_id, f"shared:{index}:{payloads[side]}")
            for _, index, memory_id in acks
            if int(index) % forget_every
        ]
        # Each writer's surviving facts are all there, in the order it wrote them.
        mine = [fact for fact in stored if fact[1].endswith(payloads[side])]
        assert mine == kept
    assert len(stored) == 2 * (count - len(range(0, count, forget_every)))

    # Once the scrub has completed, no forgotten fact is left in any file.
    assert anyio.run(scrub, db) is True
    files = b"".join(p.read_bytes() for p in tmp_path.glob(f"{db.name}*") if p.is_file())
    for side, letter in (("left", "L"), ("right", "R")):
        for index in range(0, count, forget_every):
            assert f"shared:{index}:{letter} ".encode() not in files, (side, index)
        assert f"shared:1:{letter} ".encode() in files  # the scan sees kept facts


def test_four_processes_remembering_and_forgetting_never_fail(tmp_path: Path) -> None:
    # The load that made a committed forget raise within seconds, when the
    # scrub of the log waited for the other writers and then failed.
    db = tmp_path / "four.sqlite3"
    count, forget_every = 150, 3
    users = [f"user-{i}" for i in range(4)]
    with (
        writer(db, users[0], count, forget_every=forget_every) as first,
        writer(db, users[1], count, forget_every=forget_every, backend="trio") as second,
        writer(db, users[2], count, forget_every=forget_every) as third,
        writer(db, users[3], count, forget_every=forget_every, backend="trio") as fourth,
    ):
        children = (first, second, third, fourth)
        for child in children:
            start(child)
        for child in children:
            assert child.stdout is not None
            assert child.stderr is not None
            out, err = child.stdout.read(), child.stderr.read()
            assert child.wait(timeout=DEADLINE) == 0, err
            assert out.count("forgot ") == len(range(0, count, forget_every))
    for end_user in users:
        stored = recall_all(db, end_user)
        assert [content for _, content in stored] == [
            content_of(end_user, i) for i in range(count) if i % forget_every
        ]
    assert anyio.run(scrub, db) is True
    files = b"".join(p.read_bytes() for p in tmp_path.glob(f"{db.name}*") if p.is_file())
    for end_user in users:
        for index in range(0, count, forget_every):
            assert f"{end_user}:{index}:".encode() not in files


def test_two_processes_adding_within_a_limit_at_once_never_pass_it(
    tmp_path: Path, stored: Callable[[Path, str], int]
) -> None:
    db = tmp_path / "limited.sqlite3"
    anyio.run(create, db)
    args = (str(db), str(LIMITED_END_USERS), str(LIMITED_CALLS), str(LIMIT))
    with (
        bounded_child(LIMITED_WRITER, *args, "asyncio") as left,
        bounded_child(LIMITED_WRITER, *args, "trio") as right,
    ):
        children = (left, right)
        # Both have opened the file before either begins: a real barrier.
        for child in children:
            assert child.stdout is not None
            assert child.stdout.readline() == "ready\n"
        for child in children:
            tell(child, "go")
        answers: list[list[str]] = []
        for child in children:
            assert child.stdout is not None
            assert child.stderr is not None
            out, err = child.stdout.read(), child.stderr.read()
            assert child.wait(timeout=DEADLINE) == 0, err
            answers += [line.split() for line in out.splitlines()]
    assert len(answers) == 2 * LIMITED_END_USERS * LIMITED_CALLS
    added = Counter(answer[1] for answer in answers if answer[0] == "added")
    for number in range(LIMITED_END_USERS):
        user = f"user-{number}"
        # Exactly the limit, and exactly the facts the calls said they added.
        assert stored(db, user) == LIMIT, user
        assert added[user] == LIMIT, user
        ids = {answer[2] for answer in answers if answer[:2] == ["added", user]}
        assert {fact_id for fact_id, _ in recall_all(db, user)} == ids


async def scrub(db: Path) -> bool:
    async with SqliteMemory(db) as memory:
        return await memory.scrub()


# An end user large enough for many batches at any speed: each batch of an
# erase may at most double the last, from a thousand facts.
LARGE = 100_000
# An erase's batches, and its pauses between them, scale with the busy
# timeout: a lowered one runs exactly the path of the defaults, faster.
LOWERED_BUSY_TIMEOUT = 0.5


async def create(db: Path) -> None:
    async with SqliteMemory(db):
        pass


async def erase(db: Path, end_user: str) -> int:
    async with SqliteMemory(db, busy_timeout=LOWERED_BUSY_TIMEOUT) as memory:
        return await memory.erase("acme", end_user)


def test_another_process_writing_every_20_ms_never_fails_during_a_large_erase(
    tmp_path: Path,
    load: Callable[[Path, str, int], None],
    stored: Callable[[Path, str], int],
) -> None:
    db = tmp_path / "large.sqlite3"
    anyio.run(create, db)
    load(db, "big", LARGE)
    args = (str(db), "other", str(LOWERED_BUSY_TIMEOUT), "big", "trio")
    with bounded_child(PACED_WRITER, *args) as paced:
        assert paced.stdout is not None
        assert paced.stderr is not None
        start(paced)
        # The writer is running, and the erase has not begun.
        first = paced.stdout.readline()
        assert first == "ok 1\n"
        erased = anyio.run(erase, db, "big")
        tell(paced, "stop")
        rest, err = paced.stdout.read(), paced.stderr.read()
        assert paced.wait(timeout=DEADLINE) == 0, err
    lines = [first, *rest.splitlines()]
    assert [line for line in lines if not line.startswith("ok ")] == []
    assert erased == LARGE
    # Some of its writes landed while the erase was part-way through.
    oldest = [int(line.split()[1]) for line in lines]
    assert any(position > 1 for position in oldest), oldest
    assert stored(db, "big") == 0
    # Every acknowledged write is there (and one more, cut off before its line).
    assert stored(db, "other") - len(lines) in (0, 1)
