"""Opening a connection to the database file and making it ready for the store."""

from __future__ import annotations

import os
import sqlite3
from pathlib import Path
from urllib.parse import quote

from ._errors import SqliteMemoryError
from ._schema import check_schema, prepare_schema

__all__ = ["connect", "prepare"]


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


def prepare(conn: sqlite3.Connection, name: str, synchronous: str) -> None:
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
    (mode,) = conn.execute("PRAGMA journal_mode = WAL").fetchone()
    if mode != "wal":
        raise SqliteMemoryError(
            f"SQLite cannot keep a write-ahead log for {name} (journal mode stayed {mode!r})"
        )
    conn.execute(f"PRAGMA synchronous = {synchronous}")
    conn.execute("PRAGMA secure_delete = ON")
    # Temporary tables and indices never touch the disk.
    conn.execute("PRAGMA temp_store = MEMORY")
    prepare_schema(conn, name)
