"""The SQLite adapter: every fact in one database file, deleted for real."""

from __future__ import annotations

import errno
import os
import sqlite3
import threading
import time
from collections.abc import Callable, Iterable
from contextlib import closing, suppress
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Final, Literal, TypeAlias, TypeVar, get_args

import anyio.to_thread

from psych_runtime.memory.port import (
    InvalidInputError,
    Memory,
    MemoryKey,
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
)

from ._connection import connect, prepare
from ._erasing import erasing
from ._errors import DatabaseFileMovedError, SqliteMemoryError, StoreUnavailableError
from ._failures import store_failure
from ._file import FileIdentity, check_busy_timeout, check_location, check_path, identify
from ._scrub import ScrubState, rewrite_file, truncate_log_at_once

if TYPE_CHECKING:
    from typing import Self

__all__ = ["Durability", "SqliteMemory"]

Durability: TypeAlias = Literal["full", "normal"]
"""How hard a commit works to reach the disk; see `SqliteMemory`."""

_T = TypeVar("_T")

_EPOCH: Final = datetime(1970, 1, 1, tzinfo=UTC)
_MICROSECOND: Final = timedelta(microseconds=1)

# The new fact's position is computed in the same statement that inserts it,
# under the write lock, so concurrent writers (other processes included)
# cannot both take the same one.
_INSERT: Final = (
    "INSERT INTO psych_memory_fact (tenant, end_user_id, seq, id, content, created_at) "
    "SELECT ?, ?, coalesce(max(seq), 0) + 1, ?, ?, ? FROM psych_memory_fact "
    "WHERE tenant = ? AND end_user_id = ?"
)
# How many facts the key holds, counted up to the bound only: at most that
# many entries of the key's part of the primary key are read.
_COUNT_UP_TO: Final = (
    "SELECT count(*) FROM (SELECT 1 FROM psych_memory_fact "
    "WHERE tenant = ? AND end_user_id = ? LIMIT ?)"
)
_SELECT: Final = (
    "SELECT id, content, created_at FROM psych_memory_fact "
    "WHERE tenant = ? AND end_user_id = ? ORDER BY seq LIMIT ?"
)
# The fact ``after`` is found through the index on ids, within its key; the
# page follows it in the key's order. No row at all: the key does not hold
# ``after``. One row of NULLs: it does, and it is the last fact.
_SELECT_AFTER: Final = (
    "SELECT f.id, f.content, f.created_at FROM psych_memory_fact AS a "
    "LEFT JOIN psych_memory_fact AS f ON f.tenant = a.tenant "
    "AND f.end_user_id = a.end_user_id AND f.seq > a.seq "
    "WHERE a.id = ? AND a.tenant = ? AND a.end_user_id = ? ORDER BY f.seq LIMIT ?"
)
_SELECT_BY_ID: Final = (
    "SELECT tenant, end_user_id, content, created_at FROM psych_memory_fact WHERE id = ?"
)
_DELETE_ONE: Final = "DELETE FROM psych_memory_fact WHERE tenant = ? AND end_user_id = ? AND id = ?"
_LAST_SEQ: Final = "SELECT max(seq) FROM psych_memory_fact WHERE tenant = ? AND end_user_id = ?"
# The oldest facts of the key, up to the last one it held when the erase began.
_DELETE_BATCH: Final = (
    "DELETE FROM psych_memory_fact WHERE tenant = ? AND end_user_id = ? AND seq IN ("
    "SELECT seq FROM psych_memory_fact WHERE tenant = ? AND end_user_id = ? AND seq <= ? "
    "ORDER BY seq LIMIT ?)"
)
# Expiry walks the tenant's part of the primary key in key order, from just
# after the last row the batch before looked at: each batch reads at most
# its rows of the index, however many rows there are and however few of
# them are old. ``_EXPIRE_BOUND`` finds the last row of the next batch
# (none when fewer are left); the other two delete the old facts up to it,
# or to the end.
_EXPIRE_BOUND: Final = (
    "SELECT end_user_id, seq FROM psych_memory_fact WHERE tenant = ? "
    "AND (end_user_id, seq) > (?, ?) ORDER BY end_user_id, seq LIMIT 1 OFFSET ?"
)
_EXPIRE_RANGE: Final = (
    "DELETE FROM psych_memory_fact WHERE tenant = ? AND (end_user_id, seq) > (?, ?) "
    "AND (end_user_id, seq) <= (?, ?) AND created_at < ?"
)
_EXPIRE_REST: Final = (
    "DELETE FROM psych_memory_fact WHERE tenant = ? AND (end_user_id, seq) > (?, ?) "
    "AND created_at < ?"
)
_COUNT_EXPIRED: Final = "SELECT count(*) FROM psych_memory_fact WHERE tenant = ? AND created_at < ?"
_TENANTS: Final = "SELECT DISTINCT tenant FROM psych_memory_fact ORDER BY tenant"
_END_USERS: Final = (
    "SELECT DISTINCT end_user_id FROM psych_memory_fact WHERE tenant = ? ORDER BY end_user_id"
)
# UTF-8 compared byte by byte (SQLite's BINARY collation) is code-point order.
_COUNTS: Final = (
    "SELECT end_user_id, count(*) FROM psych_memory_fact WHERE tenant = ? "
    "GROUP BY end_user_id ORDER BY end_user_id"
)

# An erase deletes in batches, each its own write transaction, holding the
# write lock for about this share of the busy timeout (within the bounds
# below): a writer elsewhere that waits as long as this store does gets a
# turn many times over before it would give up.
_BATCH_SHARE: Final = 0.1
_SHORTEST_BATCH: Final = 0.01
_LONGEST_BATCH: Final = 0.5
# Rows of the first batch; an erase of no more facts is one transaction, as
# `forget` is. Later batches are sized from the time the last one took.
_FIRST_BATCH_ROWS: Final = 1000
_FEWEST_BATCH_ROWS: Final = 100
_MOST_BATCH_ROWS: Final = 100_000
# SQLite's busy handler tries again after pauses that grow with the time it
# has waited (about that long, from 1 ms), up to 100 ms. A writer that began
# waiting during a batch has waited no longer than the batch, so a pause
# between batches longer than the batch (or than 100 ms) holds one of its
# tries; the margin is for a waiter that wakes late on a busy machine.
_LONGEST_RETRY_PAUSE: Final = 0.1
_PAUSE_FACTOR: Final = 1.5
_PAUSE_MARGIN: Final = 0.01


class SqliteMemory(MemoryStore):
    """Facts kept in one SQLite database file, which survive restarts and crashes.

    Open the store before use and close it afterwards, most simply with
    ``async with``:

        async with SqliteMemory("memory.sqlite3") as memory:
            await memory.remember("acme", "user-42", "prefers the Berlin warehouse")

    Opening creates the file if it is missing, checks it, and lays out or
    migrates its schema, so a path that cannot be used fails there and not at
    the first call. Every blocking SQLite call runs in a worker thread
    (`anyio.to_thread.run_sync`), never on the event loop, so the store works
    on asyncio and trio alike. Within one store, calls share one connection
    behind a `threading.Lock`; several stores, and several processes, may
    open the same file at once.

    Facts are kept in insertion order: each takes the next number of its
    key's sequence, so the order never depends on clocks. `forget` and
    `erase` delete for real: SQLite overwrites the deleted rows with zeros
    (``secure_delete``), and the write-ahead log, which still holds older
    copies of the changed pages, is emptied as soon as no other connection
    is reading it. Copies SQLite left in unused page space when it moved
    rows between pages go when the file is rewritten, by `scrub` or at
    close (see `scrub_pending`).

    Every method raises what the port's does for bad arguments and for a
    store that is not open (`StoreClosedError`). The file's own failures are
    `SqliteMemoryError`: `DatabaseFileMovedError` (the file was deleted or
    replaced since opening), `StoreUnavailableError` (the file stayed locked
    past the busy timeout, or SQLite failed) and `DatabaseFileError` (the
    file turned out to be corrupt). A call that raises one changed nothing,
    unless ``may_have_taken_effect`` says otherwise (a commit that failed, or
    an `erase` in batches).

    Every call waits at most ``busy_timeout`` for other connections to
    release the file, then raises `StoreUnavailableError` (a subclass of the port's
    `StoreUnavailableError`). A call that has started in its worker thread
    always finishes there, even when the caller's cancel scope expires: its
    effect is decided (made or not) before the cancellation reaches the
    caller.

    `erase` deletes a large key in batches, each a short write transaction
    of its own, and lets other connections and this store's other calls in
    between them (see `erase`); every other call is one transaction.

    `expire` deletes in batches the same way, so retention of a tenant of
    any size never holds the file for long.

    The store also provides the port's `ListsEndUsers`, `CountsFacts`,
    `PagesFacts`, `RestoresFacts`, `ScrubsDeletions`, `ExpiresFacts` and
    `RemembersWithinLimit` capabilities: `remember_within_limit` counts and
    adds in one write transaction, so a cap on an end user's facts holds
    across every store and process sharing the file.

    Args:
        path: The database file. It is created at open if missing; its
            directory must exist. Relative paths are taken from the working
            directory at the time the store is constructed.
        busy_timeout: Seconds a call waits for another connection (in this or
            another process) to release the file before it gives up.
        durability: ``"full"`` (the default) syncs the log to disk at every
            commit: a fact whose `remember` returned survives the process
            being killed and the machine losing power. ``"normal"`` syncs only
            at checkpoints: much faster writes that still survive the process
            being killed, but the last facts before a power loss or operating
            system crash may be lost (the file is never corrupted).

    Raises:
        TypeError: An argument has the wrong type.
        ValueError: ``path`` is empty, holds a NUL character or is not valid
            UTF-8, ``busy_timeout`` is negative or not finite, or
            ``durability`` is not one of the two levels.
    """

    __slots__ = (
        "_busy_timeout",
        "_conn",
        "_durability",
        "_erased",
        "_erasing",
        "_identity",
        "_lock",
        "_path",
        "_scrub",
        "_state",
        "_state_lock",
    )

    def __init__(
        self,
        path: str | os.PathLike[str],
        *,
        busy_timeout: float = 5.0,
        durability: Durability = "full",
    ) -> None:
        self._path = check_path(path)
        self._busy_timeout = check_busy_timeout(busy_timeout)
        if durability not in get_args(Durability):
            if not isinstance(durability, str):
                raise TypeError(f"durability must be a str, not {type(durability).__qualname__}")
            raise ValueError('durability must be "full" or "normal"')
        self._durability: Durability = durability
        # Serialises the calls on the one connection; held for a whole call,
        # or for one batch of an erase.
        self._lock = threading.Lock()
        # Erases in progress, which closing waits for; signalled as each ends.
        self._erasing = 0
        self._erased = threading.Condition(self._lock)
        # Guards the state and the connection's arrival; held for a moment.
        self._state_lock = threading.Lock()
        self._conn: sqlite3.Connection | None = None
        self._identity: FileIdentity | None = None
        self._state: Literal["new", "opening", "open", "closed"] = "new"
        self._scrub = ScrubState()

    @property
    def path(self) -> Path:
        """The absolute path of the database file."""
        return self._path

    @property
    def busy_timeout(self) -> float:
        """Seconds a call waits for another connection to release the file."""
        return self._busy_timeout

    @property
    def durability(self) -> Durability:
        """The durability level the store was opened with."""
        return self._durability

    @property
    def scrub_pending(self) -> bool:
        """Whether bytes of a fact this store deleted may still be in the files.

        ``True`` from a committed `forget` or `erase` until `scrub`, or
        closing, has rewritten the file and emptied the write-ahead log.
        The deletion itself is committed either way: no call returns the
        deleted facts again. Stays readable after closing.
        """
        return self._scrub.pending

    def __repr__(self) -> str:
        return f"SqliteMemory({os.fspath(self._path)!r}, state={self._state!r})"

    async def open(self) -> None:
        """Create the file if missing, check it, and lay out or migrate its schema.

        Opening a store that is already open does nothing.

        Raises:
            StoreClosedError: The store was closed (a closed store cannot be
                reopened: construct a new one).
            RuntimeError: Another task is opening the store at this moment.
            FileNotFoundError: The directory of ``path`` does not exist.
            NotADirectoryError: A parent of ``path`` is not a directory.
            IsADirectoryError: ``path`` is a directory.
            PermissionError: The file or its directory cannot be read and written.
            DatabaseFileError: The file is not a SQLite database, is corrupt,
                is a database of another application, or is marked as a
                memory file but lacks its table. The file is left unchanged.
            SchemaVersionError: The file was written by a newer schema version.
            StoreUnavailableError: The file stayed locked past the busy
                timeout, or SQLite failed otherwise.
            SqliteMemoryError: SQLite cannot keep a write-ahead log for the file.
        """
        # The state lock is only ever held for a moment, so taking it on the
        # event loop never blocks it; the connection lock may be held for a
        # whole call, and is only taken in worker threads.
        with self._state_lock:
            if self._state == "open":
                return
            if self._state == "closed":
                raise StoreClosedError("open", "closed")
            if self._state == "opening":
                raise RuntimeError("this SqliteMemory is being opened by another task")
            self._state = "opening"
        try:
            conn, identity = await anyio.to_thread.run_sync(self._connect)
        except BaseException:
            with self._state_lock:
                self._state = "closed"
            raise
        with self._state_lock:
            # aclose() may have run while the file was being opened.
            state: str = self._state
            if state != "closed":
                self._conn, self._identity = conn, identity
                self._state = "open"
                return
        await anyio.to_thread.run_sync(conn.close)

    async def aclose(self) -> None:
        """Close the store; calls in progress finish first. Closing twice is harmless.

        When a scrub is pending, closing runs it (as `scrub`, on the store's
        own connection), waiting at most the busy timeout, and closes
        whatever the outcome: `scrub_pending` tells. Closing never raises,
        for that or for anything SQLite reports while closing; the store is
        closed afterwards.
        """
        await anyio.to_thread.run_sync(self._close)

    async def __aenter__(self) -> Self:
        """Open the store (see `open`) and return it.

        Raises:
            StoreClosedError: The store was closed already.
            MemoryStoreError: Opening failed (see `open` for every case).
            OSError: The path cannot be used (see `open`).
        """
        await self.open()
        return self

    async def remember(self, scope: Scope, end_user_id: str, content: str) -> Memory:
        """Store a new fact (see `MemoryStore.remember`); it is on disk when this returns.

        Raises:
            SqliteMemoryError: The file failed, as for every call (see `SqliteMemory`).
        """
        key = memory_key(scope, end_user_id)
        content = validate_content(content)

        def insert(conn: sqlite3.Connection) -> Memory:
            memory = Memory(new_memory_id(), key, content, datetime.now(UTC))
            self._insert(conn, memory)
            return memory

        return await self._add("remember", insert)

    async def remember_within_limit(
        self, scope: Scope, end_user_id: str, content: str, *, max_facts: int
    ) -> Memory | None:
        """Add a fact unless the key holds ``max_facts``; see `RemembersWithinLimit`.

        The count and the insert are one write transaction (``BEGIN
        IMMEDIATE``), so the limit holds across every store and process
        sharing the file. The count reads at most ``max_facts`` entries of
        the key's part of the primary key, however many facts it holds.

        Raises:
            SqliteMemoryError: The file failed, as for every call (see `SqliteMemory`).
        """
        key = memory_key(scope, end_user_id)
        content = validate_content(content)
        # A limit past what SQLite's integers hold is no limit: as large as they go.
        max_facts = bounded_limit(validate_max_facts(max_facts))
        full = (key.tenant, key.end_user_id, max_facts)

        def insert(conn: sqlite3.Connection) -> Memory | None:
            (held,) = conn.execute(_COUNT_UP_TO, full).fetchone()
            if held >= max_facts:
                return None
            memory = Memory(new_memory_id(), key, content, datetime.now(UTC))
            self._insert(conn, memory)
            return memory

        return await self._add("remember_within_limit", insert)

    async def forget(self, scope: Scope, end_user_id: str, memory_id: str) -> bool:
        """Delete one fact (see `MemoryStore.forget`) and wipe its bytes from the files.

        Returns as soon as the deletion is committed and the row zeroed;
        the write-ahead log is emptied as soon as other connections allow,
        and copies in unused page space go at `scrub` or close (see
        `scrub_pending`). An id that no store could have handed out (see
        `validate_restored_id`) answers ``False`` without touching the file.

        Raises:
            SqliteMemoryError: The file failed, as for every call (see `SqliteMemory`).
        """
        key = memory_key(scope, end_user_id)
        memory_id = validate_memory_id(memory_id)
        try:
            validate_restored_id(memory_id)
        except InvalidInputError:
            known_shape = False
        else:
            known_shape = True

        def delete(conn: sqlite3.Connection) -> int:
            cursor = conn.execute(_DELETE_ONE, (key.tenant, key.end_user_id, memory_id))
            return cursor.rowcount

        def run(conn: sqlite3.Connection) -> bool:
            if not known_shape:
                return False
            return self._delete(conn, "forget", delete) > 0

        return await self._run("forget", run)

    async def recall(
        self, scope: Scope, end_user_id: str, *, limit: int | None = None
    ) -> tuple[Memory, ...]:
        """Return the facts of this end user oldest first; see `MemoryStore.recall`.

        Raises:
            SqliteMemoryError: The file failed, as for every call (see `SqliteMemory`).
        """
        key = memory_key(scope, end_user_id)
        sql_limit = bounded_limit(validate_limit(limit))

        def select(conn: sqlite3.Connection) -> tuple[Memory, ...]:
            rows = conn.execute(_SELECT, (key.tenant, key.end_user_id, sql_limit)).fetchall()
            return _memories(key, rows)

        return await self._run("recall", lambda conn: self._read(conn, "recall", select))

    async def recall_page(
        self, scope: Scope, end_user_id: str, *, after: str | None = None, size: int
    ) -> tuple[Memory, ...]:
        """Up to ``size`` facts of the key after the fact ``after``; see `PagesFacts.recall_page`.

        Each page is one short read: ``after`` is found through the index on
        ids, and the page follows it in the key's order, so a page costs the
        same wherever it starts and however large the key or the file.

        Raises:
            SqliteMemoryError: The file failed, as for every call (see `SqliteMemory`).
        """
        key = memory_key(scope, end_user_id)
        after, size = validate_page(after, size)

        def select(conn: sqlite3.Connection) -> tuple[Memory, ...]:
            if after is None:
                rows = conn.execute(_SELECT, (key.tenant, key.end_user_id, size)).fetchall()
                return _memories(key, rows)
            if not _encodable(after):
                # No fact holds an id that is not UTF-8 text (a lone
                # surrogate), and SQLite could not be handed it.
                raise StalePageError
            rows = conn.execute(
                _SELECT_AFTER, (after, key.tenant, key.end_user_id, size)
            ).fetchall()
            if not rows:
                raise StalePageError
            return () if rows[0][0] is None else _memories(key, rows)

        return await self._run("recall_page", lambda conn: self._read(conn, "recall_page", select))

    async def erase(self, scope: Scope, end_user_id: str) -> int:
        """Delete every fact of this end user (see `MemoryStore.erase`) and wipe their bytes.

        Returns as soon as the deletion is committed and the rows zeroed;
        the write-ahead log is emptied as soon as other connections allow,
        and copies in unused page space go at `scrub` or close: await
        `scrub` before telling the end user that no byte remains (see
        `scrub_pending`).

        A key of up to a thousand facts is erased in one transaction. A
        larger one is erased in batches, oldest facts first, each batch its
        own write transaction committed with ``synchronous = FULL``. Each
        holds the file's write lock for about a tenth of the busy timeout
        (0.5 s at the default), and between two batches the store pauses
        with both the write lock and its own lock released, so that other
        processes' writers, and this store's other calls, take their turn:
        a writer waiting as long as this store does is never starved. The
        erase deletes the facts the key held when it began: a fact
        remembered into the key while it runs is kept and not counted (only
        if the key's newest facts are forgotten meanwhile can such a fact
        take a place the erase has yet to clear, and then it is deleted and
        counted). The count is of the facts this call deleted; a fact
        another call forgot meanwhile is not in it.

        Two erasures of one key never run at once, in one store, several
        stores or several processes: the second waits until the first has
        ended (however long it takes; a killed process releases it at once)
        and then deletes only what is left, usually nothing, and returns
        ``0``. So every fact is counted by exactly one erasure. The wait is
        on a lock file beside the database (``<file>-erase-<xx>``, one of
        256 chosen by the key; erasures of keys that share one also wait
        for each other), removed when the erasure ends.

        While a large erase runs, other calls see its progress: `recall`
        returns the key's newest facts only, the oldest gone batch by
        batch; `fact_counts` shrinks; a `recall_page` after a fact already
        deleted raises `StalePageError`. Closing the store waits for the
        erase to finish. Cancelling the caller does not stop it: the worker
        thread deletes every batch, as for any call.

        Raises:
            DatabaseFileMovedError: The file was deleted or replaced since
                opening. Nothing was deleted, unless ``may_have_taken_effect``
                (a batch had committed before; erase again for the rest,
                once the file is back).
            StoreUnavailableError: The file stayed locked past the busy
                timeout, or SQLite failed; ``may_have_taken_effect`` says
                whether facts may be deleted all the same. When batches had
                committed before the failure, it is ``True`` and those facts
                stay deleted: erase again to delete the rest. Also raised,
                having deleted nothing, when the lock file cannot be
                created or locked.
            DatabaseFileError: The file turned out to be corrupt before
                anything was deleted; nothing was.
        """
        key = memory_key(scope, end_user_id)
        return await anyio.to_thread.run_sync(self._erase_alone, key)

    async def count_expired(self, scope: Scope, *, before: datetime) -> int:
        """How many facts of the tenant were created before ``before``; see `ExpiresFacts`.

        One read of the tenant's rows, which other connections' writes do
        not wait for.

        Raises:
            SqliteMemoryError: The file failed, as for every call (see `SqliteMemory`).
        """
        tenant = validate_scope(scope)
        micros = _micros(validate_cutoff(before))

        def select(conn: sqlite3.Connection) -> int:
            return int(conn.execute(_COUNT_EXPIRED, (tenant, micros)).fetchone()[0])

        return await self._run(
            "count_expired", lambda conn: self._read(conn, "count_expired", select)
        )

    async def expire(self, scope: Scope, *, before: datetime) -> int:
        """Delete the tenant's facts created before ``before``; see `ExpiresFacts.expire`.

        The deletion is `erase`'s, batch for batch: the tenant's rows are
        walked in key order, each batch its own short write transaction
        (about a tenth of the busy timeout) committed with ``synchronous =
        FULL`` whatever the store's durability, the deleted rows zeroed, with
        pauses between batches in which other connections and this store's
        other calls take their turn. A batch looks at a bounded number of
        rows whatever their age, so the whole call costs one pass over the
        tenant's rows and no batch grows with them. Deleted bytes leave the
        files by the rules of `erase`: the log is emptied as soon as other
        connections allow, and `scrub` (or closing) rewrites the file
        (see `scrub_pending`). Closing the store waits for the call to
        finish; cancelling the caller does not stop it.

        A fact restored meanwhile with an old ``created_at`` into a part of
        the tenant the call has passed is left for the next run.

        Raises:
            DatabaseFileMovedError: The file was deleted or replaced since
                opening; nothing was deleted unless ``may_have_taken_effect``.
            StoreUnavailableError: The file stayed locked past the busy
                timeout, or SQLite failed. When batches had committed before
                the failure, ``may_have_taken_effect`` is ``True`` and those
                facts stay deleted: expire again to delete the rest.
            DatabaseFileError: The file turned out to be corrupt before
                anything was deleted; nothing was.
        """
        tenant = validate_scope(scope)
        micros = _micros(validate_cutoff(before))
        return await anyio.to_thread.run_sync(self._expire, tenant, micros)

    async def scrub(self) -> bool:
        """Rewrite the file and empty the write-ahead log, so no byte of a deleted fact remains.

        The file is rewritten from its live rows (``VACUUM``), which costs
        about as much as copying it and holds the write lock meanwhile, then
        the log is cut to zero bytes. Each step waits at most the busy
        timeout for other connections. An operator's erase receipt can say
        "scrubbed" when this returns ``True``, and "pending" otherwise. It
        runs on a connection of its own; the store's writes, and every other
        connection's, wait for the rewrite, and fail as usual if it lasts
        longer than their busy timeout (about 8 ms per megabyte of file).

        Returns:
            ``True`` if the file was rewritten and the log emptied, so no
            bytes of any deleted fact remain in either (`scrub_pending` is
            then ``False`` unless another deletion committed meanwhile);
            ``False`` if other connections kept reading or writing past the
            busy timeout.

        Raises:
            StoreClosedError: The store is not open, or was closed.
            DatabaseFileMovedError: The file was deleted or replaced since opening.
            StoreUnavailableError: SQLite failed.
        """
        with self._state_lock:
            if self._state != "open":
                raise StoreClosedError("scrub", _closed_state(self._state))
        return await anyio.to_thread.run_sync(self._scrub_now)

    async def tenants(self) -> tuple[str, ...]:
        """Every tenant with at least one fact; see `ListsEndUsers.tenants`.

        Raises:
            SqliteMemoryError: The file failed, as for every call (see `SqliteMemory`).
        """

        def select(conn: sqlite3.Connection) -> tuple[str, ...]:
            return tuple(tenant for (tenant,) in conn.execute(_TENANTS).fetchall())

        return await self._run("tenants", lambda conn: self._read(conn, "tenants", select))

    async def end_users(self, scope: Scope) -> tuple[str, ...]:
        """Every end user of the tenant with a fact; see `ListsEndUsers.end_users`.

        Raises:
            SqliteMemoryError: The file failed, as for every call (see `SqliteMemory`).
        """
        tenant = validate_scope(scope)

        def select(conn: sqlite3.Connection) -> tuple[str, ...]:
            rows = conn.execute(_END_USERS, (tenant,)).fetchall()
            return tuple(end_user for (end_user,) in rows)

        return await self._run("end_users", lambda conn: self._read(conn, "end_users", select))

    async def fact_counts(self, scope: Scope) -> dict[str, int]:
        """How many facts each end user of the tenant holds; see `CountsFacts.fact_counts`.

        One query, which counts without reading the facts.

        Raises:
            SqliteMemoryError: The file failed, as for every call (see `SqliteMemory`).
        """
        tenant = validate_scope(scope)

        def select(conn: sqlite3.Connection) -> dict[str, int]:
            return dict(conn.execute(_COUNTS, (tenant,)).fetchall())

        return await self._run("fact_counts", lambda conn: self._read(conn, "fact_counts", select))

    async def restore(self, memory: Memory) -> bool:
        """Store ``memory`` exactly as given, after its key's facts; see `RestoresFacts.restore`.

        Raises:
            SqliteMemoryError: The file failed, as for every call (see `SqliteMemory`).
        """
        plan = RestorePlan((validate_restored(memory),), batch=False)
        body = _restore_transaction(plan)
        return await self._run(
            "restore", lambda conn: self._write_and_empty_log(conn, "restore", body) == 1
        )

    async def restore_many(self, memories: Iterable[Memory]) -> int:
        """Store every fact as given, in order, all or none; see `RestoresFacts.restore_many`.

        The facts are written in one transaction.

        Raises:
            SqliteMemoryError: The file failed, as for every call (see `SqliteMemory`).
        """
        body = _restore_transaction(RestorePlan(validate_restored_many(memories), batch=True))
        return await self._run(
            "restore_many", lambda conn: self._write_and_empty_log(conn, "restore_many", body)
        )

    @staticmethod
    def _insert(conn: sqlite3.Connection, memory: Memory) -> None:
        conn.execute(_INSERT, _insert_parameters(memory))

    async def _add(self, operation: str, insert: Callable[[sqlite3.Connection], _T]) -> _T:
        # A call that adds a fact: ``insert`` in one write transaction.
        return await self._run(
            operation, lambda conn: self._write_and_empty_log(conn, operation, insert)
        )

    async def _run(self, operation: str, work: Callable[[sqlite3.Connection], _T]) -> _T:
        # Never abandoned on cancellation: the worker thread finishes the
        # call, so its effect is decided before the caller sees the cancel.
        return await anyio.to_thread.run_sync(self._locked, operation, work)

    def _locked(self, operation: str, work: Callable[[sqlite3.Connection], _T]) -> _T:
        # Runs in a worker thread. The lock is taken here, never in the event
        # loop, so a store may be shared between threads with their own loops.
        with self._lock:
            conn = self._conn
            if conn is None:
                raise StoreClosedError(operation, _closed_state(self._state))
            return work(conn)

    def _erase_alone(self, key: MemoryKey) -> int:
        # Runs in a worker thread. Another erasure of the key, by any store
        # of any process, ends before this one begins: it then finds only
        # what the other left, so each fact is counted by one receipt.
        if self._conn is None:
            raise StoreClosedError("erase", _closed_state(self._state))
        with erasing(self._path, key):
            return self._erase(key)

    def _erase(self, key: MemoryKey) -> int:
        # Runs in a worker thread: the key's facts, oldest first.
        tenant, end_user = key.tenant, key.end_user_id
        # The key's last position when the erase began, read in the first
        # batch: later facts take higher ones, so the erase has an end.
        last: int | None = None

        def delete(conn: sqlite3.Connection, rows: int) -> tuple[int, bool]:
            nonlocal last
            if last is None:
                (last,) = conn.execute(_LAST_SEQ, (tenant, end_user)).fetchone()
                if last is None:
                    return 0, True
            batch = (tenant, end_user, tenant, end_user, last, rows)
            deleted = conn.execute(_DELETE_BATCH, batch).rowcount
            return deleted, deleted < rows

        return self._in_batches("erase", delete)

    def _expire(self, tenant: str, micros: int) -> int:
        # Runs in a worker thread: the tenant's rows in key order, ``rows``
        # of them looked at per batch whatever their age, from just after
        # the last row the batch before looked at.
        after: tuple[str, int] = ("", 0)  # Before every key: end-user ids are never empty.

        def delete(conn: sqlite3.Connection, rows: int) -> tuple[int, bool]:
            nonlocal after
            bound = conn.execute(_EXPIRE_BOUND, (tenant, *after, rows - 1)).fetchone()
            if bound is None:
                return conn.execute(_EXPIRE_REST, (tenant, *after, micros)).rowcount, True
            deleted = conn.execute(_EXPIRE_RANGE, (tenant, *after, *bound, micros)).rowcount
            after = (bound[0], bound[1])
            return deleted, False

        return self._in_batches("expire", delete)

    def _in_batches(
        self, operation: str, step: Callable[[sqlite3.Connection, int], tuple[int, bool]]
    ) -> int:
        # Runs in a worker thread, batch after batch, taking the store's lock
        # for each batch only. ``step`` deletes one batch of about ``rows``
        # rows and says whether it was the last.
        target = min(max(self._busy_timeout * _BATCH_SHARE, _SHORTEST_BATCH), _LONGEST_BATCH)
        rows = _FIRST_BATCH_ROWS
        deleted = 0
        finished = False

        def batch_of(conn: sqlite3.Connection) -> int:
            nonlocal finished
            count, finished = step(conn, rows)
            return count

        conn: sqlite3.Connection | None = None
        try:
            while True:
                with self._lock:
                    if conn is None:
                        conn = self._conn
                        if conn is None:
                            raise StoreClosedError(operation, _closed_state(self._state))
                        # From here on closing waits for this deletion to end.
                        self._erasing += 1
                    started = time.monotonic()
                    try:
                        # Emptying the log waits for the last batch: it would
                        # hold the write lock while it copies every batch's
                        # pages, and SQLite copies them anyway as the log grows.
                        batch = self._delete(conn, operation, batch_of, empty_log=False)
                    except SqliteMemoryError as exc:
                        if deleted:
                            raise _partly_deleted(exc, operation, deleted) from exc.__cause__
                        raise
                    took = time.monotonic() - started
                    if finished:
                        self._retry_scrub(conn)
                        return deleted + batch
                deleted += batch
                rows = _next_batch_rows(rows, took, target)
                time.sleep(_PAUSE_FACTOR * min(took, _LONGEST_RETRY_PAUSE) + _PAUSE_MARGIN)
        finally:
            if conn is not None:
                with self._lock:
                    self._erasing -= 1
                    self._erased.notify_all()

    def _read(
        self, conn: sqlite3.Connection, operation: str, body: Callable[[sqlite3.Connection], _T]
    ) -> _T:
        self._check_file(operation)
        try:
            result = body(conn)
        except sqlite3.Error as exc:
            raise self._failure(operation, exc, may_have_taken_effect=False) from exc
        self._retry_scrub(conn)
        return result

    def _delete(
        self,
        conn: sqlite3.Connection,
        operation: str,
        body: Callable[[sqlite3.Connection], int],
        *,
        empty_log: bool = True,
    ) -> int:
        # A deletion is synced at every durability level: undone by a power
        # cut, it would bring the deleted facts back.
        relaxed = self._durability != "full"
        if relaxed:
            try:
                conn.execute("PRAGMA synchronous = FULL")
            except sqlite3.Error as exc:
                raise self._failure(operation, exc, may_have_taken_effect=False) from exc
        try:
            deleted = self._write(conn, operation, body)
        finally:
            if relaxed:
                # Left at FULL if this fails: slower, never less safe.
                with suppress(sqlite3.Error):
                    conn.execute(f"PRAGMA synchronous = {self._durability.upper()}")
        if deleted:
            self._scrub.deleted()
        if empty_log:
            self._retry_scrub(conn)
        return deleted

    def _write(
        self, conn: sqlite3.Connection, operation: str, body: Callable[[sqlite3.Connection], _T]
    ) -> _T:
        try:
            conn.execute("BEGIN IMMEDIATE")
        except sqlite3.Error as exc:
            raise self._failure(operation, exc, may_have_taken_effect=False) from exc
        try:
            result = body(conn)
            # Checked under the write lock, just before committing: a write
            # into a file that is no longer at the path would be lost.
            self._check_file(operation)
        except BaseException as exc:
            _rollback(conn)
            if isinstance(exc, sqlite3.Error):
                raise self._failure(operation, exc, may_have_taken_effect=False) from exc
            raise
        try:
            conn.execute("COMMIT")
        except sqlite3.Error as exc:
            _rollback(conn)
            raise self._failure(operation, exc, may_have_taken_effect=True) from exc
        return result

    def _write_and_empty_log(
        self, conn: sqlite3.Connection, operation: str, body: Callable[[sqlite3.Connection], _T]
    ) -> _T:
        # A write call: one write transaction, then the log emptied if a
        # deletion left bytes in it.
        result = self._write(conn, operation, body)
        self._retry_scrub(conn)
        return result

    def _retry_scrub(self, conn: sqlite3.Connection) -> None:
        # After every call while the log holds deleted bytes, without waiting.
        if self._scrub.log_pending:
            target = self._scrub.target()
            if truncate_log_at_once(conn, round(self._busy_timeout * 1000)):
                self._scrub.log_covered(target)

    def _scrub_now(self) -> bool:
        # On a connection of its own, so the store's reads go on meanwhile.
        target = self._scrub.target()
        self._check_file("scrub")
        try:
            with closing(connect(self._path, self._busy_timeout, create=False)) as conn:
                emptied = rewrite_file(conn)
        except sqlite3.Error as exc:
            raise self._failure("scrub", exc, may_have_taken_effect=False) from exc
        if emptied:
            self._scrub.covered(target)
        return emptied

    def _check_file(self, operation: str) -> None:
        try:
            identity = identify(self._path)
        except OSError as exc:
            raise StoreUnavailableError(
                operation,
                f"the database file {self._path} cannot be looked at "
                f"({errno.errorcode.get(exc.errno or 0, type(exc).__name__)})",
                may_have_taken_effect=False,
            ) from exc
        if identity != self._identity:
            raise DatabaseFileMovedError(
                operation,
                f"the database file {self._path} was deleted or replaced after the store "
                "opened it; close the store and open the path again",
                may_have_taken_effect=False,
            )

    def _failure(
        self, operation: str, error: sqlite3.Error, *, may_have_taken_effect: bool
    ) -> SqliteMemoryError:
        return store_failure(
            operation,
            self._path,
            self._busy_timeout,
            error,
            may_have_taken_effect=may_have_taken_effect,
        )

    def _connect(self) -> tuple[sqlite3.Connection, FileIdentity]:
        check_location(self._path)
        try:
            conn = connect(self._path, self._busy_timeout, create=True)
        except sqlite3.Error as exc:
            raise self._failure("open", exc, may_have_taken_effect=False) from exc
        try:
            prepare(conn, os.fspath(self._path), self._durability.upper(), self._busy_timeout)
            identity = self._identify_opened()
        except sqlite3.Error as exc:
            conn.close()
            raise self._failure("open", exc, may_have_taken_effect=False) from exc
        except BaseException:
            conn.close()
            raise
        return conn, identity

    def _identify_opened(self) -> FileIdentity:
        identity = identify(self._path)
        if identity is None:
            raise DatabaseFileMovedError(
                "open",
                f"the database file {self._path} was deleted while it was being opened",
                may_have_taken_effect=False,
            )
        return identity

    def _close(self) -> None:
        with self._lock:
            with self._state_lock:
                conn, self._conn = self._conn, None
                self._state = "closed"
            # An erase lets other calls in between its batches, this one
            # too: it goes on with the connection until it has ended.
            while self._erasing:
                self._erased.wait()
            if conn is None:
                return
            try:
                if self._scrub.pending:
                    self._scrub_at_close(conn)
            finally:
                # Closing must not fail; SQLite released what it could.
                with suppress(sqlite3.Error):
                    conn.close()

    def _scrub_at_close(self, conn: sqlite3.Connection) -> None:
        # Waits at most the busy timeout; closing goes on whatever the outcome.
        target = self._scrub.target()
        with suppress(sqlite3.Error):
            if rewrite_file(conn):
                self._scrub.covered(target)


def _memories(key: MemoryKey, rows: list[tuple[str, str, int]]) -> tuple[Memory, ...]:
    return tuple(
        Memory(memory_id, key, content, _EPOCH + micros * _MICROSECOND)
        for memory_id, content, micros in rows
    )


def _encodable(text: str) -> bool:
    """Whether ``text`` is UTF-8 text SQLite can take (no lone surrogates)."""
    try:
        text.encode()
    except UnicodeEncodeError:
        return False
    return True


def _micros(moment: datetime) -> int:
    """``moment`` (in UTC) as the file stores times: microseconds since 1970."""
    return (moment - _EPOCH) // _MICROSECOND


def _next_batch_rows(rows: int, took: float, target: float) -> int:
    """The rows of the next batch of an erase, from the time the last one took."""
    # At most twice as many, at least a quarter: one slow commit (a busy
    # disk) must not make the next batch tiny, nor a fast one huge.
    factor = min(max(target / took, 0.25), 2.0) if took > 0 else 2.0
    return min(max(int(rows * factor), _FEWEST_BATCH_ROWS), _MOST_BATCH_ROWS)


def _partly_deleted(
    error: SqliteMemoryError, operation: str, deleted: int
) -> StoreUnavailableError:
    """The error of a deletion in batches that failed after ``deleted`` facts were deleted."""
    # A file found corrupt part-way is no longer a DatabaseFileError, whose
    # promise is that nothing was deleted.
    unavailable = error if isinstance(error, StoreUnavailableError) else None
    kind = StoreUnavailableError if unavailable is None else type(unavailable)
    reason = "the file is corrupt" if unavailable is None else unavailable.reason
    return kind(
        operation,
        f"{reason}, after {deleted} facts were deleted for good: {operation} again to delete "
        "the rest",
        may_have_taken_effect=True,
    )


def _rollback(conn: sqlite3.Connection) -> None:
    if conn.in_transaction:
        # SQLite rolls back by itself when it cannot go on.
        with suppress(sqlite3.Error):
            conn.execute("ROLLBACK")


def _closed_state(state: str) -> str:
    return "not open" if state in ("new", "opening") else "closed"


def _restore_transaction(plan: RestorePlan) -> Callable[[sqlite3.Connection], int]:
    """The body of the write transaction of a restore: store the facts the plan keeps."""

    def store(conn: sqlite3.Connection) -> int:
        # Every id is judged before anything is written: a refusal leaves
        # the transaction with nothing to roll back.
        held: dict[str, Memory] = {}
        for memory in plan.facts:
            found = conn.execute(_SELECT_BY_ID, (memory.id,)).fetchone()
            if found is not None:
                held[memory.id] = _held_fact(memory, found)
        fresh = plan.to_store(held)
        conn.executemany(_INSERT, [_insert_parameters(memory) for memory in fresh])
        return len(fresh)

    return store


def _insert_parameters(memory: Memory) -> tuple[str, str, str, str, int, str, str]:
    """The parameters of `_INSERT` that store ``memory`` after its key's facts."""
    tenant, end_user = memory.key.tenant, memory.key.end_user_id
    micros = _micros(memory.created_at)
    return (tenant, end_user, memory.id, memory.content, micros, tenant, end_user)


def _held_fact(restored: Memory, row: tuple[str, str, str, int]) -> Memory:
    """The fact the file holds under the id of ``restored``, from its row."""
    tenant, end_user, content, micros = row
    key = restored.key
    if (tenant, end_user) != (key.tenant, key.end_user_id):
        # Stored under the port's rules, so it is a valid key.
        key = MemoryKey(tenant, end_user)
    return Memory(restored.id, key, content, _EPOCH + micros * _MICROSECOND)
