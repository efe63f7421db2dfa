"""The embedded durable memory adapter: one SQLite file, real deletes.

`SqliteMemory` keeps every fact in one database file on this machine. Facts
survive restarts and crashes, several processes may share the file, and
`forget` and `erase` leave no copy of the deleted text in the file or its
side files once the write-ahead log is scrubbed. `open_url` opens one from a
``sqlite:`` URL.
"""

from ._errors import (
    DatabaseFileError,
    DatabaseFileMovedError,
    DatabaseUnavailableError,
    SchemaVersionError,
    SqliteMemoryError,
    StoreUnavailableError,
)
from ._memory import Durability, SqliteMemory
from ._schema import SCHEMA_VERSION
from ._url import open_url
from ._version import __version__ as __version__

__all__ = [
    "SCHEMA_VERSION",
    "DatabaseFileError",
    "DatabaseFileMovedError",
    "DatabaseUnavailableError",
    "Durability",
    "SchemaVersionError",
    "SqliteMemory",
    "SqliteMemoryError",
    "StoreUnavailableError",
    "open_url",
]
