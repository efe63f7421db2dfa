"""What a psycopg failure means for the caller, as a store failure of the port.

Every psycopg exception that reaches a method of the store is turned into
one of the port's store failures here, with the psycopg error as
``__cause__``. Messages name the exception class and SQLSTATE only: the
server's own text can quote values (a key, a fact), so it never appears.
"""

from __future__ import annotations

from typing import Final

import psycopg
from psycopg import errors as pg_errors
from psycopg_pool import PoolClosed, PoolTimeout

from psych_runtime.memory.port import MemoryStoreError

from ._errors import PostgresMemoryError, SchemaVersionError, StoreUnavailableError
from ._schema import SCHEMA_VERSION

__all__ = ["NoServerInTime", "never_reached_server", "translate"]

# What PgBouncer says, with SQLSTATE 08P01, before it closes a client that
# waited for a server connection and never got one: the statement reached
# no server. (A server that dies while serving the client comes through as
# the server's own error, or "server conn crashed?": sent, maybe done.)
_POOLER_NEVER_SENT: Final = frozenset(
    {
        "query_wait_timeout",
        "pgbouncer cannot connect to server",
        "server login has been failing, try again later (server_login_retry)",
    }
)


class NoServerInTime(psycopg.OperationalError):
    """A new connection got no answer to an empty query within the pool's wait bound.

    A server answers one at once. A pooler in front of it answers only once
    it lends the connection a server connection: in session mode, where
    each of its clients keeps one for as long as it stays connected, none
    may come while other clients (idle ones included) hold every one, and
    with PgBouncer's ``query_wait_timeout = 0`` the pooler never says so.
    The connection is closed: nothing was sent on it but the empty query.
    """


# The server says the tables (or their schema) are not there: dropped under
# a running store, or never set up.
_MISSING_LAYOUT: Final = (
    pg_errors.UndefinedTable,
    pg_errors.InvalidSchemaName,
    pg_errors.UndefinedColumn,
)

# SQLSTATE classes that mean "not now" rather than "never": resources,
# operator intervention, system errors, connection trouble, rollbacks forced
# by concurrency.
_TRANSIENT_CLASSES: Final = frozenset({"08", "40", "53", "57", "58"})


# Failures that guarantee the call changed nothing: it never reached a
# connection, or the server rolled its statement back.
_REASONS: Final[tuple[tuple[type[psycopg.Error], str], ...]] = (
    (PoolTimeout, "no connection of the pool became free within its wait bound"),
    (
        NoServerInTime,
        (
            "the connection pooler gave a connection opened for the call no server "
            "connection within the pool's wait bound"
        ),
    ),
    (PoolClosed, "the psycopg pool is closed"),
    (pg_errors.QueryCanceled, "the statement ran past statement_timeout or was cancelled"),
    (pg_errors.LockNotAvailable, "a lock was not granted within lock_timeout"),
    (
        pg_errors.ReadOnlySqlTransaction,
        "the PostgreSQL server is read-only (a standby, or a primary fenced or being demoted)",
    ),
)


def translate(
    operation: str, exc: psycopg.Error, *, broken: bool, sent: bool, schema: str
) -> MemoryStoreError:
    """The store failure to raise, ``from exc``, for a psycopg error.

    Args:
        operation: The method that failed.
        exc: What psycopg raised.
        broken: The connection was lost with the error, so the server never
            said how the statement ended.
        sent: The operation's statement had been sent when it failed.
        schema: The store's PostgreSQL schema, for a missing-layout error.
    """
    kind = type(exc).__name__
    state = f", SQLSTATE {exc.sqlstate}" if exc.sqlstate else ""
    if isinstance(exc, _MISSING_LAYOUT) and not broken:
        return SchemaVersionError(schema, None, SCHEMA_VERSION)
    if isinstance(exc, psycopg.DataError) and exc.sqlstate is None and not broken:
        # psycopg refused a value the server sent: of this layout's columns
        # only a time can be one it cannot load, a row someone else wrote
        # (this adapter never does) before year 1 or after year 9999.
        return PostgresMemoryError(
            f"{operation} failed: a stored fact's created_at lies outside the years "
            f"1 to 9999 that this adapter reads ({kind}); it changed nothing"
        )
    reason, may_have_taken_effect = _unavailable(exc, broken=broken, sent=sent)
    if reason is None:
        return PostgresMemoryError(
            f"{operation} failed: the PostgreSQL server refused the statement "
            f"({kind}{state}); it changed nothing"
        )
    return StoreUnavailableError(
        operation, f"{reason} ({kind}{state})", may_have_taken_effect=may_have_taken_effect
    )


def never_reached_server(exc: psycopg.Error) -> bool:
    """Whether a pooler in front of the server says the statement reached no server.

    A pooler in transaction mode waits for a server connection at the start
    of a transaction only, so what the call sent before in the same attempt
    either was in that transaction (nothing ran) or was a statement of its
    own that changes nothing when replayed (a read, or an insert that found
    its row taken): the attempt is as if never sent.

    Args:
        exc: What the attempt raised.
    """
    return exc.sqlstate == "08P01" and exc.diag.message_primary in _POOLER_NEVER_SENT


def _unavailable(exc: psycopg.Error, *, broken: bool, sent: bool) -> tuple[str | None, bool]:
    # Why the store is unavailable, and whether the call may have taken
    # effect; no reason when the server refused the statement for good.
    if never_reached_server(exc):
        return "the connection pooler gave the call no server connection in time", False
    if broken:
        return "the connection to the PostgreSQL server broke", sent
    for kind, reason in _REASONS:
        if isinstance(exc, kind):
            return reason, False
    if exc.sqlstate is None:
        # Not a server's answer: whatever failed, the statement may have run.
        return "the PostgreSQL driver failed", sent
    # The connection still works, so the server answered: in autocommit mode
    # (or inside the transaction the pool rolls back) the statement had no
    # effect at all.
    if exc.sqlstate[:2] in _TRANSIENT_CLASSES:
        return "the PostgreSQL server could not complete the call", False
    return None, False
