"""Opening a connection to the database file and making it ready for the store."""

from __future__ import annotations

import os
import sqlite3
import time
from pathlib import Path
from typing import Final
from urllib.parse import quote

from ._errors import SqliteMemoryError
from ._failures import is_busy
from ._schema import check_schema, prepare_schema

__all__ = ["connect", "prepare", "prepare_reader"]

_FIRST_PAUSE: Final = 0.001
_LONGEST_PAUSE: Final = 0.05


def connect(path: Path, busy_timeout: float, *, create: bool) -> sqlite3.Connection:
    """Connect to ``path`` in autocommit mode, usable from any one thread at a time.

    Raises:
        sqlite3.Error: SQLite cannot open the file.
    """
    mode = "rwc" if create else "rw"
    # A URI, so that a missing file is created only when asked for.
    return sqlite3.connect(
        f"file:{quote(os.fspath(path))}?mode={mode}",
        uri=True,
        timeout=busy_timeout,
        isolation_level=None,
        check_same_thread=False,
        cached_statements=16,
    )


def prepare(conn: sqlite3.Connection, name: str, synchronous: str, busy_timeout: float) -> None:
    """Check the file, switch it to write-ahead logging and lay out or migrate its schema.

    Raises:
        DatabaseFileError: The file is another application's, or damaged.
        SchemaVersionError: The file has a newer schema.
        SqliteMemoryError: SQLite cannot keep a write-ahead log for the file.
        sqlite3.Error: SQLite failed.
    """
    # Read before writing anything: a foreign, newer or damaged file must
    # be left exactly as it was found.
    check_schema(conn, name)
    mode = _use_write_ahead_log(conn, busy_timeout)
    if mode != "wal":
        raise SqliteMemoryError(
            f"SQLite cannot keep a write-ahead log for {name} (journal mode stayed {mode!r})"
        )
    conn.execute(f"PRAGMA synchronous = {synchronous}")
    conn.execute("PRAGMA secure_delete = ON")
    # Temporary tables and indices never touch the disk.
    conn.execute("PRAGMA temp_store = MEMORY")
    prepare_schema(conn, name)


def prepare_reader(conn: sqlite3.Connection) -> None:
    """Make a connection to a file the store has opened one of its readers.

    Raises:
        sqlite3.Error: SQLite failed.
    """
    # A reader never writes: a bug that tried would fail instead of
    # writing outside the writer's transactions.
    conn.execute("PRAGMA query_only = ON")
    conn.execute("PRAGMA temp_store = MEMORY")


def _use_write_ahead_log(conn: sqlite3.Connection, busy_timeout: float) -> str:
    """Switch the file to write-ahead logging; return the journal mode it is in.

    Raises:
        sqlite3.Error: SQLite failed, or the file stayed locked past ``busy_timeout``.
    """
    # The switch takes a read lock and then asks for the write lock while
    # holding it, and SQLite answers that with SQLITE_BUSY at once instead
    # of waiting the busy timeout. Stores opening a new file together (the
    # file starts in rollback mode) would then fail; they wait here instead.
    deadline = time.monotonic() + busy_timeout
    pause = _FIRST_PAUSE
    while True:
        try:
            (mode,) = conn.execute("PRAGMA journal_mode = WAL").fetchone()
        except sqlite3.OperationalError as exc:
            if not is_busy(exc) or time.monotonic() + pause > deadline:
                raise
        else:
            return str(mode)
        time.sleep(pause)
        pause = min(2 * pause, _LONGEST_PAUSE)
