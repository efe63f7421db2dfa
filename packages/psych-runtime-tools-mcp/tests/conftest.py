from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest

from psych_runtime.memory.inproc import InProcessMemory
from psych_runtime.memory.sqlite import SqliteMemory
from psych_runtime.tools.builtins import ToolResult, memory_tools


@pytest.fixture
def db_path(tmp_path: Path) -> Path:
    return tmp_path / "memory.sqlite3"


@pytest.fixture
async def memory(db_path: Path, anyio_backend: str) -> AsyncIterator[SqliteMemory]:
    async with SqliteMemory(db_path) as store:
        yield store


PythonAnswer = Callable[[str, dict[str, Any]], Awaitable[ToolResult]]


@pytest.fixture
def python_answer() -> PythonAnswer:
    """What the Python tools answer to a call, from a separate empty store."""

    async def answer(name: str, arguments: dict[str, Any]) -> ToolResult:
        async with InProcessMemory() as other:
            return await memory_tools(other, scope="t", end_user_id="u").call(name, arguments)

    return answer
