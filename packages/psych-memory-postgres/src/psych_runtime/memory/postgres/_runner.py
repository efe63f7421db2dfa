"""How one call's statements reach the server: connections, retries, cancellation.

A call is a *conversation* (`Conversation`): a generator that yields each
statement with its parameters and is sent back ``(rows, rowcount)``. Written
once, it is driven by psycopg's synchronous driver (in a worker thread) or
its asynchronous one (on asyncio), and can be replayed from the start on a
fresh connection.

Rules kept here, for every call:

- A connection the server closed while it sat in the pool is found (at no
  round trip) and replaced, never failing a call it was not part of.
- No call waits unbounded: every statement runs under the store's
  ``statement_timeout`` and ``lock_timeout``. On a pool shared with other
  code, or behind a transaction pooler, each transaction gets them with
  ``SET LOCAL`` sent with its first statement (no round trip of its own),
  so the server session goes back as the store found it. A store's own
  pool that may prepare (`Runner.bound_by_session`) opened its
  connections with the bounds as their session's own settings, so its
  calls send nothing but their statements, prepared by psycopg as usual.
- A call whose connection broke, that a read-only server refused, or
  that got no connection, is replayed or given up as `_replays` decides; this module only drives the
  attempts, the same way on either driver.
- Cancellation: once a statement was sent, the call runs to its end (it is
  bounded by the timeouts) before the cancellation reaches the caller, so
  its effect is decided (done or not) when the caller's cancel scope exits.
  Before that (waiting for a connection), a cancellation ends the call
  at once and nothing happens.
"""

from __future__ import annotations

import asyncio
import selectors
import sys
import threading
import time
from collections.abc import Callable, Coroutine, Generator, Iterator, Sequence
from contextlib import AbstractContextManager, contextmanager, suppress
from typing import Any, Final, NoReturn, TypeAlias, TypeVar

import anyio
import anyio.to_thread
import psycopg
from psycopg import (
    AsyncClientCursor,
    AsyncConnection,
    AsyncCursor,
    ClientCursor,
    Connection,
    Cursor,
)
from psycopg.errors import (
    InvalidSqlStatementName,
    ReadOnlySqlTransaction,
    error_from_result,
)
from psycopg.pq import ConnStatus, ExecStatus
from psycopg.pq.abc import PGconn
from psycopg_pool import AsyncConnectionPool, ConnectionPool, PoolClosed

from ._errors import SchemaVersionError
from ._replays import (
    ATTEMPTS,
    Call,
    Conversation,
    Statement,
    drops_refusing_connection,
    failure,
    fresh_next,
    replay_settings,
    replays,
)
from ._schema import Script
from ._translate import NoServerInTime, never_reached_server

__all__ = [
    "RECONNECT_TIMEOUT",
    "LazyPool",
    "Pool",
    "Runner",
    "Served",
    "ServedAsync",
    "await_server_async",
    "await_server_sync",
    "local_bounds",
    "revive",
    "revive_async",
    "running_loop",
    "session_bounds",
    "session_options",
]

Pool: TypeAlias = "AsyncConnectionPool[Any] | ConnectionPool[Any]"
"""A psycopg pool: asynchronous (asyncio only) or synchronous (any backend)."""

_T = TypeVar("_T")


_FATAL: Final = frozenset({"FATAL", "PANIC"})

# Read from the result rather than `Cursor.description`, which builds a
# column object per column on every call.
_TUPLES_OK: Final = ExecStatus.TUPLES_OK

RECONNECT_TIMEOUT: Final = 0.5
"""Seconds a pool the store opened keeps retrying one lost connection before `revive`.

psycopg_pool retries a connection it could not make after 1, 2, 4, 8, 16
seconds (and so on, up to ``reconnect_timeout``): a server back after
20 s is found only at the retry of second 31. The store's own pools give
up each series after this long instead, and `revive` starts a new one at
once, so a server is tried again about twice a second for as long as it
is unreachable, and serves the store's calls within about that of
accepting connections.
"""


def revive(pool: ConnectionPool[Any]) -> None:
    """``reconnect_failed`` of the store's synchronous pools: try to connect again, now.

    `ConnectionPool.check` makes the pool grow back (one connection at a
    time, at once, with a new series of retries) when a series given up
    left it below its size; it looks at the pooled connections, of which
    there are none while the server cannot be reached.
    """
    if not pool.closed:
        pool.check()


async def revive_async(pool: AsyncConnectionPool[Any]) -> None:
    """`revive` for the store's asynchronous pool."""
    if not pool.closed:
        await pool.check()


class LazyPool:
    """A synchronous pool opened on first use, from any thread, at most once."""

    __slots__ = ("_closed", "_factory", "_lock", "_pool", "_timeout")

    def __init__(self, factory: Callable[[], ConnectionPool[Any]], timeout: float) -> None:
        self._factory = factory
        self._timeout = timeout
        self._lock = threading.Lock()
        self._pool: ConnectionPool[Any] | None = None
        self._closed = False

    def get(self) -> ConnectionPool[Any]:
        """The open pool; blocks while it opens (bounded by the pool timeout).

        Raises:
            psycopg.Error: The pool could not be opened in time, or is closed.
        """
        with self._lock:
            if self._closed:
                raise PoolClosed("the store's pool is closed")
            if self._pool is None:
                pool = self._factory()
                try:
                    pool.open(wait=True, timeout=self._timeout)
                except BaseException:
                    pool.close()
                    raise
                self._pool = pool
            return self._pool

    def close(self) -> None:
        """Close the pool if it was opened; later `get` calls fail."""
        with self._lock:
            self._closed = True
            if self._pool is not None:
                self._pool.close()


class Runner:
    """Runs calls on one pool, on behalf of one store."""

    __slots__ = (
        "_bounds",
        "_fallback",
        "_home",
        "_pool",
        "_schema",
        "prepares",
        "verified",
    )

    def __init__(
        self,
        pool: Pool,
        *,
        schema: str,
        statement_timeout: float | None,
        lock_timeout: float | None,
    ) -> None:
        self._pool = pool
        # An asynchronous pool the store opened itself belongs to ``home``;
        # calls from any other event loop (trio, or another thread's loop)
        # run on ``fallback``, a synchronous pool opened on first need.
        self._home: asyncio.AbstractEventLoop | None = None
        self._fallback: LazyPool | None = None
        self._schema = schema
        self._bounds = local_bounds(statement_timeout, lock_timeout)
        self.prepares = _may_prepare(pool, self._bounds)
        """Whether the server may be sent this runner's statements prepared."""
        # Set by the store once the recorded schema version was found
        # current; cleared here when the tables turn out missing. A plain
        # flag is enough: two tasks checking at once is harmless.
        self.verified = False

    def bound_by_session(self) -> None:
        """Send no bounds: the pool's connections have them as session settings.

        For a store's own pool only, whose connections serve no other code
        and were opened with the bounds as startup options (see
        `session_options`); never behind a transaction pooler, which would
        hand those sessions to other clients.
        """
        self._bounds = b""
        self.prepares = _may_prepare(self._pool, self._bounds)

    def belong_to(self, home: asyncio.AbstractEventLoop, fallback: LazyPool) -> None:
        """Serve the asynchronous pool on ``home`` only, other loops on ``fallback``."""
        self._home = home
        self._fallback = fallback

    def run(self, call: Call[_T]) -> Coroutine[Any, Any, _T]:
        """Run ``call`` to its end, or raise a store failure of the port.

        A plain function returning what the caller awaits, so that the
        common case costs no coroutine of its own: every call comes here.

        Raises:
            StoreUnavailableError: The server could not complete the call.
            SchemaVersionError: The tables are missing.
            PostgresMemoryError: The server refused the statement.
            RuntimeError: An asynchronous pool used outside asyncio (when
                awaited).
        """
        pool = self._pool
        loop = running_loop()
        if isinstance(pool, AsyncConnectionPool):
            if loop is not None and (self._home is None or loop is self._home):
                attempts = self._attempts_async(pool, call)
                if not call.changes:
                    return attempts
                return _decided(loop, attempts, call, stoppable=True)
            if self._fallback is None:
                return _refuse_trio()
            work = anyio.to_thread.run_sync(self._on_fallback, self._fallback, call)
        else:
            work = anyio.to_thread.run_sync(self._attempts_sync, pool, call)
        # A worker thread is never abandoned by an anyio (or trio) cancel
        # scope: the call's effect is decided before the caller sees the
        # cancel. A plain asyncio cancel does not wait for the thread, so on
        # asyncio the wait is made explicit.
        if loop is not None and call.changes:
            return _decided(loop, work, call, stoppable=False)
        return work

    def _on_fallback(self, fallback: LazyPool, call: Call[_T]) -> _T:
        try:
            pool = fallback.get()
        except psycopg.Error as exc:
            self._fail(call, exc, broken=False, sent=False)
        return self._attempts_sync(pool, call)

    # -- asyncio, psycopg's asynchronous pool ---------------------------------

    async def _attempts_async(self, pool: AsyncConnectionPool[Any], call: Call[_T]) -> _T:
        own = False
        for attempt in range(1, ATTEMPTS + 1):
            conn: AsyncConnection[Any] | None = None
            sent = False
            try:
                conn = await _take_async(pool, fresh=own)
                try:
                    call.sent = True
                    if call.transaction:
                        async with conn.transaction():
                            result = await _converse_async(
                                conn, call.conversation(), self._bounds, each=False
                            )
                            sent = True
                    else:
                        sent = True
                        result = await _converse_async(
                            conn,
                            call.conversation(),
                            self._bounds,
                            each=True,
                        )
                    if not conn.autocommit:
                        await conn.commit()
                except BaseException:
                    if not conn.autocommit:
                        await _roll_back_async(conn)
                    raise
                finally:
                    await _give_back_async(pool, conn, fresh=own)
            except psycopg.Error as exc:
                connected = conn is not None
                broken = conn is not None and (conn.broken or _session_ended(exc))
                sent = sent and not never_reached_server(exc)
                if not replays(
                    call, exc, connected=connected, broken=broken, sent=sent, attempt=attempt
                ):
                    self._fail(call, exc, broken=broken, sent=sent)
                # A connection opened for the attempt that the pooler
                # refused a server connection (its query_wait_timeout)
                # was opened: the next attempt opens one too.
                own = fresh_next(fresh=own, connected=connected or never_reached_server(exc))
            else:
                return result
        raise AssertionError("unreachable: the last attempt raises")  # pragma: no cover

    # -- any event loop, psycopg's synchronous pool in a worker thread -------

    def _attempts_sync(self, pool: ConnectionPool[Any], call: Call[_T]) -> _T:
        # Runs in a worker thread; ``call.sent`` and ``call.uncertain`` are
        # read only once it is done.
        own = False
        for attempt in range(1, ATTEMPTS + 1):
            used: Connection[Any] | None = None
            sent = False
            try:
                for tried in range(pool.max_size + 1):
                    with _connection_sync(pool, fresh=own) as conn:
                        if tried < pool.max_size and not _alive(conn.pgconn):
                            continue
                        used = conn
                        call.sent = True
                        sent = not call.transaction
                        if call.transaction:
                            with conn.transaction():
                                result = _converse_sync(
                                    conn, call.conversation(), self._bounds, each=False
                                )
                                sent = True
                        else:
                            result = _converse_sync(
                                conn,
                                call.conversation(),
                                self._bounds,
                                each=True,
                            )
                        return result
            except psycopg.Error as exc:
                connected = used is not None
                broken = used is not None and (used.broken or _session_ended(exc))
                sent = sent and not never_reached_server(exc)
                if not replays(
                    call, exc, connected=connected, broken=broken, sent=sent, attempt=attempt
                ):
                    self._fail(call, exc, broken=broken, sent=sent)
                # A connection opened for the attempt that the pooler
                # refused a server connection (its query_wait_timeout)
                # was opened: the next attempt opens one too.
                own = fresh_next(fresh=own, connected=connected or never_reached_server(exc))
        raise AssertionError("unreachable: the last attempt raises")  # pragma: no cover

    def _fail(self, call: Call[Any], exc: psycopg.Error, *, broken: bool, sent: bool) -> NoReturn:
        error = failure(call, exc, broken=broken, sent=sent, schema=self._schema)
        if isinstance(error, SchemaVersionError):
            # The tables went away under a running store: check again next time.
            self.verified = False
        raise error from exc


def _may_prepare(pool: Pool, bounds: bytes) -> bool:
    # Decided once per store, not per call. Statements go alone (extended
    # protocol), which psycopg prepares after ``prepare_threshold`` runs,
    # unless the pool's connection settings say never to (settings the pool
    # computes per connection are taken to prepare, psycopg's default); with
    # bounds they go as one simple query after the SET LOCAL, never prepared.
    settings = pool.kwargs
    never = isinstance(settings, dict) and settings.get("prepare_threshold", 0) is None
    return not bounds and not never


if sys.version_info >= (3, 12):

    def _start(work: Coroutine[Any, Any, _T]) -> asyncio.Task[_T]:
        # Started at once, up to its first wait for the server, instead of
        # on the loop's next turn: a turn less for every write.
        return asyncio.Task(work, loop=asyncio.get_running_loop(), eager_start=True)

else:

    def _start(work: Coroutine[Any, Any, _T]) -> asyncio.Task[_T]:
        return asyncio.ensure_future(work)


def _decided(
    loop: asyncio.AbstractEventLoop,
    work: Coroutine[Any, Any, _T],
    call: Call[_T],
    *,
    stoppable: bool,
) -> Coroutine[Any, Any, _T]:
    # ``work`` runs in a task of its own and reports to a waiter, so a
    # cancellation of the caller (an anyio scope or a plain asyncio cancel)
    # cancels only the waiter and cannot interrupt a statement in flight:
    # psycopg would then drop the connection while the server may still
    # commit, after the caller moved on. (`asyncio.shield` would do the
    # same with more objects per call, and every write comes here.)
    waiter: asyncio.Future[_T] = loop.create_future()
    return _awaited(waiter, _start(_deliver(work, waiter)), call, stoppable=stoppable)


async def _deliver(work: Coroutine[Any, Any, _T], waiter: asyncio.Future[_T]) -> None:
    # The task's whole body: its outcome goes to the waiter, and the task
    # itself ends quietly (it is looked at only when the caller was
    # cancelled, in `_settle`).
    try:
        result = await work
    except Exception as exc:  # noqa: BLE001 - handed on whole to the waiting caller
        if not waiter.done():
            waiter.set_exception(exc)
    else:
        if not waiter.done():
            waiter.set_result(result)


async def _awaited(
    waiter: asyncio.Future[_T], task: asyncio.Task[None], call: Call[_T], *, stoppable: bool
) -> _T:
    try:
        return await waiter
    except asyncio.CancelledError:
        await _settle(task, call, stoppable=stoppable)
        if not waiter.cancelled():
            # Retrieved so asyncio does not report it as never seen.
            waiter.exception()
        raise


async def _settle(task: asyncio.Task[None], call: Call[Any], *, stoppable: bool) -> None:
    # The caller was cancelled. Before anything was sent, stoppable attempts
    # are cancelled too (nothing happened); otherwise they run to their end,
    # bounded by the statement and pool timeouts, so the outcome is decided
    # before the cancellation goes on.
    if stoppable and not call.sent:
        task.cancel()
    with anyio.CancelScope(shield=True):
        while not task.done():
            try:
                await asyncio.wait((task,))
            except asyncio.CancelledError:
                # A further plain asyncio cancel: one is already on its way.
                continue
    if not task.cancelled():
        # Retrieved so asyncio does not report it as never seen.
        task.exception()


async def _refuse_trio() -> Any:
    raise RuntimeError(
        "an AsyncConnectionPool runs only on asyncio (psycopg's asynchronous "
        "API); on trio give PostgresMemory a psycopg_pool.ConnectionPool"
    )


async def _take_async(pool: AsyncConnectionPool[Any], *, fresh: bool) -> AsyncConnection[Any]:
    # A live connection of the pool, or one opened for a replay (see
    # `replay_settings`). The pool's `getconn` and `putconn` rather than its
    # context manager, whose generator and no-op commit in autocommit every
    # call would pay; `_give_back_async` is the other half.
    settings = replay_settings(pool.conninfo, pool.kwargs, fresh=fresh)
    if settings is not None:
        opened = await AsyncConnection.connect(settings[0], **settings[1])
        await await_server_async(opened, pool.timeout)
        return opened
    conn: AsyncConnection[Any]
    for _ in range(pool.max_size):
        conn = await pool.getconn()
        if _alive(conn.pgconn):
            return conn
        # Given back, the pool sees it is closed and replaces it.
        await pool.putconn(conn)
    conn = await pool.getconn()
    return conn


async def _roll_back_async(conn: AsyncConnection[Any]) -> None:
    # A connection of an application's pool may be outside autocommit: the
    # call's transaction ends with the call, as psycopg's own context
    # manager would end it. A connection that cannot roll back is left to
    # the pool, which discards it; the call's own error goes on.
    if not conn.closed:
        with suppress(psycopg.Error):
            await conn.rollback()


async def _give_back_async(
    pool: AsyncConnectionPool[Any], conn: AsyncConnection[Any], *, fresh: bool
) -> None:
    if fresh:
        await conn.close()
    else:
        await pool.putconn(conn)


def _connection_sync(
    pool: ConnectionPool[Any], *, fresh: bool
) -> AbstractContextManager[Connection[Any]]:
    settings = replay_settings(pool.conninfo, pool.kwargs, fresh=fresh)
    if settings is None:
        return pool.connection()
    return _fresh_sync(*settings, pool.timeout)


@contextmanager
def _fresh_sync(conninfo: str, kwargs: dict[str, Any], wait: float) -> Iterator[Connection[Any]]:
    fresh = Connection.connect(conninfo, **kwargs)
    await_server_sync(fresh, wait)
    with fresh:
        yield fresh


# -- a server behind the connection, within a bound -------------------------


def await_server_sync(
    conn: Connection[Any], wait: float, pool: ConnectionPool[Any] | None = None
) -> None:
    """Return once ``conn`` is served by a server, within ``wait`` seconds; else close it.

    An empty query, which a server answers at once at no cost: a pooler in
    front of it answers only once it lends the connection a server
    connection, which in session mode may never come (see
    `NoServerInTime`). The store's own pools run it on each connection
    they open (`Served`), and a call on each connection opened for it: one
    round trip a connection, none a call. The wait also ends when ``pool``
    closes.

    Raises:
        NoServerInTime: No answer within ``wait`` seconds.
        psycopg.Error: The connection failed, or the pooler refused.
    """
    deadline = time.monotonic() + wait
    try:
        with selectors.DefaultSelector() as selector:
            for event in _empty_query(conn.pgconn):
                socket = conn.pgconn.socket
                selector.register(socket, event)
                while not selector.select(min(_GLANCE, deadline - time.monotonic())):
                    _waited(wait, time.monotonic() >= deadline, pool)
                selector.unregister(socket)
    except BaseException:
        conn.close()
        raise


async def await_server_async(
    conn: AsyncConnection[Any], wait: float, pool: AsyncConnectionPool[Any] | None = None
) -> None:
    """`await_server_sync` on asyncio."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + wait
    try:
        for event in _empty_query(conn.pgconn):
            while not await _ready(
                loop, conn.pgconn.socket, event, min(_GLANCE, deadline - loop.time())
            ):
                _waited(wait, loop.time() >= deadline, pool)
    except BaseException:
        await conn.close()
        raise


# How often a connection waiting for a server looks whether its pool closed.
_GLANCE: Final = 0.25


class Served:
    """``configure`` of the store's own synchronous pools: see `await_server_sync`.

    The wait for a server ends when the pool closes, so closing never
    waits for it.
    """

    __slots__ = ("pool", "wait")

    def __init__(self, wait: float) -> None:
        self.wait = wait
        self.pool: ConnectionPool[Any] | None = None

    def __call__(self, conn: Connection[Any]) -> None:
        await_server_sync(conn, self.wait, self.pool)


class ServedAsync:
    """`Served` for the store's asynchronous pool."""

    __slots__ = ("pool", "wait")

    def __init__(self, wait: float) -> None:
        self.wait = wait
        self.pool: AsyncConnectionPool[Any] | None = None

    async def __call__(self, conn: AsyncConnection[Any]) -> None:
        await await_server_async(conn, self.wait, self.pool)


def _waited(wait: float, past: bool, pool: Pool | None) -> None:  # noqa: FBT001 - internal
    # Raises once the wait for a server is over: its bound passed, or the
    # pool the connection was to join closed.
    if pool is not None and pool.closed:
        raise PoolClosed("the pool closed while its new connection waited for a server")
    if past:
        raise NoServerInTime(
            f"no answer from the server within {wait:g} s: a connection pooler in front "
            "of it lent no server connection"
        )


def _empty_query(pgconn: PGconn) -> Generator[int, None, None]:
    # Sends the empty query and reads its answer, yielding the event
    # (selectors' EVENT_READ or EVENT_WRITE) to wait for whenever libpq
    # must. A pooler's refusal is raised as psycopg's error.
    pgconn.send_query(b"")
    while pgconn.flush():
        yield selectors.EVENT_WRITE
    while True:
        pgconn.consume_input()
        if not pgconn.is_busy():
            break
        yield selectors.EVENT_READ
    refused = None
    while (result := pgconn.get_result()) is not None:
        if result.status == ExecStatus.FATAL_ERROR and refused is None:
            refused = result
    if refused is not None:
        raise error_from_result(refused)


async def _ready(loop: asyncio.AbstractEventLoop, socket: int, event: int, wait: float) -> bool:
    ready: asyncio.Future[None] = loop.create_future()

    def wake() -> None:
        if not ready.done():
            ready.set_result(None)

    reading = event == selectors.EVENT_READ
    (loop.add_reader if reading else loop.add_writer)(socket, wake)
    try:
        done, _ = await asyncio.wait((ready,), timeout=wait)
    finally:
        (loop.remove_reader if reading else loop.remove_writer)(socket)
        ready.cancel()
    return bool(done)


async def _converse_async(
    conn: AsyncConnection[Any],
    conversation: Conversation[_T],
    bounds: bytes,
    *,
    each: bool,
) -> _T:
    # ``bounds`` go with the first statement, or with each (in autocommit,
    # where every statement is a transaction of its own).
    statement = next(conversation)
    while True:
        try:
            cursor = await _execute_async(conn, statement, bounds)
        except (ReadOnlySqlTransaction, InvalidSqlStatementName):
            if drops_refusing_connection(conn.info.transaction_status):
                await conn.close()
            raise
        if not each:
            bounds = b""
        answer = cursor.pgresult
        rows = await cursor.fetchall() if answer is not None and answer.status == _TUPLES_OK else []
        try:
            statement = conversation.send((rows, cursor.rowcount))
        except StopIteration as done:
            result: _T = done.value
            return result


async def _execute_async(
    conn: AsyncConnection[Any], statement: Statement, bounds: bytes
) -> AsyncCursor[Any]:
    # Runs the statement, after its bounds if any, in one round trip; the
    # cursor returned holds the statement's result. See `_bounded`. A
    # `Script` always goes as one simple query, bounds or not.
    if not bounds and type(statement[0]) is not Script:
        # A cursor per statement, made only here: most calls never need one.
        cursor = conn.cursor()
        await cursor.execute(statement[0], statement[1])
        return cursor
    client = AsyncClientCursor(conn)
    await client.execute(*_bounded(bounds, statement, conn))
    return _last_result(client)


def _converse_sync(
    conn: Connection[Any],
    conversation: Conversation[_T],
    bounds: bytes,
    *,
    each: bool,
) -> _T:
    statement = next(conversation)
    while True:
        try:
            cursor = _execute_sync(conn, statement, bounds)
        except (ReadOnlySqlTransaction, InvalidSqlStatementName):
            if drops_refusing_connection(conn.info.transaction_status):
                conn.close()
            raise
        if not each:
            bounds = b""
        answer = cursor.pgresult
        rows = cursor.fetchall() if answer is not None and answer.status == _TUPLES_OK else []
        try:
            statement = conversation.send((rows, cursor.rowcount))
        except StopIteration as done:
            result: _T = done.value
            return result


def _execute_sync(conn: Connection[Any], statement: Statement, bounds: bytes) -> Cursor[Any]:
    if not bounds and type(statement[0]) is not Script:
        cursor = conn.cursor()
        cursor.execute(statement[0], statement[1])
        return cursor
    client = ClientCursor(conn)
    client.execute(*_bounded(bounds, statement, conn))
    return _last_result(client)


_C = TypeVar("_C", AsyncClientCursor[Any], ClientCursor[Any])


def _last_result(client: _C) -> _C:
    # The statement's result is the query's last, after the bounds (and,
    # for a `Script`, after its own statements before the last).
    while client.nextset():
        pass
    return client


def _bounded(
    bounds: bytes, statement: Statement, conn: AsyncConnection[Any] | Connection[Any]
) -> tuple[bytes, Sequence[object]]:
    # Both statements must be one transaction, which the bounds last, and
    # cost one round trip: one query of the simple protocol, values bound
    # by the client. Not a pipeline: a pipeline loses the message a pooler
    # sends as it closes the connection (such as PgBouncer's
    # query_wait_timeout, which says the statement reached no server), and
    # a call cancelled inside one leaves psycopg's pipeline to fail later,
    # on a connection already discarded.
    text, params = statement
    if not isinstance(text, bytes):
        text = text.as_bytes(conn)
    return bounds + text, params


def _session_ended(exc: BaseException) -> bool:
    # A FATAL (or PANIC) error from the server ends its session: the
    # connection is gone even if libpq has not read the end of the stream
    # yet. In a pipeline psycopg then reports its own failure to leave
    # pipeline mode, with the server's error as its context.
    seen: BaseException | None = exc
    for _ in range(3):
        if seen is None:
            break
        if isinstance(seen, psycopg.Error) and seen.diag.severity_nonlocalized in _FATAL:
            return True
        seen = seen.__cause__ or seen.__context__
    return False


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


def local_bounds(statement_timeout: float | None, lock_timeout: float | None) -> bytes:
    """``SET LOCAL`` statements that bound one transaction, ending in ``"; "``; empty for none.

    They last until the transaction ends, so the server session keeps none
    of them; as utility statements they are neither planned nor answered
    with rows. A bound given as ``None`` is left as the session has it.
    """
    named = (("statement_timeout", statement_timeout), ("lock_timeout", lock_timeout))
    return b"".join(
        f"SET LOCAL {name} = '{max(1, round(seconds * 1000))}ms'; ".encode("ascii")
        for name, seconds in named
        if seconds is not None
    )


def session_bounds(statement_timeout: float | None, lock_timeout: float | None) -> dict[str, int]:
    """The bounds a session of the store's own pool is opened with, in milliseconds."""
    named = (("statement_timeout", statement_timeout), ("lock_timeout", lock_timeout))
    return {name: max(1, round(seconds * 1000)) for name, seconds in named if seconds is not None}


def session_options(given: str | None, bounds: dict[str, int]) -> str | None:
    """Libpq's ``options`` that open a session with ``bounds`` as its own settings.

    ``given`` (the connection string's ``options``, or ``PGOPTIONS``) comes
    first and is kept; the bounds follow, so they are the ones the session
    has. ``None`` when there is nothing to pass.
    """
    words = [given.strip()] if given and given.strip() else []
    words += [f"-c {name}={milliseconds}ms" for name, milliseconds in bounds.items()]
    return " ".join(words) or None


def running_loop() -> asyncio.AbstractEventLoop | None:
    """The running asyncio event loop, or ``None`` (no loop, or trio)."""
    try:
        return asyncio.get_running_loop()
    except RuntimeError:
        return None
