"""A background thread that takes an erased key's facts apart a little at a time."""

from __future__ import annotations

import os
import threading
from collections import deque
from collections.abc import Iterator
from typing import Final

__all__ = ["REAPER", "STEP", "Reaper", "emptied"]

STEP: Final = 4096
"""Entries one step of a job removes: a few tenths of a millisecond."""


def emptied(table: dict[str, str]) -> Iterator[None]:
    """Empty ``table`` `STEP` entries at a time, pausing after each step."""
    pop = table.popitem
    while table:
        for _ in range(min(STEP, len(table))):
            pop()
        yield


class Reaper:
    """Runs jobs, each a generator that does a bounded step of work per ``next()``.

    Freeing a million facts in one operation holds the interpreter's lock
    (the GIL) for a tenth of a second or more, and every other thread waits
    for it. Handed to the reaper, they are freed one entry at a time in a
    thread of its own, which the interpreter interrupts for the other
    threads as it does any Python code; a job releases the store's lock
    between two steps. The thread starts with the first job and then waits
    for the next; it is a daemon, so exiting never waits for it.
    """

    def __init__(self) -> None:
        self._reset()

    def _reset(self) -> None:
        self._lock = threading.Lock()
        self._changed = threading.Condition(self._lock)
        self._jobs: deque[Iterator[None]] = deque()
        self._busy = False
        self._thread: threading.Thread | None = None

    def submit(self, job: Iterator[None]) -> None:
        """Run ``job`` to its end in the background, after the jobs before it."""
        with self._lock:
            self._jobs.append(job)
            self._changed.notify_all()
            if self._thread is not None:
                return
            thread = self._thread = threading.Thread(
                target=self._serve, name="inproc-reaper", daemon=True
            )
        try:
            thread.start()
        except RuntimeError:
            # No thread can start (the interpreter is shutting down): the
            # caller does the work itself rather than leave it undone.
            with self._lock:
                self._thread = None
            self._serve(stop_when_idle=True)

    def wait(self, timeout: float | None = None) -> bool:
        """Wait until every job submitted so far is done; ``False`` if ``timeout`` ran out."""
        with self._changed:
            return self._changed.wait_for(lambda: not (self._jobs or self._busy), timeout)

    def _serve(self, *, stop_when_idle: bool = False) -> None:
        try:
            while True:
                with self._lock:
                    while not self._jobs:
                        self._busy = False
                        self._changed.notify_all()
                        if stop_when_idle:
                            return
                        self._changed.wait()
                    job = self._jobs.popleft()
                    self._busy = True
                for _ in job:
                    pass
        except BaseException:
            # The jobs left wait for the next submit, which starts a thread.
            with self._lock:
                self._busy = False
                if not stop_when_idle:
                    self._thread = None
                self._changed.notify_all()
            raise


REAPER: Final = Reaper()
"""The one reaper of the process."""

# A child process has no reaper thread, and may have forked while another
# thread held the reaper's lock: it starts afresh.
os.register_at_fork(after_in_child=REAPER._reset)
