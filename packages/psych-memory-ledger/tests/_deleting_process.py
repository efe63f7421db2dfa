"""A process that makes one ledgered deletion and is killed at a chosen step.

Run as ``python _deleting_process.py STORE LEDGER_URL STEP KIND BACKEND
[FACT_ID]``; the key is read from ``PSYCH_MEMORY_LEDGER_KEY``. STEP is where
the process sends itself SIGKILL: ``before-intent`` (before the call),
``after-intent`` (the ledger has the intent, the store is about to delete),
``after-delete`` (the store has deleted, the ledger has not recorded the
count) or ``none``. The two steps inside the call are reached through the
store's own methods, so nothing of the ledger is patched.
"""

from __future__ import annotations

import os
import signal
import sys
from pathlib import Path

import anyio

from psych_runtime.memory.ledger import ledger_key, open_ledger, with_ledger
from psych_runtime.memory.port import Scope, StoreWrapper
from psych_runtime.memory.sqlite import SqliteMemory

TENANT = "acme"
USER = "user-1"


def _die() -> None:
    os.kill(os.getpid(), signal.SIGKILL)


class _KilledAt(StoreWrapper):
    """The SQLite store, the process killed just before or just after its delete."""

    __slots__ = ("_step",)

    def __init__(self, store: SqliteMemory, step: str) -> None:
        super().__init__(store)
        self._step = step

    async def forget(self, scope: Scope, end_user_id: str, memory_id: str) -> bool:
        if self._step == "after-intent":
            _die()
        deleted = await self.wrapped.forget(scope, end_user_id, memory_id)
        if self._step == "after-delete":
            _die()
        return deleted

    async def erase(self, scope: Scope, end_user_id: str) -> int:
        if self._step == "after-intent":
            _die()
        deleted = await self.wrapped.erase(scope, end_user_id)
        if self._step == "after-delete":
            _die()
        return deleted


async def _main(store_path: str, ledger_url: str, step: str, kind: str, fact_id: str) -> None:
    with open_ledger(ledger_url, ledger_key()) as ledger:
        async with with_ledger(_KilledAt(SqliteMemory(Path(store_path)), step), ledger) as store:
            if step == "before-intent":
                _die()
            if kind == "erase":
                await store.erase(TENANT, USER)
            else:
                await store.forget(TENANT, USER, fact_id)


if __name__ == "__main__":
    store_path, ledger_url, step, kind, backend, *rest = sys.argv[1:]
    anyio.run(_main, store_path, ledger_url, step, kind, rest[0] if rest else "", backend=backend)
