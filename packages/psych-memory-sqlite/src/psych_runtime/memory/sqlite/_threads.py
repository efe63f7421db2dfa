"""The worker threads that run every blocking SQLite call, never the event loop.

On asyncio the calls run on threads of this adapter's own pool, handed over
with the loop's `run_in_executor`: about half of what `anyio.to_thread`
costs a call (its capacity limiter, its checkpoint and its cancel scope),
which a store answering many callers at once pays on every call. On every
other event loop (trio), `anyio.to_thread` runs them.

`finish` waits for the thread even when the caller is cancelled, so the
call's effect is decided before the cancellation reaches the caller.
`abandon` stops waiting when the caller is cancelled, for a thread that
can be told its call was withdrawn.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Final, TypeVar, TypeVarTuple

import anyio
import anyio.to_thread

__all__ = ["abandon", "finish"]

_T = TypeVar("_T")
_Ts = TypeVarTuple("_Ts")

# As many as anyio's default limiter allows: calls of stores beyond them
# wait for a thread, as they would for a token of the limiter.
_THREADS: Final = 40

_pool: ThreadPoolExecutor | None = None
_pool_lock = threading.Lock()


async def finish(function: Callable[[*_Ts], _T], *args: *_Ts) -> _T:
    """Run ``function(*args)`` in a worker thread and wait for it, cancelled or not."""
    loop = _asyncio_loop()
    if loop is None:
        return await anyio.to_thread.run_sync(function, *args)
    future = loop.run_in_executor(_threads(), function, *args)
    with anyio.CancelScope(shield=True):
        result = await future
    return result  # noqa: RET504 - a cancel scope may swallow what it raises, so not inside it


async def abandon(function: Callable[[*_Ts], _T], *args: *_Ts) -> _T:
    """Run ``function(*args)`` in a worker thread; a cancelled caller stops waiting for it."""
    loop = _asyncio_loop()
    if loop is None:
        return await anyio.to_thread.run_sync(function, *args, abandon_on_cancel=True)
    return await loop.run_in_executor(_threads(), function, *args)


def _asyncio_loop() -> asyncio.AbstractEventLoop | None:
    # The loop of an asyncio task, or None: trio, or trio run as a guest
    # of an asyncio loop, whose tasks are not asyncio's.
    try:
        task = asyncio.current_task()
    except RuntimeError:
        return None
    return None if task is None else task.get_loop()


def _threads() -> ThreadPoolExecutor:
    global _pool  # noqa: PLW0603 - one pool for the process, made when first needed
    pool = _pool
    if pool is None:
        with _pool_lock:
            if _pool is None:
                _pool = ThreadPoolExecutor(_THREADS, thread_name_prefix="psych-memory-sqlite")
            pool = _pool
    return pool
