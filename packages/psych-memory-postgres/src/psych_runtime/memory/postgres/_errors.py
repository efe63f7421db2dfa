"""Errors of the PostgreSQL adapter, beside the port's input errors.

::

    Exception
     └── PostgresMemoryError         anything this adapter raises of its own
          ├── SchemaVersionError     the tables are missing, older or newer
          └── StoreUnavailableError  the server could not complete the call

Invalid input still raises the port's errors (`TypeError` and the
``InvalidInputError`` family) before the adapter talks to the server. No
message here repeats a key or the content of a fact.
"""

from __future__ import annotations

__all__ = ["PostgresMemoryError", "SchemaVersionError", "StoreUnavailableError"]


class PostgresMemoryError(Exception):
    """Base class of the errors raised by the PostgreSQL adapter itself."""


class SchemaVersionError(PostgresMemoryError):
    """The database does not hold the schema this code was written for.

    Raised by `PostgresMemory.setup` when the schema recorded in the database
    is newer than this code, and by the first operation of a store when its
    tables are missing, older (run ``setup()``) or newer (upgrade the code).

    Attributes:
        schema: The PostgreSQL schema the store was given.
        found: The version recorded in the database, ``None`` if there is none.
        expected: The version this code reads and writes.
    """

    schema: str
    found: int | None
    expected: int

    def __init__(self, schema: str, found: int | None, expected: int) -> None:
        if found is None:
            advice = "has no memory tables yet: call setup() first"
        elif found > expected:
            advice = (
                f"is at schema version {found}, newer than the {expected} this code "
                "knows: upgrade psych-memory-postgres"
            )
        else:
            advice = f"is at schema version {found}, older than {expected}: call setup()"
        super().__init__(f"schema {schema!r} {advice}")
        self.schema = schema
        self.found = found
        self.expected = expected

    def __reduce__(self) -> tuple[type[SchemaVersionError], tuple[str, int | None, int]]:
        return (type(self), (self.schema, self.found, self.expected))


class StoreUnavailableError(PostgresMemoryError):
    """The server could not complete the call: it is down, or the connection broke.

    Every operation is a single statement, so an interrupted call left nothing
    half-written: a ``forget``, ``recall`` or ``erase`` either happened whole
    or not at all, and so did a ``remember``, though the caller cannot tell
    which (``recall`` can). The next call uses a healthy connection and
    succeeds once the server answers again. The psycopg error is chained as
    ``__cause__``.

    Attributes:
        operation: The method that failed, such as ``"remember"``.
        reason: What went wrong, in words, without any value.
    """

    operation: str
    reason: str

    def __init__(self, operation: str, reason: str) -> None:
        super().__init__(
            f"{operation} did not complete: {reason}; nothing was half-written, "
            "and the next call can succeed once the server answers"
        )
        self.operation = operation
        self.reason = reason

    def __reduce__(self) -> tuple[type[StoreUnavailableError], tuple[str, str]]:
        return (type(self), (self.operation, self.reason))
