"""What only an adapter knows reaches the call's span: a PostgreSQL replay, for real."""

from __future__ import annotations

import threading
import uuid
from typing import TYPE_CHECKING, Any

import anyio
import anyio.to_thread
import psycopg
import pytest
from psycopg import sql
from psycopg.conninfo import make_conninfo

from psych_runtime.memory.postgres import PostgresMemory

if TYPE_CHECKING:
    from conftest import Telemetry

pytestmark = pytest.mark.anyio


def _query(dsn: str, statement: sql.SQL | sql.Composed, params: tuple[Any, ...] = ()) -> list[Any]:
    with psycopg.connect(dsn, autocommit=True) as conn:
        cursor = conn.execute(statement, params)
        return cursor.fetchall() if cursor.description is not None else []


class _TableLock:
    """Another connection's transaction holding the table, so a call waits in flight."""

    def __init__(self, dsn: str, table: sql.Identifier) -> None:
        self._dsn = dsn
        self._table = table
        self._conn: psycopg.Connection[Any] | None = None
        self._lock = threading.Lock()

    def acquire(self) -> None:
        with self._lock:
            self._conn = psycopg.connect(self._dsn)
            self._conn.execute(
                sql.SQL("LOCK TABLE {} IN ACCESS EXCLUSIVE MODE").format(self._table)
            )

    def release(self) -> None:
        with self._lock:
            if self._conn is not None:
                self._conn.rollback()
                self._conn.close()
                self._conn = None


async def _until_waiting(dsn: str, name: str) -> None:
    # The call has reached the server and waits for the lock: watched there.
    waiting = sql.SQL(
        "SELECT count(*) FROM pg_stat_activity"
        " WHERE application_name = %s AND wait_event_type = 'Lock'"
    )
    while True:
        if (await anyio.to_thread.run_sync(_query, dsn, waiting, (name,)))[0][0]:
            return
        await anyio.sleep(0.01)


async def test_a_replay_after_a_dropped_connection_is_an_event_of_the_calls_span(
    postgres_dsn: str, telemetry: Telemetry
) -> None:
    name = f"psych-otel-{uuid.uuid4().hex[:16]}"
    schema = f"psych_otel_{uuid.uuid4().hex}"
    terminate = sql.SQL(
        "SELECT count(*) FILTER (WHERE pg_terminate_backend(pid, 10000))"
        " FROM pg_stat_activity WHERE application_name = %s AND wait_event_type = 'Lock'"
    )
    try:
        with anyio.fail_after(60):
            dsn = make_conninfo(postgres_dsn, application_name=name)
            async with PostgresMemory.connect(dsn, schema=schema, max_size=2) as bare:
                await bare.setup()
                fact = await bare.remember("acme", "u1", "a fact")
                store = telemetry.instrument(bare)
                lock = _TableLock(postgres_dsn, sql.Identifier(schema, "memories"))
                await anyio.to_thread.run_sync(lock.acquire)
                recalled: list[object] = []

                async def recall() -> None:
                    recalled.append(await store.recall("acme", "u1"))

                try:
                    async with anyio.create_task_group() as tasks:
                        tasks.start_soon(recall)
                        await _until_waiting(postgres_dsn, name)
                        killed = await anyio.to_thread.run_sync(
                            _query, postgres_dsn, terminate, (name,)
                        )
                        assert killed[0][0] == 1
                        await anyio.to_thread.run_sync(lock.release)
                finally:
                    await anyio.to_thread.run_sync(lock.release)
    finally:
        await anyio.to_thread.run_sync(
            _query,
            postgres_dsn,
            sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(sql.Identifier(schema)),
        )
    assert recalled == [(fact,)]
    (span,) = [span for span in telemetry.spans() if span.name == "search_memory"]
    assert [(event.name, dict(event.attributes or {})) for event in span.events] == [
        (
            "psych_memory.replay",
            {"psych_memory.attempt": 2, "psych_memory.reason": "connection broken"},
        )
    ]
    assert span.status.is_ok
