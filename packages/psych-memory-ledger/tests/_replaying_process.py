"""A process that replays a ledger onto a SQLite store and is killed at a chosen deletion.

Run as ``python _replaying_process.py STORE LEDGER_URL SINCE KILL_AT WHEN
BACKEND``; the key is read from ``PSYCH_MEMORY_LEDGER_KEY``. The process
sends itself SIGKILL just ``before`` or just ``after`` the store's
KILL_AT-th deletion call (erase, forget or expire; counted from 0), reached
through the store's own methods, so nothing of the ledger is patched. When
the replay makes fewer calls, it finishes and exits 0.
"""

from __future__ import annotations

import os
import signal
import sys
from collections.abc import Awaitable, Callable
from datetime import datetime
from pathlib import Path
from typing import TypeVar, cast

import anyio

from psych_runtime.memory.ledger import ledger_key, open_ledger, reapply
from psych_runtime.memory.port import ExpiresFacts, MemoryStore, Scope, StoreWrapper, wrap_store
from psych_runtime.memory.sqlite import SqliteMemory

T = TypeVar("T")


class _KilledAt(StoreWrapper):
    """The SQLite store, the process killed around its KILL_AT-th deletion."""

    __slots__ = ("_calls", "_kill_at", "_when")

    def __init__(self, store: MemoryStore, kill_at: int, when: str) -> None:
        super().__init__(store)
        self._kill_at = kill_at
        self._when = when
        self._calls = 0

    async def _deleting(self, call: Callable[[], Awaitable[T]]) -> T:
        due = self._calls == self._kill_at
        self._calls += 1
        if due and self._when == "before":
            os.kill(os.getpid(), signal.SIGKILL)
        result = await call()
        if due:
            os.kill(os.getpid(), signal.SIGKILL)
        return result

    async def forget(self, scope: Scope, end_user_id: str, memory_id: str) -> bool:
        return await self._deleting(lambda: self.wrapped.forget(scope, end_user_id, memory_id))

    async def erase(self, scope: Scope, end_user_id: str) -> int:
        return await self._deleting(lambda: self.wrapped.erase(scope, end_user_id))


class _KilledExpiring(_KilledAt):
    __slots__ = ()

    async def count_expired(self, scope: Scope, *, before: datetime) -> int:
        return await cast("ExpiresFacts", self.wrapped).count_expired(scope, before=before)

    async def expire(self, scope: Scope, *, before: datetime) -> int:
        store = cast("ExpiresFacts", self.wrapped)
        return await self._deleting(lambda: store.expire(scope, before=before))


_KilledAt.capability_mixins = (_KilledExpiring,)


async def _main(store_path: str, ledger_url: str, since: str, kill_at: int, when: str) -> None:
    with open_ledger(ledger_url, ledger_key()) as ledger:
        async with wrap_store(_KilledAt, SqliteMemory(Path(store_path)), kill_at, when) as store:
            await reapply(store, ledger, since=datetime.fromisoformat(since))


if __name__ == "__main__":
    store_path, ledger_url, since, kill_at, when, backend = sys.argv[1:]
    anyio.run(_main, store_path, ledger_url, since, int(kill_at), when, backend=backend)
