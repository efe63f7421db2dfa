"""The SQLite adapter: every fact in one database file, deleted for real."""

from __future__ import annotations

import errno
import math
import os
import re
import sqlite3
import threading
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Final, Literal, TypeAlias, TypeVar, get_args
from urllib.parse import quote

import anyio.to_thread

from psych_runtime.memory.port import (
    Memory,
    MemoryStore,
    Scope,
    memory_key,
    validate_content,
    validate_limit,
    validate_memory_id,
)

from ._errors import DatabaseFileError, EraseIncompleteError, SqliteMemoryError
from ._schema import check_schema, prepare_schema

if TYPE_CHECKING:
    from types import TracebackType
    from typing import Self

__all__ = ["Durability", "SqliteMemory"]

Durability: TypeAlias = Literal["full", "normal"]
"""How hard a commit works to reach the disk; see `SqliteMemory`."""

_T = TypeVar("_T")

_EPOCH: Final = datetime(1970, 1, 1, tzinfo=UTC)
_MICROSECOND: Final = timedelta(microseconds=1)
# SQLite integers are signed 64-bit; a larger limit means "all of them" anyway.
_MAX_SQL_LIMIT: Final = 2**63 - 1
# The ids this adapter hands out. Anything else cannot name a stored fact,
# and is answered without touching the file (or binding text SQLite would
# refuse, such as a lone surrogate).
_ID_SHAPE: Final = re.compile(r"[0-9a-f]{32}")
_SQLITE_NOTADB: Final = 26
_SQLITE_CORRUPT: Final = 11

# The new fact's position is computed in the same statement that inserts it,
# under the write lock, so concurrent writers (other processes included)
# cannot both take the same one.
_INSERT: Final = (
    "INSERT INTO psych_memory_fact (tenant, end_user_id, seq, id, content, created_at) "
    "SELECT ?, ?, coalesce(max(seq), 0) + 1, ?, ?, ? FROM psych_memory_fact "
    "WHERE tenant = ? AND end_user_id = ?"
)
_SELECT: Final = (
    "SELECT id, content, created_at FROM psych_memory_fact "
    "WHERE tenant = ? AND end_user_id = ? ORDER BY seq LIMIT ?"
)
_DELETE_ONE: Final = "DELETE FROM psych_memory_fact WHERE tenant = ? AND end_user_id = ? AND id = ?"
_DELETE_KEY: Final = "DELETE FROM psych_memory_fact WHERE tenant = ? AND end_user_id = ?"
_TRUNCATE_LOG: Final = "PRAGMA wal_checkpoint(TRUNCATE)"


class SqliteMemory(MemoryStore):
    """Facts kept in one SQLite database file, which survive restarts and crashes.

    Open the store before use and close it afterwards, most simply with
    ``async with``::

        async with SqliteMemory("memory.sqlite3") as memory:
            await memory.remember("acme", "user-42", "prefers the Berlin warehouse")

    Opening checks the file and lays out or migrates its schema, so a path
    that cannot be used fails there and not at the first call. Every blocking
    SQLite call runs in a worker thread (`anyio.to_thread.run_sync`), never on
    the event loop, so the store works on asyncio and trio alike. Within one
    store, calls share one connection behind a `threading.Lock`; several
    stores, and several processes, may open the same file at once.

    Facts are kept in insertion order: each takes the next number of its
    key's sequence, so the order never depends on clocks. One end user's
    facts are stored side by side, so every call reads or deletes a few
    neighbouring pages however large the file grows. `forget` and `erase`
    delete for real: SQLite overwrites the deleted rows with zeros
    (``secure_delete``), and the write-ahead log is checkpointed and
    truncated before the call returns, so the deleted text is left in neither
    the database file nor its side files.

    Args:
        path: The database file. It is created if missing; its directory must
            exist. Relative paths are taken from the working directory at the
            time the store is constructed.
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
        ValueError: ``path`` is empty, ``busy_timeout`` is negative or not
            finite, or ``durability`` is not one of the two levels.
    """

    __slots__ = (
        "_busy_timeout",
        "_conn",
        "_durability",
        "_lock",
        "_path",
        "_scrub_pending",
        "_state",
    )

    def __init__(
        self,
        path: str | os.PathLike[str],
        *,
        busy_timeout: float = 5.0,
        durability: Durability = "full",
    ) -> None:
        self._path = _check_path(path)
        self._busy_timeout = _check_busy_timeout(busy_timeout)
        if durability not in get_args(Durability):
            if not isinstance(durability, str):
                raise TypeError(f"durability must be a str, not {type(durability).__qualname__}")
            raise ValueError('durability must be "full" or "normal"')
        self._durability: Durability = durability
        self._lock = threading.Lock()
        self._conn: sqlite3.Connection | None = None
        self._state: Literal["new", "opening", "open", "closed"] = "new"
        # Set when a deletion committed but the log could not be emptied yet;
        # the next forget, erase or close tries again.
        self._scrub_pending = False

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

    def __repr__(self) -> str:
        return f"SqliteMemory({os.fspath(self._path)!r}, state={self._state!r})"

    async def open(self) -> None:
        """Open the file, check it, and lay out or migrate its schema.

        Raises:
            RuntimeError: The store was already opened (a closed store cannot
                be reopened: construct a new one).
            FileNotFoundError: The directory of ``path`` does not exist.
            NotADirectoryError: A parent of ``path`` is not a directory.
            IsADirectoryError: ``path`` is a directory.
            PermissionError: The file or its directory cannot be read and written.
            DatabaseFileError: The file is not a SQLite database, is corrupt,
                or is a database of another application.
            SchemaVersionError: The file was written by a newer schema version.
            SqliteMemoryError: SQLite cannot keep a write-ahead log for the file.
            sqlite3.OperationalError: SQLite failed otherwise (for example the
                file stayed locked past the busy timeout).
        """
        with self._lock:
            if self._state != "new":
                raise RuntimeError(f"this SqliteMemory is already {self._state}")
            self._state = "opening"
        try:
            conn = await anyio.to_thread.run_sync(self._connect)
        except BaseException:
            with self._lock:
                self._state = "closed"
            raise
        with self._lock:
            # aclose() may have run while the file was being opened.
            state: str = self._state
            if state != "closed":
                self._conn = conn
                self._state = "open"
                return
        await anyio.to_thread.run_sync(conn.close)

    async def aclose(self) -> None:
        """Close the store; calls in progress finish first. Closing twice is harmless.

        Raises:
            EraseIncompleteError: A deletion earlier could not empty the
                write-ahead log, and neither could closing. The store is
                closed all the same.
        """
        await anyio.to_thread.run_sync(self._close)

    async def __aenter__(self) -> Self:
        await self.open()
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.aclose()

    async def remember(self, scope: Scope, end_user_id: str, content: str) -> Memory:
        """Store a new fact, as `MemoryStore.remember`; it is on disk when this returns.

        Raises:
            TypeError: An argument has the wrong type.
            InvalidKeyError: The tenant or end-user id breaks a key rule.
            InvalidContentError: The content breaks a content rule.
            RuntimeError: The store is not open.
            sqlite3.OperationalError: The file stayed locked past the busy timeout.
        """
        key = memory_key(scope, end_user_id)
        content = validate_content(content)

        def insert(conn: sqlite3.Connection) -> Memory:
            # 128 random bits, as the in-process adapter uses.
            memory = Memory(os.urandom(16).hex(), key, content, datetime.now(UTC))
            micros = (memory.created_at - _EPOCH) // _MICROSECOND
            tenant, end_user = key.tenant, key.end_user_id
            conn.execute(_INSERT, (tenant, end_user, memory.id, content, micros, tenant, end_user))
            return memory

        return await self._run(insert)

    async def forget(self, scope: Scope, end_user_id: str, memory_id: str) -> bool:
        """Delete one fact, as `MemoryStore.forget`, and wipe its bytes from the files.

        Raises:
            TypeError: An argument has the wrong type.
            InvalidKeyError: The tenant or end-user id breaks a key rule.
            RuntimeError: The store is not open.
            EraseIncompleteError: The fact is deleted, but another connection
                kept the write-ahead log from being emptied.
            sqlite3.OperationalError: The file stayed locked past the busy timeout.
        """
        key = memory_key(scope, end_user_id)
        memory_id = validate_memory_id(memory_id)
        known_shape = _ID_SHAPE.fullmatch(memory_id) is not None

        def delete(conn: sqlite3.Connection) -> bool:
            deleted = False
            if known_shape:
                cursor = conn.execute(_DELETE_ONE, (key.tenant, key.end_user_id, memory_id))
                deleted = cursor.rowcount > 0
            if deleted or self._scrub_pending:
                self._scrub(conn)
            return deleted

        return await self._run(delete)

    async def recall(
        self, scope: Scope, end_user_id: str, *, limit: int | None = None
    ) -> tuple[Memory, ...]:
        """Return the facts of this end user oldest first, as `MemoryStore.recall`.

        Raises:
            TypeError: An argument has the wrong type (a `bool` limit included).
            InvalidKeyError: The tenant or end-user id breaks a key rule.
            InvalidLimitError: ``limit`` is negative.
            RuntimeError: The store is not open.
            sqlite3.OperationalError: The file stayed locked past the busy timeout.
        """
        key = memory_key(scope, end_user_id)
        checked = validate_limit(limit)
        sql_limit = _MAX_SQL_LIMIT if checked is None else min(checked, _MAX_SQL_LIMIT)

        def select(conn: sqlite3.Connection) -> tuple[Memory, ...]:
            rows = conn.execute(_SELECT, (key.tenant, key.end_user_id, sql_limit)).fetchall()
            return tuple(
                Memory(memory_id, key, content, _EPOCH + micros * _MICROSECOND)
                for memory_id, content, micros in rows
            )

        return await self._run(select)

    async def erase(self, scope: Scope, end_user_id: str) -> int:
        """Delete every fact of this end user, as `MemoryStore.erase`, and wipe their bytes.

        Raises:
            TypeError: An argument has the wrong type.
            InvalidKeyError: The tenant or end-user id breaks a key rule.
            RuntimeError: The store is not open.
            EraseIncompleteError: The facts are deleted, but another connection
                kept the write-ahead log from being emptied.
            sqlite3.OperationalError: The file stayed locked past the busy timeout.
        """
        key = memory_key(scope, end_user_id)

        def delete(conn: sqlite3.Connection) -> int:
            deleted: int = conn.execute(_DELETE_KEY, (key.tenant, key.end_user_id)).rowcount
            if deleted or self._scrub_pending:
                self._scrub(conn)
            return deleted

        return await self._run(delete)

    async def _run(self, operation: Callable[[sqlite3.Connection], _T]) -> _T:
        return await anyio.to_thread.run_sync(self._locked, operation)

    def _locked(self, operation: Callable[[sqlite3.Connection], _T]) -> _T:
        # Runs in a worker thread. The lock is taken here, never in the event
        # loop, so a store may be shared between threads with their own loops.
        with self._lock:
            conn = self._conn
            if conn is None:
                raise RuntimeError(_not_open(self._state))
            return operation(conn)

    def _scrub(self, conn: sqlite3.Connection) -> None:
        # The deleted rows are already zeroed in the pages that replaced them,
        # but older copies of those pages sit in the write-ahead log (and, for
        # a moment, the database file) until a checkpoint writes the new pages
        # back and the log is cut to zero bytes.
        self._scrub_pending = True
        busy, _, _ = conn.execute(_TRUNCATE_LOG).fetchone()
        if busy:
            raise EraseIncompleteError(
                f"the deletion is committed, but the write-ahead log of {self._path} "
                "could not be emptied within the busy timeout, because another "
                "connection kept using it; the deleted bytes stay in the log until a "
                "later forget, erase or close empties it"
            )
        self._scrub_pending = False

    def _connect(self) -> sqlite3.Connection:
        path = self._path
        _check_location(path)
        uri = f"file:{quote(os.fspath(path))}?mode=rwc"
        conn = sqlite3.connect(
            uri,
            uri=True,
            timeout=self._busy_timeout,
            isolation_level=None,
            check_same_thread=False,
            cached_statements=16,
        )
        try:
            self._prepare(conn)
        except sqlite3.DatabaseError as exc:
            conn.close()
            if exc.sqlite_errorcode in (_SQLITE_NOTADB, _SQLITE_CORRUPT):
                raise DatabaseFileError(
                    f"{path} is not a SQLite database, or is corrupt ({exc})"
                ) from exc
            raise
        except BaseException:
            conn.close()
            raise
        return conn

    def _prepare(self, conn: sqlite3.Connection) -> None:
        name = os.fspath(self._path)
        # Read before writing anything: a foreign or newer file must be left
        # exactly as it was found.
        check_schema(conn, name)
        (mode,) = conn.execute("PRAGMA journal_mode = WAL").fetchone()
        if mode != "wal":
            raise SqliteMemoryError(
                f"SQLite cannot keep a write-ahead log for {name} (journal mode stayed {mode!r})"
            )
        conn.execute(f"PRAGMA synchronous = {self._durability.upper()}")
        conn.execute("PRAGMA secure_delete = ON")
        # Temporary tables and indices never touch the disk.
        conn.execute("PRAGMA temp_store = MEMORY")
        prepare_schema(conn, name)

    def _close(self) -> None:
        with self._lock:
            conn, self._conn = self._conn, None
            self._state = "closed"
            if conn is None:
                return
            try:
                if self._scrub_pending:
                    self._scrub(conn)
            finally:
                conn.close()


def _check_path(path: object) -> Path:
    if isinstance(path, os.PathLike):
        path = os.fspath(path)
    if not isinstance(path, str):
        raise TypeError(
            f"path must be a str or an os.PathLike of str, not {type(path).__qualname__}"
        )
    if not path:
        raise ValueError("path must not be empty")
    if "\x00" in path:
        raise ValueError("path must not contain a NUL character")
    return Path(path).absolute()


def _check_busy_timeout(busy_timeout: object) -> float:
    if isinstance(busy_timeout, bool) or not isinstance(busy_timeout, int | float):
        raise TypeError(
            f"busy_timeout must be a number of seconds, not {type(busy_timeout).__qualname__}"
        )
    if not math.isfinite(busy_timeout) or busy_timeout < 0:
        raise ValueError("busy_timeout must be a finite number of seconds >= 0")
    return float(busy_timeout)


def _check_location(path: Path) -> None:
    # SQLite's own message for all of these is "unable to open database file";
    # saying which rule broke is worth a few system calls at open.
    parent = path.parent
    if not parent.exists():
        raise FileNotFoundError(
            errno.ENOENT, "the directory of path does not exist", os.fspath(parent)
        )
    if not parent.is_dir():
        raise NotADirectoryError(
            errno.ENOTDIR, "the parent of path is not a directory", os.fspath(parent)
        )
    if path.is_dir():
        raise IsADirectoryError(
            errno.EISDIR, "path is a directory, not a database file", os.fspath(path)
        )
    if path.exists() and not os.access(path, os.R_OK | os.W_OK):
        raise PermissionError(
            errno.EACCES, "the database file must be readable and writable", os.fspath(path)
        )
    # The write-ahead log and its index are files beside the database.
    if not os.access(parent, os.W_OK | os.X_OK):
        raise PermissionError(
            errno.EACCES,
            "the directory of path must be writable (SQLite keeps its log there)",
            os.fspath(parent),
        )


def _not_open(state: str) -> str:
    if state in ("new", "opening"):
        return "this SqliteMemory is not open yet: use 'async with' or 'await open()'"
    return "this SqliteMemory is closed"
