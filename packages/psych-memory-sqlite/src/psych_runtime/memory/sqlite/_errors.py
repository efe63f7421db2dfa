"""The adapter's own errors, each a subclass of the port's store failures.

Bad arguments to the port methods raise the port's own errors (`TypeError`
and the `InvalidInputError` family). A path that cannot be used raises the
standard `OSError` subclasses at open (`FileNotFoundError`,
`NotADirectoryError`, `IsADirectoryError`, `PermissionError`). Everything
else is a `MemoryStoreError` of the port, so code that knows only the port can
catch it:

    MemoryStoreError (port)
     └── SqliteMemoryError
          ├── DatabaseFileError          not SQLite, corrupt, another application's, damaged
          ├── SchemaVersionError         also the port's SchemaVersionError
          └── StoreUnavailableError      also the port's StoreUnavailableError
               └── DatabaseFileMovedError  the path no longer names the file opened

`DatabaseUnavailableError`, the name of `StoreUnavailableError` in 0.1, is the
same class.

A ``sqlite3`` exception never reaches the caller bare: it is the
``__cause__`` of one of these. Messages name the operation, the file and the
rule; they never contain stored facts or keys. Every error pickles with its
attributes.
"""

from __future__ import annotations

from psych_runtime.memory.port import MemoryStoreError
from psych_runtime.memory.port import SchemaVersionError as PortSchemaVersionError
from psych_runtime.memory.port import StoreUnavailableError as PortStoreUnavailableError

__all__ = [
    "DatabaseFileError",
    "DatabaseFileMovedError",
    "DatabaseUnavailableError",
    "SchemaVersionError",
    "SqliteMemoryError",
    "StoreUnavailableError",
]


class SqliteMemoryError(MemoryStoreError):
    """A `SqliteMemory` could not do what was asked, through no fault of the caller."""


class DatabaseFileError(SqliteMemoryError):
    """The file is not a SQLite database, is corrupt, belongs to another application or is damaged.

    Raised by `SqliteMemory.open` before anything is written to the file,
    and by a call that finds a page of the file corrupt.
    """


class SchemaVersionError(SqliteMemoryError, PortSchemaVersionError):
    """The file was written by a newer version of this adapter than the one running.

    Opening it would mean guessing at a layout this version does not know, so
    the store refuses and leaves the file untouched. Upgrade
    ``psych-memory-sqlite`` to open it. The attributes are the port's:
    ``where`` (the file), ``found`` and ``expected`` (schema versions).
    """


class StoreUnavailableError(SqliteMemoryError, PortStoreUnavailableError):
    """The file could not be used in time, or SQLite failed to read or write it.

    The most common case: another connection (in this or another process)
    kept the file locked for longer than the busy timeout. The attributes are
    the port's: ``operation``, ``reason`` and ``may_have_taken_effect``, which
    is ``False`` whenever SQLite rolled the call's transaction back or never
    began it, and ``True`` only when committing itself failed, or when an
    erase in batches failed after some of them had committed (erase again
    to delete the rest).
    """


DatabaseUnavailableError = StoreUnavailableError
"""The name of `StoreUnavailableError` in 0.1: the same class, kept importable."""


class DatabaseFileMovedError(StoreUnavailableError):
    """The path no longer names the file the store opened: it was deleted or replaced.

    Writing on would put facts into a file nobody can open again (or report
    deletions from the wrong one), so every call refuses, and changes
    nothing (``may_have_taken_effect`` is ``False``; an erase in batches
    whose earlier batches had committed says ``True``). Put the file back,
    or close the store and open the path again.
    """
