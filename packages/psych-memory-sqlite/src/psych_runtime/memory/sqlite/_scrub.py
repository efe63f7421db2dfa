"""Scrubbing the files after a deletion, and knowing whether it is still pending.

A deleted row is zeroed (``secure_delete``) where it lies, but two kinds of
older copies survive that:

- the write-ahead log keeps older images of every page the deletion
  changed, until a checkpoint writes the new pages back and cuts the log to
  zero bytes;
- when SQLite moves rows between pages (a page splits, or neighbours are
  rebalanced), it rewrites a page from its end and leaves the bytes of rows
  that moved away in the page's unused middle. Such a copy is not a row, so
  deleting the row does not zero it: only rewriting the file (``VACUUM``)
  removes it.

The log is emptied after every deletion when nobody is in the way (after
the last batch of an erase in batches), which costs what the deletion
wrote to it. Rewriting costs about as much as copying the file, so it is
done by the store's ``scrub()`` and at close, never inside a call. Both can
only finish while no other connection reads an older snapshot or writes,
which is not this store's to decide: the deletion is committed and answered
first, and the scrub follows when it can.
"""

from __future__ import annotations

import sqlite3
import threading
from typing import Final

from ._failures import is_busy

__all__ = ["ScrubState", "rewrite_file", "truncate_log", "truncate_log_at_once"]

_TRUNCATE_LOG: Final = "PRAGMA wal_checkpoint(TRUNCATE)"


class ScrubState:
    """Deletions a store committed, against those an emptied log and a rewritten file cover.

    Thread-safe on a lock of its own, so that `SqliteMemory.scrub` can run
    beside the store's calls instead of queueing behind them.
    """

    __slots__ = ("_deletions", "_lock", "_log_emptied", "_rewritten")

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._deletions = 0
        self._log_emptied = 0
        self._rewritten = 0

    @property
    def pending(self) -> bool:
        """Whether a committed deletion has not been followed by a rewrite and an emptied log."""
        with self._lock:
            return self._rewritten < self._deletions

    @property
    def log_pending(self) -> bool:
        """Whether a committed deletion has not been followed by an emptied log."""
        # Asked after every call: read without the lock, since a reader
        # that sees an update late only tries to empty the log once more
        # (or once later), and reading an int is atomic.
        return self._log_emptied < self._deletions

    def deleted(self) -> None:
        """Record a committed deletion."""
        with self._lock:
            self._deletions += 1

    def target(self) -> int:
        """The deletions committed so far; a scrub begun after now covers them."""
        with self._lock:
            return self._deletions

    def log_covered(self, target: int) -> None:
        """Record that the log was emptied after ``target`` deletions had committed."""
        with self._lock:
            self._log_emptied = max(self._log_emptied, target)

    def covered(self, target: int) -> None:
        """Record that the file was rewritten and the log emptied after ``target`` deletions."""
        with self._lock:
            self._rewritten = max(self._rewritten, target)
            self._log_emptied = max(self._log_emptied, target)


def truncate_log(conn: sqlite3.Connection) -> bool:
    """Empty the log, waiting at most the connection's busy timeout; ``True`` if emptied.

    Raises:
        sqlite3.Error: SQLite failed.
    """
    (busy, _, _) = conn.execute(_TRUNCATE_LOG).fetchone()
    return not busy


def truncate_log_at_once(conn: sqlite3.Connection, busy_timeout_ms: int) -> bool:
    """Empty the log only if nobody is in the way right now; ``True`` if emptied.

    Never waits and never raises: it runs after a call's own effect is
    committed, which a reader elsewhere must not make slow or failed.
    """
    try:
        conn.execute("PRAGMA busy_timeout = 0")
        try:
            return truncate_log(conn)
        finally:
            conn.execute(f"PRAGMA busy_timeout = {busy_timeout_ms}")
    except sqlite3.Error:
        return False


def rewrite_file(conn: sqlite3.Connection) -> bool:
    """Rewrite the file from its live rows, then empty the log; ``True`` if both finished.

    Waits at most the connection's busy timeout for each step. The
    connection must not be in a transaction.

    Raises:
        sqlite3.Error: SQLite failed, other than by finding the file busy.
    """
    try:
        # The new pages are built from the live rows only, in memory, so
        # no temporary file ever holds a copy of them.
        conn.execute("PRAGMA temp_store = MEMORY")
        conn.execute("VACUUM")
    except sqlite3.OperationalError as exc:
        if is_busy(exc):
            return False
        raise
    return truncate_log(conn)
