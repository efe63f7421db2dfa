"""The layout of the database file, its version, and the steps between versions.

The file says what it is in two header fields SQLite reserves for this:
``application_id`` marks it as a Psych memory file, and ``user_version`` is
the schema version. Each entry of `MIGRATIONS` turns version ``n`` into
``n + 1``; a new schema is a new entry at the end, never an edit of an old
one, so that every file ever written can be brought forward step by step.
"""

from __future__ import annotations

import sqlite3
from typing import Final

from ._errors import DatabaseFileError, SchemaVersionError

__all__ = [
    "APPLICATION_ID",
    "MIGRATIONS",
    "SCHEMA_VERSION",
    "check_schema",
    "prepare_schema",
]

# "PsMe" in ASCII: tells a Psych memory file from any other SQLite file.
APPLICATION_ID: Final = 0x50734D65

MIGRATIONS: Final[tuple[tuple[str, ...], ...]] = (
    # 0 -> 1: the first layout. The table is clustered on the key: one end
    # user's facts sit side by side in key order, so every per-user operation
    # reads or deletes a few neighbouring pages, however large the file grows.
    # ``seq`` numbers a key's facts in insertion order; each new fact takes
    # one more than the key's highest, so the order never depends on clocks.
    (
        """
        CREATE TABLE psych_memory_fact (
            tenant TEXT NOT NULL,
            end_user_id TEXT NOT NULL,
            seq INTEGER NOT NULL,
            id TEXT NOT NULL,
            content TEXT NOT NULL,
            created_at INTEGER NOT NULL,
            PRIMARY KEY (tenant, end_user_id, seq)
        ) STRICT, WITHOUT ROWID
        """,
    ),
    # 1 -> 2: ids are unique across the store and found without a scan, so
    # `restore` can tell a fact it already holds from a different one with
    # the same id, whichever key holds it.
    ("CREATE UNIQUE INDEX psych_memory_fact_id ON psych_memory_fact (id)",),
)

SCHEMA_VERSION: Final = len(MIGRATIONS)
"""The schema version this adapter writes and reads."""

_HEADER: Final = (
    "SELECT (SELECT application_id FROM pragma_application_id),"
    " (SELECT user_version FROM pragma_user_version),"
    " (SELECT count(*) FROM sqlite_schema),"
    " (SELECT count(*) FROM sqlite_schema WHERE type = 'table' AND name = 'psych_memory_fact')"
)


def check_schema(conn: sqlite3.Connection, name: str) -> int:
    """Check, without writing, that the file can hold memory; return its version.

    Raises:
        DatabaseFileError: The file holds another application's data, or is
            marked as a memory file but lacks its table.
        SchemaVersionError: The file has a newer schema than `SCHEMA_VERSION`.
    """
    # One statement, so all four come from one snapshot: read separately,
    # another process could lay out the file in between.
    application_id, version, objects, tables = conn.execute(_HEADER).fetchone()
    if application_id == APPLICATION_ID:
        if version > SCHEMA_VERSION:
            raise SchemaVersionError(name, int(version), SCHEMA_VERSION)
        if version >= 1 and not tables:
            raise DatabaseFileError(
                f"{name} is marked as a Psych memory file, but its table is missing: "
                "the file is damaged; refusing to use it (restore it from a backup)"
            )
        if version == 0 and objects:
            raise DatabaseFileError(
                f"{name} is marked as a Psych memory file without a schema version, "
                "but it is not empty: the file is damaged; refusing to use it"
            )
        return int(version)
    if application_id == 0 and version == 0 and objects == 0:
        return 0  # An empty database: ours to lay out.
    raise DatabaseFileError(
        f"{name} is a SQLite database of another application (it is not empty and "
        "not marked as a Psych memory file); refusing to write to it"
    )


def prepare_schema(conn: sqlite3.Connection, name: str) -> None:
    """Bring the file to `SCHEMA_VERSION`, in one write transaction.

    The version is read again under the write lock, so two processes opening
    the same new file at once lay it out exactly once.

    Raises:
        DatabaseFileError: The file holds another application's data.
        SchemaVersionError: The file has a newer schema than `SCHEMA_VERSION`.
    """
    if check_schema(conn, name) == SCHEMA_VERSION:
        return
    conn.execute("BEGIN IMMEDIATE")
    try:
        version = check_schema(conn, name)
        for step in MIGRATIONS[version:]:
            for statement in step:
                conn.execute(statement)
        conn.execute(f"PRAGMA application_id = {APPLICATION_ID}")
        conn.execute(f"PRAGMA user_version = {SCHEMA_VERSION}")
    except BaseException:
        conn.execute("ROLLBACK")
        raise
    conn.execute("COMMIT")
