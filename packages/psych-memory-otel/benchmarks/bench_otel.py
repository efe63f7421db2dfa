"""What `instrument` costs each call, beside the bare store in the same run.

Run it from the repository root with ``hatch run bench:otel`` (add
``--quick`` for a run of a few seconds). For each adapter (in-process,
SQLite on a temporary file, PostgreSQL from ``PSYCH_MEMORY_TEST_POSTGRES_DSN``
in a schema of its own, dropped at the end), the same store is called three
ways, taking turns call by call so that drift in the machine's load, the
disk's or the server's falls on all alike:

- bare: the store itself;
- API only: `instrument` with the OpenTelemetry API's no-op providers,
  which is what an application gets when no SDK is installed or set up;
- SDK: `instrument` with the SDK's tracer provider (every span sampled,
  ended into a batch processor whose exporter drops them) and meter
  provider (every measurement aggregated).

Each figure is the median over the rounds of the time per call, and each
overhead the median of the rounds' own ratios to the bare store. Target:
at most 5 % with the SDK on SQLite and PostgreSQL. Figures are printed as a
Markdown table, ready for docs/otel.md, never asserted.
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import tempfile
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from importlib.metadata import version
from pathlib import Path
from time import perf_counter

import anyio
import psycopg
from opentelemetry.metrics import NoOpMeterProvider
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor, SpanExporter, SpanExportResult
from opentelemetry.trace import NoOpTracerProvider
from psycopg import sql

from psych_runtime.memory.inproc import InProcessMemory
from psych_runtime.memory.otel import instrument
from psych_runtime.memory.port import MemoryStore
from psych_runtime.memory.postgres import PostgresMemory
from psych_runtime.memory.sqlite import SqliteMemory

DSN = os.environ.get("PSYCH_MEMORY_TEST_POSTGRES_DSN", "postgresql://postgres@127.0.0.1:5432/test")
SIDES = ("bare", "API only", "SDK")
OPERATIONS = ("remember", "recall", "forget", "erase")


class _Dropped(SpanExporter):
    """An exporter that sends nothing anywhere: the SDK's own cost, no network's."""

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        return SpanExportResult.SUCCESS

    def shutdown(self) -> None:
        """Nothing to release."""


@dataclass
class Cell:
    """One operation of one adapter: each side's time per call, round by round."""

    seconds: dict[str, list[float]] = field(default_factory=lambda: {side: [] for side in SIDES})

    def per_call(self, side: str) -> float:
        return statistics.median(self.seconds[side])

    def overhead(self, side: str) -> float:
        ratios = [
            mine / bare for mine, bare in zip(self.seconds[side], self.seconds["bare"], strict=True)
        ]
        return statistics.median(ratios) - 1


async def _round(
    stores: dict[str, MemoryStore], calls: int, tag: str
) -> dict[str, dict[str, float]]:
    """Seconds per call of each operation, by operation and side.

    The sides take turns call by call (the first of each turn rotating), so
    a slow second of the machine, or of the disk or the server, falls on all
    three alike.
    """
    found: dict[str, dict[str, float]] = {}
    tenant = "bench"
    held = f"held-{tag}"
    for number in range(10):
        await stores["bare"].remember(tenant, held, f"fact {number} of a user who has ten")

    async def timed(operation: str, call: Callable[[str, int], Awaitable[object]]) -> None:
        spent = dict.fromkeys(SIDES, 0.0)
        for number in range(calls):
            first = number % len(SIDES)
            for side in SIDES[first:] + SIDES[:first]:
                started = perf_counter()
                await call(side, number)
                spent[side] += perf_counter() - started
        found[operation] = {side: seconds / calls for side, seconds in spent.items()}

    ids: dict[tuple[str, int], str] = {}

    async def remember(side: str, number: int) -> None:
        fact = await stores[side].remember(tenant, f"user-{tag}-{side}-{number}", "a fact")
        ids[side, number] = fact.id

    async def recall(side: str, number: int) -> None:
        await stores[side].recall(tenant, held)

    async def forget(side: str, number: int) -> None:
        await stores[side].forget(tenant, f"user-{tag}-{side}-{number}", ids[side, number])

    async def erase(side: str, number: int) -> None:
        await stores[side].erase(tenant, f"erased-{tag}-{side}-{number}")

    await timed("remember", remember)
    await timed("recall", recall)
    await timed("forget", forget)
    for side in SIDES:
        for number in range(calls):
            await stores["bare"].remember(tenant, f"erased-{tag}-{side}-{number}", "a fact")
    await timed("erase", erase)
    await stores["bare"].erase(tenant, held)
    return found


async def _measure(bare: MemoryStore, calls: int, rounds: int) -> dict[str, Cell]:
    sdk_traces = TracerProvider()
    sdk_traces.add_span_processor(BatchSpanProcessor(_Dropped()))
    sdk_metrics = MeterProvider(metric_readers=[InMemoryMetricReader()])
    stores = {
        "bare": bare,
        "API only": instrument(
            bare, tracer_provider=NoOpTracerProvider(), meter_provider=NoOpMeterProvider()
        ),
        "SDK": instrument(bare, tracer_provider=sdk_traces, meter_provider=sdk_metrics),
    }
    cells = {operation: Cell() for operation in OPERATIONS}
    await _round(stores, max(calls // 10, 1), "warm")
    for number in range(rounds):
        for operation, sides in (await _round(stores, calls, f"{number}")).items():
            for side, seconds in sides.items():
                cells[operation].seconds[side].append(seconds)
    sdk_traces.shutdown()
    sdk_metrics.shutdown()
    return cells


@asynccontextmanager
async def _postgres() -> AsyncIterator[MemoryStore]:
    schema = f"psych_bench_otel_{uuid.uuid4().hex}"
    try:
        async with PostgresMemory.connect(DSN, schema=schema, max_size=4) as store:
            await store.setup()
            yield store
    finally:
        with psycopg.connect(DSN, autocommit=True) as conn:
            conn.execute(sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(sql.Identifier(schema)))


async def _run(quick: bool) -> None:  # noqa: FBT001
    calls, rounds = (50, 3) if quick else (200, 7)
    results: dict[str, dict[str, Cell]] = {}
    async with InProcessMemory() as store:
        # Calls of a microsecond: more of them, for a readable clock.
        results["in-process"] = await _measure(store, calls * 10, rounds)
    with tempfile.TemporaryDirectory() as folder:
        async with SqliteMemory(Path(folder) / "bench.sqlite3") as store:
            results["SQLite"] = await _measure(store, calls, rounds)
    async with _postgres() as store:
        results["PostgreSQL"] = await _measure(store, calls, rounds)
    print(
        f"Python {platform.python_version()}, OpenTelemetry SDK {version('opentelemetry-sdk')}, "
        f"{rounds} rounds of {calls} calls (in-process: {calls * 10})\n"
    )
    print("| store | operation | bare | API only | SDK |")
    print("| --- | --- | --- | --- | --- |")
    for store_name, cells in results.items():
        for operation, cell in cells.items():
            bare = _time(cell.per_call("bare"))
            api = f"{_time(cell.per_call('API only'))} ({cell.overhead('API only'):+.1%})"
            sdk = f"{_time(cell.per_call('SDK'))} ({cell.overhead('SDK'):+.1%})"
            print(f"| {store_name} | {operation} | {bare} | {api} | {sdk} |")


def _time(seconds: float) -> str:
    return f"{seconds * 1e6:.1f} µs" if seconds < 0.001 else f"{seconds * 1e3:.2f} ms"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="a few seconds, for a smoke run")
    parser.add_argument("--backend", choices=["asyncio", "trio"], default="asyncio")
    arguments = parser.parse_args()
    anyio.run(_run, arguments.quick, backend=arguments.backend)


if __name__ == "__main__":
    main()
