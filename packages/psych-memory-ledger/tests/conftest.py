"""Fixtures of the ledger's tests: a key, a ledger on a fresh file, real stores."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from pathlib import Path

import pytest

from psych_runtime.memory.inproc import InProcessMemory
from psych_runtime.memory.ledger import DeletionLedger, LedgerKey, open_ledger
from psych_runtime.memory.port import MemoryStore
from psych_runtime.memory.sqlite import SqliteMemory

StoreOpener = Callable[[], AbstractAsyncContextManager[MemoryStore]]

SECRET = b"k" * 32


@pytest.fixture
def key() -> LedgerKey:
    return LedgerKey(SECRET)


@pytest.fixture
def ledger_url(tmp_path: Path) -> str:
    return f"sqlite:///{tmp_path / 'ledger.sqlite3'}"


@pytest.fixture
def ledger(ledger_url: str, key: LedgerKey) -> Iterator[DeletionLedger]:
    with open_ledger(ledger_url, key) as opened:
        yield opened


@asynccontextmanager
async def _inproc() -> AsyncIterator[MemoryStore]:
    async with InProcessMemory() as store:
        yield store


@pytest.fixture
def open_inproc() -> StoreOpener:
    """Opens a fresh in-process store."""
    return _inproc


@pytest.fixture
def open_sqlite(tmp_path: Path) -> StoreOpener:
    """Opens a store on a fresh SQLite file."""
    counter = iter(range(1_000_000_000))

    @asynccontextmanager
    async def sqlite() -> AsyncIterator[MemoryStore]:
        async with SqliteMemory(tmp_path / f"facts-{next(counter)}.sqlite3") as store:
            yield store

    return sqlite
