"""A lock for whichever event loop runs the caller, asyncio or trio, with no dependency."""

from __future__ import annotations

import asyncio
import sys
from contextlib import AbstractAsyncContextManager
from typing import Any

__all__ = ["LoopLock"]


class LoopLock:
    """Mutual exclusion among the tasks of one event loop.

    The lock of the loop that used it last is kept; a call from another loop
    (a later `asyncio.run`, a new `trio.run`) gets a fresh one, since neither
    library's lock may be shared between loops. Tasks of two loops running
    at the same time (in two threads) are therefore not excluded from each
    other: the lock serves one loop at a time.
    """

    __slots__ = ("_lock", "_loop")

    def __init__(self) -> None:
        self._loop: object = None
        self._lock: AbstractAsyncContextManager[Any] | None = None

    def __call__(self) -> AbstractAsyncContextManager[Any]:
        """Return the lock of the running loop, to use with ``async with``.

        Raises:
            RuntimeError: No asyncio or trio event loop runs in this thread.
        """
        loop = _running_loop()
        if self._lock is None or loop is not self._loop:
            self._loop = loop
            self._lock = _new_lock(loop)
        return self._lock


def _running_loop() -> object:
    try:
        return asyncio.get_running_loop()
    except RuntimeError:
        pass
    # Only a program that runs trio has imported it; otherwise it is not ours
    # to import.
    trio: Any = sys.modules.get("trio")
    if trio is not None:
        try:
            return trio.lowlevel.current_trio_token()
        except RuntimeError:
            pass
    raise RuntimeError("the memory tools need a running asyncio or trio event loop")


def _new_lock(loop: object) -> AbstractAsyncContextManager[Any]:
    if isinstance(loop, asyncio.AbstractEventLoop):
        return asyncio.Lock()
    trio: Any = sys.modules["trio"]
    lock: AbstractAsyncContextManager[Any] = trio.Lock()
    return lock
