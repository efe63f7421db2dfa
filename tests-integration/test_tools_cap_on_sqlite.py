"""The tools' cap on facts, on a real SQLite file, with parallel tool calls.

Every SQLite call runs in a worker thread, so other tasks run while the
store counts and adds: the race the cap's lock exists for is real here.
"""

from __future__ import annotations

from pathlib import Path

import anyio
import pytest

from psych_runtime.memory.sqlite import SqliteMemory
from psych_runtime.tools.builtins import memory_tools

pytestmark = pytest.mark.anyio


async def test_parallel_remembers_on_one_toolset_never_pass_the_cap(
    anyio_backend: str, tmp_path: Path
) -> None:
    async with SqliteMemory(tmp_path / "memory.sqlite3") as memory:
        await memory.remember("acme", "u1", "stored before")
        await memory.remember("acme", "u2", "another user's")
        tools = memory_tools(memory, scope="acme", end_user_id="u1", max_facts=4)
        refused: list[bool] = []

        async def remember(index: int) -> None:
            result = await tools.call("remember", {"content": f"parallel fact {index}"})
            refused.append(result.is_error)

        async with anyio.create_task_group() as group:
            for index in range(24):
                group.start_soon(remember, index)

        stored = await memory.recall("acme", "u1")
        assert len(stored) == 4
        assert stored[0].content == "stored before"
        assert refused.count(False) == 3
        assert [fact.content for fact in await memory.recall("acme", "u2")] == ["another user's"]
