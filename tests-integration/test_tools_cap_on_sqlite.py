"""The tools' cap on facts, on a real SQLite file, with parallel tool calls.

Every SQLite call runs in a worker thread, so other tasks run while the
store counts and adds: the race the cap exists for is real here. The store
counts and adds as one step (`RemembersWithinLimit`), so the cap holds
across toolsets and across processes sharing the file, not only among the
calls of one toolset.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import anyio
import pytest

from psych_runtime.memory.port import RemembersWithinLimit
from psych_runtime.memory.sqlite import SqliteMemory
from psych_runtime.tools.builtins import MemoryTools, memory_tools


async def remember_at_once(toolsets: list[MemoryTools], count: int) -> list[bool]:
    """Make ``count`` calls at once, spread over ``toolsets``; return which were refused."""
    refused: list[bool] = []

    async def remember(tools: MemoryTools, index: int) -> None:
        result = await tools.call("remember", {"content": f"parallel fact {index}"})
        refused.append(result.is_error)

    async with anyio.create_task_group() as group:
        for index in range(count):
            group.start_soon(remember, toolsets[index % len(toolsets)], index)
    return refused


@pytest.mark.anyio
async def test_parallel_remembers_on_one_toolset_never_pass_the_cap(
    anyio_backend: str, tmp_path: Path
) -> None:
    async with SqliteMemory(tmp_path / "memory.sqlite3") as memory:
        await memory.remember("acme", "u1", "stored before")
        await memory.remember("acme", "u2", "another user's")
        tools = memory_tools(memory, scope="acme", end_user_id="u1", max_facts=4)
        refused = await remember_at_once([tools], 24)

        stored = await memory.recall("acme", "u1")
        assert len(stored) == 4
        assert stored[0].content == "stored before"
        assert refused.count(False) == 3
        assert [fact.content for fact in await memory.recall("acme", "u2")] == ["another user's"]


@pytest.mark.anyio
@pytest.mark.parametrize("calls", [3, 24])
async def test_two_toolsets_of_one_end_user_keep_the_cap_together(
    anyio_backend: str, tmp_path: Path, calls: int
) -> None:
    async with SqliteMemory(tmp_path / "memory.sqlite3") as memory:
        assert isinstance(memory, RemembersWithinLimit)
        toolsets = [
            memory_tools(memory, scope="acme", end_user_id="u1", max_facts=2) for _ in range(2)
        ]
        refused = await remember_at_once(toolsets, calls)
        assert refused.count(False) == 2
        assert len(await memory.recall("acme", "u1")) == 2


# A process of its own: opens the file, says it is ready, waits for the word,
# then makes its calls at once and prints how many were stored.
_WORKER = textwrap.dedent(
    """
    import sys

    import anyio

    from psych_runtime.memory.sqlite import SqliteMemory
    from psych_runtime.tools.builtins import memory_tools


    async def main(path, calls):
        async with SqliteMemory(path) as memory:
            tools = memory_tools(memory, scope="acme", end_user_id="u1", max_facts=2)
            stored = []

            async def remember(index):
                result = await tools.call("remember", {"content": f"fact {index}"})
                stored.append(not result.is_error)

            print("ready", flush=True)
            await anyio.to_thread.run_sync(sys.stdin.readline)
            async with anyio.create_task_group() as group:
                for index in range(calls):
                    group.start_soon(remember, index)
            print(sum(stored), flush=True)


    anyio.run(main, sys.argv[1], int(sys.argv[2]), backend=sys.argv[3])
    """
)


@pytest.mark.parametrize("backend", ["asyncio", "trio"])
def test_two_processes_on_one_file_keep_the_cap_together(tmp_path: Path, backend: str) -> None:
    path = tmp_path / "memory.sqlite3"
    workers = [
        subprocess.Popen(
            [sys.executable, "-c", _WORKER, str(path), "6", backend],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        for _ in range(2)
    ]
    try:
        for worker in workers:
            assert worker.stdout is not None
            assert worker.stdout.readline().strip() == "ready"
        # Both have opened the file; both start their calls on one word.
        for worker in workers:
            assert worker.stdin is not None
            worker.stdin.write("go\n")
            worker.stdin.flush()
        outputs = [worker.communicate(timeout=120)[0] for worker in workers]
    finally:
        for worker in workers:
            if worker.poll() is None:
                worker.kill()
                worker.wait()
    assert [worker.returncode for worker in workers] == [0, 0]
    assert sum(int(output.strip()) for output in outputs) == 2

    async def stored() -> int:
        async with SqliteMemory(path) as memory:
            return len(await memory.recall("acme", "u1"))

    assert anyio.run(stored) == 2
