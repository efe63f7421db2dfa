"""Real processes: a writer killed at random points, and two writers sharing a file."""

from __future__ import annotations

import random
import signal
import subprocess
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import anyio
import pytest

from psych_runtime.memory.sqlite import SqliteMemory

WRITER = Path(__file__).with_name("_writer.py")
DEADLINE = 60.0  # seconds any one child may live
KILLS = 6
COUNT = 10_000  # more than any child gets to write before it is killed
# Long enough to spread facts over many pages, and checkable byte for byte.
PAYLOAD = "payload " * 40


def content_of(user: str, index: int) -> str:
    return f"{user}:{index}:{PAYLOAD}"


@contextmanager
def writer(
    db: Path,
    user: str,
    count: int,
    *,
    durability: str = "full",
    backend: str = "asyncio",
    forget_every: int = 0,
    payload: str = PAYLOAD,
) -> Iterator[subprocess.Popen[str]]:
    args = [str(db), user, str(count), durability, str(forget_every), payload, backend]
    child = subprocess.Popen(
        [sys.executable, str(WRITER), *args],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=WRITER.parent,
    )
    # Every read from a child is bounded: a hung child is killed, and the test
    # fails on its output instead of hanging CI.
    watchdog = threading.Timer(DEADLINE, child.kill)
    watchdog.start()
    try:
        yield child
    finally:
        watchdog.cancel()
        if child.poll() is None:
            child.kill()
        child.communicate(timeout=DEADLINE)


def start(child: subprocess.Popen[str]) -> None:
    assert child.stdout is not None
    assert child.stdin is not None
    assert child.stdout.readline() == "ready\n"
    child.stdin.write("go\n")
    child.stdin.flush()


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


async def scrub(db: Path) -> bool:
    async with SqliteMemory(db) as memory:
        return await memory.scrub()
