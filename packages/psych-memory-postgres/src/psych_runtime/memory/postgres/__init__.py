"""The PostgreSQL memory adapter, for deployments beyond one machine.

`PostgresMemory` keeps facts in one table of a PostgreSQL schema, reached
through a psycopg 3 pool, and runs on asyncio and on trio. See the
documentation for setup, operation and the cost of each choice.
"""

from ._errors import PostgresMemoryError, SchemaVersionError, StoreUnavailableError
from ._schema import DEFAULT_SCHEMA, SCHEMA_VERSION
from ._store import Pool, PostgresMemory
from ._version import __version__ as __version__

__all__ = [
    "DEFAULT_SCHEMA",
    "SCHEMA_VERSION",
    "Pool",
    "PostgresMemory",
    "PostgresMemoryError",
    "SchemaVersionError",
    "StoreUnavailableError",
]
