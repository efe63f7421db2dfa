"""What `remember_within_limit` costs beside `remember`: round trips and time.

Run it from the repository root with ``hatch run bench:python
packages/psych-memory-postgres/benchmarks/bench_within_limit.py`` (add
``--quick`` for a short run). The server comes from
``PSYCH_MEMORY_TEST_POSTGRES_DSN`` (default: the local test database); the
benchmark works in a schema of its own and drops it at the end.

Two stores, each opened by `PostgresMemory.connect` on asyncio with one
connection: the default (statements prepared, bounds held by the
session) and ``prepare_threshold=None`` (as behind a transaction pooler:
bounds sent with ``SET LOCAL``, nothing prepared). For each:

1. Round trips per call, counted in libpq's trace of the connection: every
   message that makes the server answer (a simple ``Query``, or the
   ``Sync`` ending an extended-protocol batch) is one.
2. Calls per second, one task, rounds of ``remember`` and of
   ``remember_within_limit`` alternating, on keys that fill up to 40 facts
   under a cap of 50 (every capped call adds, after counting up to 40
   index entries), and of ``remember_within_limit`` on a key at its cap
   (every call refused). The figures are medians of the rounds.

The figures are printed, never asserted.
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import tempfile
from collections.abc import Awaitable, Callable
from functools import partial
from pathlib import Path
from time import perf_counter
from typing import Any
from uuid import uuid4

import anyio
import psycopg
from psycopg import sql
from psycopg.conninfo import make_conninfo
from psycopg.pq import Trace
from psycopg_pool import AsyncConnectionPool

from psych_runtime.memory.postgres import PostgresMemory

DSN = os.environ.get("PSYCH_MEMORY_TEST_POSTGRES_DSN", "postgresql://postgres@127.0.0.1:5432/test")
PER_KEY = 40
MAX_FACTS = 50


def _drop(schema: str) -> None:
    with psycopg.connect(DSN, autocommit=True) as conn:
        conn.execute(sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(sql.Identifier(schema)))


class _Keys:
    """End users that fill up to `PER_KEY` facts, one after another, per operation."""

    def __init__(self, label: str) -> None:
        self.label = label
        self.calls = 0

    def next(self) -> str:
        user = f"{self.label}-{self.calls // PER_KEY}"
        self.calls += 1
        return user


async def _round_trips(store: PostgresMemory, calls: int) -> dict[str, float]:
    """Round trips per call of each operation, from libpq's trace of the one connection."""
    pool = store.pool
    if not isinstance(pool, AsyncConnectionPool):
        raise TypeError("run on asyncio: connect opens psycopg's asynchronous pool there")
    found: dict[str, float] = {}
    keys = {"remember": _Keys("trace-r"), "remember_within_limit": _Keys("trace-l")}
    operations: dict[str, Callable[[], Awaitable[Any]]] = {
        "remember": lambda: store.remember("acme", keys["remember"].next(), "a fact"),
        "remember_within_limit": lambda: store.remember_within_limit(
            "acme", keys["remember_within_limit"].next(), "a fact", max_facts=MAX_FACTS
        ),
        "remember_within_limit (refused)": lambda: store.remember_within_limit(
            "acme", "full", "a fact", max_facts=MAX_FACTS
        ),
    }
    # Warm: psycopg prepares after 5 runs, so the counted calls are the
    # steady state.
    for operation in operations.values():
        for _ in range(10):
            await operation()
    with tempfile.TemporaryDirectory() as folder:
        for name, operation in operations.items():
            path = Path(folder) / f"{name}.trace"
            with path.open("w") as out:
                async with pool.connection() as conn:
                    conn.pgconn.trace(out.fileno())
                    conn.pgconn.set_trace_flags(Trace.SUPPRESS_TIMESTAMPS)
                try:
                    for _ in range(calls):
                        await operation()
                finally:
                    async with pool.connection() as conn:
                        conn.pgconn.untrace()
            sent = [line.split("\t") for line in path.read_text().splitlines()]
            answered = sum(
                1 for fields in sent if fields[0] == "F" and fields[2] in {"Query", "Sync"}
            )
            found[name] = answered / calls
    return found


async def _rate(call: Callable[[], Awaitable[Any]], calls: int) -> float:
    started = perf_counter()
    for _ in range(calls):
        await call()
    return calls / (perf_counter() - started)


async def _measure(
    label: str, dsn: str, prepare_threshold: int | None, rounds: int, calls: int
) -> None:
    schema = f"psych_bench_limit_{uuid4().hex[:12]}"
    try:
        async with PostgresMemory.connect(
            dsn, schema=schema, min_size=1, max_size=1, prepare_threshold=prepare_threshold
        ) as store:
            await store.setup()
            for _ in range(MAX_FACTS):
                await store.remember("acme", "full", "a fact")
            trips = await _round_trips(store, calls=200)
            plain, capped = _Keys("plain"), _Keys("capped")
            rates: dict[str, list[float]] = {name: [] for name in trips}
            for _ in range(rounds):
                rates["remember"].append(
                    await _rate(lambda: store.remember("acme", plain.next(), "a fact"), calls)
                )
                rates["remember_within_limit"].append(
                    await _rate(
                        lambda: store.remember_within_limit(
                            "acme", capped.next(), "a fact", max_facts=MAX_FACTS
                        ),
                        calls,
                    )
                )
                rates["remember_within_limit (refused)"].append(
                    await _rate(
                        lambda: store.remember_within_limit(
                            "acme", "full", "a fact", max_facts=MAX_FACTS
                        ),
                        calls,
                    )
                )
    finally:
        await anyio.to_thread.run_sync(_drop, schema)
    load = ", ".join(f"{value:.1f}" for value in os.getloadavg())
    print(f"\n#### {label}: {rounds} rounds of {calls} calls each, one task (load {load})\n")
    print(
        "| operation | round trips per call | calls/s (median) | µs per call"
        " | against remember (median of rounds) |"
    )
    print("|---|---:|---:|---:|---:|")
    for name, values in rates.items():
        rate = statistics.median(values)
        ratio = statistics.median(
            value / base for value, base in zip(values, rates["remember"], strict=True)
        )
        print(f"| {name} | {trips[name]:.2f} | {rate:,.0f} | {1e6 / rate:,.0f} | {ratio:.2f} |")


async def main(*, quick: bool) -> None:
    rounds, calls = (3, 200) if quick else (12, 250)
    print(f"Python {platform.python_version()}, psycopg {psycopg.__version__}")
    with psycopg.connect(DSN) as conn:
        print(f"PostgreSQL {conn.info.server_version}")
    # Without waiting for the WAL flush, what is left is the round trip and
    # the work of client and server.
    unflushed = make_conninfo(DSN, options="-c synchronous_commit=off")
    for label, dsn, threshold in (
        ("default (prepared)", DSN, 5),
        ("prepare_threshold=None (as behind a transaction pooler)", DSN, None),
        ("default, synchronous_commit=off", unflushed, 5),
        ("prepare_threshold=None, synchronous_commit=off", unflushed, None),
    ):
        await _measure(label, dsn, threshold, rounds, calls)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="a short run")
    anyio.run(partial(main, quick=parser.parse_args().quick))
