"""How `PostgresMemory` compares with raw psycopg running the same statements.

Run it from the repository root with ``hatch run bench:postgres`` (add
``--quick`` for a run of a few seconds). The server comes from
``PSYCH_MEMORY_TEST_POSTGRES_DSN`` (default: the local test database); the
benchmark works in a schema of its own and drops it at the end. It prints
Markdown tables, ready to paste into ``docs/postgres.md``:

1. Throughput of ``remember``, ``recall``, ``forget`` and ``erase`` at 1, 8
   and 32 concurrent tasks, for the adapter and for raw psycopg sending the
   same statements over the same pool (for ``erase``, the one ``DELETE`` of
   the key an application would write), with the ratio adapter / raw
   (target: at least 0.8). Rounds alternate the two sides, and the ratio is
   the median of each round's pair, so that drift in the machine's load
   falls on both alike. Four ways of running: the default path (``connect``
   on asyncio, which opens psycopg's asynchronous pool), asyncio with an
   application's own asynchronous pool, then the synchronous pool in worker
   threads (what ``connect`` opens on trio) on asyncio and on trio. The
   raw baseline of each way runs exactly like the adapter: the threaded ways
   hop to a worker thread too, so the second table against the first shows
   what the threads cost on asyncio.
2. Per-user operations, one task, while the table grows from ten thousand
   to a million rows of other end users (target: flat). Median of three
   rounds after a warm-up round.

With ``--large`` it measures instead one end user of 1, 3 and 6 million
facts (``--large --quick``: 100,000 and 300,000), loaded straight into the
table: ``erase`` at the default bounds, with the worst wait of a writer
remembering for another end user every 20 ms meanwhile, beside the same
writer's worst wait with no erase running and one plain ``DELETE`` of the
key under the same bound (rolled back); and the time to read the key page
by page.

With ``--expire`` it measures instead the retention capability: a tenant
of 3 million facts (``--expire --quick``: 300,000) over 10,000 end users,
every third fact of each older than the cutoff, loaded straight into the
table, then ``expire`` at the default settings while another tenant's
writer remembers every 20 ms, beside the same writer's waits with nothing
else running.

The default path against raw psycopg, operation by operation, is
``bench_versus_raw.py`` (``hatch run bench:postgres-release``).

The figures are printed, never asserted: a benchmark that fails on a busy
machine teaches nothing.
"""

from __future__ import annotations

import argparse
import os
import platform
import secrets
import statistics
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from functools import partial
from time import perf_counter
from typing import Any
from uuid import uuid4

import anyio
import anyio.to_thread
import psycopg
from psycopg import sql
from psycopg_pool import AsyncConnectionPool, ConnectionPool

from psych_runtime.memory.port import MAX_PAGE_SIZE
from psych_runtime.memory.postgres import (
    DEFAULT_STATEMENT_TIMEOUT,
    PostgresMemory,
    StoreUnavailableError,
)
from psych_runtime.memory.postgres._schema import Statements

DSN = os.environ.get("PSYCH_MEMORY_TEST_POSTGRES_DSN", "postgresql://postgres@127.0.0.1:5432/test")
OPERATIONS = ("remember", "recall", "forget", "erase")
FACTS_PER_USER = 10
"""Facts each recalled end user holds."""

Call = Callable[[], Awaitable[object]]


@dataclass(frozen=True)
class Mode:
    """One way of running the statements: an event loop and a kind of pool."""

    name: str
    backend: str
    threaded: bool
    default: bool = False


MODES = (
    Mode("asyncio, `connect` (the default path)", "asyncio", threaded=False, default=True),
    Mode("asyncio, async pool", "asyncio", threaded=False),
    Mode("asyncio, sync pool in threads", "asyncio", threaded=True),
    Mode("trio, sync pool in threads", "trio", threaded=True),
)


class Raw:
    """Raw psycopg: the adapter's statements, straight on the same pool."""

    def __init__(self, pool: AsyncConnectionPool[Any] | ConnectionPool[Any], schema: str):
        self.pool = pool
        self.sql = Statements.for_schema(schema)
        self.plain_erase = (
            sql.SQL("DELETE FROM {} WHERE tenant = %s AND end_user_id = %s")
            .format(sql.Identifier(schema, "memories"))
            .as_bytes(None)
        )

    async def run(self, query: bytes, params: Sequence[object]) -> None:
        pool = self.pool
        if isinstance(pool, AsyncConnectionPool):
            async with pool.connection() as conn, conn.cursor() as cursor:
                await cursor.execute(query, params)
                if cursor.description is not None:
                    await cursor.fetchall()
        else:
            await anyio.to_thread.run_sync(partial(_run_sync, pool, query, params))

    async def erase(self, tenant: str, end_user_id: str) -> None:
        # What an application would write to delete an end user: one
        # statement, at the server's own synchronous_commit.
        await self.run(self.plain_erase, (tenant, end_user_id))


def _run_sync(pool: ConnectionPool[Any], query: bytes, params: Sequence[object]) -> None:
    with pool.connection() as conn, conn.cursor() as cursor:
        cursor.execute(query, params)
        if cursor.description is not None:
            cursor.fetchall()


def _utc_session(conn: psycopg.Connection[Any]) -> None:
    conn.execute("SET TimeZone TO 'UTC'")


async def _utc_session_async(conn: psycopg.AsyncConnection[Any]) -> None:
    await conn.execute("SET TimeZone TO 'UTC'")


def admin(statement: sql.SQL | sql.Composed, params: Sequence[object] = ()) -> list[Any]:
    with psycopg.connect(DSN, autocommit=True) as conn:
        cursor = conn.execute(statement, params)
        return cursor.fetchall() if cursor.description is not None else []


def fill(schema: str, first_user: int, users: int, per_user: int, tag: str) -> list[str]:
    """Insert ``users`` end users of ``per_user`` facts each; return their ids."""
    table = sql.Identifier(schema, "memories")
    rows = admin(
        sql.SQL(
            "INSERT INTO {} (id, tenant, end_user_id, content)"
            " SELECT replace(gen_random_uuid()::text, '-', ''), 'bench', %s || u,"
            " 'a fact of about forty characters, say ' || f"
            " FROM generate_series(%s::int, %s::int) AS u, generate_series(1, %s) AS f"
            " ORDER BY u, f RETURNING id"
        ).format(table),
        (tag, first_user, first_user + users - 1, per_user),
    )
    return [row[0] for row in rows]


async def timed(calls: list[Call], concurrency: int) -> float:
    """Run the calls on ``concurrency`` tasks; return calls per second."""
    queue = iter(calls)

    async def lane() -> None:
        for call in queue:
            await call()

    start = perf_counter()
    async with anyio.create_task_group() as tasks:
        for _ in range(concurrency):
            tasks.start_soon(lane)
    return len(calls) / (perf_counter() - start)


def workload(
    operation: str, target: PostgresMemory | Raw, schema: str, count: int, tag: str
) -> list[Call]:
    """``count`` calls of one operation, on data prepared for them alone."""
    # Arguments of each call as the adapter takes them, and as the raw
    # statement does (the raw insert binds an id chosen beforehand, as the
    # adapter chooses one before its insert).
    args: list[tuple[Any, ...]]
    if operation == "remember":
        args = [("bench", f"{tag}w{n % 64}", f"fact {n}") for n in range(count)]
        raw_args = [(secrets.token_hex(16), *call) for call in args]
    elif operation == "recall":
        fill(schema, 0, 64, FACTS_PER_USER, f"{tag}r")
        args = [("bench", f"{tag}r{n % 64}") for n in range(count)]
        raw_args = [(*call, None) for call in args]
    elif operation == "forget":
        ids = fill(schema, 0, count, 1, f"{tag}f")
        args = [("bench", f"{tag}f{n}", memory_id) for n, memory_id in enumerate(ids)]
        raw_args = args
    else:
        fill(schema, 0, count, 3, f"{tag}e")
        args = [("bench", f"{tag}e{n}") for n in range(count)]
        raw_args = args
    if isinstance(target, PostgresMemory):
        method = getattr(target, operation)
        return [partial(method, *call) for call in args]
    if operation == "erase":
        return [partial(target.erase, *call) for call in raw_args]
    query = getattr(target.sql, operation)
    return [partial(target.run, query, call) for call in raw_args]


async def throughput(mode: Mode, schema: str, count: int, rounds: int) -> list[list[str]]:
    pool_size = 32
    pool: AsyncConnectionPool[Any] | ConnectionPool[Any]
    # Both pools are set up as `connect` sets up its own: autocommit, and the
    # session in UTC. The raw baseline runs on the very same pool.
    options: dict[str, Any] = {
        "min_size": pool_size,
        "max_size": pool_size,
        "kwargs": {"autocommit": True},
        "open": False,
    }
    if mode.default:
        # What `connect` (and `open_url`) give an application on this loop.
        async with PostgresMemory.connect(
            DSN, schema=schema, min_size=pool_size, max_size=pool_size
        ) as store:
            await store.setup()
            return await compare(store, Raw(store.pool, schema), schema, count, rounds)
    if mode.threaded:
        pool = ConnectionPool(DSN, configure=_utc_session, **options)
        await anyio.to_thread.run_sync(partial(pool.open, wait=True))
    else:
        pool = AsyncConnectionPool(DSN, configure=_utc_session_async, **options)
        await pool.open(wait=True)
    try:
        store = PostgresMemory(pool, schema=schema)
        await store.setup()
        return await compare(store, Raw(pool, schema), schema, count, rounds)
    finally:
        if isinstance(pool, AsyncConnectionPool):
            await pool.close()
        else:
            await anyio.to_thread.run_sync(pool.close)


async def compare(
    store: PostgresMemory, raw: Raw, schema: str, count: int, rounds: int
) -> list[list[str]]:
    """Adapter and raw psycopg side by side, for every operation and concurrency."""
    lines = []
    for concurrency in (1, 8, 32):
        for operation in OPERATIONS:
            rates: dict[str, list[float]] = {"adapter": [], "raw": []}
            ratios: list[float] = []
            for n in range(rounds):
                # Interleaved, and each side first in turn, so that drift
                # in the machine's load falls on both alike.
                sides: list[tuple[str, PostgresMemory | Raw]] = [
                    ("adapter", store),
                    ("raw", raw),
                ]
                for side, target in sides if n % 2 == 0 else sides[::-1]:
                    tag = uuid4().hex[:8]
                    calls = workload(operation, target, schema, count, tag)
                    rates[side].append(await timed(calls, concurrency))
                # Each round's pair ran back to back, under the same load:
                # their ratio is steadier than a ratio of medians.
                ratios.append(rates["adapter"][-1] / rates["raw"][-1])
            adapter = statistics.median(rates["adapter"])
            baseline = statistics.median(rates["raw"])
            lines.append(
                [
                    operation,
                    str(concurrency),
                    f"{adapter:,.0f}",
                    f"{baseline:,.0f}",
                    f"{statistics.median(ratios):.2f}",
                ]
            )
    return lines


async def scaling(schema: str, sizes: Sequence[int], count: int) -> list[list[str]]:
    table = sql.Identifier(schema, "memories")
    lines = []
    async with PostgresMemory.connect(DSN, schema=schema, min_size=1, max_size=2) as store:
        await store.setup()
        admin(sql.SQL("TRUNCATE {}").format(table))
        held = 0
        for size in sizes:
            # Other end users' facts, ten each, up to this size.
            added = size - held
            await anyio.to_thread.run_sync(
                fill, schema, held // FACTS_PER_USER, added // FACTS_PER_USER, FACTS_PER_USER, "o"
            )
            held = size
            admin(sql.SQL("VACUUM ANALYZE {}").format(table))
            row = [f"{size:,}"]
            for operation in OPERATIONS:
                latencies = []
                # The first round warms the caches and is not counted.
                for n in range(4):
                    calls = workload(operation, store, schema, count, uuid4().hex[:8])
                    rate = await timed(calls, 1)
                    if n:
                        latencies.append(1e6 / rate)
                row.append(f"{statistics.median(latencies):,.0f}")
            # Leave only the other users, so every size measures the same work.
            admin(sql.SQL("DELETE FROM {} WHERE end_user_id NOT LIKE 'o%%'").format(table))
            lines.append(row)
    return lines


WRITER_EVERY = 0.02
"""Seconds between two calls of the writer that runs beside a large erase."""


class Writer:
    """Another end user's ``remember`` every 20 ms, and how long each call took."""

    def __init__(self, store: PostgresMemory, tenant: str = "bench") -> None:
        self.store = store
        self.tenant = tenant
        self.waits: list[float] = []
        self.failures = 0
        self.stop = anyio.Event()

    async def run(self) -> None:
        n = 0
        while not self.stop.is_set():
            start = perf_counter()
            try:
                await self.store.remember(self.tenant, "writer", f"written while erasing {n}")
            except StoreUnavailableError:
                self.failures += 1
            took = perf_counter() - start
            self.waits.append(took)
            n += 1
            with anyio.move_on_after(max(0.0, WRITER_EVERY - took)):
                await self.stop.wait()


def load_one_user(schema: str, end_user_id: str, count: int) -> None:
    """``count`` facts of one end user, straight into the table, then vacuumed."""
    table = sql.Identifier(schema, "memories")
    admin(
        sql.SQL(
            "INSERT INTO {} (id, tenant, end_user_id, content)"
            " SELECT md5(%s::text || g), 'bench', %s,"
            " 'a fact of about forty characters, say ' || g"
            " FROM generate_series(1, %s) AS g"
        ).format(table),
        (end_user_id, end_user_id, count),
    )
    # As a key that has sat in the table for a while: visible to all, with
    # its pages' hint bits set, as autovacuum leaves them.
    admin(sql.SQL("VACUUM ANALYZE {}").format(table))


def one_delete(schema: str, end_user_id: str) -> str:
    """One plain DELETE of the key under the default bound, rolled back."""
    table = sql.Identifier(schema, "memories")
    with psycopg.connect(DSN) as conn:
        bound = f"{DEFAULT_STATEMENT_TIMEOUT * 1000:.0f}ms"
        conn.execute(sql.SQL("SET statement_timeout = {}").format(bound))
        start = perf_counter()
        try:
            conn.execute(
                sql.SQL("DELETE FROM {} WHERE tenant = 'bench' AND end_user_id = %s").format(table),
                (end_user_id,),
            )
        except psycopg.errors.QueryCanceled:
            conn.rollback()
            return f"cancelled at {perf_counter() - start:.1f}"
        took = perf_counter() - start
        conn.rollback()
        return f"{took:.1f}"


async def with_writer(
    store: PostgresMemory, work: Callable[[], Awaitable[object]], tenant: str = "bench"
) -> Writer:
    """Run ``work`` while the writer writes (for ``tenant``); return the writer."""
    writer = Writer(store, tenant)

    async def then_stop() -> None:
        try:
            await work()
        finally:
            writer.stop.set()

    async with anyio.create_task_group() as tasks:
        tasks.start_soon(writer.run)
        tasks.start_soon(then_stop)
    return writer


async def read_in_pages(store: PostgresMemory, end_user_id: str) -> int:
    """Read the key page by page, as an operator's export does; return the pages read."""
    pages = 0
    after: str | None = None
    while True:
        page = await store.recall_page("bench", end_user_id, after=after, size=MAX_PAGE_SIZE)
        pages += 1
        if len(page) < MAX_PAGE_SIZE:
            return pages
        after = page[-1].id


async def erased(store: PostgresMemory, end_user_id: str, expected: int) -> None:
    """Erase the key; a wrong count ends the benchmark."""
    count = await store.erase("bench", end_user_id)
    if count != expected:
        raise RuntimeError(f"erase answered {count}, not {expected}")


async def large(schema: str, sizes: Sequence[int]) -> list[list[str]]:
    """Erase one end user of each size at the default bounds, a writer beside it."""
    lines = []
    async with PostgresMemory.connect(DSN, schema=schema) as store:
        await store.setup()
        await store.remember("bench", "writer", "the writer's first fact")
        for size in sizes:
            user = f"big{size}"
            start = perf_counter()
            await anyio.to_thread.run_sync(load_one_user, schema, user, size)
            loaded = perf_counter() - start
            plain = await anyio.to_thread.run_sync(one_delete, schema, user)
            # The same writer with nothing else running: the baseline.
            baseline = await with_writer(store, partial(anyio.sleep, 3))
            start = perf_counter()
            pages = await read_in_pages(store, user)
            paged = perf_counter() - start
            start = perf_counter()
            writer = await with_writer(store, partial(erased, store, user, size))
            took = perf_counter() - start
            lines.append(
                [
                    f"{size:,}",
                    f"{loaded:.0f}",
                    plain,
                    f"{took:.1f}",
                    f"{len(writer.waits)}",
                    f"{writer.failures}",
                    f"{max(writer.waits) * 1000:.0f}",
                    f"{statistics.median(writer.waits) * 1000:.1f}",
                    f"{max(baseline.waits) * 1000:.0f}",
                    f"{statistics.median(baseline.waits) * 1000:.1f}",
                    f"{paged:.1f} ({pages} pages)",
                ]
            )
            print(" | ".join(lines[-1]), flush=True)
    return lines


EXPIRE_USERS = 10_000
"""End users the expired tenant's facts are spread over."""


def load_tenant(schema: str, facts: int, cutoff: datetime) -> None:
    """Tenant "acme": ``facts`` facts over 10,000 end users, a third made before ``cutoff``."""
    table = sql.Identifier(schema, "memories")
    # Each end user's facts alternate in age as years of use leave them:
    # every third one old, the others newer than the cutoff.
    admin(
        sql.SQL(
            "INSERT INTO {} (id, tenant, end_user_id, content, created_at)"
            " SELECT md5('x' || g), 'acme', 'user' || (g %% %s),"
            " 'a fact of about forty characters, say ' || g,"
            " CASE WHEN g %% 3 = 0 THEN %s - make_interval(secs => g + 1)"
            " ELSE %s + make_interval(secs => g) END"
            " FROM generate_series(0, %s::int - 1) AS g ORDER BY g %% %s, g"
        ).format(table),
        (EXPIRE_USERS, cutoff, cutoff, facts, EXPIRE_USERS),
    )
    admin(sql.SQL("VACUUM ANALYZE {}").format(table))


async def expiry(schema: str, facts: int) -> list[str]:
    """Expire a third of a tenant of ``facts`` facts at the default settings, a writer beside it."""
    cutoff = datetime.now(UTC) - timedelta(days=400)
    async with PostgresMemory.connect(DSN, schema=schema) as store:
        await store.setup()
        await store.remember("other", "writer", "the writer's first fact")
        start = perf_counter()
        await anyio.to_thread.run_sync(load_tenant, schema, facts, cutoff)
        loaded = perf_counter() - start
        baseline = await with_writer(store, partial(anyio.sleep, 3), "other")
        expired: list[int] = []

        async def expire() -> None:
            expired.append(await store.expire("acme", before=cutoff))

        start = perf_counter()
        writer = await with_writer(store, expire, "other")
        took = perf_counter() - start
        return [
            f"{facts:,}",
            f"{loaded:.0f}",
            f"{expired[0]:,}",
            f"{took:.1f}",
            f"{len(writer.waits)}",
            f"{writer.failures}",
            f"{max(writer.waits) * 1000:.0f}",
            f"{statistics.median(writer.waits) * 1000:.1f}",
            f"{max(baseline.waits) * 1000:.0f}",
            f"{statistics.median(baseline.waits) * 1000:.1f}",
        ]


def table(header: list[str], rows: list[list[str]]) -> str:
    out = ["| " + " | ".join(header) + " |", "|" + "|".join("---:" for _ in header) + "|"]
    out.extend("| " + " | ".join(row) + " |" for row in rows)
    return "\n".join(out)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--quick", action="store_true", help="a small run of a few seconds")
    parser.add_argument(
        "--large",
        action="store_true",
        help="erase and page through one end user of 1, 3 and 6 million facts instead",
    )
    parser.add_argument(
        "--expire",
        action="store_true",
        help="expire a third of a tenant of 3 million facts instead (--quick: 300,000)",
    )
    args = parser.parse_args()
    count = 200 if args.quick else 1000
    rounds = 2 if args.quick else 8
    sizes = (10_000, 100_000) if args.quick else (10_000, 100_000, 1_000_000)

    schema = f"psych_bench_{uuid4().hex[:12]}"
    server = admin(sql.SQL("SHOW server_version"))[0][0]
    print(f"PostgreSQL {server}, psycopg {psycopg.__version__}, Python {platform.python_version()}")
    print(
        f"{os.cpu_count()} cores; {count} calls per measurement, {rounds} rounds per side;"
        " rates are medians, the ratio is the median of the rounds' paired ratios\n"
    )
    try:
        if args.expire:
            facts = 300_000 if args.quick else 3_000_000
            row = anyio.run(expiry, schema, facts)
            print(
                f"\n### A tenant of {facts:,} facts over {EXPIRE_USERS:,} end users, a third older"
                " than the cutoff, expired at the default settings beside another tenant's"
                " writer every 20 ms\n"
            )
            header = [
                "facts",
                "load (s)",
                "expired",
                "expire (s)",
                "writer calls",
                "writer failures",
                "writer worst (ms)",
                "writer median (ms)",
                "baseline worst (ms)",
                "baseline median (ms)",
            ]
            print(table(header, [row]))
            return
        if args.large:
            sizes = (100_000, 300_000) if args.quick else (1_000_000, 3_000_000, 6_000_000)
            lines = anyio.run(large, schema, sizes)
            print("\n### One end user of many facts (asyncio, `connect`, default bounds)\n")
            header = [
                "facts",
                "load (s)",
                "one DELETE (s)",
                "erase (s)",
                "writer calls",
                "writer failures",
                "writer worst (ms)",
                "writer median (ms)",
                "baseline worst (ms)",
                "baseline median (ms)",
                "read in pages (s)",
            ]
            print(table(header, lines))
            return
        header = ["operation", "tasks", "adapter calls/s", "raw psycopg calls/s", "ratio"]
        for mode in MODES:
            lines = anyio.run(throughput, mode, schema, count, rounds, backend=mode.backend)
            print(f"### {mode.name}\n")
            print(table(header, lines) + "\n")
        lines = anyio.run(scaling, schema, sizes, count)
        print(
            "### Per-user cost as the table grows"
            " (asyncio, the pool of `connect`, one task, µs per call)\n"
        )
        print(table(["rows in the table", *OPERATIONS], lines))
    finally:
        admin(sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(sql.Identifier(schema)))


if __name__ == "__main__":
    main()
