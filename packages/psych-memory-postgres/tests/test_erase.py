"""How many statements and round trips an erase costs: one for a key of few facts.

Two records of what really happened, neither taken from the adapter: a
statement-level trigger on the table logs every ``DELETE`` the server runs
(also one that deletes nothing, and one run inside the schema's function),
with its transaction and the rows it deleted; and libpq's trace of the
store's only connection logs every message the client sent, so the round
trips (a ``Sync`` or a simple ``Query`` each) and any ``BEGIN`` are counted
on the wire.

Each test runs both ways a store sends its statements: alone, which psycopg
prepares (a store's own pool; here a store with no bounds to send), and
after the ``SET LOCAL`` bounds in one simple query, never prepared (behind
a transaction pooler, or on a pool given to the store), where the erase is
one call of the schema's function.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any

import anyio.to_thread
import psycopg
import pytest
from psycopg import pq, sql
from psycopg_pool import AsyncConnectionPool, ConnectionPool

from psych_runtime.memory.postgres import PostgresMemory
from psych_runtime.memory.postgres._conversations import FEW_FACTS

if TYPE_CHECKING:
    from conftest import Backdoor

pytestmark = pytest.mark.anyio


class _Wire:
    """What the client sent on one traced connection, from a mark on."""

    def __init__(self, path: Path) -> None:
        self._path = path
        self._mark = 0

    def trace(self, conn: psycopg.Connection[Any] | psycopg.AsyncConnection[Any]) -> None:
        # Unbuffered: each message is in the file once it was sent.
        conn.pgconn.trace(self._file.fileno())
        conn.pgconn.set_trace_flags(pq.Trace.SUPPRESS_TIMESTAMPS | pq.Trace.REGRESS_MODE)

    @asynccontextmanager
    async def opened(self) -> AsyncIterator[None]:
        with self._path.open("w") as self._file:
            yield

    def mark(self) -> None:
        self._mark = self._path.stat().st_size

    def sent(self) -> list[str]:
        """The client's messages since the mark, as ``Kind text``."""
        with self._path.open() as file:
            file.seek(self._mark)
            lines = file.read().splitlines()
        return [
            " ".join(part.strip() for part in line.split("\t")[2:])
            for line in lines
            if line.startswith("F\t")
        ]


def _round_trips(messages: list[str]) -> list[str]:
    # Each Sync (extended protocol) or Query (simple protocol) waits for
    # the server's ReadyForQuery: one round trip, whose messages are joined
    # here (a Parse carries the statement's text).
    trips: list[str] = []
    pending: list[str] = []
    for message in messages:
        pending.append(message)
        if message.startswith(("Sync", "Query")):
            trips.append(" ".join(pending))
            pending = []
    assert not pending, "every message sent ends in a round trip"
    return trips


@pytest.fixture(params=["alone", "with bounds"])
def way(request: pytest.FixtureRequest) -> str:
    """How the store sends its statements: alone, or after its ``SET LOCAL`` bounds."""
    sent: str = request.param
    return sent


@asynccontextmanager
async def _traced_store(
    backdoor: Backdoor, tmp_path: Path, anyio_backend: str, way: str
) -> AsyncIterator[tuple[PostgresMemory, _Wire]]:
    wire = _Wire(tmp_path / "wire.trace")
    bounds: dict[str, Any] = {}
    if way == "alone":
        bounds = {"statement_timeout": None, "lock_timeout": None}
    options: dict[str, Any] = {
        "min_size": 1,
        "max_size": 1,
        "kwargs": {"autocommit": True},
        "open": False,
    }
    async with wire.opened():
        if anyio_backend == "asyncio":

            async def configure(conn: psycopg.AsyncConnection[Any]) -> None:
                wire.trace(conn)

            async with AsyncConnectionPool(backdoor.dsn, configure=configure, **options) as pool:
                await pool.open(wait=True)
                async with PostgresMemory(pool, schema=backdoor.schema, **bounds) as store:
                    await store.setup()
                    yield store, wire
        else:
            threaded = ConnectionPool(backdoor.dsn, configure=wire.trace, **options)
            await anyio.to_thread.run_sync(threaded.open, True)
            try:
                async with PostgresMemory(threaded, schema=backdoor.schema, **bounds) as store:
                    await store.setup()
                    yield store, wire
            finally:
                await anyio.to_thread.run_sync(threaded.close)


async def _record_deletes(backdoor: Backdoor) -> None:
    log = sql.Identifier(backdoor.schema, "deletes")
    function = sql.Identifier(backdoor.schema, "record_delete")
    await backdoor.query(
        sql.SQL(
            "CREATE TABLE {} (n bigint GENERATED ALWAYS AS IDENTITY, xact bigint, deleted bigint)"
        ).format(log)
    )
    await backdoor.query(
        sql.SQL(
            "CREATE FUNCTION {}() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN"
            " INSERT INTO {} (xact, deleted) SELECT txid_current(), count(*) FROM gone;"
            " RETURN NULL; END $$"
        ).format(function, log)
    )
    await backdoor.query(
        sql.SQL(
            "CREATE TRIGGER record_delete AFTER DELETE ON {} REFERENCING OLD TABLE AS gone"
            " FOR EACH STATEMENT EXECUTE FUNCTION {}()"
        ).format(backdoor.table, function)
    )


async def _deletes(backdoor: Backdoor) -> list[tuple[int, int]]:
    rows = await backdoor.query(
        sql.SQL("SELECT xact, deleted FROM {} ORDER BY n").format(
            sql.Identifier(backdoor.schema, "deletes")
        )
    )
    return [(int(xact), int(deleted)) for xact, deleted in rows]


async def _erase_observed(
    store: PostgresMemory, backdoor: Backdoor, wire: _Wire, facts: int
) -> tuple[list[tuple[int, int]], list[str]]:
    """Erase a key of ``facts`` facts; return the DELETEs run and the messages sent."""
    await backdoor.load("erased", facts)
    neighbour = await store.remember("acme", "next door", "stays")
    await _record_deletes(backdoor)
    wire.mark()

    assert await store.erase("acme", "erased") == facts

    sent = wire.sent()
    assert await backdoor.count("acme", "erased") == 0
    assert await store.recall("acme", "next door") == (neighbour,)
    return await _deletes(backdoor), sent


@pytest.mark.parametrize("facts", [1, 3, FEW_FACTS])
async def test_a_key_of_few_facts_is_erased_by_one_statement_in_one_round_trip(
    backdoor: Backdoor, tmp_path: Path, anyio_backend: str, way: str, facts: int
) -> None:
    async with _traced_store(backdoor, tmp_path, anyio_backend, way) as (store, wire):
        deletes, sent = await _erase_observed(store, backdoor, wire, facts)

    # One round trip; in autocommit the server runs it as one implicit
    # transaction.
    (trip,) = _round_trips(sent)
    if way == "alone":
        assert "DELETE" in trip
        assert "set_config" in trip
    else:
        # The bounds, then the function's call: the DELETE runs inside it.
        assert trip.startswith('Query "SET LOCAL statement_timeout')
        assert "erase_few" in trip
        assert "DELETE" not in trip
    assert "BEGIN" not in trip, "no BEGIN"
    assert "COMMIT" not in trip, "no COMMIT"
    ((_, deleted),) = deletes
    assert deleted == facts


async def test_an_empty_key_costs_the_one_statement_and_one_read(
    backdoor: Backdoor, tmp_path: Path, anyio_backend: str, way: str
) -> None:
    async with _traced_store(backdoor, tmp_path, anyio_backend, way) as (store, wire):
        deletes, sent = await _erase_observed(store, backdoor, wire, 0)

    # The statement deleted nothing, so a read tells "no fact" from "more
    # than it deletes" (inside the function's call when there is one);
    # nothing else runs.
    ((_, deleted),) = deletes
    assert deleted == 0
    trips = _round_trips(sent)
    if way == "alone":
        first, second = trips
        assert "DELETE" in first
        assert "EXISTS" in second
        assert "DELETE" not in second
    else:
        (call,) = trips
        assert "erase_few" in call
    assert not any("BEGIN" in trip for trip in trips)


@pytest.mark.parametrize("facts", [FEW_FACTS + 1, 3 * FEW_FACTS + 7])
async def test_a_key_of_more_facts_is_untouched_by_the_one_statement_and_erased_in_one_transaction(
    backdoor: Backdoor, tmp_path: Path, anyio_backend: str, way: str, facts: int
) -> None:
    async with _traced_store(backdoor, tmp_path, anyio_backend, way) as (store, wire):
        (first, *batches), sent = await _erase_observed(store, backdoor, wire, facts)

    # The single statement ran in a transaction of its own and deleted
    # nothing ...
    assert first[1] == 0
    # ... then batches, all in one other transaction, took every fact.
    assert len(batches) >= 2
    assert {xact for xact, _ in batches} == {batches[0][0]} != {first[0]}
    assert sum(deleted for _, deleted in batches) == facts
    trips = _round_trips(sent)
    if way == "alone":
        assert "DELETE" in trips[0]
        assert "EXISTS" in trips[1]
        batched = trips[2:]
    else:
        assert "erase_few" in trips[0]
        batched = trips[1:]
    assert batched[0] == 'Query "BEGIN"'
    assert batched[-1] == 'Query "COMMIT"'


@pytest.mark.parametrize(
    ("kwargs", "bounded", "prepares"),
    [
        (None, False, True),
        ({"autocommit": True}, False, True),
        ({"prepare_threshold": 0}, False, True),
        ({"prepare_threshold": None}, False, False),
        ({"autocommit": True}, True, False),
    ],
)
def test_the_inline_statement_goes_where_statements_may_be_prepared(
    kwargs: dict[str, Any] | None, bounded: bool, prepares: bool
) -> None:
    # The function's call where nothing is prepared (bounds sent as SET
    # LOCAL make a simple query; a pool told never to prepare); the inline
    # DELETE elsewhere, which costs the server less once prepared.
    pool = ConnectionPool("postgresql://nobody@127.0.0.1/none", kwargs=kwargs, open=False)
    bounds: dict[str, Any] = {} if bounded else {"statement_timeout": None, "lock_timeout": None}
    store = PostgresMemory(pool, **bounds)
    assert store._runner.prepares is prepares
