"""Fixtures of the instrumentation's tests: the SDK's in-memory exporter and reader, real stores.

The PostgreSQL server comes from the repository's root conftest
(``postgres_dsn``): without one the PostgreSQL cases are skipped, except
under ``CI=true``, where a missing server fails the run.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import anyio.to_thread
import psycopg
import pytest
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader, MetricsData
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from psycopg import sql

from psych_runtime.memory.inproc import InProcessMemory
from psych_runtime.memory.otel import instrument
from psych_runtime.memory.port import MemoryStore
from psych_runtime.memory.postgres import PostgresMemory
from psych_runtime.memory.sqlite import SqliteMemory

# Always set: the root conftest gives it its default.
DSN = os.environ["PSYCH_MEMORY_TEST_POSTGRES_DSN"]

StoreOpener = Callable[[], AbstractAsyncContextManager[MemoryStore]]


@dataclass
class Telemetry:
    """An SDK set up for one test: every span it ends, every measurement it takes."""

    exporter: InMemorySpanExporter = field(default_factory=InMemorySpanExporter)
    reader: InMemoryMetricReader = field(default_factory=InMemoryMetricReader)
    tracer_provider: TracerProvider = field(default_factory=TracerProvider)
    meter_provider: MeterProvider = field(init=False)

    def __post_init__(self) -> None:
        self.tracer_provider.add_span_processor(SimpleSpanProcessor(self.exporter))
        self.meter_provider = MeterProvider(metric_readers=[self.reader])

    def instrument(self, store: MemoryStore, **options: Any) -> MemoryStore:
        """``store``, instrumented into this SDK."""
        return instrument(
            store,
            tracer_provider=self.tracer_provider,
            meter_provider=self.meter_provider,
            **options,
        )

    def spans(self) -> tuple[ReadableSpan, ...]:
        return tuple(self.exporter.get_finished_spans())

    def metrics(self) -> MetricsData | None:
        return self.reader.get_metrics_data()

    def points(self, name: str) -> list[Any]:
        data = self.metrics()
        if data is None:
            return []
        return [
            point
            for resource in data.resource_metrics
            for scope in resource.scope_metrics
            for metric in scope.metrics
            if metric.name == name
            for point in metric.data.data_points
        ]

    def clear(self) -> None:
        self.exporter.clear()

    def texts(self) -> list[str]:
        """Every text recorded: spans' names, attributes, events and statuses; measurements."""
        found: list[str] = []

        def add(attributes: Any) -> None:
            for name, value in dict(attributes or {}).items():
                found.append(name)
                values = value if isinstance(value, (tuple, list)) else [value]
                found.extend(str(item) for item in values)

        for span in self.spans():
            found.append(span.name)
            found.append(span.status.description or "")
            add(span.attributes)
            for event in span.events:
                found.append(event.name)
                add(event.attributes)
            add(span.resource.attributes)
        data = self.metrics()
        for resource in [] if data is None else data.resource_metrics:
            for scope in resource.scope_metrics:
                for metric in scope.metrics:
                    found.extend([metric.name, metric.description or "", metric.unit or ""])
                    for point in metric.data.data_points:
                        add(point.attributes)
        return found


@pytest.fixture
def make_telemetry() -> type[Telemetry]:
    """A fresh SDK set-up per call, for tests that need one per example."""
    return Telemetry


@pytest.fixture
def telemetry() -> Iterator[Telemetry]:
    found = Telemetry()
    yield found
    found.tracer_provider.shutdown()
    found.meter_provider.shutdown()


def _drop_schema(schema: str) -> None:
    with psycopg.connect(DSN, autocommit=True) as conn:
        conn.execute(sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(sql.Identifier(schema)))


@asynccontextmanager
async def _postgres() -> AsyncIterator[MemoryStore]:
    schema = f"psych_otel_{uuid.uuid4().hex}"
    try:
        async with PostgresMemory.connect(DSN, schema=schema, max_size=4) as store:
            await store.setup()
            yield store
    finally:
        await anyio.to_thread.run_sync(_drop_schema, schema)


@asynccontextmanager
async def _inproc() -> AsyncIterator[MemoryStore]:
    async with InProcessMemory() as store:
        yield store


@pytest.fixture
def open_inproc() -> StoreOpener:
    """Opens a fresh in-process store."""
    return _inproc


@pytest.fixture
def open_sqlite(tmp_path: Path) -> StoreOpener:
    """Opens a store on a fresh SQLite file."""
    counter = iter(range(1_000_000_000))

    @asynccontextmanager
    async def sqlite() -> AsyncIterator[MemoryStore]:
        async with SqliteMemory(tmp_path / f"facts-{next(counter)}.sqlite3") as store:
            yield store

    return sqlite


@pytest.fixture
def open_postgres(postgres_dsn: str) -> StoreOpener:
    """Opens a set-up PostgreSQL store in a fresh schema, dropped on leaving."""
    return _postgres


@pytest.fixture(params=["inproc", "sqlite", "postgres"])
def open_bare(request: pytest.FixtureRequest) -> StoreOpener:
    """Opens a fresh bare store of each adapter, in turn."""
    opener: StoreOpener = request.getfixturevalue(f"open_{request.param}")
    return opener
