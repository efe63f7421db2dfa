"""Scrubbing the write-ahead log after a deletion, and knowing whether it is still pending.

A deleted row is zeroed (``secure_delete``) in the pages that replace it,
but older copies of those pages stay in the write-ahead log until a
checkpoint writes the new pages back and cuts the log to zero bytes. That
checkpoint can only finish while no other connection is reading or writing
the log, which is not this store's to decide, so the deletion is committed
and answered first and the scrub follows when it can.
"""

from __future__ import annotations

import sqlite3
import threading
from typing import Final

__all__ = ["ScrubState", "truncate_log", "truncate_log_at_once"]

_TRUNCATE_LOG: Final = "PRAGMA wal_checkpoint(TRUNCATE)"


class ScrubState:
    """Deletions a store committed, against those an emptied log is known to cover.

    Thread-safe on a lock of its own, so that `SqliteMemory.scrub` can run
    beside the store's calls instead of queueing behind them.
    """

    __slots__ = ("_deletions", "_lock", "_scrubbed")

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._deletions = 0
        self._scrubbed = 0

    @property
    def pending(self) -> bool:
        """Whether a committed deletion has not been followed by an emptied log yet."""
        with self._lock:
            return self._scrubbed < self._deletions

    def deleted(self) -> None:
        """Record a committed deletion."""
        with self._lock:
            self._deletions += 1

    def target(self) -> int:
        """The deletions committed so far; an emptied log begun after now covers them."""
        with self._lock:
            return self._deletions

    def covered(self, target: int) -> None:
        """Record that the log was emptied after ``target`` deletions had committed."""
        with self._lock:
            self._scrubbed = max(self._scrubbed, target)


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
