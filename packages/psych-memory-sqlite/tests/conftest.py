from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from psych_runtime.memory.sqlite import SqliteMemory


@pytest.fixture
def db_path(tmp_path: Path) -> Path:
    return tmp_path / "memory.sqlite3"


@pytest.fixture
async def memory(db_path: Path, anyio_backend: str) -> AsyncIterator[SqliteMemory]:
    async with SqliteMemory(db_path) as store:
        yield store
