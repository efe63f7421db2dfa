"""The default path of `PostgresMemory` against raw psycopg, operation by operation.

Run it from the repository root with ``hatch run bench:postgres-release``
(add ``--quick`` for a short run): the job to run before a release. The
store is opened with `PostgresMemory.connect` on asyncio with its default
pool; raw psycopg runs the same work on that very pool (so the same pool
size, server and connections), on the same data, in the same round. For
``remember``, ``recall``, ``forget``, ``erase`` and a mixed load, at 100
and 1,000 end users of three facts each, 16 tasks call at once. Each round
times the adapter and raw psycopg back to back, each side first in turn,
so the load of a shared machine falls on both alike; the ratio printed is
the median of the rounds' ratios (adapter time / raw time, target at most
1.1).

Raw psycopg sends the adapter's own statements with a plain cursor (so
psycopg prepares them after five runs); for ``erase`` it sends the one
``DELETE`` of the key an application would write; a third side, raw
psycopg sending the adapter's own ``erase`` statement, splits that ratio in
two: what the statement's guarantees cost the server, and what the
adapter's Python adds. Beside each ratio: the
client's CPU time per call of each side, and the server's (the CPU time
the server processes serving the pool spent, read from ``/proc``; shown
when the server runs on this machine), in microseconds.

Then the contended mixed load, where callers wait for a connection: a
store opened with ``max_size=4`` and raw psycopg on that pool of 4, 16
tasks each on end users of its own, 50 calls each (half ``recall`` of all
the end user's facts, a quarter ``remember``, a quarter ``forget`` of a
fact it knows), 10,000 facts over 100 or 1,000 end users; raw psycopg
sends the adapter's statements, ``forget`` with ``remote_apply``. Beside
the ratio and CPU times, the event loop's turns and the tasks created per
call, counted in an untimed pass (``--contended-only`` runs this part
alone, ``--contended-rounds`` sets its rounds, 20 by default).

When PgBouncer is installed (``pgbouncer`` on the ``PATH`` or in
``/usr/sbin``), the same run repeats everything through a private PgBouncer
in transaction mode, the store opened with ``prepare_threshold=None`` as
the documentation says for such a pooler, and raw psycopg through the same
pooler and pool as its baseline. ``--no-pooler`` skips it.

The server comes from ``PSYCH_MEMORY_TEST_POSTGRES_DSN`` (default: the
local test database); the benchmark works in a schema of its own and drops
it at the end. Figures are printed, never asserted.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import platform
import pwd
import random
import secrets
import shutil
import socket
import statistics
import subprocess
import tempfile
import time
from collections.abc import Awaitable, Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any
from uuid import uuid4

import psycopg
from psycopg import sql
from psycopg.conninfo import conninfo_to_dict
from psycopg_pool import AsyncConnectionPool

from psych_runtime.memory.postgres import PostgresMemory
from psych_runtime.memory.postgres._schema import Statements

DSN = os.environ.get("PSYCH_MEMORY_TEST_POSTGRES_DSN", "postgresql://postgres@127.0.0.1:5432/test")
OPERATIONS = ("remember", "recall", "forget", "erase", "mixed")
END_USERS = (100, 1_000)
FACTS = 3
"""Facts of each end user: a key of a few facts."""
TASKS = 16

Call = Callable[[], Awaitable[object]]


@dataclass
class Side:
    """One side's measurements of one operation: per round, seconds and CPU per call."""

    walls: list[float] = field(default_factory=list)
    client: list[float] = field(default_factory=list)
    server: list[float] = field(default_factory=list)


class Raw:
    """Raw psycopg on the store's own pool: the adapter's statements, a plain cursor."""

    def __init__(self, pool: AsyncConnectionPool[Any], schema: str) -> None:
        self.pool = pool
        self.sql = Statements.for_schema(schema)
        self.plain_erase = (
            sql.SQL("DELETE FROM {} WHERE tenant = %s AND end_user_id = %s")
            .format(sql.Identifier(schema, "memories"))
            .as_bytes(None)
        )

    async def run(self, query: bytes, params: tuple[object, ...]) -> None:
        async with self.pool.connection() as conn, conn.cursor() as cursor:
            await cursor.execute(query, params)
            if cursor.description is not None:
                await cursor.fetchall()

    def remember(self, tenant: str, end_user_id: str, content: str) -> Awaitable[None]:
        # The id chosen beforehand, as the adapter chooses one.
        return self.run(self.sql.remember, (secrets.token_hex(16), tenant, end_user_id, content))

    def recall(self, tenant: str, end_user_id: str) -> Awaitable[None]:
        return self.run(self.sql.recall, (tenant, end_user_id, 2**63 - 1))

    def forget(self, tenant: str, end_user_id: str, memory_id: str) -> Awaitable[None]:
        return self.run(self.sql.forget, (tenant, end_user_id, memory_id))

    def erase(self, tenant: str, end_user_id: str) -> Awaitable[None]:
        return self.run(self.plain_erase, (tenant, end_user_id))


class RawGuarded(Raw):
    """Raw psycopg sending, for ``erase``, the statement the adapter sends.

    The guarded ``DELETE`` where statements are prepared, the call of the
    schema's function ``erase_few`` where they are not (through the
    pooler): beside the plain ``DELETE`` it shows what the statement itself
    costs (its guard and ``remote_apply``), apart from the adapter's Python.
    """

    def __init__(self, pool: AsyncConnectionPool[Any], schema: str, *, prepared: bool) -> None:
        super().__init__(pool, schema)
        self.prepared = prepared

    def erase(self, tenant: str, end_user_id: str) -> Awaitable[None]:
        if self.prepared:
            return self.run(self.sql.erase_few, (tenant, end_user_id, tenant, end_user_id))
        return self.run(self.sql.erase_few_function, (tenant, end_user_id))


def admin(
    dsn: str, statement: sql.SQL | sql.Composed, params: tuple[object, ...] = ()
) -> list[Any]:
    with psycopg.connect(dsn, autocommit=True) as conn:
        cursor = conn.execute(statement, params)
        return cursor.fetchall() if cursor.description is not None else []


def fill(schema: str, prefix: str, users: int, per_user: int) -> list[tuple[str, str]]:
    """End users ``prefix0``... of ``per_user`` facts each; return (end user, id) per fact."""
    rows = admin(
        DSN,
        sql.SQL(
            "INSERT INTO {} (id, tenant, end_user_id, content)"
            " SELECT replace(gen_random_uuid()::text, '-', ''), 'bench', %s || u,"
            " 'a fact of about forty characters, say ' || f"
            " FROM generate_series(0, %s::int - 1) AS u, generate_series(1, %s) AS f"
            " ORDER BY u, f RETURNING end_user_id, id"
        ).format(sql.Identifier(schema, "memories")),
        (prefix, users, per_user),
    )
    return [(row[0], row[1]) for row in rows]


def workload(
    operation: str, target: PostgresMemory | Raw, schema: str, users: int, count: int
) -> list[Call]:
    """``count`` calls of ``operation`` spread over ``users`` end users, data ready."""
    tag = uuid4().hex[:8]
    if operation == "remember":
        return [
            partial(target.remember, "bench", f"{tag}u{n % users}", f"fact {n}")
            for n in range(count)
        ]
    if operation == "recall":
        fill(schema, f"{tag}u", users, FACTS)
        return [partial(target.recall, "bench", f"{tag}u{n % users}") for n in range(count)]
    if operation == "forget":
        # As many facts as calls, over the end users.
        facts = fill(schema, f"{tag}u", users, -(-count // users))[:count]
        random.Random(count).shuffle(facts)
        return [partial(target.forget, "bench", user, memory_id) for user, memory_id in facts]
    if operation == "erase":
        # Every end user erased once per lap, laps of fresh end users.
        laps = -(-count // users)
        fill(schema, f"{tag}l", users * laps, FACTS)
        erases: list[Call] = [partial(target.erase, "bench", f"{tag}l{n}") for n in range(count)]
        return erases
    # Mixed: half recalls, then remembers, forgets and erases, shuffled alike
    # for both sides.
    facts = fill(schema, f"{tag}u", users, FACTS)
    gone = fill(schema, f"{tag}g", max(1, count // 20), FACTS)
    spare = iter(facts)
    erasable = iter(sorted({user for user, _ in gone}))
    calls: list[Call] = []
    for n in range(count):
        kind = n % 20
        user = f"{tag}u{n % users}"
        if kind < 10:
            calls.append(partial(target.recall, "bench", user))
        elif kind < 16:
            calls.append(partial(target.remember, "bench", user, f"fact {n}"))
        elif kind < 19 and (fact := next(spare, None)) is not None:
            calls.append(partial(target.forget, "bench", *fact))
        elif (erased := next(erasable, None)) is not None:
            calls.append(partial(target.erase, "bench", erased))
        else:
            calls.append(partial(target.recall, "bench", user))
    random.Random(count).shuffle(calls)
    return calls


class ServerClock:
    """CPU seconds the server processes of a set of connections spent, from ``/proc``."""

    def __init__(self, pids: list[int]) -> None:
        self.pids = pids
        self.tick = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100

    def read(self) -> float | None:
        total = 0
        for pid in self.pids:
            try:
                fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
            except OSError:
                return None
            total += int(fields[11]) + int(fields[12])
        return total / self.tick


async def server_pids(pool: AsyncConnectionPool[Any]) -> list[int]:
    """The server process of every connection of the pool, all taken at once."""
    held = [await pool.getconn() for _ in range(pool.max_size)]
    try:
        pids = []
        for conn in held:
            rows = await (await conn.execute("SELECT pg_backend_pid()")).fetchall()
            pids.append(int(rows[0][0]))
        return pids
    finally:
        for conn in held:
            await pool.putconn(conn)


async def timed(calls: list[Call], clock: ServerClock | None, side: Side) -> None:
    queue = iter(calls)

    async def lane() -> None:
        for call in queue:
            await call()

    server = clock.read() if clock else None
    cpu = time.process_time()
    start = time.perf_counter()
    await asyncio.gather(*(lane() for _ in range(TASKS)))
    side.walls.append(time.perf_counter() - start)
    side.client.append((time.process_time() - cpu) / len(calls) * 1e6)
    after = clock.read() if clock else None
    if server is not None and after is not None:
        side.server.append((after - server) / len(calls) * 1e6)


async def compare(dsn: str, schema: str, count: int, rounds: int, *, pooled: bool) -> None:
    """Print the table for one way of reaching the server, row by row, then the erase table."""
    erase_lines = []
    threshold = None if pooled else 5
    async with PostgresMemory.connect(dsn, schema=schema, prepare_threshold=threshold) as store:
        await store.setup()
        pool = store.pool
        if not isinstance(pool, AsyncConnectionPool):
            raise TypeError("connect opens an asynchronous pool on asyncio")
        raw = Raw(pool, schema)
        guarded = RawGuarded(pool, schema, prepared=not pooled)
        # Every connection of the pool opened before timing; through the
        # pooler the server processes are the pooler's, not counted.
        pids = await server_pids(pool)
        clock = None if pooled else ServerClock(pids)
        if clock is not None and clock.read() is None:
            clock = None
        # A warm-up round of each operation, not counted.
        for operation in OPERATIONS:
            for target in (store, raw):
                await timed(workload(operation, target, schema, 100, 200), None, Side())
        await timed(workload("erase", guarded, schema, 100, 200), None, Side())
        for users in END_USERS:
            for operation in OPERATIONS:
                order: list[tuple[str, PostgresMemory | Raw]] = [("adapter", store), ("raw", raw)]
                if operation == "erase":
                    order.append(("guarded", guarded))
                sides = {name: Side() for name, _ in order}
                for n in range(rounds):
                    # Each side first in turn.
                    for name, target in order[n % len(order) :] + order[: n % len(order)]:
                        calls = workload(operation, target, schema, users, count)
                        await timed(calls, clock, sides[name])
                print(row(users, operation, count, sides), flush=True)
                if operation == "erase":
                    erase_lines.append(erase_row(users, count, sides))
    print("\n" + ERASE_HEADER + "\n" + "\n".join(erase_lines), flush=True)


# -- the contended mixed load: more tasks than connections -------------------

CONTENDED_TASKS = 16
CONTENDED_POOL = 4
CONTENDED_CALLS = 50
"""Calls of each task: half ``recall``, a quarter ``remember``, a quarter ``forget``."""
CONTENDED_FACTS = 10_000
"""Facts stored before each measurement, spread evenly over its end users."""


def contended_workload(
    target: PostgresMemory | Raw, schema: str, users: int, seed: int
) -> list[list[Call]]:
    """One list of calls per task, each task on end users of its own, data ready.

    Task ``t`` owns the end users ``u`` with ``u % 16 == t``; each call goes
    to the next of them in turn. Each task's kinds of call are shuffled with
    a seed that depends on the round and the task alone, so both sides of a
    round run the same sequence; a ``forget`` names a fact of the task's own
    end users, each fact once.
    """
    tag = uuid4().hex[:8]
    facts = fill(schema, f"{tag}u", users, CONTENDED_FACTS // users)
    known: dict[str, list[str]] = {}
    for user, memory_id in facts:
        known.setdefault(user, []).append(memory_id)
    recalls = CONTENDED_CALLS // 2
    remembers = (CONTENDED_CALLS - recalls) // 2
    lanes: list[list[Call]] = []
    for task in range(CONTENDED_TASKS):
        own = [f"{tag}u{u}" for u in range(task, users, CONTENDED_TASKS)]
        kinds = ["recall"] * recalls + ["remember"] * remembers
        kinds += ["forget"] * (CONTENDED_CALLS - len(kinds))
        random.Random(seed * 1_000 + task).shuffle(kinds)
        lane: list[Call] = []
        for n, kind in enumerate(kinds):
            user = own[n % len(own)]
            if kind == "recall":
                lane.append(partial(target.recall, "bench", user))
            elif kind == "remember":
                lane.append(partial(target.remember, "bench", user, f"fact {n}"))
            else:
                lane.append(partial(target.forget, "bench", user, known[user].pop()))
        lanes.append(lane)
    return lanes


@dataclass
class Counts:
    """Turns of the event loop and tasks created, per call, counted outside the timed rounds."""

    turns: list[float] = field(default_factory=list)
    tasks: list[float] = field(default_factory=list)


async def run_lanes(lanes: list[list[Call]]) -> None:
    async def lane(calls: list[Call]) -> None:
        for call in calls:
            await call()

    await asyncio.gather(*(lane(calls) for calls in lanes))


async def timed_lanes(lanes: list[list[Call]], clock: ServerClock | None, side: Side) -> None:
    calls = sum(len(lane) for lane in lanes)
    server = clock.read() if clock else None
    cpu = time.process_time()
    start = time.perf_counter()
    await run_lanes(lanes)
    side.walls.append(time.perf_counter() - start)
    side.client.append((time.process_time() - cpu) / calls * 1e6)
    after = clock.read() if clock else None
    if server is not None and after is not None:
        side.server.append((after - server) / calls * 1e6)


async def counted_lanes(lanes: list[list[Call]], counts: Counts) -> None:
    """Run the lanes once, untimed, counting the loop's turns and the tasks created.

    A turn of asyncio's loop (``_run_once``) polls its selector exactly
    once, so the selector's ``select`` of the running loop is wrapped with
    a counter; tasks are counted by a task factory. Both are removed before
    the next timed round.
    """
    loop = asyncio.get_running_loop()
    selector = loop._selector  # type: ignore[attr-defined]
    select = selector.select
    turns = 0
    tasks = 0

    def counting_select(timeout: float | None = None) -> Any:
        nonlocal turns
        turns += 1
        return select(timeout)

    def counting_factory(
        loop: asyncio.AbstractEventLoop, coro: Any, **kwargs: Any
    ) -> asyncio.Future[Any]:
        nonlocal tasks
        tasks += 1
        return asyncio.Task(coro, loop=loop, **kwargs)

    calls = sum(len(lane) for lane in lanes)
    # The gather's own tasks, one per lane, are not the calls'.
    selector.select = counting_select
    loop.set_task_factory(counting_factory)
    try:
        await run_lanes(lanes)
    finally:
        loop.set_task_factory(None)
        del selector.select
    counts.turns.append(turns / calls)
    counts.tasks.append((tasks - len(lanes)) / calls)


async def compare_contended(dsn: str, schema: str, rounds: int, *, pooled: bool) -> None:
    """Print the contended mixed load's table for one way of reaching the server."""
    threshold = None if pooled else 5
    async with PostgresMemory.connect(
        dsn, schema=schema, prepare_threshold=threshold, max_size=CONTENDED_POOL
    ) as store:
        await store.setup()
        pool = store.pool
        if not isinstance(pool, AsyncConnectionPool):
            raise TypeError("connect opens an asynchronous pool on asyncio")
        # Raw psycopg with the adapter's guarantees: its own statements,
        # ``forget`` committed with ``remote_apply``.
        raw = RawGuarded(pool, schema, prepared=not pooled)
        pids = await server_pids(pool)
        clock = None if pooled else ServerClock(pids)
        if clock is not None and clock.read() is None:
            clock = None
        order: list[tuple[str, PostgresMemory | Raw]] = [("adapter", store), ("raw", raw)]
        for users in END_USERS:
            # A warm-up round of each side, not counted.
            for _, target in order:
                await run_lanes(contended_workload(target, schema, users, 0))
            sides = {name: Side() for name, _ in order}
            counts = {name: Counts() for name, _ in order}
            for n in range(rounds):
                for name, target in order[n % 2 :] + order[: n % 2]:
                    lanes = contended_workload(target, schema, users, n + 1)
                    await timed_lanes(lanes, clock, sides[name])
            # The counting pass, after the timed rounds, twice per side.
            for n in range(2):
                for name, target in order[n % 2 :] + order[: n % 2]:
                    lanes = contended_workload(target, schema, users, n + 1)
                    await counted_lanes(lanes, counts[name])
            print(contended_row(users, sides, counts), flush=True)


def contended_row(users: int, sides: dict[str, Side], counts: dict[str, Counts]) -> str:
    adapter, raw = sides["adapter"], sides["raw"]
    calls = CONTENDED_TASKS * CONTENDED_CALLS
    return (
        f"| {users:,} | {statistics.median(adapter.walls) / calls * 1e6:,.0f}"
        f" | {statistics.median(raw.walls) / calls * 1e6:,.0f}"
        f" | **{ratio(sides, 'adapter', 'raw'):.2f}**"
        f" | {micro(adapter.client)} | {micro(raw.client)}"
        f" | {micro(adapter.server)} | {micro(raw.server)}"
        f" | {statistics.median(counts['adapter'].turns):.2f}"
        f" | {statistics.median(counts['raw'].turns):.2f}"
        f" | {statistics.median(counts['adapter'].tasks):.2f}"
        f" | {statistics.median(counts['raw'].tasks):.2f} |"
    )


CONTENDED_HEADER = (
    f"The contended mixed load: {CONTENDED_TASKS} tasks on a pool of {CONTENDED_POOL}"
    f" connections (`max_size={CONTENDED_POOL}`), each on end users of its own,"
    f" {CONTENDED_CALLS} calls each (half `recall` of all the end user's facts, a quarter"
    f" `remember`, a quarter `forget` of a fact it knows), {CONTENDED_FACTS:,} facts stored;"
    " raw psycopg sends the adapter's statements (`forget` with `remote_apply`)."
    " Loop turns and tasks per call counted in an untimed pass\n\n"
    "| end users | adapter µs/call | raw µs/call | ratio"
    " | client CPU µs, adapter | client CPU µs, raw | server CPU µs, adapter"
    " | server CPU µs, raw | loop turns/call, adapter | loop turns/call, raw"
    " | tasks/call, adapter | tasks/call, raw |\n"
    "|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"
)


def micro(values: list[float]) -> str:
    return f"{statistics.median(values):,.0f}" if values else "-"


def ratio(sides: dict[str, Side], over: str, under: str) -> float:
    """The median of the rounds' ratios of one side's time to another's."""
    return statistics.median(
        a / b for a, b in zip(sides[over].walls, sides[under].walls, strict=True)
    )


def row(users: int, operation: str, count: int, sides: dict[str, Side]) -> str:
    adapter, raw = sides["adapter"], sides["raw"]
    return (
        f"| {users:,} | {operation} | {statistics.median(adapter.walls) / count * 1e6:,.0f}"
        f" | {statistics.median(raw.walls) / count * 1e6:,.0f}"
        f" | **{ratio(sides, 'adapter', 'raw'):.2f}**"
        f" | {micro(adapter.client)} | {micro(raw.client)}"
        f" | {micro(adapter.server)} | {micro(raw.server)} |"
    )


def erase_row(users: int, count: int, sides: dict[str, Side]) -> str:
    guarded = sides["guarded"]
    return (
        f"| {users:,} | {statistics.median(guarded.walls) / count * 1e6:,.0f}"
        f" | {ratio(sides, 'guarded', 'raw'):.2f} | {ratio(sides, 'adapter', 'guarded'):.2f}"
        f" | {micro(guarded.client)} | {micro(guarded.server)} |"
    )


ERASE_HEADER = (
    "`erase` split in two: raw psycopg sending the adapter's own statement"
    " (the guarded `DELETE`, or through the pooler the call of `erase_few`)"
    " beside the plain `DELETE` (what the statement's guard and `remote_apply`"
    " cost), and the adapter beside that (what its Python costs); same rounds\n\n"
    "| end users | raw, adapter's statement µs/call | its ratio to the plain `DELETE`"
    " | adapter's ratio to it | client CPU µs | server CPU µs |\n"
    "|---:|---:|---:|---:|---:|---:|"
)

HEADER = (
    "| end users | operation | adapter µs/call | raw µs/call | ratio"
    " | client CPU µs, adapter | client CPU µs, raw | server CPU µs, adapter"
    " | server CPU µs, raw |\n|---:|---|---:|---:|---:|---:|---:|---:|---:|"
)


# -- a private PgBouncer in transaction mode, as the tests start one ---------


def pgbouncer_binary() -> str | None:
    found = shutil.which("pgbouncer") or shutil.which("pgbouncer", path="/usr/sbin:/usr/local/sbin")
    if found is None:
        return None
    if os.geteuid() == 0:
        try:
            pwd.getpwnam("postgres")
        except KeyError:
            return None
    return found


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


@contextmanager
def pgbouncer(binary: str, server_dsn: str) -> Iterator[str]:
    """A PgBouncer in transaction mode in front of ``server_dsn``; yields its DSN."""
    server = conninfo_to_dict(server_dsn)
    dbname = str(server.get("dbname", "postgres"))
    user = str(server.get("user", "postgres"))
    folder = Path(tempfile.mkdtemp(prefix="psych-bench-pooler-"))
    as_root = os.geteuid() == 0
    port = free_port()
    target = f"host={server.get('host', '127.0.0.1')} port={server.get('port', 5432)}"
    (folder / "users.txt").write_text(f'"{user}" ""\n')
    settings = {
        "listen_addr": "127.0.0.1",
        "listen_port": port,
        "unix_socket_dir": "",
        "auth_type": "trust",
        "auth_file": folder / "users.txt",
        "pool_mode": "transaction",
        # As many server connections as the store's pool has.
        "default_pool_size": 10,
        "max_client_conn": 100,
        "logfile": folder / "pgbouncer.log",
        "pidfile": "",
    }
    (folder / "pgbouncer.ini").write_text(
        f"[databases]\n{dbname} = {target} dbname={dbname}\n\n[pgbouncer]\n"
        + "".join(f"{name} = {value}\n" for name, value in settings.items())
    )
    if as_root:
        shutil.chown(folder, "postgres")
        for written in folder.iterdir():
            shutil.chown(written, "postgres")
    process = subprocess.Popen(  # noqa: S603 - the installed pgbouncer, our own file
        [binary, str(folder / "pgbouncer.ini")],
        user="postgres" if as_root else None,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    dsn = f"postgresql://{user}@127.0.0.1:{port}/{dbname}"
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                with psycopg.connect(dsn, connect_timeout=2, prepare_threshold=None) as conn:
                    conn.execute("SELECT 1")
                break
            except psycopg.OperationalError:
                if process.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError("pgbouncer did not start") from None
                time.sleep(0.01)
        yield dsn
    finally:
        process.terminate()
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
        shutil.rmtree(folder, ignore_errors=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--quick", action="store_true", help="a short run: fewer calls and rounds")
    parser.add_argument("--no-pooler", action="store_true", help="skip the run through PgBouncer")
    parser.add_argument("--calls", type=int, help="calls per measurement (default 1000)")
    parser.add_argument("--rounds", type=int, help="rounds per side (default 6)")
    parser.add_argument(
        "--contended-rounds", type=int, help="rounds per side of the contended load (default 20)"
    )
    parser.add_argument(
        "--contended-only", action="store_true", help="only the contended mixed load"
    )
    args = parser.parse_args()
    count = args.calls or (300 if args.quick else 1000)
    rounds = args.rounds or (2 if args.quick else 6)
    contended = args.contended_rounds or (4 if args.quick else 20)

    schema = f"psych_bench_{uuid4().hex[:12]}"
    version = admin(DSN, sql.SQL("SHOW server_version"))[0][0]
    print(
        f"{time.strftime('%Y-%m-%d')}; PostgreSQL {version}, psycopg {psycopg.__version__}"
        f" ({psycopg.pq.__impl__}), Python {platform.python_version()},"
        f" {platform.system()} {platform.machine()}, {os.cpu_count()} cores,"
        f" load average {os.getloadavg()[0]:.1f} at the start"
    )
    print(
        f"{count} calls on {TASKS} tasks per measurement, {rounds} rounds per side,"
        f" the default pool of `connect`; the contended load {contended} rounds per side;"
        " ratio: median of the rounds' adapter / raw\n"
    )
    try:
        print("### Straight to the server\n", flush=True)
        if not args.contended_only:
            print(HEADER, flush=True)
            asyncio.run(compare(DSN, schema, count, rounds, pooled=False))
            print()
        print(CONTENDED_HEADER, flush=True)
        asyncio.run(compare_contended(DSN, schema, contended, pooled=False))
        binary = None if args.no_pooler else pgbouncer_binary()
        if binary is not None:
            with pgbouncer(binary, DSN) as pooled:
                print(
                    "\n### Through PgBouncer in transaction mode (`prepare_threshold=None`)\n",
                    flush=True,
                )
                if not args.contended_only:
                    print(HEADER, flush=True)
                    asyncio.run(compare(pooled, schema, count, rounds, pooled=True))
                    print()
                print(CONTENDED_HEADER, flush=True)
                asyncio.run(compare_contended(pooled, schema, contended, pooled=True))
        print(f"\nload average {os.getloadavg()[0]:.1f} at the end")
    finally:
        admin(DSN, sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(sql.Identifier(schema)))


if __name__ == "__main__":
    main()
