"""The errors page's example: a store failure becomes a result the model can read."""

from __future__ import annotations

import importlib.util
import logging
import sys
from pathlib import Path
from types import ModuleType

import pytest

from psych_runtime.memory.inproc import InProcessMemory
from psych_runtime.tools.builtins import memory_tools

EXAMPLE = Path(__file__).parents[1] / "docs" / "examples" / "store_failure.py"

pytestmark = pytest.mark.anyio


@pytest.fixture(scope="module")
def example() -> ModuleType:
    spec = importlib.util.spec_from_file_location("store_failure_example", EXAMPLE)
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


async def test_a_working_store_answers_as_the_tool_does(example: ModuleType) -> None:
    tools = memory_tools(InProcessMemory(), scope="acme", end_user_id="u1")
    result = await example.run_memory_tool(tools, "remember", {"content": "likes tea"})
    assert not result.is_error
    assert len(await tools.memory.recall("acme", "u1")) == 1


async def test_a_closed_store_becomes_an_error_result_without_the_fact(
    example: ModuleType, caplog: pytest.LogCaptureFixture
) -> None:
    memory = InProcessMemory()
    tools = memory_tools(memory, scope="acme", end_user_id="u1")
    await memory.aclose()
    with caplog.at_level(logging.WARNING, logger="agent"):
        result = await example.run_memory_tool(tools, "remember", {"content": "likes green tea"})
    assert result.is_error
    assert result.content == example.UNAVAILABLE
    assert "green tea" not in caplog.text
    assert "remember" in caplog.text
