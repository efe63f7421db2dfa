"""Properties: any JSON a model can send gives a stored fact or an error result."""

from __future__ import annotations

import json
from typing import Any

import anyio
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from hypothesis.stateful import Bundle, RuleBasedStateMachine, invariant, rule
from jsonschema import Draft202012Validator

from psych_runtime.memory.inproc import InProcessMemory
from psych_runtime.memory.port import Memory
from psych_runtime.tools.builtins import FORGET, REMEMBER, MemoryTools, memory_tools

OTHER_KEYS = [("acme", "u2"), ("other", "u1")]

json_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers()
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(),
    lambda children: (
        st.lists(children, max_size=3) | st.dictionaries(st.text(max_size=12), children, max_size=3)
    ),
    max_leaves=8,
)
# Argument objects near the real ones, so the interesting cases are common.
argument_names = st.sampled_from(["content", "memory_id", "end_user_id", "tenant"]) | st.text(
    max_size=12
)
near_arguments = st.dictionaries(argument_names, json_values, max_size=3)
arguments = json_values | near_arguments | near_arguments.map(json.dumps) | st.text(max_size=30)


async def everything_else(memory: InProcessMemory) -> list[tuple[Memory, ...]]:
    return [await memory.recall(*key) for key in OTHER_KEYS]


@pytest.mark.anyio
@settings(suppress_health_check=[HealthCheck.function_scoped_fixture], deadline=None)
@given(arguments=arguments)
async def test_remember_stores_exactly_one_fact_or_answers_with_an_error(
    anyio_backend: str, arguments: object
) -> None:
    memory = InProcessMemory()
    unrelated = await memory.remember("acme", "u2", "unrelated")
    tools = memory_tools(memory, scope="acme", end_user_id="u1")
    result = await tools.call("remember", arguments)
    stored = await memory.recall("acme", "u1")
    data: dict[str, Any] = json.loads(result.content)
    if result.is_error:
        assert stored == ()
        assert set(data) == {"error"}
    else:
        (fact,) = stored
        assert data == {"remembered": True, "id": fact.id}
        parsed = json.loads(arguments) if isinstance(arguments, str) else arguments
        assert parsed == {"content": fact.content}
        # Whatever the call accepts, the published schema accepts too.
        assert Draft202012Validator(REMEMBER.input_schema).is_valid(parsed)
    assert await everything_else(memory) == [(unrelated,), ()]


@pytest.mark.anyio
@settings(suppress_health_check=[HealthCheck.function_scoped_fixture], deadline=None)
@given(arguments=arguments)
async def test_forget_deletes_at_most_the_named_fact_or_answers_with_an_error(
    anyio_backend: str, arguments: object
) -> None:
    memory = InProcessMemory()
    theirs = await memory.remember("acme", "u2", "theirs")
    mine = await memory.remember("acme", "u1", "mine")
    tools = memory_tools(memory, scope="acme", end_user_id="u1")
    result = await tools.call("forget", arguments)
    data: dict[str, Any] = json.loads(result.content)
    assert await everything_else(memory) == [(theirs,), ()]
    if result.is_error:
        assert await memory.recall("acme", "u1") == (mine,)
        return
    parsed = json.loads(arguments) if isinstance(arguments, str) else arguments
    assert isinstance(parsed, dict)
    assert Draft202012Validator(FORGET.input_schema).is_valid(parsed)
    forgotten = parsed["memory_id"] == mine.id
    assert data["forgotten"] is forgotten
    assert await memory.recall("acme", "u1") == (() if forgotten else (mine,))


class ToolsMachine(RuleBasedStateMachine):
    """The tools against a plain model of one user's facts, on one backend."""

    backend = "asyncio"
    ids = Bundle("ids")

    def __init__(self) -> None:
        super().__init__()
        self.memory = InProcessMemory()
        self.tools: MemoryTools = memory_tools(self.memory, scope="acme", end_user_id="u1")
        self.model: dict[str, str] = {}

    def run(self, name: str, arguments: object) -> dict[str, Any]:
        async def call() -> dict[str, Any]:
            result = await self.tools.call(name, arguments)
            data: dict[str, Any] = json.loads(result.content)
            data["is_error"] = result.is_error
            return data

        return anyio.run(call, backend=self.backend)

    @rule(target=ids, content=st.text(min_size=1, max_size=20))
    def remember(self, content: str) -> str:
        data = self.run("remember", {"content": content})
        if data["is_error"]:
            return "refused"
        self.model[data["id"]] = content
        return str(data["id"])

    @rule(memory_id=ids)
    def forget(self, memory_id: str) -> None:
        data = self.run("forget", json.dumps({"memory_id": memory_id}))
        assert data["is_error"] is False
        assert data["forgotten"] is (memory_id in self.model)
        self.model.pop(memory_id, None)

    @rule(memory_id=ids)
    def forget_for_someone_else(self, memory_id: str) -> None:
        data = self.run("forget", {"memory_id": memory_id, "end_user_id": "u2"})
        assert data["is_error"] is True

    @invariant()
    def prompt_shows_exactly_the_models_facts_in_order(self) -> None:
        block = anyio.run(self.tools.prompt, backend=self.backend)
        shown = [json.loads(line) for line in block.splitlines() if line.startswith("{")]
        assert shown == [{"id": i, "fact": c} for i, c in self.model.items()]


class ToolsMachineOnTrio(ToolsMachine):
    backend = "trio"


TestToolsOnAsyncio = ToolsMachine.TestCase
TestToolsOnTrio = ToolsMachineOnTrio.TestCase
TestToolsOnAsyncio.settings = settings(max_examples=30, stateful_step_count=15, deadline=None)
TestToolsOnTrio.settings = settings(max_examples=30, stateful_step_count=15, deadline=None)
