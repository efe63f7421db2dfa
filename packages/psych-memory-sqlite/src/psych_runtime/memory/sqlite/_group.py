"""One group of write calls: one transaction, a savepoint per call, one commit.

The group commits with a full sync when any of its calls deletes, whatever
the store's durability: a deletion undone by a power cut would bring the
deleted facts back. Just before committing, the file is checked to still
be the one the store opened (a write into a file no longer at its path
would be lost). After a commit that deleted, the log is emptied once, with
the store's readers held back for that moment, before any deletion of the
group returns.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable
from contextlib import suppress
from typing import Final, Protocol

from ._errors import SqliteMemoryError, StoreUnavailableError
from ._readers import Readers
from ._scrub import ScrubState, truncate_log_at_once
from ._writer import WriteCall

__all__ = ["GroupCommit"]


class Failure(Protocol):
    """The store's error for an operation's SQLite error."""

    def __call__(
        self, operation: str, error: sqlite3.Error, *, may_have_taken_effect: bool
    ) -> SqliteMemoryError: ...


FileCheck = Callable[[str], None]
"""Raises the store's error for an operation when the file moved or cannot be looked at."""

_SAVEPOINT: Final = "SAVEPOINT psych_memory_call"
_RELEASE: Final = "RELEASE psych_memory_call"
_ROLLBACK_TO: Final = "ROLLBACK TO psych_memory_call"


class GroupCommit:
    """Runs a group of the writer's calls on its connection (see the module)."""

    __slots__ = (
        "_busy_timeout",
        "_check_file",
        "_conn",
        "_durability",
        "_failure",
        "_readers",
        "_scrub",
    )

    def __init__(  # noqa: PLR0913 - one for each part of the store a group touches
        self,
        conn: sqlite3.Connection,
        *,
        durability: str,
        busy_timeout: float,
        readers: Readers,
        scrub: ScrubState,
        check_file: FileCheck,
        failure: Failure,
    ) -> None:
        self._conn = conn
        self._durability = durability
        self._busy_timeout = busy_timeout
        self._readers = readers
        self._scrub = scrub
        self._check_file = check_file
        self._failure = failure

    def __call__(self, group: list[WriteCall[object]]) -> Callable[[], None] | None:
        """Run ``group``, recording every call's outcome; return the log's emptying, if due."""
        conn = self._conn
        deletes = any(call.deletes for call in group)
        relaxed = deletes and self._durability != "full"
        try:
            if relaxed:
                conn.execute("PRAGMA synchronous = FULL")
            try:
                committed = self._commit(conn, group)
            finally:
                if relaxed:
                    # Left at FULL if this fails: slower, never less safe.
                    with suppress(sqlite3.Error):
                        conn.execute(f"PRAGMA synchronous = {self._durability.upper()}")
        except sqlite3.Error as exc:
            for call in group:
                call.fail(self._failed(call.operation, exc, may_have_taken_effect=False))
            return None
        if any(call.deletes and call.outcome() for call in committed):
            self._scrub.deleted()
        if not self._scrub.log_pending:
            return None
        if deletes and not any(call.deletes and call.empties_log for call in committed):
            # A batch of a larger deletion: the log is emptied after its last.
            return None
        return self.empty_log

    def empty_log(self) -> None:
        """Empty the log if it holds deleted bytes and nobody else reads it right now."""
        if not self._scrub.log_pending:
            return
        target = self._scrub.target()
        with self._readers.quiet(self._busy_timeout) as quiet:
            if quiet and truncate_log_at_once(self._conn, round(self._busy_timeout * 1000)):
                self._scrub.log_covered(target)

    def _failed(
        self, operation: str, error: sqlite3.Error, *, may_have_taken_effect: bool
    ) -> SqliteMemoryError:
        # As if raised ``from error``, which the caller's thread will raise.
        failure = self._failure(operation, error, may_have_taken_effect=may_have_taken_effect)
        failure.__cause__ = error
        return failure

    def _commit(
        self, conn: sqlite3.Connection, group: list[WriteCall[object]]
    ) -> list[WriteCall[object]]:
        # The calls that committed; every other call of the group has failed.
        conn.execute("BEGIN IMMEDIATE")
        try:
            ran = self._run(conn, group)
        except BaseException:
            _rollback(conn)
            for call in group:
                call.fail(_undone(call.operation, "the writer was interrupted"))
            raise
        if not ran:
            _rollback(conn)
            return []
        try:
            self._check_file(ran[0].operation)
        except SqliteMemoryError as exc:
            _rollback(conn)
            for call in ran:
                call.fail(_undone(call.operation, exc))
            return []
        try:
            conn.execute("COMMIT")
        except sqlite3.Error as exc:
            _rollback(conn)
            for call in ran:
                call.fail(self._failed(call.operation, exc, may_have_taken_effect=True))
            return []
        return ran

    def _run(
        self, conn: sqlite3.Connection, group: list[WriteCall[object]]
    ) -> list[WriteCall[object]]:
        # Each call's body, in order; a call that fails is rolled back to
        # its savepoint and the others go on. A lone call needs none.
        alone = len(group) == 1
        ran: list[WriteCall[object]] = []
        for index, call in enumerate(group):
            try:
                if not alone:
                    conn.execute(_SAVEPOINT)
                result = call.body(conn)
                if not alone:
                    conn.execute(_RELEASE)
            except Exception as exc:  # noqa: BLE001 - the call's own error, told to it alone
                if isinstance(exc, sqlite3.Error):
                    call.fail(self._failed(call.operation, exc, may_have_taken_effect=False))
                else:
                    call.fail(exc)
                if alone:
                    return []
                if conn.in_transaction:
                    with suppress(sqlite3.Error):
                        conn.execute(_ROLLBACK_TO)
                        conn.execute(_RELEASE)
                if not conn.in_transaction:
                    # SQLite rolled the whole transaction back (a full disk,
                    # an I/O error): the calls before were undone with it,
                    # and those after cannot run in it.
                    for other in [*ran, *group[index + 1 :]]:
                        other.fail(_undone(other.operation, "SQLite rolled back the call's group"))
                    return []
            else:
                call.succeed(result)
                ran.append(call)
        return ran


def _undone(operation: str, cause: str | SqliteMemoryError) -> SqliteMemoryError:
    """The error of a call whose group was rolled back, for ``cause``: it changed nothing."""
    if isinstance(cause, StoreUnavailableError):
        return type(cause)(operation, cause.reason, may_have_taken_effect=False)
    reason = cause if isinstance(cause, str) else str(cause)
    return StoreUnavailableError(operation, reason, may_have_taken_effect=False)


def _rollback(conn: sqlite3.Connection) -> None:
    if conn.in_transaction:
        # SQLite rolls back by itself when it cannot go on.
        with suppress(sqlite3.Error):
            conn.execute("ROLLBACK")
