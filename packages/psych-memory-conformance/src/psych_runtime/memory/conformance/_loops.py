"""Each check runs on the event loop its parametrisation names, whichever plugin runs it.

anyio's pytest plugin runs a ``[trio]`` check on trio. pytest-asyncio in auto
mode claims every coroutine test, the kit's checks included, and runs each on
asyncio, ``[trio]`` ones too: a backend that fails on trio would pass there
unnoticed. A check that finds itself on the wrong loop therefore runs again
from the start on its own loop, in a worker thread, and the answer is that
run's.
"""

from __future__ import annotations

import asyncio
import functools
from collections.abc import Callable, Coroutine
from typing import Any, TypeVar

import anyio
import anyio.to_thread

__all__ = ["on_its_loop", "running_loop"]

_Self = TypeVar("_Self")
_Check = Callable[[_Self], Coroutine[Any, Any, None]]


def running_loop() -> str:
    """Name the event loop running the caller: ``"asyncio"`` or ``"trio"``."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        # The kit runs on two loops; a coroutine without an asyncio loop is on trio.
        return "trio"
    return "asyncio"


def on_its_loop(check: _Check[_Self]) -> _Check[_Self]:
    """Wrap a check so that it always runs on the loop of its parametrisation.

    The loop is the ``_anyio_backend_name`` the kit's fixture set before the
    check. A check called without it (directly, outside pytest) runs where
    it is called.
    """

    @functools.wraps(check)
    async def run(self: _Self) -> None:
        loop = getattr(self, "_anyio_backend_name", None)
        if loop is None or loop == running_loop():
            await check(self)
            return
        # Another plugin started it on another loop: start afresh on its own.
        await anyio.to_thread.run_sync(functools.partial(anyio.run, check, self, backend=loop))

    return run
