"""The PostgreSQL adapter: facts in one table, one statement per operation."""

from __future__ import annotations

import math
import os
from collections.abc import AsyncIterator, Coroutine, Iterable
from contextlib import asynccontextmanager
from datetime import datetime
from functools import partial
from typing import Any, Final, Self, TypeVar

import anyio.to_thread
import psycopg
from psycopg import AsyncConnection, Connection
from psycopg.conninfo import conninfo_to_dict
from psycopg_pool import AsyncConnectionPool, ConnectionPool

from psych_runtime.memory.port import (
    InvalidInputError,
    Memory,
    MemoryStore,
    RestorePlan,
    Scope,
    StalePageError,
    StoreClosedError,
    bounded_limit,
    memory_key,
    new_memory_id,
    validate_content,
    validate_cutoff,
    validate_limit,
    validate_max_facts,
    validate_memory_id,
    validate_page,
    validate_restored,
    validate_restored_id,
    validate_restored_many,
    validate_scope,
    validate_seconds,
)

from . import _conversations as conversations
from ._durability import DeletionDurability, deletion_durability
from ._errors import (
    ConnectionRefusedByServerError,
    PostgresMemoryError,
    SchemaVersionError,
    StoreUnavailableError,
)
from ._replays import Call, Conversation
from ._runner import (
    RECONNECT_TIMEOUT,
    LazyPool,
    Pool,
    Runner,
    Served,
    ServedAsync,
    await_server_async,
    await_server_sync,
    revive,
    revive_async,
    running_loop,
    session_bounds,
    session_options,
)
from ._schema import (
    DEFAULT_SCHEMA,
    SCHEMA_VERSION,
    Statements,
    setup_steps,
    validate_schema_name,
)

__all__ = [
    "DEFAULT_LOCK_TIMEOUT",
    "DEFAULT_POOL_TIMEOUT",
    "DEFAULT_PREPARE_THRESHOLD",
    "DEFAULT_STATEMENT_TIMEOUT",
    "Pool",
    "PostgresMemory",
    "validate_prepare_threshold",
]

_T = TypeVar("_T")

DEFAULT_STATEMENT_TIMEOUT: Final = 5.0
"""Seconds one statement of a call may run before the server cancels it."""

DEFAULT_LOCK_TIMEOUT: Final = 2.0
"""Seconds one statement may wait for a lock before the server gives up."""

DEFAULT_POOL_TIMEOUT: Final = 30.0
"""Seconds `PostgresMemory.connect` waits for a free connection."""

DEFAULT_PREPARE_THRESHOLD: Final = 5
"""psycopg's own default: a statement run this often on a connection is prepared."""

# Words of libpq or the server for a refusal that may pass by itself: the
# pool keeps trying these until its timeout, as for a server not reachable.
_PASSING_REFUSALS: Final = (
    "starting up",
    "shutting down",
    "recovery",
    "too many",
    "connection slots",
)


class PostgresMemory(MemoryStore):
    """Facts about end users in a PostgreSQL table, shared by every machine.

    Build it around a psycopg pool the application owns
    (``PostgresMemory(pool)``), or let it open and close a pool of its own
    with `PostgresMemory.connect` (or `open_url`). Call `setup` once per
    deployment (it writes nothing when the schema is current) to create or
    upgrade the tables in ``schema``.

    Each operation is one SQL statement (``remember`` adds a second one only
    when it replays; ``remember_within_limit`` is a few in one query, one
    implicit transaction), so it is atomic and no other connection ever
    sees part of it; ``erase`` is one statement too for an end user of at most a
    thousand facts, and for a bigger one a series of short ``DELETE``
    statements in one transaction, which is just as atomic and never meets
    ``statement_timeout`` however many facts the end user holds. Order comes
    from an insertion sequence, ids are 128 random bits chosen before the
    insert, and ``forget`` and ``erase`` delete with a condition that
    includes the key. The first operation of a store checks that the schema
    is at the version this code knows; nothing but `setup` ever creates or
    changes the schema or its tables.

    Beyond the port it provides ``ListsEndUsers``, ``CountsFacts``,
    ``RestoresFacts``, ``PagesFacts``, ``ExpiresFacts`` and
    ``RemembersWithinLimit`` (its count and insert under a lock of the key,
    in one round trip).

    Failures are the port's: `StoreUnavailableError` (with a truthful
    ``may_have_taken_effect``), `SchemaVersionError`, ``StoreClosedError``,
    and `PostgresMemoryError` for a statement the server refused. A psycopg
    exception never escapes bare; it is the ``__cause__``.

    Time bounds: every statement of the store runs under
    ``statement_timeout`` and ``lock_timeout``. On a pool given to the
    store, and on a store's own pool that never prepares (behind a
    transaction pooler), each transaction gets them with ``SET LOCAL``,
    sent with its first statement in the same round trip, so no server
    session keeps a setting of the store once a call is done: the session
    goes back to the pool or the pooler as the store found it. A store's
    own pool that may prepare serves this store alone: its connections are
    opened with the bounds as their session's settings (see `connect`),
    and a call sends nothing but its statement. Waiting for a connection
    is bounded by the pool's own timeout. A call exceeding a bound raises
    `StoreUnavailableError` with ``may_have_taken_effect=False``:
    PostgreSQL rolled the statement back.

    Connection faults: a connection the server closed while idle in the pool
    is replaced before use. A call whose connection breaks in flight is
    replayed on a fresh connection when the replay cannot change its answer
    (``remember``, ``recall``, the capabilities, and the transaction of a
    big ``erase`` until its ``COMMIT`` was sent); ``forget``, ``erase``
    broken during its single statement, and ``erase`` broken during its
    ``COMMIT``, then raise `StoreUnavailableError` with
    ``may_have_taken_effect=True``. A call a read-only server refused (a
    standby, or an old primary fenced during a failover) changed nothing
    and is replayed whatever it is; with a connection string that lists
    every server and asks for ``target_session_attrs=read-write``, the
    replay and the pool's new connections reach the new primary.

    Cancellation: a call that was cancelled after its statement was sent
    finishes that statement first (bounded by the timeouts), so its effect
    is decided before the cancellation reaches the caller; a call cancelled
    while waiting for a connection ends at once and changes nothing. A call
    that only reads is interrupted wherever it is.

    How the statements run depends on the pool:

    - A `psycopg_pool.ConnectionPool` is driven from worker threads
      (`anyio.to_thread.run_sync`): it works on asyncio and on trio, and
      from any thread and event loop.
    - A `psycopg_pool.AsyncConnectionPool` is used directly, with no thread
      hop. psycopg's asynchronous API runs only on asyncio, so on trio such
      a store raises `RuntimeError`; and like the pool, the store then
      belongs to the event loop that opened the pool.
    - `connect` on asyncio combines both: see there.

    The store is open from construction. ``async with store:`` and `aclose`
    close it (calls then raise ``StoreClosedError``) but never close a pool
    the application passed in.

    Args:
        pool: The pool the statements run on. Connections in autocommit mode
            save two round trips per call (``kwargs={"autocommit": True}``);
            otherwise each call is committed on its own. Behind a pooler in
            transaction mode, add ``"prepare_threshold": None``.
        schema: The PostgreSQL schema holding the tables. Stores with
            different schemas are fully separate.
        statement_timeout: Seconds one statement may run; ``None`` leaves
            the connections' own setting.
        lock_timeout: Seconds one statement may wait for a lock; ``None``
            leaves the connections' own setting.

    Raises:
        TypeError: ``pool`` is not a psycopg pool, or ``schema`` not a `str`,
            or a timeout not a number.
        ValueError: ``schema`` is not a usable schema name, or a timeout is
            not positive.
    """

    __slots__ = ("_closed", "_pool", "_runner", "_schema", "_sql", "_statement_timeout")

    def __init__(
        self,
        pool: Pool,
        *,
        schema: str = DEFAULT_SCHEMA,
        statement_timeout: float | None = DEFAULT_STATEMENT_TIMEOUT,
        lock_timeout: float | None = DEFAULT_LOCK_TIMEOUT,
    ) -> None:
        if not isinstance(pool, AsyncConnectionPool | ConnectionPool):
            raise TypeError(
                "pool must be a psycopg_pool.AsyncConnectionPool or ConnectionPool, "
                f"not {type(pool).__qualname__}"
            )
        self._schema = validate_schema_name(schema)
        self._pool: Pool = pool
        self._sql = Statements.for_schema(self._schema)
        self._statement_timeout = _seconds(statement_timeout, "statement_timeout")
        self._runner = Runner(
            pool,
            schema=self._schema,
            statement_timeout=self._statement_timeout,
            lock_timeout=_seconds(lock_timeout, "lock_timeout"),
        )
        self._closed = False

    @classmethod
    @asynccontextmanager
    async def connect(  # noqa: PLR0913 - every pool setting is a keyword of its own
        cls,
        conninfo: str,
        *,
        schema: str = DEFAULT_SCHEMA,
        min_size: int = 1,
        max_size: int = 10,
        pool_timeout: float = DEFAULT_POOL_TIMEOUT,
        statement_timeout: float | None = DEFAULT_STATEMENT_TIMEOUT,
        lock_timeout: float | None = DEFAULT_LOCK_TIMEOUT,
        prepare_threshold: int | None = DEFAULT_PREPARE_THRESHOLD,
    ) -> AsyncIterator[PostgresMemory]:
        """Open a store with a pool of its own; close both on exit.

        Its connections are in autocommit mode and serve this store alone.
        Unless ``prepare_threshold`` is ``None``, they are opened with
        ``statement_timeout`` and ``lock_timeout`` as their session's own
        settings (``-c`` in libpq's ``options``, after any ``options`` of
        ``conninfo`` or ``PGOPTIONS``), and psycopg prepares the statements
        they run often, so a call sends its statement alone, as an
        application's own code would. With ``prepare_threshold=None``
        (behind a transaction pooler, which hands each transaction to a
        server session other clients share) the store sets nothing on a
        session: each transaction gets the bounds with ``SET LOCAL`` (see
        `PostgresMemory`). One connection is tried first: when the server
        refuses it (a wrong password, a role or database that does not
        exist, a bad option), opening fails at once with the server's words
        rather than after ``pool_timeout``; and when its session does not
        have the bounds (something between the store and the server dropped
        the ``options``), opening fails saying so. Opening creates nothing:
        `setup` does.

        Opened on asyncio, the pool is psycopg's asynchronous pool,
        used with no thread hop on the loop that opened it; calls from any
        other event loop (trio, or a thread running a loop of its own) run
        on a synchronous pool of the same settings in worker threads, opened
        the first time such a call comes. Opened anywhere else (trio), the
        pool is the synchronous one from the start. Either way every event
        loop and thread may use the store.

        While no server can be reached, the pool tries to connect again
        about twice a second (psycopg_pool's own delays grow to 16 s and
        more), so the store serves again within about half a second of a
        server (a restarted or newly promoted primary) accepting
        connections. A call the pool gave no connection within
        ``pool_timeout`` sent nothing: it is replayed on a connection
        opened for it, and, if that cannot be opened, waits for the pool
        once more. A connection joins the pool, and one opened for a call
        serves it, only once the server answered an empty query on it
        within ``pool_timeout``: behind a pooler in session mode, which
        may keep a new connection waiting for a server connection for
        ever, the call ends with `StoreUnavailableError`
        (``may_have_taken_effect=False``) instead.

        After the block the store is closed: its calls raise
        ``StoreClosedError``.

        Args:
            conninfo: A libpq connection string or URI, such as
                ``"postgresql://app@db.internal/app"``.
            schema: The PostgreSQL schema holding the tables.
            min_size: Connections kept open even when idle.
            max_size: The most connections open at once.
            pool_timeout: Seconds to wait for the first connections, and for a
                free connection in each attempt of a call (a call waits twice
                at most) before failing.
            statement_timeout: Seconds one statement may run.
            lock_timeout: Seconds one statement may wait for a lock.
            prepare_threshold: psycopg's: after how many runs of a statement
                on a connection it is prepared on the server (0: at once).
                ``None`` never prepares: needed behind a pooler in
                transaction mode (PgBouncer before 1.21, or without
                ``max_prepared_statements``; pooled endpoints of managed
                services), which hands each transaction to any server
                connection, where a statement prepared on another is
                unknown.

        Yields:
            The store. Run `setup` once per schema before using it.

        Raises:
            TypeError: ``schema`` is not a `str`, or ``prepare_threshold``
                not an `int` or ``None``.
            ValueError: ``schema`` is not a usable schema name, a bound is
                not positive, ``prepare_threshold`` is negative, or
                ``conninfo`` is not one libpq accepts.
            ConnectionRefusedByServerError: The server refused the first
                connection; the message says why, without the password.
            StoreUnavailableError: No connection could be opened in time.
            PostgresMemoryError: The first connection's session does not
                have the bounds passed in libpq's options (something between
                the store and the server dropped them).
        """
        schema = validate_schema_name(schema)
        threshold = validate_prepare_threshold(prepare_threshold)
        statement_timeout = _seconds(statement_timeout, "statement_timeout")
        lock_timeout = _seconds(lock_timeout, "lock_timeout")
        kwargs: dict[str, Any] = {"autocommit": True, "prepare_threshold": threshold}
        libpq = _libpq_settings(conninfo)
        if "connect_timeout" not in libpq and "PGCONNECT_TIMEOUT" not in os.environ:
            # Opening a connection waits no longer than for a free one.
            kwargs["connect_timeout"] = _connect_timeout(pool_timeout)
        held: dict[str, int] = {}
        if threshold is not None:
            held = session_bounds(statement_timeout, lock_timeout)
            given = libpq.get("options") or os.environ.get("PGOPTIONS")
            session = session_options(given, held)
            if session is not None:
                kwargs["options"] = session
        options: dict[str, Any] = {
            "kwargs": kwargs,
            "min_size": min_size,
            "max_size": max_size,
            "timeout": pool_timeout,
            "open": False,
            "name": f"psych-memory:{schema}",
            # Retries at a steady pace instead of psycopg_pool's growing
            # delays: see `RECONNECT_TIMEOUT`.
            "reconnect_timeout": RECONNECT_TIMEOUT,
        }
        bounds = {"statement_timeout": statement_timeout, "lock_timeout": lock_timeout}
        home = running_loop()
        # A connection joins the pool once a server serves it: behind a
        # pooler in session mode, one that would wait for a server
        # connection (all held, the pool's own idle ones included) is
        # dropped after the wait bound, never handed to a call.
        if home is None:
            threaded = cls(_served_pool(conninfo, pool_timeout, options), schema=schema, **bounds)
            if threshold is not None:
                threaded._runner.bound_by_session()
            async with _opened(threaded, conninfo, pool_timeout, kwargs, held):
                yield threaded
            return
        # On asyncio: psycopg's asynchronous pool, no thread hop. Calls from
        # another event loop (a thread running its own) get a synchronous
        # pool of the same settings, opened only if that ever happens.
        fallback = LazyPool(partial(_served_pool, conninfo, pool_timeout, options), pool_timeout)
        served = ServedAsync(pool_timeout)
        pool = AsyncConnectionPool(
            conninfo, reconnect_failed=revive_async, configure=served, **options
        )
        served.pool = pool
        store = cls(pool, schema=schema, **bounds)
        store._runner.belong_to(home, fallback)
        if threshold is not None:
            # Its connections serve this store alone: they carry the bounds.
            store._runner.bound_by_session()
        try:
            async with _opened(store, conninfo, pool_timeout, kwargs, held):
                yield store
        finally:
            await anyio.to_thread.run_sync(fallback.close)

    @property
    def schema(self) -> str:
        """The PostgreSQL schema holding this store's tables."""
        return self._schema

    @property
    def pool(self) -> Pool:
        """The psycopg pool the store runs its statements on."""
        return self._pool

    @property
    def closed(self) -> bool:
        """Whether `aclose` was called (or the ``async with`` block exited)."""
        return self._closed

    def __repr__(self) -> str:
        # The pool's connection string may hold a password: never shown.
        state = "closed" if self._closed else "open"
        return f"PostgresMemory(schema={self._schema!r}, {state})"

    async def __aenter__(self) -> Self:
        """Return the store, which is open from construction.

        Raises:
            StoreClosedError: The store was closed already.
        """
        self._check_open("open")
        return self

    async def aclose(self) -> None:
        """Close the store; a pool the application passed in stays open.

        Closing again does nothing. Calls that already started finish.
        """
        self._closed = True

    async def setup(self) -> None:
        """Create or upgrade this store's tables; writes nothing when they are current.

        First reads the recorded version: at the current version it returns
        without writing, taking a lock or needing any privilege beyond
        reading, so a read-only role can call it. Otherwise it runs in one
        transaction under an advisory lock, so that several processes
        starting at once take turns and none sees a half-built schema: it
        creates the schema if it does not exist, applies every migration the
        recorded version lacks (keeping every fact), and records the new
        version. A migration is not bounded by ``statement_timeout`` (it may
        rewrite the table); it still is by ``lock_timeout``.

        Raises:
            SchemaVersionError: The schema is at a newer version than this
                code knows. Nothing was changed.
            PostgresMemoryError: The database does not store text as UTF-8,
                or the server refused a statement (a missing privilege, such
                as creating the schema: see the documentation).
            StoreUnavailableError: The server could not complete the setup.
            StoreClosedError: The store was closed.
        """
        self._check_open("setup")
        _, found = await self._runner.run(
            Call(
                "setup",
                partial(conversations.schema_version, self._sql),
                replayable=True,
                changes=False,
            )
        )
        if found is None or found < SCHEMA_VERSION:
            await self._runner.run(
                Call(
                    "setup",
                    partial(_setup_conversation, self._schema),
                    replayable=True,
                    transaction=True,
                )
            )
        elif found > SCHEMA_VERSION:
            raise SchemaVersionError(self._schema, found, SCHEMA_VERSION)
        self._runner.verified = True

    async def verify(self) -> None:
        """Check that the schema is at this code's version, writing nothing.

        For deployments where only a DBA may change the schema, and for
        tools that only read or delete: unlike `setup`, it never creates
        anything, so a mistyped schema name is reported, not created.

        Raises:
            SchemaVersionError: The tables are missing (``found`` is
                ``None``; ``schema_exists`` says whether the PostgreSQL
                schema itself exists), older or newer.
            StoreUnavailableError: The server could not be asked.
            StoreClosedError: The store was closed.
        """
        self._check_open("verify")
        await self._verify("verify")

    async def remember(self, scope: Scope, end_user_id: str, content: str) -> Memory:
        """Store a new fact with one ``INSERT``; see `MemoryStore.remember`.

        The id is chosen before the statement runs. If the connection breaks
        during the call, the insert is replayed on a fresh connection and
        finds the row the first attempt stored, if any: the fact is stored
        exactly once. `StoreUnavailableError` says ``may_have_taken_effect``
        only when every attempt broke and the first may have committed.
        """
        key = memory_key(scope, end_user_id)
        content = validate_content(content)
        memory_id = new_memory_id()
        return await self._run(
            "remember",
            partial(conversations.remember, self._sql, key, content, memory_id),
            replayable=True,
        )

    async def remember_within_limit(
        self, scope: Scope, end_user_id: str, content: str, *, max_facts: int
    ) -> Memory | None:
        """Add a fact unless the key holds ``max_facts``; see `RemembersWithinLimit`.

        One round trip, as `remember`: one query of the simple protocol
        that takes the key's advisory lock for its transaction
        (``pg_advisory_xact_lock``), then counts at most ``max_facts``
        facts of the key and inserts only below that, in a statement whose
        snapshot is taken once the lock is granted. Calls on one key take
        turns on every connection, process and pooler's server connection
        of the store; a plain `remember` takes no lock, and its fact counts
        but is never refused. The wait for the lock is bounded by
        ``lock_timeout``. With ``max_facts=0`` nothing is sent.

        The id is chosen before the query, which is replayed on a fresh
        connection if the connection breaks and then returns the fact the
        first attempt stored, if it did, as `remember` does.
        """
        key = memory_key(scope, end_user_id)
        content = validate_content(content)
        max_facts = validate_max_facts(max_facts)
        if not max_facts:
            # Every key holds zero facts or more: nothing to count.
            self._check_open("remember_within_limit")
            return None
        memory_id = new_memory_id()
        return await self._run(
            "remember_within_limit",
            partial(
                conversations.remember_within_limit,
                self._sql,
                key,
                content,
                memory_id,
                bounded_limit(max_facts),
            ),
            replayable=True,
        )

    async def forget(self, scope: Scope, end_user_id: str, memory_id: str) -> bool:
        """Delete one fact with one ``DELETE`` keyed on it; see `MemoryStore.forget`.

        An id no store could hand out (see `validate_restored_id`) answers
        ``False`` without a statement. Never replayed: when the connection
        broke after the ``DELETE`` was sent, `StoreUnavailableError` says
        ``may_have_taken_effect``.
        """
        key = memory_key(scope, end_user_id)
        memory_id = validate_memory_id(memory_id)
        try:
            validate_restored_id(memory_id)
        except InvalidInputError:
            # Not a shape any fact of this store can have, so no row has it.
            self._check_open("forget")
            return False
        return await self._run(
            "forget", partial(conversations.forget, self._sql, key, memory_id), replayable=False
        )

    async def recall(
        self, scope: Scope, end_user_id: str, *, limit: int | None = None
    ) -> tuple[Memory, ...]:
        """Read the key's facts in sequence order with one ``SELECT``; see `MemoryStore.recall`.

        Replayed on a fresh connection if the connection breaks.
        """
        key = memory_key(scope, end_user_id)
        limit = validate_limit(limit)
        return await self._run(
            "recall",
            partial(conversations.recall, self._sql, key, bounded_limit(limit)),
            replayable=True,
            changes=False,
        )

    async def recall_page(
        self, scope: Scope, end_user_id: str, *, after: str | None = None, size: int
    ) -> tuple[Memory, ...]:
        """Up to ``size`` facts of the key after the fact ``after``, with one short query.

        See `PagesFacts.recall_page`. The query walks the key's index from
        the sequence number of ``after`` (looked up within the key), so each
        page costs the same wherever it starts. Replayed on a fresh
        connection if the connection breaks.

        Raises:
            PostgresMemoryError: A stored time lies outside the years 1 to
                9999 (a row this adapter did not write).
        """
        key = memory_key(scope, end_user_id)
        after, size = validate_page(after, size)
        if after is not None:
            try:
                validate_restored_id(after)
            except InvalidInputError:
                # Not a shape any fact of this store can have, so no row has it.
                self._check_open("recall_page")
                raise StalePageError from None
        return await self._run(
            "recall_page",
            partial(conversations.recall_page, self._sql, key, after, size),
            replayable=True,
            changes=False,
        )

    async def erase(self, scope: Scope, end_user_id: str) -> int:
        """Delete every fact of the key, all at once; see `MemoryStore.erase`.

        Two paths, both atomic, both committed with ``synchronous_commit =
        remote_apply``:

        - One statement, in autocommit: it reads at most a thousand and one
          facts of the key's index and deletes the key only if it holds at
          most a thousand. For a key of one to a thousand facts that is the
          whole erase, one round trip, like ``forget``: replayed on a fresh
          connection only if it was never sent. When it deleted nothing, one
          read of the index tells a key that held no fact (the erase returns
          0) from a bigger one. Where statements are not prepared (behind a
          transaction pooler, or on a pool given to the store), both are one
          call of the schema's function ``erase_few``, whose plans the
          server keeps: one short statement to parse instead of a long one.
        - A key of more facts is left untouched by that statement and goes
          in batches of short ``DELETE`` statements inside one transaction,
          each sized to stay far below ``statement_timeout`` (an eighth of
          it, at most 0.1 s), so an end user of any size is erased in one
          call. Until the transaction commits, other connections still read
          every fact (and ``forget`` of one of them waits for the row lock,
          at most ``lock_timeout``); then none. ``remember`` into the same
          key is not held up, and its fact is erased too if it committed
          before the last batch read the key. If the connection breaks
          before ``COMMIT`` is sent, the server rolls the transaction back
          and it is replayed on a fresh connection.

        A `StoreUnavailableError` means nothing was deleted, unless the
        connection broke after the single statement was sent or while the
        ``COMMIT`` was on its way (``may_have_taken_effect`` is then
        ``True``; a retry deletes whatever is left).
        """
        key = memory_key(scope, end_user_id)
        deleted = await self._run(
            "erase",
            partial(conversations.erase_few, self._sql, key, prepared=self._runner.prepares),
            replayable=False,
        )
        if deleted is not None:
            return deleted
        return await self._run(
            "erase",
            partial(conversations.erase, self._sql, key, self._statement_timeout),
            replayable=False,
            transaction=True,
        )

    async def count_expired(self, scope: Scope, *, before: datetime) -> int:
        """How many facts of the tenant were created before ``before``; see `ExpiresFacts`.

        Counted in short reads of the tenant's rows, batch by batch as
        `expire` walks them, so no statement meets ``statement_timeout``
        however many facts the tenant holds; the total is therefore not one
        snapshot. Each read is replayed on a fresh connection if the
        connection breaks.
        """
        return await self._walk("count_expired", scope, before, delete=False)

    async def expire(self, scope: Scope, *, before: datetime) -> int:
        """Delete the tenant's facts created before ``before``; see `ExpiresFacts.expire`.

        The tenant's rows are walked in key order in batches sized as an
        erase's (each far below ``statement_timeout``), and each batch is a
        call of its own: two short statements, the ``DELETE`` committed on
        its own with ``synchronous_commit = remote_apply`` like every
        deletion (see `deletion_durability`). No transaction, row lock or
        statement grows with the number of facts, and other connections'
        calls go on between batches; a ``forget`` of a fact the current
        batch is deleting waits for its row lock, at most ``lock_timeout``.

        A batch is never replayed after its ``DELETE`` was sent: when the
        connection breaks then, or any batch fails after earlier ones
        committed, `StoreUnavailableError` says ``may_have_taken_effect``,
        and running `expire` again deletes the rest.
        """
        return await self._walk("expire", scope, before, delete=True)

    async def _walk(self, operation: str, scope: Scope, before: datetime, *, delete: bool) -> int:
        tenant = validate_scope(scope)
        cutoff = validate_cutoff(before)
        walk = conversations.Walk.for_timeout(self._statement_timeout)
        batch = partial(conversations.expiry_batch, self._sql, tenant, cutoff, walk, delete=delete)
        total = 0
        while True:
            try:
                found, last = await self._run(
                    operation,
                    batch,
                    replayable=not delete,
                    changes=delete,
                )
            except StoreUnavailableError as exc:
                if delete and total and not exc.may_have_taken_effect:
                    raise StoreUnavailableError(
                        operation,
                        f"{exc.reason}, after {total} facts were deleted for good: expire again "
                        "to delete the rest",
                        may_have_taken_effect=True,
                    ) from exc
                raise
            total += found
            if last:
                return total

    async def deletion_durability(self) -> DeletionDurability:
        """Where an acknowledged ``forget`` or ``erase`` is durable, read from the server now.

        Deletions commit with ``synchronous_commit = remote_apply``, so the
        answer follows from the server's ``synchronous_standby_names`` and
        the standbys streaming from it (``pg_stat_replication``):

        - ``"synchronous_standbys"``: standbys are named synchronous; a
          deletion returns only once every standby the setting requires has
          applied it, so it survives that standby's promotion and no query
          there sees the facts.
        - ``"primary_only"``: standbys stream asynchronously; the deletion
          is durable on the primary, and a failover before a standby
          replayed it brings the facts back.
        - ``"no_replication"``: no standby streams from the server; the
          deletion is durable on it alone.

        For an operator's receipt, asked right after the deletion. Needs no
        tables; changes nothing. The answer is the server's own, read
        through a pooler as directly. Without ``pg_read_all_stats`` the
        role sees the standbys but not their state, so a base backup in
        progress counts as a standby (``"primary_only"``, the weaker
        claim). A role refused ``pg_stat_replication`` itself learns
        ``"synchronous_standbys"`` all the same (the setting says it), and
        otherwise gets the server's refusal rather than a guess.

        Raises:
            StoreUnavailableError: The server could not be asked.
            PostgresMemoryError: The role may not read ``pg_stat_replication``
                (or ``pg_replication_slots``) and no standby is named
                synchronous: the answer cannot be known.
            StoreClosedError: The store was closed.
        """
        self._check_open("deletion_durability")
        return await self._runner.run(
            Call("deletion_durability", deletion_durability, replayable=True, changes=False)
        )

    async def tenants(self) -> tuple[str, ...]:
        """Every tenant with at least one fact, sorted by code point.

        See `ListsEndUsers.tenants`.
        """
        return await self._run(
            "tenants", partial(conversations.tenants, self._sql), replayable=True, changes=False
        )

    async def end_users(self, scope: Scope) -> tuple[str, ...]:
        """Every end user of the tenant with at least one fact, sorted by code point.

        See `ListsEndUsers.end_users`.
        """
        tenant = validate_scope(scope)
        return await self._run(
            "end_users",
            partial(conversations.end_users, self._sql, tenant),
            replayable=True,
            changes=False,
        )

    async def fact_counts(self, scope: Scope) -> dict[str, int]:
        """How many facts each end user of the tenant holds, with one query.

        See `CountsFacts.fact_counts`.
        """
        tenant = validate_scope(scope)
        return await self._run(
            "fact_counts",
            partial(conversations.fact_counts, self._sql, tenant),
            replayable=True,
            changes=False,
        )

    async def restore(self, memory: Memory) -> bool:
        """Store ``memory`` as given (id, key, content, time), after the key's facts.

        See `RestoresFacts.restore`. A restored id must be free in the whole
        store, every tenant included. Replayed on a fresh connection if the
        connection breaks; a replay that finds the first attempt's row
        answers ``False``.
        """
        plan = RestorePlan((validate_restored(memory),), batch=False)
        stored = await self._run(
            "restore",
            partial(conversations.restore_many, self._sql, plan),
            replayable=True,
            transaction=True,
        )
        return stored == 1

    async def restore_many(self, memories: Iterable[Memory]) -> int:
        """Store every fact as given, in order, all or none, in one transaction.

        See `RestoresFacts.restore_many`: facts held exactly are skipped. A
        restored id must be free in the whole store, every tenant included.
        Replayed on a fresh connection if the connection breaks; a replay
        that finds the first attempt's rows does not count them again.
        """
        plan = RestorePlan(validate_restored_many(memories), batch=True)
        if not plan.facts:
            self._check_open("restore_many")
            return 0
        return await self._run(
            "restore_many",
            partial(conversations.restore_many, self._sql, plan),
            replayable=True,
            transaction=True,
        )

    def _check_open(self, operation: str) -> None:
        if self._closed:
            raise StoreClosedError(operation, "closed")

    def _run(
        self,
        operation: str,
        conversation: partial[Conversation[_T]],
        *,
        replayable: bool,
        changes: bool = True,
        transaction: bool = False,
    ) -> Coroutine[Any, Any, _T]:
        # A plain function returning what the operation awaits: every call
        # comes here, and a coroutine of its own would cost each one.
        self._check_open(operation)
        call = Call(operation, conversation, replayable, transaction, changes)
        if self._runner.verified:
            return self._runner.run(call)
        return self._verified_run(call)

    async def _verified_run(self, call: Call[_T]) -> _T:
        await self._verify(call.operation)
        return await self._runner.run(call)

    async def _verify(self, operation: str) -> None:
        # Code older than the database must fail clearly rather than misread
        # or damage a layout it does not know.
        exists, found = await self._runner.run(
            Call(
                operation,
                partial(conversations.schema_version, self._sql),
                replayable=True,
                changes=False,
            )
        )
        if found != SCHEMA_VERSION:
            raise SchemaVersionError(self._schema, found, SCHEMA_VERSION, schema_exists=exists)
        self._runner.verified = True


def _setup_conversation(schema: str) -> Conversation[None]:
    yield from setup_steps(schema)


def _seconds(value: float | None, argument: str) -> float | None:
    return None if value is None else validate_seconds(value, argument)


def validate_prepare_threshold(value: object) -> int | None:
    """Check psycopg's ``prepare_threshold``: a whole number >= 0, or ``None``.

    Raises:
        TypeError: ``value`` is not an `int` (a `bool` is not) or ``None``.
        ValueError: ``value`` is negative.
    """
    if value is None:
        return None
    if not isinstance(value, int) or isinstance(value, bool):
        raise TypeError(f"prepare_threshold must be an int or None, not {type(value).__qualname__}")
    if value < 0:
        raise ValueError("prepare_threshold must be a whole number >= 0, or None (never prepare)")
    return value


@asynccontextmanager
async def _opened(
    store: PostgresMemory,
    conninfo: str,
    wait: float,
    kwargs: dict[str, Any],
    bounds: dict[str, int],
) -> AsyncIterator[None]:
    # Opens the store's own pool, waiting for its first connection; closes
    # the store, then the pool, on exit.
    pool = store.pool
    try:
        said = await _first_connection(conninfo, wait, kwargs, bounds)
        try:
            if isinstance(pool, AsyncConnectionPool):
                await pool.open(wait=True, timeout=wait)
            else:
                await anyio.to_thread.run_sync(partial(pool.open, wait=True, timeout=wait))
        except psycopg.Error as exc:
            last = "" if said is None else f"; the first attempt said: {said}"
            raise StoreUnavailableError(
                "connect",
                "no connection to the PostgreSQL server could be opened in time "
                f"({type(exc).__name__}){last}",
                may_have_taken_effect=False,
            ) from exc
        async with store:
            yield
    finally:
        if isinstance(pool, AsyncConnectionPool):
            await pool.close()
        else:
            await anyio.to_thread.run_sync(pool.close)


async def _first_connection(
    conninfo: str, wait: float, kwargs: dict[str, Any], bounds: dict[str, int]
) -> str | None:
    # One connection opened and closed before the pool opens, with the
    # pool's settings: the pool retries a refused connection until its
    # timeout and then says only that it timed out, while the server told
    # at once why. A refusal that will not pass by itself is raised here;
    # any other failure is returned, in words, for the pool's timeout to
    # report. The connection also shows whether the session got the bounds
    # passed as its options.
    settings = _libpq_settings(conninfo)
    bound = dict(kwargs)
    if "connect_timeout" not in settings:
        bound["connect_timeout"] = _connect_timeout(wait)
    try:
        if running_loop() is not None:
            async with await AsyncConnection.connect(conninfo, **bound) as conn:
                await await_server_async(conn, wait)
                cursor = await conn.execute(_BOUNDS_HELD, prepare=False)
                held = await cursor.fetchall()
        else:
            held = await anyio.to_thread.run_sync(partial(_bounds_held, conninfo, bound, wait))
    except psycopg.Error as exc:
        said = _redacted(str(exc), settings.get("password"))
        if "FATAL:" in said and not any(words in said for words in _PASSING_REFUSALS):
            raise ConnectionRefusedByServerError("connect", said) from exc
        return said
    ((statement_timeout, lock_timeout),) = held
    _check_session_bounds(
        bounds, {"statement_timeout": statement_timeout, "lock_timeout": lock_timeout}
    )
    return None


# What a session has for the bounds, in milliseconds; numbers, which every
# server encoding hands back alike.
_BOUNDS_HELD: Final = (
    b"SELECT (SELECT setting::bigint FROM pg_catalog.pg_settings"
    b" WHERE name = 'statement_timeout'), (SELECT setting::bigint"
    b" FROM pg_catalog.pg_settings WHERE name = 'lock_timeout')"
)


def _bounds_held(conninfo: str, bound: dict[str, Any], wait: float) -> list[tuple[int, int]]:
    with Connection.connect(conninfo, **bound) as conn:
        await_server_sync(conn, wait)
        return conn.execute(_BOUNDS_HELD, prepare=False).fetchall()


def _check_session_bounds(bounds: dict[str, int], held: dict[str, int]) -> None:
    # The bounds passed in libpq's options must be what the session has: a
    # pooler told to ignore the ``options`` startup parameter would
    # otherwise leave every statement of the store unbounded, silently.
    for name, milliseconds in bounds.items():
        if held[name] != milliseconds:
            raise PostgresMemoryError(
                f"the store's connections do not have its {name} ({milliseconds}ms), passed "
                f"in libpq's options (the session has {held[name]}ms): something between "
                "the store and the server dropped them; behind a pooler in transaction mode, "
                "open the store with prepare_threshold=None"
            )


def _served_pool(conninfo: str, wait: float, options: dict[str, Any]) -> ConnectionPool[Any]:
    # The store's own synchronous pool, whose connections join it once a
    # server serves them (see `Served`).
    served = Served(wait)
    pool = ConnectionPool(conninfo, reconnect_failed=revive, configure=served, **options)
    served.pool = pool
    return pool


def _connect_timeout(wait: float) -> int:
    # libpq's connect_timeout is whole seconds, and at least 2.
    return max(2, math.ceil(wait))


def _libpq_settings(conninfo: str) -> dict[str, Any]:
    try:
        return conninfo_to_dict(conninfo)
    except psycopg.Error:
        # libpq's message may quote the string, password included.
        raise ValueError("conninfo is not a connection string libpq accepts") from None


def _redacted(message: str, password: object) -> str:
    # libpq does not quote passwords, but a message must never carry one,
    # whatever a future libpq writes; one line, as logs want it.
    if password:
        message = message.replace(str(password), "***")
    return " ".join(message.split())
