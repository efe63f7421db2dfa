"""The PostgreSQL memory adapter, for deployments beyond one machine.

`PostgresMemory` keeps facts in one table of a PostgreSQL schema, reached
through a psycopg 3 pool, and runs on asyncio and on trio. `open_url` opens
one from a ``postgresql://`` URL. See the documentation for setup,
operation, failures, time bounds and the cost of each choice.
"""

from ._errors import (
    ConnectionRefusedByServerError,
    PostgresMemoryError,
    SchemaVersionError,
    StoreUnavailableError,
)
from ._schema import DEFAULT_SCHEMA, SCHEMA_VERSION
from ._store import (
    DEFAULT_LOCK_TIMEOUT,
    DEFAULT_POOL_TIMEOUT,
    DEFAULT_STATEMENT_TIMEOUT,
    Pool,
    PostgresMemory,
)
from ._url import open_url
from ._version import __version__ as __version__

__all__ = [
    "DEFAULT_LOCK_TIMEOUT",
    "DEFAULT_POOL_TIMEOUT",
    "DEFAULT_SCHEMA",
    "DEFAULT_STATEMENT_TIMEOUT",
    "SCHEMA_VERSION",
    "ConnectionRefusedByServerError",
    "Pool",
    "PostgresMemory",
    "PostgresMemoryError",
    "SchemaVersionError",
    "StoreUnavailableError",
    "open_url",
]
