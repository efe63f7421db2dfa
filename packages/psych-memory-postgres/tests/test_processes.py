"""Several processes writing to one table at once, as several machines would."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import anyio
import pytest

from psych_runtime.memory.postgres import PostgresMemory

_WRITER = textwrap.dedent(
    """
    import sys

    import anyio

    from psych_runtime.memory.postgres import PostgresMemory

    dsn, schema, backend, name, count = sys.argv[1:6]


    async def main() -> None:
        async with PostgresMemory.connect(dsn, schema=schema, max_size=4) as store:
            async def write(lane: int) -> None:
                for n in range(lane, int(count), 4):
                    await store.remember("acme", f"{name}-lane{lane}", f"{name}-{n}")
                    await store.remember("acme", "shared", f"{name}-{n}")

            async with anyio.create_task_group() as tasks:
                for lane in range(4):
                    tasks.start_soon(write, lane)


    anyio.run(main, backend=backend)
    """
)


def test_concurrent_writers_in_several_processes(postgres_dsn: str, schema: str) -> None:
    processes, per_process = 4, 60

    async def prepare() -> None:
        async with PostgresMemory.connect(postgres_dsn, schema=schema) as store:
            await store.setup()

    anyio.run(prepare)
    writers = [
        subprocess.Popen(
            [
                sys.executable,
                "-c",
                _WRITER,
                postgres_dsn,
                schema,
                "trio" if number % 2 else "asyncio",
                f"p{number}",
                str(per_process),
            ],
            stderr=subprocess.PIPE,
            text=True,
        )
        for number in range(processes)
    ]
    for writer in writers:
        try:
            _, errors = writer.communicate(timeout=120)
        except subprocess.TimeoutExpired:
            for other in writers:
                other.kill()
            pytest.fail("a writer process did not finish in time")
        assert writer.returncode == 0, errors

    async def check() -> None:
        async with PostgresMemory.connect(postgres_dsn, schema=schema) as store:
            shared = await store.recall("acme", "shared")
            assert len(shared) == processes * per_process
            assert len({fact.id for fact in shared}) == len(shared)
            for number in range(processes):
                name = f"p{number}"
                mine = [f.content for f in shared if f.content.startswith(f"{name}-")]
                assert sorted(mine) == sorted(f"{name}-{n}" for n in range(per_process))
                for lane in range(4):
                    # One task wrote each lane in order: its facts come back
                    # in that order, interleaved however with the others.
                    written = [f"{name}-{n}" for n in range(lane, per_process, 4)]
                    lane_facts = await store.recall("acme", f"{name}-lane{lane}")
                    assert [f.content for f in lane_facts] == written
                    in_shared = [c for c in (f.content for f in shared) if c in set(written)]
                    assert in_shared == written

    anyio.run(check)
