"""Errors about the database file itself, as opposed to the input of a call.

Bad arguments to the four port methods raise the port's own errors
(`TypeError` and the `InvalidInputError` family). A path that cannot be used
raises the standard `OSError` subclasses (`FileNotFoundError`,
`NotADirectoryError`, `IsADirectoryError`, `PermissionError`). What is left,
a file that is there but is not a usable memory database, raises one of
these::

    Exception
     └── SqliteMemoryError
          ├── DatabaseFileError       not SQLite, corrupt, or another application's
          ├── SchemaVersionError      written by a newer, unknown schema
          └── EraseIncompleteError    deleted, but the log could not yet be emptied

Messages name the file and the rule; they never contain stored facts or keys.
"""

from __future__ import annotations

__all__ = [
    "DatabaseFileError",
    "EraseIncompleteError",
    "SchemaVersionError",
    "SqliteMemoryError",
]


class SqliteMemoryError(Exception):
    """The database file of a `SqliteMemory` cannot be used as asked."""


class DatabaseFileError(SqliteMemoryError):
    """The file is not a SQLite database, is corrupt, or belongs to another application.

    Raised when the store is opened, before anything is written to the file.
    """


class SchemaVersionError(SqliteMemoryError):
    """The file was written by a newer version of this adapter than the one running.

    Opening it would mean guessing at a layout this version does not know, so
    the store refuses, and leaves the file untouched. Upgrade
    ``psych-memory-sqlite`` to open it.

    Attributes:
        found: The schema version recorded in the file.
        supported: The newest schema version this adapter knows.
    """

    found: int
    supported: int

    def __init__(self, message: str, *, found: int, supported: int) -> None:
        super().__init__(message)
        self.found = found
        self.supported = supported


class EraseIncompleteError(SqliteMemoryError):
    """A `forget` or `erase` deleted its facts, but their old bytes may still be on disk.

    The deletion itself is committed: the facts are gone from every later
    `recall`. What failed is the step after it, emptying the write-ahead log,
    because another connection kept reading an older snapshot or kept the
    write lock for longer than the busy timeout. The old bytes stay in the
    ``-wal`` file until the next `forget`, `erase` or close that succeeds in
    emptying it; retrying the call (which then returns ``False`` or ``0``)
    tries again.
    """
