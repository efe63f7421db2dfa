"""Errors of the PostgreSQL adapter, as subclasses of the port's store failures.

    MemoryStoreError (port)
     ├── PostgresMemoryError            anything this adapter raises of its own
     │    ├── SchemaVersionError        also the port's SchemaVersionError
     │    └── StoreUnavailableError     also the port's StoreUnavailableError
     │         └── ConnectionRefusedByServerError
     └── StoreClosedError (port)        raised as it is

Code written against the port catches these as the port's classes; code
that knows this adapter may catch the subclasses. Invalid input still raises
the port's errors (`TypeError` and the ``InvalidInputError`` family) before
the adapter talks to the server. No message here repeats a key, the content
of a fact, a password or the server's own text about a statement (which can
quote values): the psycopg error is kept as ``__cause__`` for whoever needs
it. The one exception is `ConnectionRefusedByServerError`, which says why the
server refused a new connection (no fact is involved), with any password
hidden.
"""

from __future__ import annotations

from typing import Any

from psych_runtime.memory import port

__all__ = [
    "ConnectionRefusedByServerError",
    "PostgresMemoryError",
    "SchemaVersionError",
    "StoreUnavailableError",
]


class PostgresMemoryError(port.MemoryStoreError):
    """Base class of the errors raised by the PostgreSQL adapter itself."""


class SchemaVersionError(port.SchemaVersionError, PostgresMemoryError):
    """The database does not hold the schema this code was written for.

    Raised by `PostgresMemory.setup` when the schema recorded in the database
    is newer than this code, and by an operation when the tables are missing
    (never set up, or dropped under a running store), older (run ``setup()``)
    or newer (upgrade the code). Nothing was changed.

    Attributes:
        schema: The PostgreSQL schema the store was given.
        where: ``"PostgreSQL schema '<schema>'"``, as the port names places.
        found: The version recorded in the database, ``None`` if there is none.
        expected: The version this code reads and writes.
        schema_exists: ``False`` when the PostgreSQL schema itself does not
            exist (often a mistyped name); then ``found`` is ``None``.
    """

    schema: str
    schema_exists: bool

    def __init__(
        self, schema: str, found: int | None, expected: int, *, schema_exists: bool = True
    ) -> None:
        super().__init__(f"PostgreSQL schema {schema!r}", found, expected)
        if not schema_exists:
            advice = "does not exist: check its name, or call setup() to create it"
        elif found is None:
            advice = "has no memory tables: call setup() first"
        elif found > expected:
            advice = (
                f"is at schema version {found}, newer than the {expected} this code "
                "knows: upgrade psych-memory-postgres"
            )
        else:
            advice = f"is at schema version {found}, older than {expected}: call setup()"
        # The port's message is generic; this one says which call fixes it.
        self.args = (f"{self.where} {advice}",)
        self.schema = schema
        self.schema_exists = schema_exists

    def __reduce__(self) -> tuple[Any, ...]:
        return (
            _rebuild,
            (
                type(self),
                (self.schema, self.found, self.expected),
                {"schema_exists": self.schema_exists},
            ),
        )


class StoreUnavailableError(port.StoreUnavailableError, PostgresMemoryError):
    """The server could not complete the call in time, or the connection broke.

    ``may_have_taken_effect`` is ``False`` when PostgreSQL guarantees that the
    statement was rolled back (a timeout, a lock not granted, an error the
    server reported on a working connection) or that it never ran (no
    connection in time); ``True`` only when the connection broke after the
    statement was sent, so its outcome is unknown. The psycopg error is
    chained as ``__cause__``.

    Attributes:
        operation: The method that failed, such as ``"remember"``.
        reason: What went wrong, in words, without any value.
        may_have_taken_effect: Whether the call may have changed the store.
    """


class ConnectionRefusedByServerError(StoreUnavailableError):
    """The server answered a new connection with a refusal, when the store opened.

    A wrong password, a role or database that does not exist, a bad option
    or too many connections: waiting for the pool would not change the
    answer, so opening fails at once. The message carries the server's own
    words (libpq's), with any password of the connection string hidden.
    Nothing was changed.

    Attributes:
        server_message: What the server (or libpq) said, on one line, with
            the password hidden.
    """

    server_message: str

    def __init__(self, operation: str, server_message: str) -> None:
        super().__init__(
            operation,
            f"the PostgreSQL server refused the connection: {server_message}",
            may_have_taken_effect=False,
        )
        self.server_message = server_message

    def __reduce__(self) -> tuple[Any, ...]:
        return (type(self), (self.operation, self.server_message))


def _rebuild(
    cls: type[BaseException], args: tuple[object, ...], kwargs: dict[str, object]
) -> BaseException:
    # Pickle calls this to rebuild an error whose constructor takes keywords.
    return cls(*args, **kwargs)
