"""The kit runs unchanged in a backend's project that also runs pytest-asyncio.

Each test writes a small backend project (one test module subclassing the
kit's class with the in-process adapter) and runs it with pytest-asyncio in
one of its modes, in a pytest process of its own, as the author would. Every
check must pass, on both event loops, and each must run on the loop its
parametrisation names: in auto mode pytest-asyncio could otherwise take a
``[trio]`` check and run it on asyncio, and nothing would look wrong.
"""

from __future__ import annotations

import re
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import pytest
import sniffio

from psych_runtime.memory.conformance import MemoryStoreContract
from psych_runtime.memory.inproc import InProcessMemory
from psych_runtime.memory.port import MemoryKey, MemoryStore

# The author's whole test module. open_store runs on the event loop of the
# check, in its task, so it can tell which loop that is.
BACKEND_TESTS = """
import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import pytest
import trio

from psych_runtime.memory.conformance import MemoryStoreContract
from psych_runtime.memory.inproc import InProcessMemory
from psych_runtime.memory.port import MemoryKey, MemoryStore


def running_loop() -> str:
    try:
        trio.lowlevel.current_task()
    except RuntimeError:
        asyncio.get_running_loop()
        return "asyncio"
    return "trio"


class TestInProcessMemory(MemoryStoreContract):
    # What is proven is where the checks run, not how hard they look.
    max_examples = 3
    max_steps = 5
    cancelled_calls = 3

    @pytest.fixture(autouse=True)
    def _parametrised_loop(self, anyio_backend: str) -> None:
        self.parametrised_loop = anyio_backend

    @asynccontextmanager
    async def open_store(self) -> AsyncIterator[MemoryStore]:
        running = running_loop()
        assert running == self.parametrised_loop, (
            f"a [{self.parametrised_loop}] check runs on {running}"
        )
        yield InProcessMemory()

    async def count_stored(self, store: MemoryStore, key: MemoryKey) -> int:
        assert isinstance(store, InProcessMemory)
        return len(store._facts.get(key, {}))
"""

# The author's configuration: what pytest-asyncio asks every project to set,
# and warnings as errors, so that a warning the kit causes fails the run.
BACKEND_CONFIG = """
[pytest]
asyncio_default_fixture_loop_scope = function
filterwarnings = error
"""

CHECKS = sum(name.startswith("test") for name in dir(MemoryStoreContract))


@pytest.mark.nested_pytest
@pytest.mark.parametrize("mode", ["strict", "auto"])
def test_every_check_passes_on_its_own_loop_under_pytest_asyncio(
    pytester: pytest.Pytester, mode: str
) -> None:
    pytester.makeini(BACKEND_CONFIG)
    pytester.makepyfile(test_backend=BACKEND_TESTS)
    # Its own process: pytest-asyncio, anyio and Hypothesis start afresh, as
    # they do for the author.
    result = pytester.runpytest_subprocess(
        "-p", "asyncio", f"--asyncio-mode={mode}", "-v", "-p", "no:cacheprovider", timeout=600
    )
    outcomes = result.parseoutcomes()
    assert outcomes.get("passed", 0) > 0, result.stdout.str()
    assert "failed" not in outcomes, result.stdout.str()
    assert "errors" not in outcomes, result.stdout.str()
    assert result.ret == pytest.ExitCode.OK
    # pytest-asyncio's header names the mode it ran in ("mode=Mode.AUTO").
    assert re.search(rf"^asyncio: mode=\S*{mode}\b", result.stdout.str(), re.M | re.I)
    # Every check ran once per loop, and passed there (or was skipped as not
    # applicable on both); none ran without a loop or on a third.
    for loop in ("asyncio", "trio"):
        ran = re.findall(rf"::(test\w+)\[{loop}\] (PASSED|SKIPPED)", result.stdout.str())
        assert len({name for name, _ in ran}) == CHECKS, (loop, ran)
    assert outcomes["passed"] + outcomes.get("skipped", 0) == 2 * CHECKS


class Recording(MemoryStoreContract):
    """The kit against the in-process adapter, noting the loop each store opens on."""

    opened_on: list[str]

    @asynccontextmanager
    async def open_store(self) -> AsyncIterator[MemoryStore]:
        self.opened_on.append(sniffio.current_async_library())
        yield InProcessMemory()

    async def count_stored(self, store: MemoryStore, key: MemoryKey) -> int:
        assert isinstance(store, InProcessMemory)
        return len(store._facts.get(key, {}))


@pytest.mark.anyio
async def test_a_check_started_on_the_other_loop_runs_on_its_own(
    tmp_path: Path, anyio_backend: str
) -> None:
    # What pytest-asyncio's auto mode does to a [trio] check, in this process.
    other = {"asyncio": "trio", "trio": "asyncio"}[anyio_backend]
    contract = Recording()
    contract.opened_on = []
    contract._prepare(tmp_path, other)
    await contract.test_rule3_recall_is_oldest_first()
    assert contract.opened_on == [other]
    contract._prepare(tmp_path, anyio_backend)
    await contract.test_rule3_recall_is_oldest_first()
    assert contract.opened_on == [other, anyio_backend]
