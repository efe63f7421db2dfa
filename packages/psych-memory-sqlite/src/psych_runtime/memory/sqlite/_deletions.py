"""Deletions too large for one transaction: an erase of a large key, an expiry.

They delete in batches, each its own short write transaction through the
store's writer. The first batch of an erase may share a group with other
calls (a key of a few facts is erased in it); every later batch, and every
batch of an expiry, runs alone, sized to hold the file's write lock for
about a tenth of the busy timeout. Between two batches the deletion
pauses with the lock released, long enough for a writer of another process
that waits as long as this store does to get its turn, and the writer's
queue runs meanwhile.
"""

from __future__ import annotations

import sqlite3
import time
from collections.abc import Callable
from typing import Final

from ._errors import SqliteMemoryError, StoreUnavailableError
from ._statements import DELETE_BATCH, EXPIRE_BOUND, EXPIRE_RANGE, EXPIRE_REST, LAST_SEQ
from ._writer import WriteCall, Writer

__all__ = ["erase_step", "expire_step", "in_batches"]

Step = Callable[[sqlite3.Connection, int], tuple[int, bool]]
"""Deletes one batch of about the given number of rows: how many, and whether it was the last."""

_BATCH_SHARE: Final = 0.1
_SHORTEST_BATCH: Final = 0.01
_LONGEST_BATCH: Final = 0.5
# Rows of the first batch; an erase of no more facts is one transaction, as
# `forget` is. Later batches are sized from the time the last one took.
_FIRST_BATCH_ROWS: Final = 1000
_FEWEST_BATCH_ROWS: Final = 100
_MOST_BATCH_ROWS: Final = 100_000
# SQLite's busy handler tries again after pauses that grow with the time it
# has waited (about that long, from 1 ms), up to 100 ms. A writer that began
# waiting during a batch has waited no longer than the batch, so a pause
# between batches longer than the batch (or than 100 ms) holds one of its
# tries; the margin is for a waiter that wakes late on a busy machine.
_LONGEST_RETRY_PAUSE: Final = 0.1
_PAUSE_FACTOR: Final = 1.5
_PAUSE_MARGIN: Final = 0.01


def erase_step(tenant: str, end_user: str) -> Step:
    """The batches of an erase: the key's facts oldest first, up to its last when it began."""
    last: int | None = None

    def delete(conn: sqlite3.Connection, rows: int) -> tuple[int, bool]:
        nonlocal last
        if last is None:
            # Read in the first batch: later facts take higher positions, so
            # the erase has an end.
            (last,) = conn.execute(LAST_SEQ, (tenant, end_user)).fetchone()
            if last is None:
                return 0, True
        batch = (tenant, end_user, tenant, end_user, last, rows)
        deleted = conn.execute(DELETE_BATCH, batch).rowcount
        return deleted, deleted < rows

    return delete


def expire_step(tenant: str, micros: int) -> Step:
    """The batches of an expiry: the tenant's rows in key order, ``rows`` looked at per batch."""
    after: tuple[str, int] = ("", 0)  # Before every key: end-user ids are never empty.

    def delete(conn: sqlite3.Connection, rows: int) -> tuple[int, bool]:
        nonlocal after
        bound = conn.execute(EXPIRE_BOUND, (tenant, *after, rows - 1)).fetchone()
        if bound is None:
            return conn.execute(EXPIRE_REST, (tenant, *after, micros)).rowcount, True
        deleted = conn.execute(EXPIRE_RANGE, (tenant, *after, *bound, micros)).rowcount
        after = (bound[0], bound[1])
        return deleted, False

    return delete


def in_batches(
    writer: Writer, operation: str, step: Step, busy_timeout: float, *, group_first: bool
) -> int:
    """Run ``step`` batch after batch through ``writer``, in this (worker) thread; the count.

    With ``group_first``, the first batch may share a group with other calls.

    Raises:
        SqliteMemoryError: A batch failed; when batches had committed before,
            a `StoreUnavailableError` with ``may_have_taken_effect``.
        StoreClosedError: The writer was closed before the first batch.
    """
    target = min(max(busy_timeout * _BATCH_SHARE, _SHORTEST_BATCH), _LONGEST_BATCH)
    rows = _FIRST_BATCH_ROWS
    deleted = 0
    alone = not group_first
    while True:
        call = _Batch(operation, step, rows, alone=alone)
        alone = True
        writer.submit(call)
        writer.serve(call)
        try:
            count = call.outcome()
        except SqliteMemoryError as exc:
            if deleted:
                raise _partly_deleted(exc, operation, deleted) from exc.__cause__
            raise
        deleted += count
        if call.finished:
            return deleted
        # From the batch's first statement to its commit.
        took = time.monotonic() - call.started
        rows = _next_batch_rows(rows, took, target)
        time.sleep(_PAUSE_FACTOR * min(took, _LONGEST_RETRY_PAUSE) + _PAUSE_MARGIN)


class _Batch(WriteCall[int]):
    """One batch of a deletion, which knows when it began to run and whether it was the last."""

    __slots__ = ("_rows", "_step", "finished", "started")

    def __init__(self, operation: str, step: Step, rows: int, *, alone: bool) -> None:
        super().__init__(operation, self._delete, deletes=True, alone=alone)
        self._step = step
        self._rows = rows
        self.started = time.monotonic()
        self.finished = False

    def _delete(self, conn: sqlite3.Connection) -> int:
        self.started = time.monotonic()
        count, self.finished = self._step(conn, self._rows)
        # Emptying the log waits for the last batch: it would hold the
        # write lock while it copies every batch's pages, and SQLite copies
        # them anyway as the log grows.
        self.empties_log = self.finished
        return count


def _next_batch_rows(rows: int, took: float, target: float) -> int:
    """The rows of the next batch, from the time the last one took."""
    # At most twice as many, at least a quarter: one slow commit (a busy
    # disk) must not make the next batch tiny, nor a fast one huge.
    factor = min(max(target / took, 0.25), 2.0) if took > 0 else 2.0
    return min(max(int(rows * factor), _FEWEST_BATCH_ROWS), _MOST_BATCH_ROWS)


def _partly_deleted(
    error: SqliteMemoryError, operation: str, deleted: int
) -> StoreUnavailableError:
    """The error of a deletion in batches that failed after ``deleted`` facts were deleted."""
    # A file found corrupt part-way is no longer a DatabaseFileError, whose
    # promise is that nothing was deleted.
    unavailable = error if isinstance(error, StoreUnavailableError) else None
    kind = StoreUnavailableError if unavailable is None else type(unavailable)
    reason = "the file is corrupt" if unavailable is None else unavailable.reason
    return kind(
        operation,
        f"{reason}, after {deleted} facts were deleted for good: {operation} again to delete "
        "the rest",
        may_have_taken_effect=True,
    )
