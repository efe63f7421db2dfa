"""The SQLite adapter: every fact in one database file, deleted for real."""

from __future__ import annotations

import errno
import os
import sqlite3
import threading
from collections.abc import Callable, Iterable, Iterator
from contextlib import closing, contextmanager, suppress
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Final, Literal, TypeAlias, TypeVar, get_args

import anyio

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

from . import _statements as sql
from ._connection import connect, prepare, prepare_reader
from ._deletions import erase_step, expire_step, in_batches
from ._erasing import erasing
from ._errors import DatabaseFileMovedError, SqliteMemoryError, StoreUnavailableError
from ._failures import store_failure
from ._file import FileIdentity, check_busy_timeout, check_location, check_path, identify
from ._group import GroupCommit
from ._readers import Readers
from ._scrub import ScrubState, rewrite_file, truncate_log_at_once
from ._threads import abandon, finish
from ._writer import WriteCall, Writer

if TYPE_CHECKING:
    from typing import Self

__all__ = ["Durability", "SqliteMemory"]

Durability: TypeAlias = Literal["full", "normal"]
"""How hard a commit works to reach the disk; see `SqliteMemory`."""

_T = TypeVar("_T")

_EPOCH: Final = datetime(1970, 1, 1, tzinfo=UTC)
_MICROSECOND: Final = timedelta(microseconds=1)

# Reader connections per store; reads beyond them wait for one. A read
# spends most of its time in Python building its facts, under the GIL, so
# more connections buy no speed and each costs a page cache of its own.
_READERS: Final = 2


class SqliteMemory(MemoryStore):
    """Facts kept in one SQLite database file, which survive restarts and crashes.

    Open the store before use and close it afterwards, most simply with
    ``async with``:

        async with SqliteMemory("memory.sqlite3") as memory:
            await memory.remember("acme", "user-42", "prefers the Berlin warehouse")

    Opening creates the file if it is missing, checks it, and lays out or
    migrates its schema, so a path that cannot be used fails there and not at
    the first call. Every blocking SQLite call runs in a worker thread,
    never on the event loop, so the store works on asyncio and trio alike.
    Several stores, and several processes, may open the same file at once.

    Writes queue for the store's one writer connection, which commits every
    call queued at the moment it starts as one transaction, a savepoint
    around each call: one commit and one sync for the group, each call with
    its own outcome, in the order they were queued. Reads run beside it on
    up to two reader connections, so a read never waits behind a commit.

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
    `StoreUnavailableError`). A write cancelled while still queued never
    runs. A call that has started (a read in its worker thread, a write
    whose group the writer took) always finishes, even when the caller's
    cancel scope expires: its effect is decided (made or not) before the
    cancellation reaches the caller.

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
        "_deleting",
        "_deletions_ended",
        "_durability",
        "_identity",
        "_name",
        "_path",
        "_readers",
        "_scrub",
        "_state",
        "_state_lock",
        "_writer",
    )

    def __init__(
        self,
        path: str | os.PathLike[str],
        *,
        busy_timeout: float = 5.0,
        durability: Durability = "full",
    ) -> None:
        self._path = check_path(path)
        self._name = os.fspath(self._path)
        self._busy_timeout = check_busy_timeout(busy_timeout)
        if durability not in get_args(Durability):
            if not isinstance(durability, str):
                raise TypeError(f"durability must be a str, not {type(durability).__qualname__}")
            raise ValueError('durability must be "full" or "normal"')
        self._durability: Durability = durability
        # Guards the state and the connections' arrival; held for a moment.
        self._state_lock = threading.Lock()
        # Erases and expiries in progress, which closing waits for.
        self._deleting = 0
        self._deletions_ended = threading.Condition(self._state_lock)
        # The writer's connection, its queue and the readers, from opening on.
        self._conn: sqlite3.Connection | None = None
        self._writer: Writer | None = None
        self._readers: Readers | None = None
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
            conn, identity = await finish(self._connect)
        except BaseException:
            with self._state_lock:
                self._state = "closed"
            raise
        with self._state_lock:
            # aclose() may have run while the file was being opened.
            state: str = self._state
            if state != "closed":
                self._conn, self._identity = conn, identity
                readers = Readers(self._open_reader, _READERS)
                self._readers = readers
                self._writer = Writer(
                    GroupCommit(
                        conn,
                        durability=self._durability,
                        busy_timeout=self._busy_timeout,
                        readers=readers,
                        scrub=self._scrub,
                        check_file=self._check_file,
                        failure=self._failure,
                    )
                )
                self._state = "open"
                return
        await finish(conn.close)

    async def aclose(self) -> None:
        """Close the store; calls in progress finish first. Closing twice is harmless.

        When a scrub is pending, closing runs it (as `scrub`, on the store's
        own connection), waiting at most the busy timeout, and closes
        whatever the outcome: `scrub_pending` tells. Closing never raises,
        for that or for anything SQLite reports while closing; the store is
        closed afterwards.
        """
        await finish(self._close)

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
            conn.execute(sql.INSERT, _insert_parameters(memory))
            return memory

        return await self._write(WriteCall("remember", insert))

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
            (held,) = conn.execute(sql.COUNT_UP_TO, full).fetchone()
            if held >= max_facts:
                return None
            memory = Memory(new_memory_id(), key, content, datetime.now(UTC))
            conn.execute(sql.INSERT, _insert_parameters(memory))
            return memory

        return await self._write(WriteCall("remember_within_limit", insert))

    async def forget(self, scope: Scope, end_user_id: str, memory_id: str) -> bool:
        """Delete one fact (see `MemoryStore.forget`) and wipe its bytes from the files.

        Returns once the deletion is committed, the row zeroed and the
        write-ahead log emptied (when other connections are in the way, the
        log is emptied as soon as they allow); copies in unused page space
        go at `scrub` or close (see `scrub_pending`). An id that no store could have handed out (see
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

        if not known_shape:
            self._check_open("forget")
            return False

        def delete(conn: sqlite3.Connection) -> int:
            cursor = conn.execute(sql.DELETE_ONE, (key.tenant, key.end_user_id, memory_id))
            return cursor.rowcount

        return await self._write(WriteCall("forget", delete, deletes=True)) > 0

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
            rows = conn.execute(sql.SELECT, (key.tenant, key.end_user_id, sql_limit)).fetchall()
            return _memories(key, rows)

        return await self._read("recall", select)

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
                rows = conn.execute(sql.SELECT, (key.tenant, key.end_user_id, size)).fetchall()
                return _memories(key, rows)
            if not _encodable(after):
                # No fact holds an id that is not UTF-8 text (a lone
                # surrogate), and SQLite could not be handed it.
                raise StalePageError
            rows = conn.execute(
                sql.SELECT_AFTER, (after, key.tenant, key.end_user_id, size)
            ).fetchall()
            if not rows:
                raise StalePageError
            return () if rows[0][0] is None else _memories(key, rows)

        return await self._read("recall_page", select)

    async def erase(self, scope: Scope, end_user_id: str) -> int:
        """Delete every fact of this end user (see `MemoryStore.erase`) and wipe their bytes.

        Returns once the deletion is committed, the rows zeroed and the
        write-ahead log emptied (when other connections are in the way, the
        log is emptied as soon as they allow); copies in unused page space
        go at `scrub` or close: await
        `scrub` before telling the end user that no byte remains (see
        `scrub_pending`).

        A key of up to a thousand facts is erased in one transaction. A
        larger one is erased in batches, oldest facts first, each batch its
        own write transaction committed with ``synchronous = FULL``. Each
        holds the file's write lock for about a tenth of the busy timeout
        (0.5 s at the default), and between two batches the store pauses
        with both the write lock and its writer released, so that other
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
        return await finish(self._erase_alone, key)

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
            return int(conn.execute(sql.COUNT_EXPIRED, (tenant, micros)).fetchone()[0])

        return await self._read("count_expired", select)

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
        return await finish(self._expire, tenant, micros)

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
        self._check_open("scrub")
        return await finish(self._scrub_now)

    async def tenants(self) -> tuple[str, ...]:
        """Every tenant with at least one fact; see `ListsEndUsers.tenants`.

        Raises:
            SqliteMemoryError: The file failed, as for every call (see `SqliteMemory`).
        """

        def select(conn: sqlite3.Connection) -> tuple[str, ...]:
            return tuple(tenant for (tenant,) in conn.execute(sql.TENANTS).fetchall())

        return await self._read("tenants", select)

    async def end_users(self, scope: Scope) -> tuple[str, ...]:
        """Every end user of the tenant with a fact; see `ListsEndUsers.end_users`.

        Raises:
            SqliteMemoryError: The file failed, as for every call (see `SqliteMemory`).
        """
        tenant = validate_scope(scope)

        def select(conn: sqlite3.Connection) -> tuple[str, ...]:
            rows = conn.execute(sql.END_USERS, (tenant,)).fetchall()
            return tuple(end_user for (end_user,) in rows)

        return await self._read("end_users", select)

    async def fact_counts(self, scope: Scope) -> dict[str, int]:
        """How many facts each end user of the tenant holds; see `CountsFacts.fact_counts`.

        One query, which counts without reading the facts.

        Raises:
            SqliteMemoryError: The file failed, as for every call (see `SqliteMemory`).
        """
        tenant = validate_scope(scope)

        def select(conn: sqlite3.Connection) -> dict[str, int]:
            return dict(conn.execute(sql.COUNTS, (tenant,)).fetchall())

        return await self._read("fact_counts", select)

    async def restore(self, memory: Memory) -> bool:
        """Store ``memory`` exactly as given, after its key's facts; see `RestoresFacts.restore`.

        Raises:
            SqliteMemoryError: The file failed, as for every call (see `SqliteMemory`).
        """
        plan = RestorePlan((validate_restored(memory),), batch=False)
        return await self._write(WriteCall("restore", _restore_transaction(plan))) == 1

    async def restore_many(self, memories: Iterable[Memory]) -> int:
        """Store every fact as given, in order, all or none; see `RestoresFacts.restore_many`.

        The facts are written in one transaction.

        Raises:
            SqliteMemoryError: The file failed, as for every call (see `SqliteMemory`).
        """
        body = _restore_transaction(RestorePlan(validate_restored_many(memories), batch=True))
        return await self._write(WriteCall("restore_many", body))

    def _check_open(self, operation: str) -> None:
        with self._state_lock:
            if self._state != "open":
                raise StoreClosedError(operation, _closed_state(self._state))

    async def _write(self, call: WriteCall[_T]) -> _T:
        # Queued for the writer. A caller cancelled while its call is still
        # queued withdraws it, and it never runs; once its group has
        # started, the caller waits, shielded, for the outcome, which it
        # then gets as if it had not been cancelled (the cancellation
        # reaches it at its next checkpoint).
        with self._state_lock:
            writer = self._writer
            if self._state != "open" or writer is None:
                raise StoreClosedError(call.operation, _closed_state(self._state))
        writer.submit(call)
        try:
            await abandon(writer.serve, call)
        except anyio.get_cancelled_exc_class():
            if writer.withdraw(call):
                raise
            # Shielded: the caller's scope is cancelled already, and would
            # stop the wait before its thread even started.
            with anyio.CancelScope(shield=True):
                return await finish(call.wait)
        return call.outcome()

    async def _read(self, operation: str, body: Callable[[sqlite3.Connection], _T]) -> _T:
        # A worker thread finishes the read even when the caller is cancelled.
        return await finish(self._read_now, operation, body)

    def _read_now(self, operation: str, body: Callable[[sqlite3.Connection], _T]) -> _T:
        # Without the state lock: once set, the readers stay, and closing
        # them is what makes a late read fail.
        readers = self._readers
        if self._state != "open" or readers is None:
            raise StoreClosedError(operation, _closed_state(self._state))
        self._check_file(operation)

        def read(conn: sqlite3.Connection) -> _T:
            result = body(conn)
            if self._scrub.log_pending:
                # A reader may empty the log too, when nobody is in the way.
                target = self._scrub.target()
                if truncate_log_at_once(conn, round(self._busy_timeout * 1000)):
                    self._scrub.log_covered(target)
            return result

        try:
            return readers.read(read)
        except sqlite3.Error as exc:
            raise self._failure(operation, exc, may_have_taken_effect=False) from exc
        except RuntimeError:
            # The store closed between the check above and the read.
            raise StoreClosedError(operation, "closed") from None

    @contextmanager
    def _long_deletion(self, operation: str) -> Iterator[Writer]:
        # An erase or an expiry, which closing waits for.
        with self._state_lock:
            writer = self._writer
            if self._state != "open" or writer is None:
                raise StoreClosedError(operation, _closed_state(self._state))
            self._deleting += 1
        try:
            yield writer
        finally:
            with self._state_lock:
                self._deleting -= 1
                self._deletions_ended.notify_all()

    def _erase_alone(self, key: MemoryKey) -> int:
        # Runs in a worker thread. Another erasure of the key, by any store
        # of any process, ends before this one begins: it then finds only
        # what the other left, so each fact is counted by one receipt.
        self._check_open("erase")
        with erasing(self._path, key), self._long_deletion("erase") as writer:
            step = erase_step(key.tenant, key.end_user_id)
            return in_batches(writer, "erase", step, self._busy_timeout, group_first=True)

    def _expire(self, tenant: str, micros: int) -> int:
        # Runs in a worker thread: the tenant's rows in key order.
        with self._long_deletion("expire") as writer:
            step = expire_step(tenant, micros)
            return in_batches(writer, "expire", step, self._busy_timeout, group_first=False)

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
            identity = identify(self._name)
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

    def _open_reader(self) -> sqlite3.Connection:
        conn = connect(self._path, self._busy_timeout, create=False)
        try:
            prepare_reader(conn)
        except BaseException:
            conn.close()
            raise
        return conn

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
        with self._state_lock:
            self._state = "closed"
            # An erase or an expiry lets other calls in between its
            # batches, and goes on until it has ended.
            while self._deleting:
                self._deletions_ended.wait()
            conn, writer, readers = self._conn, self._writer, self._readers
            self._conn = None
        if conn is None or writer is None or readers is None:
            return
        # Calls queued before closing run first.
        writer.close()
        readers.close()
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


def _closed_state(state: str) -> str:
    return "not open" if state in ("new", "opening") else "closed"


def _restore_transaction(plan: RestorePlan) -> Callable[[sqlite3.Connection], int]:
    """The body of the write transaction of a restore: store the facts the plan keeps."""

    def store(conn: sqlite3.Connection) -> int:
        # Every id is judged before anything is written: a refusal leaves
        # the transaction with nothing to roll back.
        held: dict[str, Memory] = {}
        for memory in plan.facts:
            found = conn.execute(sql.SELECT_BY_ID, (memory.id,)).fetchone()
            if found is not None:
                held[memory.id] = _held_fact(memory, found)
        fresh = plan.to_store(held)
        conn.executemany(sql.INSERT, [_insert_parameters(memory) for memory in fresh])
        return len(fresh)

    return store


def _insert_parameters(memory: Memory) -> tuple[str, str, str, str, int, str, str]:
    """The parameters of `INSERT` that store ``memory`` after its key's facts."""
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
