"""What becomes of a call whose attempt failed: decisions only, no I/O.

`_runner` drives each call on psycopg's synchronous driver (in a worker
thread) or its asynchronous one (on asyncio); both drivers only do the
I/O and ask here what to do next, so the rules exist once:

- A call whose connection broke is replayed, on a connection opened for
  the replay, only when replaying cannot change its answer: it was never
  sent, or it is idempotent (reads, and inserts of an id chosen before the
  first attempt), or it runs in a transaction whose ``COMMIT`` was not yet
  sent (the server rolls such a transaction back when its connection goes).
  A call a read-only server refused changed nothing and is replayed too,
  and so is a call that got no connection at all (the pool gave none
  within its wait bound, or a connection opened for a replay failed):
  it sent nothing.
- Otherwise the caller gets the port's store failure, whose
  ``may_have_taken_effect`` also counts an earlier attempt that broke
  after sending.
- A connection that refused a write outside a transaction would refuse
  every later one: it is dropped.
"""

from __future__ import annotations

from collections.abc import Callable, Generator, Sequence
from dataclasses import dataclass
from typing import Any, Final, Generic, TypeAlias, TypeVar

import psycopg
from psycopg import sql
from psycopg.errors import InvalidSqlStatementName, ReadOnlySqlTransaction
from psycopg.pq import TransactionStatus
from psycopg_pool import PoolClosed

from psych_runtime.memory.port import store_events

from ._errors import StoreUnavailableError
from ._translate import NoServerInTime, translate

__all__ = [
    "ATTEMPTS",
    "Call",
    "Conversation",
    "Rows",
    "Statement",
    "drops_refusing_connection",
    "failure",
    "fresh_next",
    "replay_settings",
    "replays",
]

Rows: TypeAlias = list[tuple[Any, ...]]
Statement: TypeAlias = "tuple[bytes | sql.SQL | sql.Composed, Sequence[object]]"
_T = TypeVar("_T")
Conversation: TypeAlias = Generator[Statement, tuple[Rows, int], _T]

ATTEMPTS: Final = 3
"""How often a call is tried at most: a first attempt and two replays."""


@dataclass(slots=True, eq=False)
class Call(Generic[_T]):
    """One call of the store, ready to run, and what it did so far.

    Attributes:
        operation: The method's name, for errors.
        conversation: Makes a fresh conversation for each attempt.
        replayable: Replaying it after a broken connection cannot change
            its answer.
        transaction: Run every statement in one transaction (setup, restores,
            erase). Until its ``COMMIT`` is sent, a broken connection leaves
            no trace of it, so it is replayed like a call never sent.
        changes: It may change the database. A call that only reads has no
            effect to decide, so a cancellation may interrupt it anywhere.
        sent: A statement of this call reached a connection (in any attempt).
        uncertain: An attempt broke after sending, so it may have taken
            effect.
    """

    operation: str
    conversation: Callable[[], Conversation[_T]]
    replayable: bool
    transaction: bool = False
    changes: bool = True
    sent: bool = False
    uncertain: bool = False


def replays(  # noqa: PLR0913 - what the attempt got to, each a keyword of its own
    call: Call[Any],
    exc: psycopg.Error,
    *,
    connected: bool,
    broken: bool,
    sent: bool,
    attempt: int,
) -> bool:
    """Whether attempt number ``attempt`` (from 1), failed with ``exc``, is followed by a replay.

    A replay is recorded in ``call`` and reported to the observer of the
    call, if any (such as psych-memory-otel).

    Args:
        call: The call.
        exc: What the attempt raised.
        connected: The attempt got a connection (from the pool, or opened
            for it); ``False``: it sent nothing.
        broken: The attempt's connection broke.
        sent: A statement of the attempt reached the server and, in a
            transaction, its ``COMMIT`` may have.
        attempt: The failed attempt's number.
    """
    if attempt >= ATTEMPTS:
        return False
    if not connected:
        # Nothing was sent; a closed pool stays closed. A connection opened
        # for the call that a pooler gave no server connection in the pool's
        # wait bound ends the call: it has waited for a connection twice
        # that bound, which is its promise.
        if isinstance(exc, PoolClosed | NoServerInTime):
            return False
        reason = "no connection"
    elif _harmless_replay(call, exc, broken=broken, sent=sent):
        if broken:
            reason = "connection broken"
        elif isinstance(exc, ReadOnlySqlTransaction):
            reason = "server read-only"
        else:
            reason = "prepared statement unknown"
    else:
        return False
    listener = store_events.get()
    if listener is not None:
        listener(
            "psych_memory.replay",
            {"psych_memory.attempt": attempt + 1, "psych_memory.reason": reason},
        )
    if sent and broken:
        call.uncertain = True
    return True


def _harmless_replay(call: Call[Any], exc: psycopg.Error, *, broken: bool, sent: bool) -> bool:
    # Whether another attempt cannot change the call's answer. A server that
    # refuses to write (a standby, or a primary fenced or being demoted)
    # changed nothing: a call in a transaction is rolled back whole, and of
    # the calls outside one the only ones never replayed, forget and the
    # single statement of a small erase, are each one statement. Unless an
    # earlier attempt broke after sending, the call is replayed on a fresh
    # connection, which the URL's target_session_attrs sends to a writable
    # server. A statement the server did not know as prepared did not run
    # either (psycopg's record of the connection's prepared statements was
    # out of date, as after a DEALLOCATE ALL it did not see on older
    # versions): the connection goes, and a fresh one has no such record.
    if broken:
        return call.replayable or not sent
    refused = isinstance(exc, ReadOnlySqlTransaction | InvalidSqlStatementName)
    return refused and not call.uncertain


def failure(
    call: Call[Any], exc: psycopg.Error, *, broken: bool, sent: bool, schema: str
) -> Exception:
    """The store failure of the port that the caller of a call not replayed gets.

    Args:
        call: The call.
        exc: What its last attempt raised.
        broken: That attempt's connection broke.
        sent: A statement of that attempt may have reached the server.
        schema: The store's schema, for a `SchemaVersionError`.
    """
    # A read changes nothing, whatever became of it.
    sent = sent and call.changes
    error = translate(call.operation, exc, broken=broken, sent=sent, schema=schema)
    if (
        call.uncertain
        and call.changes
        and isinstance(error, StoreUnavailableError)
        and not error.may_have_taken_effect
    ):
        # An earlier attempt may have committed before its connection broke.
        error = StoreUnavailableError(error.operation, error.reason, may_have_taken_effect=True)
    return error


def drops_refusing_connection(status: TransactionStatus) -> bool:
    """Whether a connection whose statement the server refused is closed.

    Refused as read-only, or as a prepared statement the server does not
    know. Outside a transaction it would refuse every later write (or that
    statement) too, so it is closed and the pool drops it. Inside one it stays open for the
    rollback; a later call outside one closes it.

    Args:
        status: The connection's transaction status after the refusal.
    """
    return status == TransactionStatus.IDLE


def replay_settings(
    conninfo: object, kwargs: object, *, fresh: bool
) -> tuple[str, dict[str, Any]] | None:
    """The settings of a connection opened for this attempt, or ``None`` to take the pool's.

    A replay runs on a connection opened for it, outside the pool: whatever
    broke the first attempt (a failover, an operator terminating backends
    one after another) may still be breaking the pool's other connections,
    which were opened before it, and a pool that gave the first attempt no
    connection in time may be waiting to reconnect while the server is back
    already. Replays are rare; the extra connection lives for one call. When
    the pool computes its settings per connection, the replay takes the
    pool's own next connection.

    Args:
        conninfo: The pool's ``conninfo``.
        kwargs: The pool's ``kwargs``.
        fresh: The attempt wants a connection of its own (see `fresh_next`).
    """
    if fresh and isinstance(conninfo, str) and isinstance(kwargs, dict | None):
        return conninfo, dict(kwargs or {})
    return None


def fresh_next(*, fresh: bool, connected: bool) -> bool:
    """Whether the attempt after a failed one opens a connection of its own.

    It does, unless the failed attempt opened one of its own and could not:
    the server is not reachable now, and the replay waits for the pool
    instead, which reconnects by itself (bounded by the pool's timeout).

    Args:
        fresh: The failed attempt opened a connection of its own.
        connected: It got a connection.
    """
    return connected or not fresh
