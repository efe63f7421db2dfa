"""Benchmark SqliteMemory beside plain sqlite3 running the same statements.

Run with ``hatch run bench:sqlite`` (add ``--quick`` for a short smoke run).

Part 1, throughput: on two files prepared the same way, the adapter and a
plain ``sqlite3`` connection (same schema, same pragmas, same SQL in the same
transactions, called directly with no validation and no worker thread) each run ``remember``,
``recall``, ``forget`` and ``erase``. Rounds alternate between the two so
that a busy machine slows both alike; the best round of each counts. The
ratio adapter / plain is the figure of merit (target: at least 0.7).

Part 2, growth: one file grows from 10 thousand to 1 million facts, and at
each size the adapter's per-user operations are timed on end users holding
ten facts each. Their cost should stay flat (target: within 25 % of the
smallest size).

Part 3, the file identity check: the ``stat`` of the path the adapter makes
before each commit (to refuse writes into a deleted or replaced file), next
to the transaction of one ``remember``.

Part 4, the scrub: on each file of part 2, one end user is erased and the
adapter's ``scrub()`` (rewrite the file from its live rows, then empty the
log) is timed beside the same ``VACUUM`` and checkpoint run by a plain
connection, rounds alternating. Its cost grows with the file, which is why
no call makes it.

Part 5, a large erase beside another process's writes: one end user of a
million facts is erased at the default settings while a child process
remembers a fact (for another end user) every 20 ms, against a baseline in
the same run: the same child writing with no erase running, and the same
erase as one plain ``DELETE`` transaction. Reported: the erase's time, and
the writer's calls, failed calls and worst wait. ``--only erase`` runs this
part alone; ``--erase-facts`` sets the size.

Part 6, how long one ``restore_many`` holds the write lock: batches of 2,000
(what the operator's import and migrate send), 10,000 and 50,000 facts, each
timed beside plain ``sqlite3`` inserting the same rows in one transaction.
``--only restore`` runs this part alone.

Part 8, many callers at once (run first; ``--only callers`` runs it alone):
five phases on disjoint end users of one file, remember16 (16 tasks x 40
``remember``), forget16 (16 x 40 ``forget``), mixed16 (16 x 40 calls, half
``recall``, a quarter each ``remember`` and ``forget``, shuffled with a fixed
seed, alike for every side), recall16w (15 tasks x 40 ``recall`` while one
task makes 40 ``remember``) and remember1 (one caller, 200 ``remember`` one
after another), for three sides in the same rounds, each going first in
turn: SqliteMemory with its defaults, and plain ``sqlite3`` in a worker
thread (one connection behind a lock, WAL, one transaction per call, no
secure delete, no emptying of the log) at ``synchronous=FULL`` and at
``NORMAL``. Medians of 5 rounds (``--rounds``). Per call it gives the bytes
the process wrote to storage (``write_bytes`` of /proc/self/io, read around
each phase), its write system calls (``syscw``, ``wchar``), and its fsyncs,
counted by ``strace -c -f`` around a separate run of each phase alone when
strace is installed (``--no-strace`` skips it).

All other parts use the default durability ("full": an fsync per commit) unless
``--durability normal`` is given. Figures go to stdout; copy them to
docs/sqlite.md.
"""

from __future__ import annotations

import argparse
import functools
import gc
import os
import random
import shutil
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Awaitable, Callable, Iterable, Iterator
from contextlib import closing, contextmanager
from datetime import UTC, datetime, timedelta
from pathlib import Path

import anyio
import anyio.to_thread

from psych_runtime.memory.port import Memory, MemoryKey, MemoryStoreError
from psych_runtime.memory.sqlite import Durability, SqliteMemory

FACTS_PER_USER = 10
EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
MICROSECOND = timedelta(microseconds=1)

# The adapter's statements, spelled out again for the plain connection.
INSERT = (
    "INSERT INTO psych_memory_fact (tenant, end_user_id, seq, id, content, created_at) "
    "SELECT ?, ?, coalesce(max(seq), 0) + 1, ?, ?, ? FROM psych_memory_fact "
    "WHERE tenant = ? AND end_user_id = ?"
)
SELECT = (
    "SELECT id, content, created_at FROM psych_memory_fact "
    "WHERE tenant = ? AND end_user_id = ? ORDER BY seq LIMIT ?"
)
DELETE_ONE = "DELETE FROM psych_memory_fact WHERE tenant = ? AND end_user_id = ? AND id = ?"
DELETE_KEY = "DELETE FROM psych_memory_fact WHERE tenant = ? AND end_user_id = ?"
TRUNCATE_LOG = "PRAGMA wal_checkpoint(TRUNCATE)"
NO_LIMIT = 2**63 - 1
OPERATIONS = ("remember", "recall", "forget", "erase")


@contextmanager
def gc_paused() -> Iterator[None]:
    # As timeit does: a collection triggered by earlier allocations must not
    # land in one measurement and not in another.
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


def content(rng: random.Random) -> str:
    words = ("prefers", "the", "Berlin", "warehouse", "invoices", "in", "euro", "weekly")
    return " ".join(rng.choice(words) for _ in range(12))


def user(index: int) -> str:
    return f"user-{index:07d}"


def now_micros() -> int:
    return (datetime.now(UTC) - EPOCH) // MICROSECOND


async def create(path: Path, durability: Durability) -> None:
    async with SqliteMemory(path, durability=durability):
        pass


def plain(path: Path, durability: Durability) -> sqlite3.Connection:
    """A connection set up exactly as the adapter sets up its own."""
    conn = sqlite3.connect(
        path, timeout=5.0, isolation_level=None, check_same_thread=False, cached_statements=16
    )
    conn.execute("PRAGMA journal_mode = WAL")
    conn.execute(f"PRAGMA synchronous = {durability.upper()}")
    conn.execute("PRAGMA secure_delete = ON")
    conn.execute("PRAGMA temp_store = MEMORY")
    return conn


def fill(path: Path, durability: Durability, first_user: int, users: int, seed: int) -> None:
    """Add ``users`` end users of ten facts each, interleaved as if over time."""
    rng = random.Random(seed)
    with closing(plain(path, durability)) as conn:
        rows = []
        for _ in range(FACTS_PER_USER):
            for index in range(first_user, first_user + users):
                end_user = user(index)
                row = (
                    "acme",
                    end_user,
                    os.urandom(16).hex(),
                    content(rng),
                    now_micros(),
                    "acme",
                    end_user,
                )
                rows.append(row)
                if len(rows) == 50_000:
                    with conn:
                        conn.execute("BEGIN")
                        conn.executemany(INSERT, rows)
                    rows.clear()
        with conn:
            conn.execute("BEGIN")
            conn.executemany(INSERT, rows)
        conn.execute(TRUNCATE_LOG)


def first_ids(path: Path, indices: Iterable[int]) -> list[tuple[str, str]]:
    """The oldest fact's id of each given user, read before the clock starts."""
    with closing(sqlite3.connect(path)) as conn:
        found = []
        for index in indices:
            (memory_id,) = conn.execute(
                "SELECT id FROM psych_memory_fact WHERE tenant = 'acme' AND end_user_id = ? "
                "ORDER BY seq LIMIT 1",
                (user(index),),
            ).fetchone()
            found.append((memory_id, user(index)))
        return found


# Part 1: the adapter and plain sqlite3, side by side.


class Workload:
    """The same four operations, on users laid out the same way in either file."""

    def __init__(self, users: int, ops: int) -> None:
        self.users = users
        self.ops = ops
        # Forget the first fact of some users; erase other users entirely.
        self.forget_users = range(ops)
        self.erase_users = range(ops, 2 * ops)
        self.recall_order = [random.Random(7).randrange(2 * ops, users) for _ in range(ops * 4)]


def plain_remember(conn: sqlite3.Connection, end_user: str, text: str) -> None:
    conn.execute("BEGIN IMMEDIATE")
    conn.execute(
        INSERT, ("acme", end_user, os.urandom(16).hex(), text, now_micros(), "acme", end_user)
    )
    conn.execute("COMMIT")


def plain_recall(conn: sqlite3.Connection, end_user: str) -> object:
    return conn.execute(SELECT, ("acme", end_user, NO_LIMIT)).fetchall()


def plain_forget(conn: sqlite3.Connection, end_user: str, memory_id: str) -> None:
    conn.execute("BEGIN IMMEDIATE")
    deleted = conn.execute(DELETE_ONE, ("acme", end_user, memory_id)).rowcount
    conn.execute("COMMIT")
    if deleted:
        conn.execute(TRUNCATE_LOG).fetchone()


def plain_erase(conn: sqlite3.Connection, end_user: str) -> None:
    conn.execute("BEGIN IMMEDIATE")
    deleted = conn.execute(DELETE_KEY, ("acme", end_user)).rowcount
    conn.execute("COMMIT")
    if deleted:
        conn.execute(TRUNCATE_LOG).fetchone()


PLAIN: dict[str, Callable[..., object]] = {
    "remember": plain_remember,
    "recall": plain_recall,
    "forget": plain_forget,
    "erase": plain_erase,
}
SIDES = ("plain", "plain-thread", "adapter")

Call = Callable[..., Awaitable[object]]


async def run_side(
    side: str, path: Path, durability: Durability, work: Workload
) -> dict[str, float]:
    """Run the workload one way; return operations per second for each operation."""
    if side == "adapter":
        async with SqliteMemory(path, durability=durability) as memory:

            async def adapter(op: str, *args: str) -> object:
                return await getattr(memory, op)("acme", *args)

            return await timed(adapter, path, work)
    conn = plain(path, durability)
    try:
        if side == "plain":

            async def direct(op: str, *args: str) -> object:
                # Deliberately on the loop thread: the ceiling, with no hop.
                return PLAIN[op](conn, *args)

            return await timed(direct, path, work)

        async def threaded(op: str, *args: str) -> object:
            return await anyio.to_thread.run_sync(PLAIN[op], conn, *args)

        return await timed(threaded, path, work)
    finally:
        conn.close()


async def timed(call: Call, path: Path, work: Workload) -> dict[str, float]:
    rng = random.Random(1)
    forget = first_ids(path, work.forget_users)
    rates: dict[str, float] = {}

    start = time.perf_counter()
    for i in range(work.ops):
        await call("remember", user(i % work.users), content(rng))
    rates["remember"] = work.ops / (time.perf_counter() - start)

    start = time.perf_counter()
    for index in work.recall_order:
        await call("recall", user(index))
    rates["recall"] = len(work.recall_order) / (time.perf_counter() - start)

    start = time.perf_counter()
    for memory_id, end_user in forget:
        await call("forget", end_user, memory_id)
    rates["forget"] = len(forget) / (time.perf_counter() - start)

    start = time.perf_counter()
    for index in work.erase_users:
        await call("erase", user(index))
    rates["erase"] = len(work.erase_users) / (time.perf_counter() - start)
    return rates


def throughput(
    folder: Path, *, durability: Durability, backend: str, users: int, ops: int, rounds: int
) -> None:
    work = Workload(users, ops)
    best: dict[str, dict[str, float]] = {side: {} for side in SIDES}
    for round_ in range(rounds):
        # Rotate the order, so no side always runs first on a fresh page cache.
        for side in SIDES[round_ % 3 :] + SIDES[: round_ % 3]:
            path = folder / f"throughput-{side}-{round_}.sqlite3"
            anyio.run(create, path, durability)
            fill(path, durability, 0, users, seed=round_)
            with gc_paused():
                rates = anyio.run(run_side, side, path, durability, work, backend=backend)
            for op, rate in rates.items():
                best[side][op] = max(best[side].get(op, 0.0), rate)
            for leftover in folder.glob(f"{path.name}*"):
                leftover.unlink()

    print(f"\n## Throughput ({backend}, durability={durability}, {users * FACTS_PER_USER} facts)")
    print(
        "\n| operation | plain sqlite3 | plain sqlite3 in a worker thread | SqliteMemory "
        "| ratio to plain | ratio to plain in a thread |"
    )
    print("| --- | ---: | ---: | ---: | ---: | ---: |")
    for op in OPERATIONS:
        base, hop, ours = (best[side][op] for side in SIDES)
        print(
            f"| {op} | {base:,.0f} | {hop:,.0f} | {ours:,.0f} "
            f"| {ours / base:.2f} | {ours / hop:.2f} |"
        )


# Part 2: per-user operations as the file grows.


async def per_user_ops(
    path: Path, durability: Durability, picks: list[int], ops: int
) -> dict[str, list[float]]:
    """Microseconds of each call; ``picks`` holds 3 * ``ops`` end users not used before."""
    rng = random.Random(3)
    forget = first_ids(path, picks[:ops])
    calls: dict[str, list[float]] = {op: [] for op in OPERATIONS}
    clock = time.perf_counter
    async with SqliteMemory(path, durability=durability) as memory:
        for index in picks[ops : 2 * ops]:
            start = clock()
            await memory.remember("acme", user(index), content(rng))
            calls["remember"].append(clock() - start)
        for index in picks[ops : 2 * ops]:
            start = clock()
            await memory.recall("acme", user(index))
            calls["recall"].append(clock() - start)
        for memory_id, end_user in forget:
            start = clock()
            await memory.forget("acme", end_user, memory_id)
            calls["forget"].append(clock() - start)
        for index in picks[2 * ops :]:
            start = clock()
            await memory.erase("acme", user(index))
            calls["erase"].append(clock() - start)
    return {op: [seconds * 1e6 for seconds in values] for op, values in calls.items()}


def growth(
    folder: Path, *, durability: Durability, backend: str, sizes: list[int], ops: int, rounds: int
) -> dict[int, Path]:
    # One file per size, measured in rotating order within each round, so a
    # change in the machine's load falls on every size alike.
    files: dict[int, Path] = {}
    unused: dict[int, list[int]] = {}
    for size in sizes:
        files[size] = folder / f"growth-{size}.sqlite3"
        anyio.run(create, files[size], durability)
        fill(files[size], durability, 0, size // FACTS_PER_USER, seed=size)
        # Each round works on end users no earlier round touched (erase
        # removes them), drawn from the whole file.
        unused[size] = random.Random(size).sample(range(size // FACTS_PER_USER), 3 * ops * rounds)
        megabytes = files[size].stat().st_size / 1e6
        print(f"  filled {size:,} facts ({megabytes:,.0f} MB)", file=sys.stderr)

    samples: dict[int, dict[str, list[float]]] = {
        size: {op: [] for op in OPERATIONS} for size in sizes
    }
    for round_ in range(rounds):
        for size in sizes[round_ % len(sizes) :] + sizes[: round_ % len(sizes)]:
            picks = unused[size][3 * ops * round_ : 3 * ops * (round_ + 1)]
            with gc_paused():
                calls = anyio.run(
                    per_user_ops, files[size], durability, picks, ops, backend=backend
                )
            for op, values in calls.items():
                samples[size][op].extend(values)

    print(f"\n## Per-user operations as the file grows ({backend}, durability={durability})")
    header = " | ".join(f"{size:,} facts" for size in sizes)
    print(f"\n| operation (median µs per call) | {header} | largest / smallest |")
    print("| --- |" + " ---: |" * (len(sizes) + 1))
    for op in OPERATIONS:
        medians = [statistics.median(samples[size][op]) for size in sizes]
        cells = " | ".join(f"{value:,.0f}" for value in medians)
        print(f"| {op} | {cells} | {medians[-1] / medians[0]:.2f} |")
    return files


# Part 4: what a scrub costs as the file grows.


async def adapter_scrub(path: Path, durability: Durability, end_user: str) -> float:
    async with SqliteMemory(path, durability=durability) as memory:
        await memory.erase("acme", end_user)
        start = time.perf_counter()
        if not await memory.scrub():
            raise RuntimeError("the scrub did not finish: is another program using the file?")
        return time.perf_counter() - start


def plain_scrub(path: Path, durability: Durability, end_user: str) -> float:
    with closing(plain(path, durability)) as conn:
        plain_erase(conn, end_user)
        start = time.perf_counter()
        conn.execute("VACUUM")
        conn.execute(TRUNCATE_LOG)
        return time.perf_counter() - start


def scrub_cost(
    files: dict[int, Path], *, durability: Durability, backend: str, rounds: int
) -> None:
    samples: dict[int, dict[str, list[float]]] = {
        size: {"adapter": [], "plain": []} for size in files
    }
    for round_ in range(rounds):
        for size, path in files.items():
            # Users beyond the ones part 2 drew from are never there: erasing
            # one deletes nothing, so every round rewrites the same rows.
            first, second = user(size + 2 * round_), user(size + 2 * round_ + 1)
            with gc_paused():
                samples[size]["adapter"].append(
                    anyio.run(adapter_scrub, path, durability, first, backend=backend)
                )
                samples[size]["plain"].append(plain_scrub(path, durability, second))
    print(f"\n## The scrub as the file grows ({backend}, durability={durability})")
    print("\n| facts in the file | MB | scrub() ms | plain VACUUM + checkpoint ms | ratio |")
    print("| ---: | ---: | ---: | ---: | ---: |")
    for size, path in files.items():
        adapter, direct = (min(samples[size][side]) * 1e3 for side in ("adapter", "plain"))
        megabytes = path.stat().st_size / 1e6
        cells = f"{adapter:,.0f} | {direct:,.0f} | {direct / adapter:.2f}"
        print(f"| {size:,} | {megabytes:,.0f} | {cells} |")


# Part 3: what the check for a moved file costs next to a commit.


def identity_check(folder: Path, *, durability: Durability, ops: int) -> None:
    """Median µs of the ``stat`` the adapter makes before each commit, and of a commit."""
    path = folder / "identity.sqlite3"
    anyio.run(create, path, durability)
    stats: list[float] = []
    commits: list[float] = []
    clock = time.perf_counter
    with closing(plain(path, durability)) as conn, gc_paused():
        for index in range(ops):
            start = clock()
            path.stat()
            stats.append(clock() - start)
            start = clock()
            plain_remember(conn, user(index), "a fact of ordinary length, about a preference")
            commits.append(clock() - start)
    stat, commit = (statistics.median(values) * 1e6 for values in (stats, commits))
    print(f"\n## File identity check (durability={durability})")
    print("\n| median µs | stat of the path | one remember's transaction | share |")
    print("| --- | ---: | ---: | ---: |")
    print(f"| per call | {stat:.1f} | {commit:,.1f} | {stat / commit:.1%} |")


# Part 5: a large erase while another process writes.

WRITER_PACE = 0.02  # seconds between two writes of the child
BASELINE_SECONDS = 10.0


async def paced_writes(path: str, durability: Durability) -> None:
    """The child: remember a fact every 20 ms until a line arrives; print each call's wait."""
    async with SqliteMemory(path, durability=durability) as memory:
        print("ready", flush=True)
        await anyio.to_thread.run_sync(sys.stdin.readline)

        async def write() -> None:
            index = 0
            while True:
                start = time.perf_counter()
                try:
                    await memory.remember("acme", "paced-writer", f"paced fact {index}")
                except MemoryStoreError as exc:
                    print(f"failed {type(exc).__name__}", flush=True)
                else:
                    print(f"ok {(time.perf_counter() - start) * 1e3:.3f}", flush=True)
                index += 1
                await anyio.sleep(WRITER_PACE)

        async with anyio.create_task_group() as group:
            group.start_soon(write)
            await anyio.to_thread.run_sync(sys.stdin.readline)
            group.cancel_scope.cancel()


def beside_writer(
    path: Path, durability: Durability, during: Callable[[], float]
) -> tuple[float, list[str]]:
    """Run ``during`` while a child process writes every 20 ms; its time and the child's lines."""
    child = subprocess.Popen(  # noqa: S603 - this script, with arguments built here
        [sys.executable, __file__, "--writer", str(path), "--durability", durability],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    if child.stdin is None or child.stdout is None:
        raise RuntimeError("the writer process has no pipes")
    try:
        if child.stdout.readline() != "ready\n":
            raise RuntimeError("the writer process did not start")
        child.stdin.write("go\n")
        child.stdin.flush()
        # Its first write is under way before the measured work starts.
        first = child.stdout.readline()
        seconds = during()
        child.stdin.write("stop\n")
        child.stdin.flush()
        lines = [first, *child.stdout.read().splitlines()]
    finally:
        if child.wait(timeout=60) != 0:
            raise RuntimeError("the writer process failed")
    return seconds, lines


def load_one_user(path: Path, durability: Durability, facts: int) -> None:
    """One end user of ``facts`` facts with random ids, written as one transaction."""
    rng = random.Random(facts)
    with closing(plain(path, durability)) as conn:
        conn.execute("BEGIN")
        conn.executemany(
            "INSERT INTO psych_memory_fact (tenant, end_user_id, seq, id, content, created_at) "
            "VALUES ('acme', 'erased', ?, ?, ?, ?)",
            (
                (seq, uuid.UUID(int=rng.getrandbits(128)).hex, content(rng), now_micros())
                for seq in range(1, facts + 1)
            ),
        )
        conn.execute("COMMIT")
        conn.execute(TRUNCATE_LOG)


async def adapter_erase(path: Path, durability: Durability, facts: int) -> float:
    async with SqliteMemory(path, durability=durability) as memory:
        start = time.perf_counter()
        erased = await memory.erase("acme", "erased")
        seconds = time.perf_counter() - start
    if erased != facts:
        raise RuntimeError(f"the erase deleted {erased} facts, not {facts}")
    return seconds


def plain_erase_once(path: Path, durability: Durability) -> float:
    with closing(plain(path, durability)) as conn:
        start = time.perf_counter()
        plain_erase(conn, "erased")
        return time.perf_counter() - start


def large_erase(folder: Path, *, durability: Durability, backend: str, facts: int) -> None:
    rows: list[tuple[str, float, int, int, float, float]] = []
    cases: list[tuple[str, Callable[[Path], float]]] = [
        ("no erase (baseline)", lambda _: _slept(BASELINE_SECONDS)),
        (
            "SqliteMemory.erase, in batches",
            lambda path: anyio.run(adapter_erase, path, durability, facts, backend=backend),
        ),
        ("one plain DELETE transaction", lambda path: plain_erase_once(path, durability)),
    ]
    for name, work in cases:
        path = folder / f"erase-{len(rows)}.sqlite3"
        anyio.run(create, path, durability)
        if work is not cases[0][1]:
            start = time.perf_counter()
            load_one_user(path, durability, facts)
            megabytes = path.stat().st_size / 1e6
            loaded = time.perf_counter() - start
            print(
                f"  loaded {facts:,} facts ({megabytes:,.0f} MB) in {loaded:.0f} s",
                file=sys.stderr,
            )
        seconds, lines = beside_writer(path, durability, functools.partial(work, path))
        waits = [float(line.split()[1]) for line in lines if line.startswith("ok ")]
        failed = len(lines) - len(waits)
        rows.append((name, seconds, len(lines), failed, max(waits), statistics.median(waits)))
        for leftover in folder.glob(f"{path.name}*"):
            leftover.unlink()
    print(
        f"\n## One end user of {facts:,} facts erased beside a writer every 20 ms "
        f"({backend}, durability={durability})"
    )
    print("\n| case | seconds | writer's calls | failed | worst wait ms | median wait ms |")
    print("| --- | ---: | ---: | ---: | ---: | ---: |")
    for name, seconds, calls, failed, worst, median in rows:
        print(f"| {name} | {seconds:,.1f} | {calls:,} | {failed} | {worst:,.0f} | {median:,.1f} |")


# Part 7: retention, one tenant expired beside a writer.

EXPIRE_USERS = 10_000


def load_tenant(path: Path, durability: Durability, facts: int, cutoff: int) -> None:
    """Tenant "acme": ``facts`` facts over 10,000 end users, a third made before ``cutoff``."""
    rng = random.Random(facts)
    with closing(plain(path, durability)) as conn:
        conn.execute("BEGIN")
        conn.executemany(
            "INSERT INTO psych_memory_fact (tenant, end_user_id, seq, id, content, created_at) "
            "VALUES ('acme', ?, ?, ?, ?, ?)",
            (
                (
                    user(index % EXPIRE_USERS),
                    index // EXPIRE_USERS + 1,
                    uuid.UUID(int=rng.getrandbits(128)).hex,
                    content(rng),
                    # Each end user's oldest third is old, as years of use leave it.
                    cutoff - 1 - index if index % 3 == 0 else cutoff + index,
                )
                for index in range(facts)
            ),
        )
        conn.execute("COMMIT")
        conn.execute(TRUNCATE_LOG)


async def adapter_expire(path: Path, durability: Durability, cutoff: datetime) -> tuple[float, int]:
    async with SqliteMemory(path, durability=durability) as memory:
        start = time.perf_counter()
        expired = await memory.expire("acme", before=cutoff)
        return time.perf_counter() - start, expired


def large_expire(folder: Path, *, durability: Durability, backend: str, facts: int) -> None:
    cutoff = datetime.now(UTC) - timedelta(days=400)
    micros = (cutoff - datetime(1970, 1, 1, tzinfo=UTC)) // timedelta(microseconds=1)
    path = folder / "expire.sqlite3"
    anyio.run(create, path, durability)
    start = time.perf_counter()
    load_tenant(path, durability, facts, micros)
    print(f"  loaded {facts:,} facts in {time.perf_counter() - start:.0f} s", file=sys.stderr)
    expired: list[int] = []

    def expire_all() -> float:
        seconds, count = anyio.run(adapter_expire, path, durability, cutoff, backend=backend)
        expired.append(count)
        return seconds

    seconds, lines = beside_writer(path, durability, expire_all)
    waits = [float(line.split()[1]) for line in lines if line.startswith("ok ")]
    failed = len(lines) - len(waits)
    print(
        f"\n## A tenant of {facts:,} facts over {EXPIRE_USERS:,} end users, a third older than "
        f"the cutoff, expired beside a writer every 20 ms ({backend}, durability={durability})"
    )
    print(
        "\n| facts deleted | seconds | writer's calls | failed | worst wait ms | median wait ms |"
    )
    print("| ---: | ---: | ---: | ---: | ---: | ---: |")
    print(
        f"| {expired[0]:,} | {seconds:,.1f} | {len(lines):,} | {failed} | {max(waits):,.0f} | "
        f"{statistics.median(waits):,.1f} |"
    )
    for leftover in folder.glob(f"{path.name}*"):
        leftover.unlink()


# Part 6: one restore_many, which is one transaction.

RESTORE_BATCHES = (2_000, 10_000, 50_000)


async def adapter_restore(path: Path, durability: Durability, facts: list[Memory]) -> float:
    async with SqliteMemory(path, durability=durability) as memory:
        start = time.perf_counter()
        await memory.restore_many(facts)
        return time.perf_counter() - start


def plain_restore(path: Path, durability: Durability, facts: list[Memory]) -> float:
    with closing(plain(path, durability)) as conn:
        start = time.perf_counter()
        conn.execute("BEGIN IMMEDIATE")
        for fact in facts:
            conn.execute("SELECT 1 FROM psych_memory_fact WHERE id = ?", (fact.id,)).fetchone()
        conn.executemany(
            INSERT,
            [
                ("acme", "restored", fact.id, fact.content, now_micros(), "acme", "restored")
                for fact in facts
            ],
        )
        conn.execute("COMMIT")
        return time.perf_counter() - start


def restore_batches(folder: Path, *, durability: Durability, backend: str, rounds: int) -> None:
    rng = random.Random(6)
    key = MemoryKey("acme", "restored")
    best: dict[int, dict[str, float]] = {}
    for size in RESTORE_BATCHES:
        best[size] = {"adapter": float("inf"), "plain": float("inf")}
        for round_ in range(rounds):
            when = datetime.now(UTC)
            facts = [
                Memory(uuid.UUID(int=rng.getrandbits(128)).hex, key, content(rng), when)
                for _ in range(size)
            ]
            for side in ("adapter", "plain")[round_ % 2 :] + ("adapter", "plain")[: round_ % 2]:
                path = folder / f"restore-{side}.sqlite3"
                anyio.run(create, path, durability)
                with gc_paused():
                    if side == "adapter":
                        seconds = anyio.run(
                            adapter_restore, path, durability, facts, backend=backend
                        )
                    else:
                        seconds = plain_restore(path, durability, facts)
                best[size][side] = min(best[size][side], seconds)
                for leftover in folder.glob(f"{path.name}*"):
                    leftover.unlink()
    print(f"\n## One restore_many: the write lock held ({backend}, durability={durability})")
    print("\n| facts in the batch | restore_many ms | plain sqlite3 ms | plain / adapter |")
    print("| ---: | ---: | ---: | ---: |")
    for size, sides in best.items():
        adapter, direct = sides["adapter"] * 1e3, sides["plain"] * 1e3
        print(f"| {size:,} | {adapter:,.0f} | {direct:,.0f} | {direct / adapter:.2f} |")


# Part 8: many callers at once, against plain sqlite3 at FULL and at NORMAL.

PHASES = ("remember16", "forget16", "mixed16", "recall16w", "remember1")
PHASE_CALLS = {
    "remember16": 16 * 40,
    "forget16": 16 * 40,
    "mixed16": 16 * 40,
    "recall16w": 16 * 40,
    "remember1": 200,
}
CROWD = ("SqliteMemory", "plain FULL", "plain NORMAL")
TASKS = 16
PER_TASK = 40
SERIAL_CALLS = 200
BACKGROUND_USERS = 1_000  # ten facts each: the phases do not run on an empty file
MIX_SEED = 47


class PlainStore:
    """Plain sqlite3 in a worker thread: one connection behind a lock, WAL,
    one transaction per call, no secure delete and no emptying of the log."""

    def __init__(self, path: Path, synchronous: str) -> None:
        self._conn = sqlite3.connect(
            path, timeout=5.0, isolation_level=None, check_same_thread=False, cached_statements=16
        )
        self._conn.execute("PRAGMA journal_mode = WAL")
        self._conn.execute(f"PRAGMA synchronous = {synchronous}")
        self._conn.execute("PRAGMA secure_delete = OFF")
        self._conn.execute("PRAGMA temp_store = MEMORY")
        self._lock = threading.Lock()

    def close(self) -> None:
        self._conn.close()

    def _write(self, sql: str, parameters: tuple[object, ...]) -> int:
        with self._lock:
            self._conn.execute("BEGIN IMMEDIATE")
            try:
                count = self._conn.execute(sql, parameters).rowcount
            except BaseException:
                self._conn.execute("ROLLBACK")
                raise
            self._conn.execute("COMMIT")
            return count

    def _read(self, end_user: str) -> list[object]:
        with self._lock:
            return self._conn.execute(SELECT, ("acme", end_user, NO_LIMIT)).fetchall()

    async def remember(self, end_user: str, text: str) -> None:
        row = ("acme", end_user, uuid.uuid4().hex, text, now_micros(), "acme", end_user)
        await anyio.to_thread.run_sync(self._write, INSERT, row)

    async def forget(self, end_user: str, memory_id: str) -> None:
        await anyio.to_thread.run_sync(self._write, DELETE_ONE, ("acme", end_user, memory_id))

    async def recall(self, end_user: str) -> None:
        await anyio.to_thread.run_sync(self._read, end_user)


class AdapterStore:
    """SqliteMemory with its defaults, called as an application calls it."""

    def __init__(self, memory: SqliteMemory) -> None:
        self._memory = memory

    async def remember(self, end_user: str, text: str) -> None:
        await self._memory.remember("acme", end_user, text)

    async def forget(self, end_user: str, memory_id: str) -> None:
        if not await self._memory.forget("acme", end_user, memory_id):
            raise RuntimeError(f"{memory_id} of {end_user} was not there to forget")

    async def recall(self, end_user: str) -> None:
        await self._memory.recall("acme", end_user)


Store = PlainStore | AdapterStore
# One call of a plan: (operation, end user, fact id or text).
Op = tuple[str, str, str]


def fact_id(end_user: str, index: int) -> str:
    """The same ids in every side's file, so one plan serves them all."""
    return uuid.uuid5(uuid.NAMESPACE_OID, f"{end_user}/{index}").hex


def crowd_users(phase: str, count: int) -> list[str]:
    return [f"{phase}-{index:02d}" for index in range(count)]


def crowd_plans() -> dict[str, list[list[Op]]]:
    """Each phase's calls, one list per task, alike for every side and round."""
    text = "a fact of ordinary length, about a preference for weekly invoices"
    plans: dict[str, list[list[Op]]] = {}
    plans["remember16"] = [
        [("remember", end_user, text)] * PER_TASK for end_user in crowd_users("remember16", TASKS)
    ]
    plans["forget16"] = [
        [("forget", end_user, fact_id(end_user, index)) for index in range(PER_TASK)]
        for end_user in crowd_users("forget16", TASKS)
    ]
    mixed: list[list[Op]] = []
    rng = random.Random(MIX_SEED)
    for end_user in crowd_users("mixed16", TASKS):
        quarter = PER_TASK // 4
        ops: list[Op] = [("recall", end_user, "")] * (2 * quarter)
        ops += [("remember", end_user, text)] * quarter
        ops += [("forget", end_user, fact_id(end_user, index)) for index in range(quarter)]
        rng.shuffle(ops)
        mixed.append(ops)
    plans["mixed16"] = mixed
    readers = crowd_users("recall16w", TASKS - 1)
    plans["recall16w"] = [[("recall", end_user, "")] * PER_TASK for end_user in readers]
    plans["recall16w"].append([("remember", "recall16w-writer", text)] * PER_TASK)
    plans["remember1"] = [[("remember", "remember1", text)] * SERIAL_CALLS]
    return plans


def crowd_file(path: Path) -> None:
    """The schema, a background of other end users, and the facts the phases read and forget."""
    anyio.run(create, path, "full")
    rng = random.Random(8)
    rows: list[tuple[str, str, int, str, str, int]] = []
    for index in range(BACKGROUND_USERS):
        end_user = user(index)
        rows += [
            ("acme", end_user, seq + 1, fact_id(end_user, seq), content(rng), now_micros())
            for seq in range(FACTS_PER_USER)
        ]
    for phase in ("forget16", "mixed16", "recall16w"):
        for end_user in crowd_users(phase, TASKS):
            rows += [
                ("acme", end_user, seq + 1, fact_id(end_user, seq), content(rng), now_micros())
                for seq in range(PER_TASK)
            ]
    with closing(sqlite3.connect(path, isolation_level=None)) as conn:
        conn.execute("BEGIN")
        conn.executemany(
            "INSERT INTO psych_memory_fact (tenant, end_user_id, seq, id, content, created_at) "
            "VALUES (?, ?, ?, ?, ?, ?)",
            rows,
        )
        conn.execute("COMMIT")
        conn.execute(TRUNCATE_LOG)


async def run_plan(store: Store, plan: list[list[Op]]) -> None:
    async def task(ops: list[Op]) -> None:
        for op, end_user, argument in ops:
            if op == "remember":
                await store.remember(end_user, argument)
            elif op == "forget":
                await store.forget(end_user, argument)
            else:
                await store.recall(end_user)

    async with anyio.create_task_group() as group:
        for ops in plan:
            group.start_soon(task, ops)


def process_io() -> dict[str, int]:
    """This process's counters, all its threads included."""
    counters = {}
    for line in Path("/proc/self/io").read_text().splitlines():
        name, value = line.split(":")
        counters[name] = int(value)
    return counters


async def crowd_phase(side: str, path: Path, plan: list[list[Op]]) -> tuple[float, dict[str, int]]:
    """Open the side's store, run one phase, close; the phase's seconds and I/O counters."""

    async def measured(store: Store) -> tuple[float, dict[str, int]]:
        before = process_io()
        start = time.perf_counter()
        await run_plan(store, plan)
        seconds = time.perf_counter() - start
        after = process_io()
        return seconds, {name: after[name] - before[name] for name in after}

    if side == "SqliteMemory":
        async with SqliteMemory(path) as memory:
            return await measured(AdapterStore(memory))
    plain_store = PlainStore(path, side.split()[1])
    try:
        return await measured(plain_store)
    finally:
        plain_store.close()


def fsyncs_in_child(strace: str, path: Path, side: str, phase: str, backend: str) -> int:
    """fsync and fdatasync calls of another process running one phase alone (strace -c)."""
    report = path.with_suffix(".strace")
    subprocess.run(  # noqa: S603 - this script, with arguments built here
        [
            strace, "-f", "-qq", "-c", "-e", "trace=fsync,fdatasync", "-o", str(report),
            sys.executable, __file__, "--crowd-child", phase, side, str(path),
            "--backend", backend,
        ],
        check=True,
    )  # fmt: skip
    calls = 0
    for line in report.read_text().splitlines():
        fields = line.split()
        if fields and fields[-1] in ("fsync", "fdatasync"):
            calls += int(fields[3])
    report.unlink()
    return calls


def crowd_child(phase: str, side: str, path: str, backend: str) -> None:
    """Run one phase once (or, as "idle", open and close the store alone)."""
    plan = crowd_plans()[phase] if phase != "idle" else []
    anyio.run(crowd_phase, side, Path(path), plan, backend=backend)


def fs_type(folder: Path) -> str:
    """The type of file system the folder is on, from the longest mount point above it."""
    best, kind = "", "unknown"
    resolved = str(folder.resolve())
    for line in Path("/proc/mounts").read_text().splitlines():
        mount_point, fs = line.split()[1:3]
        inside = resolved == mount_point or resolved.startswith(mount_point.rstrip("/") + "/")
        if inside and len(mount_point) >= len(best):
            best, kind = mount_point, fs
    return kind


def crowd_fsyncs(folder: Path, strace: str, backend: str) -> dict[str, dict[str, float]]:
    """Per phase and side, fsyncs per call: each phase run alone, less opening and closing."""
    fsyncs: dict[str, dict[str, float]] = {phase: {} for phase in PHASES}
    path = folder / "crowd-fsyncs.sqlite3"
    for side in CROWD:
        idle = -1
        for phase in ("idle", *PHASES):
            crowd_file(path)
            counted = fsyncs_in_child(strace, path, side, phase, backend)
            if phase == "idle":
                idle = counted
            else:
                fsyncs[phase][side] = (counted - idle) / PHASE_CALLS[phase]
            for leftover in folder.glob(f"{path.name}*"):
                leftover.unlink()
    return fsyncs


def many_callers(folder: Path, *, backend: str, rounds: int, strace: str | None) -> None:
    load_before = os.getloadavg()
    plans = crowd_plans()
    seconds: dict[str, dict[str, list[float]]] = {p: {s: [] for s in CROWD} for p in PHASES}
    io: dict[str, dict[str, dict[str, list[int]]]] = {
        p: {s: {"write_bytes": [], "wchar": [], "syscw": []} for s in CROWD} for p in PHASES
    }
    for round_ in range(rounds):
        files = {side: folder / f"crowd-{i}-{round_}.sqlite3" for i, side in enumerate(CROWD)}
        for path in files.values():
            crowd_file(path)
        for number, phase in enumerate(PHASES):
            # Each side goes first in turn, and the phases of a round run
            # on the same three files one after another.
            turn = (round_ + number) % len(CROWD)
            for side in CROWD[turn:] + CROWD[:turn]:
                with gc_paused():
                    took, counters = anyio.run(
                        crowd_phase, side, files[side], plans[phase], backend=backend
                    )
                seconds[phase][side].append(took)
                for name, values in io[phase][side].items():
                    values.append(counters[name])
        for path in files.values():
            for leftover in folder.glob(f"{path.name}*"):
                leftover.unlink()
        print(f"  round {round_ + 1} of {rounds} done", file=sys.stderr)
    fsyncs = crowd_fsyncs(folder, strace, backend) if strace else {}
    load_after = os.getloadavg()

    def load(values: tuple[float, float, float]) -> str:
        return " ".join(f"{value:.2f}" for value in values)

    print(
        f"\n## Many callers at once ({backend}, medians of {rounds} rounds, files on "
        f"{fs_type(folder)}; load average {load(load_before)} before, {load(load_after)} after)"
    )
    print_callers(seconds, io, fsyncs)


def print_callers(
    seconds: dict[str, dict[str, list[float]]],
    io: dict[str, dict[str, dict[str, list[int]]]],
    fsyncs: dict[str, dict[str, float]],
) -> None:
    print(
        "\n| phase | calls | SqliteMemory ms | plain FULL ms | plain NORMAL ms "
        "| SqliteMemory / plain FULL | SqliteMemory / plain NORMAL |"
    )
    print("| --- | ---: | ---: | ---: | ---: | ---: | ---: |")
    for phase in PHASES:
        ours, full, normal = (statistics.median(seconds[phase][side]) * 1e3 for side in CROWD)
        print(
            f"| {phase} | {PHASE_CALLS[phase]} | {ours:,.0f} | {full:,.0f} | {normal:,.0f} "
            f"| {ours / full:.2f} | {ours / normal:.2f} |"
        )

    def per_call(phase: str, side: str, name: str) -> float:
        return statistics.median(io[phase][side][name]) / PHASE_CALLS[phase]

    def ratio(ours: float, theirs: float) -> str:
        return f"{ours / theirs:.2f}" if theirs else "-"

    print(
        "\n### Per call: KiB written to the file and its log (write_bytes of the process), medians"
    )
    print(
        "\n| phase | SqliteMemory | plain FULL | plain NORMAL "
        "| SqliteMemory / plain FULL | SqliteMemory / plain NORMAL |"
    )
    print("| --- | ---: | ---: | ---: | ---: | ---: |")
    for phase in PHASES:
        ours, full, normal = (per_call(phase, side, "write_bytes") / 1024 for side in CROWD)
        print(
            f"| {phase} | {ours:,.1f} | {full:,.1f} | {normal:,.1f} "
            f"| {ratio(ours, full)} | {ratio(ours, normal)} |"
        )
    print("\n### Per call: write system calls (syscw) and KiB handed to them (wchar), medians")
    print("\n| phase | SqliteMemory | plain FULL | plain NORMAL |")
    print("| --- | ---: | ---: | ---: |")
    for phase in PHASES:
        cells = " | ".join(
            f"{per_call(phase, side, 'syscw'):.1f} / {per_call(phase, side, 'wchar') / 1024:.1f}"
            for side in CROWD
        )
        print(f"| {phase} | {cells} |")
    if fsyncs:
        print(
            "\n### Per call: fsync and fdatasync (strace -c -f on a separate run of the phase "
            "alone, less the same run opening and closing the store only)"
        )
        print(
            "\n| phase | SqliteMemory | plain FULL | plain NORMAL "
            "| SqliteMemory / plain FULL | SqliteMemory / plain NORMAL |"
        )
        print("| --- | ---: | ---: | ---: | ---: | ---: |")
        for phase in PHASES:
            ours, full, normal = (fsyncs[phase][side] for side in CROWD)
            print(
                f"| {phase} | {ours:.2f} | {full:.2f} | {normal:.2f} "
                f"| {ratio(ours, full)} | {ratio(ours, normal)} |"
            )


def _slept(seconds: float) -> float:
    time.sleep(seconds)
    return seconds


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="small sizes, for a smoke run")
    parser.add_argument("--durability", choices=["full", "normal"], default="full")
    parser.add_argument("--backend", choices=["asyncio", "trio"], default="asyncio")
    # The default keeps the files on the disk the project lives on: a temporary
    # folder may be in memory, where an fsync costs nothing.
    parser.add_argument("--dir", default=".", help="folder for the database files")
    parser.add_argument(
        "--only", choices=["erase", "restore", "expire", "callers"], help="run only this part"
    )
    parser.add_argument(
        "--rounds", type=int, help="rounds of part 8, whose medians count (default 5)"
    )
    parser.add_argument(
        "--no-strace", action="store_true", help="part 8 without its fsync count under strace"
    )
    parser.add_argument("--crowd-child", nargs=3, help=argparse.SUPPRESS)
    parser.add_argument(
        "--erase-facts", type=int, help="facts of the end user part 5 erases (default 1,000,000)"
    )
    parser.add_argument(
        "--expire-facts", type=int, help="facts of the tenant part 7 expires (default 1,000,000)"
    )
    parser.add_argument("--writer", metavar="FILE", help=argparse.SUPPRESS)
    args = parser.parse_args()
    durability: Durability = "normal" if args.durability == "normal" else "full"
    if args.writer:
        anyio.run(paced_writes, args.writer, durability, backend=args.backend)
        return
    if args.crowd_child:
        phase, side, path = args.crowd_child
        crowd_child(phase, side, path, args.backend)
        return
    erase_facts = args.erase_facts or (20_000 if args.quick else 1_000_000)
    expire_facts = args.expire_facts or (30_000 if args.quick else 1_000_000)
    if args.quick:
        users, ops, per_user, rounds, sizes = 200, 40, 20, 2, [2_000, 20_000]
    else:
        users, ops, per_user, rounds, sizes = 1_000, 200, 60, 5, [10_000, 100_000, 1_000_000]
    print(f"Python {sys.version.split()[0]}, SQLite {sqlite3.sqlite_version}")
    with tempfile.TemporaryDirectory(prefix="bench-sqlite-", dir=args.dir) as folder:
        if args.only == "erase":
            large_erase(
                Path(folder), durability=durability, backend=args.backend, facts=erase_facts
            )
            return
        if args.only == "restore":
            restore_batches(Path(folder), durability=durability, backend=args.backend, rounds=3)
            return
        callers = functools.partial(
            many_callers,
            Path(folder),
            backend=args.backend,
            rounds=args.rounds or (2 if args.quick else 5),
            strace=None if args.no_strace else shutil.which("strace"),
        )
        if args.only == "callers":
            callers()
            return
        if args.only == "expire":
            large_expire(
                Path(folder), durability=durability, backend=args.backend, facts=expire_facts
            )
            return
        callers()
        throughput(
            Path(folder),
            durability=durability,
            backend=args.backend,
            users=users,
            ops=ops,
            rounds=rounds,
        )
        files = growth(
            Path(folder),
            durability=durability,
            backend=args.backend,
            sizes=sizes,
            ops=per_user,
            rounds=rounds,
        )
        identity_check(Path(folder), durability=durability, ops=ops * 10)
        scrub_cost(files, durability=durability, backend=args.backend, rounds=3)
        large_erase(Path(folder), durability=durability, backend=args.backend, facts=erase_facts)
        restore_batches(Path(folder), durability=durability, backend=args.backend, rounds=3)
        large_expire(Path(folder), durability=durability, backend=args.backend, facts=expire_facts)


if __name__ == "__main__":
    main()
