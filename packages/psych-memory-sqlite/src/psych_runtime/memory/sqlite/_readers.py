"""The store's readers: connections of their own, reading while the writer writes.

In write-ahead-log mode a reader sees the last commit made before its
statement began and never waits for a writer, so reads run on a small
pool of connections beside the writer's instead of queueing behind its
commits. Each read is one statement in autocommit mode: it holds its
snapshot only while it runs.

Emptying the log needs every reader to be on the newest snapshot. After a
deletion the writer asks for the readers to be `quiet`: new reads wait for a
moment, reads under way finish, and the log is emptied with none of this
store's readers keeping the deleted bytes alive.
"""

from __future__ import annotations

import sqlite3
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager, suppress
from typing import TypeVar

__all__ = ["Readers"]

_T = TypeVar("_T")


class Readers:
    """Up to ``size`` reader connections, opened as reads need them.

    ``connect`` opens one; it raises `sqlite3.Error` when SQLite cannot.
    """

    __slots__ = (
        "_active",
        "_closed",
        "_connect",
        "_drained",
        "_free",
        "_idle",
        "_opened",
        "_quieting",
        "_size",
    )

    def __init__(self, connect: Callable[[], sqlite3.Connection], size: int) -> None:
        self._connect = connect
        self._size = size
        lock = threading.Lock()
        # One waiting read is woken per connection given back, not all of
        # them: on a busy store most would only go back to sleep.
        self._free = threading.Condition(lock)
        self._drained = threading.Condition(lock)
        self._idle: list[sqlite3.Connection] = []
        self._opened = 0
        self._active = 0
        self._quieting = 0
        self._closed = False

    def read(self, body: Callable[[sqlite3.Connection], _T]) -> _T:
        """Run ``body`` on a reader connection, in the calling (worker) thread.

        Raises:
            sqlite3.Error: SQLite failed, opening a connection included.
            RuntimeError: The readers were closed.
        """
        conn = self._take()
        try:
            return body(conn)
        finally:
            self._give_back(conn)

    @contextmanager
    def quiet(self, timeout: float) -> Iterator[bool]:
        """Hold new reads back and wait at most ``timeout`` for those under way to end.

        Yields whether they all ended; reads resume when the block ends.
        """
        deadline = time.monotonic() + timeout
        with self._drained:
            self._quieting += 1
        try:
            with self._drained:
                while self._active:
                    left = deadline - time.monotonic()
                    if left <= 0 or not self._drained.wait(left):
                        break
                ended = not self._active
            yield ended
        finally:
            with self._free:
                self._quieting -= 1
                self._free.notify_all()

    def close(self) -> None:
        """Wait for reads under way, then close every connection; never raises."""
        with self._drained:
            self._closed = True
            self._free.notify_all()
            while self._active:
                self._drained.wait()
            idle, self._idle = self._idle, []
        for conn in idle:
            with suppress(sqlite3.Error):
                conn.close()

    def _take(self) -> sqlite3.Connection:
        with self._free:
            while True:
                if self._closed:
                    raise RuntimeError("the store's readers are closed")
                if not self._quieting:
                    if self._idle:
                        self._active += 1
                        return self._idle.pop()
                    if self._opened < self._size:
                        self._opened += 1
                        self._active += 1
                        break
                self._free.wait()
        try:
            return self._connect()
        except BaseException:
            with self._free:
                self._opened -= 1
                self._ended()
            raise

    def _give_back(self, conn: sqlite3.Connection) -> None:
        with self._free:
            if self._closed:
                with suppress(sqlite3.Error):
                    conn.close()
                self._opened -= 1
            else:
                self._idle.append(conn)
            self._ended()

    def _ended(self) -> None:
        # Under the lock: a read has ended, and its connection is free.
        self._active -= 1
        self._free.notify()
        if not self._active:
            self._drained.notify_all()
