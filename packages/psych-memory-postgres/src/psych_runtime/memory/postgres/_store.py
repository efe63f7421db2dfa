"""The PostgreSQL adapter: facts in one table, one statement per operation."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Iterator, Sequence
from contextlib import asynccontextmanager, contextmanager
from datetime import UTC, datetime
from functools import partial
from typing import Any, Final, TypeAlias, TypeVar
from uuid import UUID

import anyio.to_thread
import psycopg
from psycopg import AsyncConnection, Connection
from psycopg.pq import ConnStatus
from psycopg.pq.abc import PGconn
from psycopg_pool import AsyncConnectionPool, ConnectionPool

from psych_runtime.memory.port import (
    Memory,
    MemoryKey,
    MemoryStore,
    Scope,
    memory_key,
    validate_content,
    validate_limit,
    validate_memory_id,
)

from ._errors import SchemaVersionError, StoreUnavailableError
from ._schema import (
    DEFAULT_SCHEMA,
    SCHEMA_VERSION,
    Statements,
    setup_steps,
    validate_schema_name,
)

__all__ = ["Pool", "PostgresMemory"]

Pool: TypeAlias = "AsyncConnectionPool[Any] | ConnectionPool[Any]"
"""A psycopg pool: asynchronous (asyncio only) or synchronous (any backend)."""

_Rows: TypeAlias = list[tuple[Any, ...]]
_T = TypeVar("_T")

# LIMIT takes a bigint; a larger limit means "all of them" anyway.
_MAX_LIMIT: Final = 2**63 - 1


class PostgresMemory(MemoryStore):
    """Facts about end users in a PostgreSQL table, shared by every machine.

    Build it around a psycopg pool the application owns
    (``PostgresMemory(pool)``), or let it open and close a pool of its own
    with `PostgresMemory.connect`. Call `setup` once per deployment (it is
    idempotent) to create or upgrade the tables in ``schema``.

    Each operation is exactly one SQL statement, so it is atomic and no other
    connection ever sees part of it. Order comes from an insertion sequence,
    ids are random UUIDs, and ``forget`` and ``erase`` are plain ``DELETE``
    statements whose condition includes the key. The first operation of a
    store checks that the schema is at the version this code knows.

    Before a statement runs on a pooled connection, whatever the server sent
    that connection while it sat idle is read, at no round trip. A connection
    the server closed meanwhile (a restart, ``pg_terminate_backend``) is
    thereby found broken and replaced, instead of failing a call it was not
    part of.

    How the statements run depends on the pool:

    - A `psycopg_pool.ConnectionPool` (what `connect` opens) is driven from
      worker threads (`anyio.to_thread.run_sync`): it works on asyncio and
      on trio, and from any thread and event loop.
    - A `psycopg_pool.AsyncConnectionPool` is used directly, with no thread
      hop. psycopg's asynchronous API runs only on asyncio, so on trio such
      a store raises `RuntimeError`; and like the pool, the store then
      belongs to the event loop that opened the pool.

    Args:
        pool: The pool the statements run on. The store never opens or closes
            it. Connections in autocommit mode save two round trips per call
            (``kwargs={"autocommit": True}``); otherwise each statement is
            committed on its own.
        schema: The PostgreSQL schema holding the tables. Stores with
            different schemas are fully separate.

    Raises:
        TypeError: ``pool`` is not a psycopg pool, or ``schema`` not a `str`.
        ValueError: ``schema`` is not a usable schema name.
    """

    __slots__ = ("_pool", "_schema", "_sql", "_verified")

    def __init__(self, pool: Pool, *, schema: str = DEFAULT_SCHEMA) -> None:
        if not isinstance(pool, AsyncConnectionPool | ConnectionPool):
            raise TypeError(
                "pool must be a psycopg_pool.AsyncConnectionPool or ConnectionPool, "
                f"not {type(pool).__qualname__}"
            )
        self._schema = validate_schema_name(schema)
        self._pool: Pool = pool
        self._sql = Statements.for_schema(self._schema)
        # Set once the recorded schema version was found current. A plain
        # flag is enough: two tasks checking at once is harmless.
        self._verified = False

    @classmethod
    @asynccontextmanager
    async def connect(
        cls,
        conninfo: str,
        *,
        schema: str = DEFAULT_SCHEMA,
        min_size: int = 1,
        max_size: int = 10,
        pool_timeout: float = 30.0,
    ) -> AsyncIterator[PostgresMemory]:
        """Open a store with a pool of its own, and close the pool on exit.

        The pool is psycopg's synchronous pool, its connections in autocommit
        mode with the session time zone set to UTC, driven from worker
        threads. That one way serves asyncio and trio alike, and any number
        of threads each running its own event loop. On asyncio the thread hop
        costs some throughput beside psycopg's asynchronous pool (the
        documentation has the figures); an asyncio application that wants it
        back passes a `psycopg_pool.AsyncConnectionPool` to the constructor
        instead.

        Args:
            conninfo: A libpq connection string or URI, such as
                ``"postgresql://app@db.internal/app"``.
            schema: The PostgreSQL schema holding the tables.
            min_size: Connections kept open even when idle.
            max_size: The most connections open at once.
            pool_timeout: Seconds to wait for the first connections, and for a
                free connection in each call, before failing.

        Yields:
            The store. Run `setup` once per schema before using it.

        Raises:
            TypeError: ``schema`` is not a `str`.
            ValueError: ``schema`` is not a usable schema name.
            StoreUnavailableError: No connection could be opened in time.
        """
        schema = validate_schema_name(schema)
        options: dict[str, Any] = {
            "kwargs": {"autocommit": True},
            "min_size": min_size,
            "max_size": max_size,
            "timeout": pool_timeout,
            "open": False,
            "name": f"psych-memory:{schema}",
            "configure": _session_in_utc,
        }
        pool = ConnectionPool(conninfo, **options)
        try:
            await _translate(
                "connect",
                anyio.to_thread.run_sync(partial(pool.open, wait=True, timeout=pool_timeout)),
            )
            yield cls(pool, schema=schema)
        finally:
            await anyio.to_thread.run_sync(pool.close)

    @property
    def schema(self) -> str:
        """The PostgreSQL schema holding this store's tables."""
        return self._schema

    @property
    def pool(self) -> Pool:
        """The psycopg pool the store runs its statements on."""
        return self._pool

    def __repr__(self) -> str:
        # The pool's connection string may hold a password: never shown.
        return f"PostgresMemory(schema={self._schema!r})"

    async def setup(self) -> None:
        """Create or upgrade this store's tables; safe to call any number of times.

        Runs in one transaction under an advisory lock, so that several
        processes starting at once take turns and none sees a half-built
        schema. Creates the schema if it does not exist, applies every
        migration the recorded version lacks, and records the new version.

        Raises:
            SchemaVersionError: The schema is at a newer version than this
                code knows. Nothing was changed.
            PostgresMemoryError: The database does not store text as UTF-8,
                so facts could not be kept exactly as given.
            StoreUnavailableError: The server could not complete the setup.
            psycopg.Error: The role lacks a privilege the setup needs, such
                as creating the schema (see the documentation).
        """
        pool = self._pool
        if isinstance(pool, AsyncConnectionPool):
            _require_asyncio()
            await _translate("setup", _setup_async(pool, self._schema))
        else:
            await _translate(
                "setup", anyio.to_thread.run_sync(partial(_setup_sync, pool, self._schema))
            )
        self._verified = True

    async def remember(self, scope: Scope, end_user_id: str, content: str) -> Memory:
        """Store a new fact with one ``INSERT``; see `MemoryStore.remember`.

        If the connection breaks during the call, the fact was stored whole or
        not at all; `recall` tells which.

        Raises:
            TypeError: An argument has the wrong type.
            InvalidKeyError: The tenant or end-user id breaks a key rule.
            InvalidContentError: The content breaks a content rule.
            SchemaVersionError: The first call of this store found the
                schema missing, older or newer than this code.
            StoreUnavailableError: The server could not complete the call;
                nothing was half-written.
        """
        key = memory_key(scope, end_user_id)
        content = validate_content(content)
        rows, _ = await self._run(
            "remember", self._sql.remember, (key.tenant, key.end_user_id, content)
        )
        memory_id, created_at = rows[0]
        return Memory(memory_id, key, content, _utc(created_at))

    async def forget(self, scope: Scope, end_user_id: str, memory_id: str) -> bool:
        """Delete one fact with one ``DELETE`` keyed on it; see `MemoryStore.forget`.

        An id that is not this store's exact spelling of a UUID answers
        ``False`` without a statement.

        Raises:
            TypeError: An argument has the wrong type.
            InvalidKeyError: The tenant or end-user id breaks a key rule.
            SchemaVersionError: The first call of this store found the
                schema missing, older or newer than this code.
            StoreUnavailableError: The server could not complete the call;
                nothing was half-written.
        """
        key = memory_key(scope, end_user_id)
        memory_id = validate_memory_id(memory_id)
        uuid = _parse_id(memory_id)
        if uuid is None:
            # Not a spelling this store ever hands out, so no row has it.
            return False
        _, deleted = await self._run(
            "forget", self._sql.forget, (key.tenant, key.end_user_id, uuid)
        )
        return deleted == 1

    async def recall(
        self, scope: Scope, end_user_id: str, *, limit: int | None = None
    ) -> tuple[Memory, ...]:
        """Read the key's facts in sequence order with one ``SELECT``; see `MemoryStore.recall`.

        Raises:
            TypeError: An argument has the wrong type.
            InvalidKeyError: The tenant or end-user id breaks a key rule.
            InvalidLimitError: ``limit`` is negative.
            SchemaVersionError: The first call of this store found the
                schema missing, older or newer than this code.
            StoreUnavailableError: The server could not complete the call;
                nothing was half-written.
        """
        key = memory_key(scope, end_user_id)
        limit = validate_limit(limit)
        rows, _ = await self._run(
            "recall",
            self._sql.recall,
            (key.tenant, key.end_user_id, None if limit is None else min(limit, _MAX_LIMIT)),
        )
        return tuple([_memory(key, row) for row in rows])

    async def erase(self, scope: Scope, end_user_id: str) -> int:
        """Delete every fact of the key with one ``DELETE``; see `MemoryStore.erase`.

        Raises:
            TypeError: An argument has the wrong type.
            InvalidKeyError: The tenant or end-user id breaks a key rule.
            SchemaVersionError: The first call of this store found the
                schema missing, older or newer than this code.
            StoreUnavailableError: The server could not complete the call;
                nothing was half-written.
        """
        key = memory_key(scope, end_user_id)
        _, deleted = await self._run("erase", self._sql.erase, (key.tenant, key.end_user_id))
        return deleted

    async def _run(
        self, operation: str, query: bytes, params: Sequence[object]
    ) -> tuple[_Rows, int]:
        if not self._verified:
            await self._verify(operation)
        return await self._execute(operation, query, params)

    async def _execute(
        self, operation: str, query: bytes, params: Sequence[object]
    ) -> tuple[_Rows, int]:
        pool = self._pool
        try:
            if isinstance(pool, AsyncConnectionPool):
                _require_asyncio()
                return await _execute_async(pool, query, params)
            return await anyio.to_thread.run_sync(_execute_sync, pool, query, params)
        except psycopg.OperationalError as exc:
            raise _unavailable(operation, exc) from exc

    async def _verify(self, operation: str) -> None:
        # Code older than the database must fail clearly rather than misread
        # or damage a layout it does not know.
        try:
            rows, _ = await self._execute(operation, self._sql.version, ())
        except psycopg.errors.UndefinedTable:
            raise SchemaVersionError(self._schema, None, SCHEMA_VERSION) from None
        found = int(rows[0][0]) if rows else None
        if found != SCHEMA_VERSION:
            raise SchemaVersionError(self._schema, found, SCHEMA_VERSION)
        self._verified = True


# A connection the server closed while it sat in the pool is handed back
# (the pool replaces it) and the next one is tried, up to the pool's size.
# One more is then used whatever its state, so the call fails rather than
# spins. The statement runners repeat this loop instead of sharing the
# context managers below, which cost a few microseconds on every call.


@asynccontextmanager
async def _connection_async(pool: AsyncConnectionPool[Any]) -> AsyncIterator[Any]:
    for _ in range(pool.max_size):
        async with pool.connection() as conn:
            if _alive(conn.pgconn):
                yield conn
                return
    async with pool.connection() as conn:
        yield conn


@contextmanager
def _connection_sync(pool: ConnectionPool[Any]) -> Iterator[Any]:
    for _ in range(pool.max_size):
        with pool.connection() as conn:
            if _alive(conn.pgconn):
                yield conn
                return
    with pool.connection() as conn:
        yield conn


async def _execute_async(
    pool: AsyncConnectionPool[Any], query: bytes, params: Sequence[object]
) -> tuple[_Rows, int]:
    for _ in range(pool.max_size):
        async with pool.connection() as conn:
            if _alive(conn.pgconn):
                return await _statement_async(conn, query, params)
    async with pool.connection() as conn:
        return await _statement_async(conn, query, params)


async def _statement_async(
    conn: AsyncConnection[Any], query: bytes, params: Sequence[object]
) -> tuple[_Rows, int]:
    async with conn.cursor() as cursor:
        await cursor.execute(query, params)
        rows = await cursor.fetchall() if cursor.description is not None else []
        return rows, cursor.rowcount


def _execute_sync(
    pool: ConnectionPool[Any], query: bytes, params: Sequence[object]
) -> tuple[_Rows, int]:
    for _ in range(pool.max_size):
        with pool.connection() as conn:
            if _alive(conn.pgconn):
                return _statement_sync(conn, query, params)
    with pool.connection() as conn:
        return _statement_sync(conn, query, params)


def _statement_sync(
    conn: Connection[Any], query: bytes, params: Sequence[object]
) -> tuple[_Rows, int]:
    with conn.cursor() as cursor:
        cursor.execute(query, params)
        rows = cursor.fetchall() if cursor.description is not None else []
        return rows, cursor.rowcount


def _alive(pgconn: PGconn) -> bool:
    # A server that shut down or terminated the backend has already written
    # to the idle connection's socket: an error, then end of file. The first
    # read takes the error in, the second meets the end of file. A healthy
    # idle connection has nothing to read, so this costs no round trip, and
    # a connection the server dropped never fails a call it was not part of.
    try:
        pgconn.consume_input()
        pgconn.consume_input()
    except psycopg.OperationalError:
        return False
    return pgconn.status == ConnStatus.OK


async def _setup_async(pool: AsyncConnectionPool[Any], schema: str) -> None:
    async with _connection_async(pool) as conn, conn.transaction(), conn.cursor() as cursor:
        steps = setup_steps(schema)
        step = next(steps)
        while True:
            await cursor.execute(*step)
            rows = await cursor.fetchall() if cursor.description is not None else []
            try:
                step = steps.send(rows)
            except StopIteration:
                return


def _setup_sync(pool: ConnectionPool[Any], schema: str) -> None:
    with _connection_sync(pool) as conn, conn.transaction(), conn.cursor() as cursor:
        steps = setup_steps(schema)
        step = next(steps)
        while True:
            cursor.execute(*step)
            rows = cursor.fetchall() if cursor.description is not None else []
            try:
                step = steps.send(rows)
            except StopIteration:
                return


async def _translate(operation: str, call: Awaitable[_T]) -> _T:
    try:
        return await call
    except psycopg.OperationalError as exc:
        raise _unavailable(operation, exc) from exc


def _unavailable(operation: str, exc: psycopg.OperationalError) -> StoreUnavailableError:
    # The class and SQLSTATE say what happened; the server's own text is left
    # to __cause__, as some messages can quote values.
    state = f", SQLSTATE {exc.sqlstate}" if exc.sqlstate else ""
    return StoreUnavailableError(
        operation,
        "the PostgreSQL server could not be reached or the connection broke "
        f"({type(exc).__name__}{state})",
    )


def _on_asyncio() -> bool:
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return False
    return True


def _require_asyncio() -> None:
    if not _on_asyncio():
        raise RuntimeError(
            "an AsyncConnectionPool runs only on asyncio (psycopg's asynchronous API); "
            "on trio give PostgresMemory a psycopg_pool.ConnectionPool"
        )


def _parse_id(memory_id: str) -> UUID | None:
    try:
        uuid = UUID(memory_id)
    except ValueError:
        return None
    # UUID() also reads braces, URNs and capitals; only the exact spelling
    # this store hands out names a fact.
    return uuid if str(uuid) == memory_id else None


def _memory(key: MemoryKey, row: tuple[Any, ...]) -> Memory:
    memory_id, content, created_at = row
    return Memory(memory_id, key, content, _utc(created_at))


def _utc(moment: datetime) -> datetime:
    # psycopg reads timestamps in the session's time zone; in a UTC session
    # they already carry datetime.UTC and need no conversion.
    return moment if moment.tzinfo is UTC else moment.astimezone(UTC)


def _session_in_utc(conn: Connection[Any]) -> None:
    conn.execute("SET TimeZone TO 'UTC'")
