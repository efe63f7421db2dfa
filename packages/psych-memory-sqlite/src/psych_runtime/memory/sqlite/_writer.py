"""The store's one writer: every call that changes the file, committed in groups.

Write calls queue here. The thread of whichever call finds nobody writing
becomes the writer: it takes everything queued at that moment (it never
waits for more, so a lone caller pays nothing for the queue) and runs it
as one ``BEGIN IMMEDIATE`` transaction, a savepoint around each call, so
one commit and one sync of the log carry the whole group, and a call that
fails is rolled back alone while the others commit. Calls run in the order
they were queued: each sees the effect of those before it.

Once its own call is done, the writer hands the next group to the thread
of a queued call that is waiting for it, so that no caller waits for
other callers' work; when every queued call's thread is yet to start, it
goes on writing itself, so the queue never stalls on a thread that is not
running.

A call still queued can be withdrawn (its caller was cancelled): it then
never runs. A call whose group has started runs to its end. A commit that
fails fails every call of its group, telling each that it may have taken
effect.
"""

from __future__ import annotations

import enum
import sqlite3
import threading
from collections import deque
from collections.abc import Callable
from typing import Final, Generic, TypeVar

from psych_runtime.memory.port import StoreClosedError

from ._errors import StoreUnavailableError

__all__ = ["BatchRunner", "WriteCall", "Writer"]

_T = TypeVar("_T")

# A group is taken whole unless it is very long: a bound on how long the
# first call of a group waits for the last.
_LONGEST_GROUP: Final = 256


class _State(enum.Enum):
    QUEUED = "queued"
    RUNNING = "running"
    DONE = "done"
    WITHDRAWN = "withdrawn"


class WriteCall(Generic[_T]):
    """One call's work for the writer, and its outcome once it has run.

    ``body`` runs inside the group's transaction on the writer's
    connection. ``deletes`` marks a deletion, which is committed with a
    full sync at every durability level and empties the log after its group;
    its body returns how many facts it deleted. ``alone`` keeps the call out
    of groups: it runs in a transaction of its own (a batch of a large
    erase or of an expiry). A deletion's body may set ``empties_log`` to
    ``False`` to leave the log for a later call (all but the last batch of a
    larger deletion).
    """

    __slots__ = (
        "_done",
        "_error",
        "_lead",
        "_result",
        "_settled",
        "_state",
        "_waiting",
        "_wake",
        "alone",
        "body",
        "deletes",
        "empties_log",
        "operation",
    )

    def __init__(
        self,
        operation: str,
        body: Callable[[sqlite3.Connection], _T],
        *,
        deletes: bool = False,
        alone: bool = False,
    ) -> None:
        self.operation = operation
        self.body = body
        self.deletes = deletes
        self.alone = alone
        self.empties_log = True
        self._state = _State.QUEUED
        self._result: _T | None = None
        self._error: BaseException | None = None
        self._settled = False
        # Set once the call is done or withdrawn, or its thread is to write.
        self._wake = threading.Event()
        self._done = threading.Event()
        self._waiting = False
        self._lead = False

    def outcome(self) -> _T:
        """The call's result, or its error raised; only once it is done."""
        if self._error is not None:
            raise self._error
        return self._result  # type: ignore[return-value]

    def wait(self) -> _T:
        """Block until a call whose group has started is done, then return `outcome`."""
        self._done.wait()
        return self.outcome()

    def succeed(self, result: _T) -> None:
        """Record the call's result, before the writer says it is done."""
        self._result = result
        self._settled = True

    def fail(self, error: BaseException) -> None:
        """Record the call's error, before the writer says it is done; replaces a result."""
        self._error = error
        self._settled = True


BatchRunner = Callable[[list[WriteCall[object]]], Callable[[], None] | None]
"""Runs a group on the writer's connection, recording each call's outcome.

It returns what is left to do before the group's deletions may return (the
log to empty), run once the group's other calls are told.
"""


class Writer:
    """The queue of a store's write calls and the turn to write them.

    ``run_group`` runs a group; it records an outcome for every call of the
    group and must not raise (other than `BaseException` outside
    `Exception`, which fails the group's unfinished calls and goes on up).
    """

    __slots__ = ("_closed", "_idle", "_lock", "_queue", "_run_group", "_writing")

    def __init__(self, run_group: BatchRunner) -> None:
        self._run_group = run_group
        self._lock = threading.Lock()
        self._idle = threading.Condition(self._lock)
        self._queue: deque[WriteCall[object]] = deque()
        self._writing = False
        self._closed = False

    def submit(self, call: WriteCall[_T]) -> None:
        """Queue ``call``; any thread, the event loop's included (it never blocks).

        Raises:
            StoreClosedError: The writer was closed.
        """
        with self._lock:
            if self._closed:
                raise StoreClosedError(call.operation, "closed")
            self._queue.append(call)  # type: ignore[arg-type]

    def withdraw(self, call: WriteCall[_T]) -> bool:
        """Take ``call`` out of the queue if it has not started; ``True`` if it never will."""
        with self._lock:
            if call._state is not _State.QUEUED:
                return call._state is _State.WITHDRAWN
            self._queue.remove(call)  # type: ignore[arg-type]
            call._state = _State.WITHDRAWN
            self._idle.notify_all()
        call._wake.set()
        return True

    def serve(self, call: WriteCall[_T]) -> None:
        """Wait in a worker thread until ``call`` has run or was withdrawn; write at our turn.

        Returns once the call is done (its outcome is then known) or withdrawn.
        """
        with self._lock:
            if not self._writing and call._state is _State.QUEUED:
                self._writing = True
            else:
                call._waiting = True
                while not call._lead and call._state in (_State.QUEUED, _State.RUNNING):
                    self._lock.release()
                    try:
                        call._wake.wait()
                    finally:
                        self._lock.acquire()
                call._waiting = False
                if not call._lead:
                    return
                call._lead = False
        self._write(call)

    def close(self) -> None:
        """Refuse new calls, and wait until every queued call has run or was withdrawn."""
        with self._lock:
            self._closed = True
            while self._writing or self._queue:
                self._idle.wait()

    def _write(self, own: WriteCall[_T]) -> None:
        # This thread has the turn: group after group until the queue is
        # empty or another waiting thread can take over.
        try:
            while True:
                with self._lock:
                    group = self._take()
                    if not group:
                        self._writing = False
                        self._idle.notify_all()
                        return
                try:
                    after = self._run_group(group)
                    # Calls that deleted nothing need not wait for the log.
                    self._finish([call for call in group if not call.deletes])
                    if after is not None:
                        after()
                finally:
                    self._finish(group)
                with self._lock:
                    if own._state is _State.QUEUED:
                        continue
                    successor = next((call for call in self._queue if call._waiting), None)
                    if successor is not None:
                        successor._lead = True
                        successor._wake.set()
                        return
        except BaseException:
            with self._lock:
                self._writing = False
                self._idle.notify_all()
            raise

    def _take(self) -> list[WriteCall[object]]:
        # Under the lock: the queued calls up to the first that runs alone.
        group: list[WriteCall[object]] = []
        while self._queue and len(group) < _LONGEST_GROUP:
            call = self._queue[0]
            if call.alone and group:
                break
            self._queue.popleft()
            call._state = _State.RUNNING
            group.append(call)
            if call.alone:
                break
        return group

    def _finish(self, calls: list[WriteCall[object]]) -> None:
        for call in calls:
            with self._lock:
                if call._state is not _State.RUNNING:
                    continue
                if not call._settled:
                    # Only when the group was interrupted (a `BaseException`).
                    call.fail(
                        StoreUnavailableError(
                            call.operation,
                            "the writer was interrupted before the call ended",
                            may_have_taken_effect=True,
                        )
                    )
                call._state = _State.DONE
            call._done.set()
            call._wake.set()
