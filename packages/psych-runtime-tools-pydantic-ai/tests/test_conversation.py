"""Conversations of pydantic-ai agents driven by its FunctionModel, on a SQLite store.

pydantic-ai runs tool calls as asyncio tasks (``asyncio.create_task``), so
an agent runs on asyncio only: these tests are marked ``asyncio`` rather
than run on every anyio backend.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import anyio
import pytest
from pydantic_ai import Agent
from pydantic_ai.messages import (
    ModelMessage,
    ModelRequest,
    ModelResponse,
    TextPart,
    ToolCallPart,
    ToolReturnPart,
)
from pydantic_ai.models.function import AgentInfo, FunctionModel
from pydantic_ai.tools import ToolDefinition

from psych_runtime.memory.port import InvalidKeyError
from psych_runtime.memory.sqlite import SqliteMemory
from psych_runtime.tools.builtins import FORGET, REMEMBER, ToolLimits, memory_full, refusal
from psych_runtime.tools.pydantic_ai import MemoryToolset, NoEndUserError

TENANT = "acme"
FACT = "prefers the Berlin warehouse"


@dataclass(frozen=True)
class Deps:
    """What the application passes to each run: here, who the run is for."""

    tenant: str
    end_user_id: str | None


# The tool calls the scripted model makes on the first request of a run,
# decided from the instructions it was given.
Decide = Callable[[str], list[tuple[str, dict[str, object]]]]


@dataclass
class ScriptedModel:
    """Makes the decided tool calls, then answers; records what it was sent."""

    decide: Decide
    instructions: list[str] = field(default_factory=list)
    tools: list[list[ToolDefinition]] = field(default_factory=list)
    returned: list[str] = field(default_factory=list)

    def respond(self, messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        self.instructions.append(info.instructions or "")
        self.tools.append(list(info.function_tools))
        last = messages[-1]
        assert isinstance(last, ModelRequest)
        returns = [part for part in last.parts if isinstance(part, ToolReturnPart)]
        if returns:
            self.returned += [str(part.content) for part in returns]
            return ModelResponse(parts=[TextPart("noted")])
        calls = self.decide(self.instructions[-1])
        if not calls:
            return ModelResponse(parts=[TextPart("nothing to do")])
        parts = [
            ToolCallPart(name, args, tool_call_id=f"c{i}") for i, (name, args) in enumerate(calls)
        ]
        return ModelResponse(parts=list(parts))


def facts_in(instructions: str) -> dict[str, str]:
    """The saved facts of a memory block, by id."""
    facts = {}
    for line in instructions.splitlines():
        if line.startswith("{"):
            entry = json.loads(line)
            if "id" in entry:
                facts[entry["id"]] = entry["fact"]
    return facts


def agent(store: SqliteMemory, **limits: int) -> Agent[Deps, str]:
    toolset = MemoryToolset[Deps](
        store,
        identity=lambda deps: (deps.tenant, deps.end_user_id),
        limits=ToolLimits(**limits),
    )
    return Agent(deps_type=Deps, toolsets=[toolset], instructions="You are a helpful assistant.")


async def run(agent: Agent[Deps, str], decide: Decide, deps: Deps) -> ScriptedModel:
    model = ScriptedModel(decide)
    await agent.run("hello", deps=deps, model=FunctionModel(model.respond))
    return model


def remember(fact: str) -> Decide:
    return lambda _: [("remember", {"content": fact})]


def forget_all(instructions: str) -> list[tuple[str, dict[str, object]]]:
    return [("forget", {"memory_id": memory_id}) for memory_id in facts_in(instructions)]


@pytest.mark.asyncio
async def test_remembered_fact_is_in_next_prompt_and_gone_after_forget(
    tmp_path: Path,
) -> None:
    async with SqliteMemory(tmp_path / "facts.sqlite3") as store:
        bot = agent(store)
        deps = Deps(TENANT, "user-1")

        first = await run(bot, remember(FACT), deps)
        assert facts_in(first.instructions[0]) == {}
        assert json.loads(first.returned[0])["remembered"] is True
        (saved,) = await store.recall(TENANT, "user-1")
        assert saved.content == FACT

        second = await run(bot, forget_all, deps)
        assert facts_in(second.instructions[0]) == {saved.id: FACT}
        assert "You are a helpful assistant." in second.instructions[0]
        assert json.loads(second.returned[0]) == {"forgotten": True}

        third = await run(bot, lambda _: [], deps)
        assert facts_in(third.instructions[0]) == {}
        assert FACT not in third.instructions[0]
        assert await store.recall(TENANT, "user-1") == ()


@pytest.mark.asyncio
async def test_the_model_sees_our_specs_and_no_identity(tmp_path: Path) -> None:
    async with SqliteMemory(tmp_path / "facts.sqlite3") as store:
        model = await run(agent(store, max_fact_length=120), lambda _: [], Deps(TENANT, "u"))
        tools = {tool.name: tool for tool in model.tools[0]}
        assert set(tools) == {"remember", "forget"}
        assert tools["forget"].description == FORGET.description
        assert tools["forget"].parameters_json_schema == FORGET.input_schema
        assert "120 characters" in (tools["remember"].description or "")
        assert tools["remember"].parameters_json_schema["properties"]["content"]["maxLength"] == 120
        assert tools["remember"].description != REMEMBER.description
        for tool in tools.values():
            schema = tool.parameters_json_schema
            assert schema["additionalProperties"] is False
            text = json.dumps(schema).lower()
            for word in ("tenant", "scope", "user_id", "end_user"):
                assert word not in text, (tool.name, word)


@pytest.mark.asyncio
async def test_a_run_without_end_user_fails_before_the_model_is_called(
    tmp_path: Path,
) -> None:
    async with SqliteMemory(tmp_path / "facts.sqlite3") as store:
        model = ScriptedModel(remember(FACT))
        scripted = FunctionModel(model.respond)
        with pytest.raises(NoEndUserError, match="no end user"):
            await agent(store).run("hello", deps=Deps(TENANT, None), model=scripted)
        assert model.instructions == []
        with pytest.raises(InvalidKeyError):
            await agent(store).run("hello", deps=Deps(" acme", "u"), model=scripted)
        assert model.instructions == []


@pytest.mark.asyncio
async def test_end_users_in_parallel_never_see_each_others_facts(tmp_path: Path) -> None:
    async with SqliteMemory(tmp_path / "facts.sqlite3") as store:
        bot = agent(store)
        users = [f"user-{i}" for i in range(8)]
        await asyncio.gather(
            *(run(bot, remember(f"fact of {user}"), Deps(TENANT, user)) for user in users)
        )
        seen = await asyncio.gather(*(run(bot, lambda _: [], Deps(TENANT, user)) for user in users))
        for user, model in zip(users, seen, strict=True):
            assert list(facts_in(model.instructions[0]).values()) == [f"fact of {user}"]
        other_tenant = await run(bot, lambda _: [], Deps("globex", users[0]))
        assert facts_in(other_tenant.instructions[0]) == {}


@pytest.mark.asyncio
async def test_a_model_cannot_name_another_user_or_tenant(tmp_path: Path) -> None:
    async with SqliteMemory(tmp_path / "facts.sqlite3") as store:
        await store.remember(TENANT, "victim", "the victim's fact")
        (victims,) = await store.recall(TENANT, "victim")
        attempts: list[tuple[str, dict[str, object]]] = [
            ("remember", {"content": FACT, "end_user_id": "victim"}),
            ("remember", {"content": FACT, "tenant": "globex"}),
            ("remember", {"content": FACT, "user_id": "victim", "scope": "globex"}),
            ("forget", {"memory_id": victims.id, "end_user_id": "victim"}),
            ("forget", {"memory_id": victims.id}),
        ]
        model = await run(agent(store), lambda _: attempts, Deps(TENANT, "mallory"))
        results = [json.loads(text) for text in model.returned]
        assert [("error" in result) for result in results] == [True, True, True, True, False]
        assert results[-1]["forgotten"] is False
        assert all("victim" not in text and "globex" not in text for text in model.returned)
        assert await store.recall(TENANT, "mallory") == ()
        assert await store.recall("globex", "victim") == ()
        assert await store.recall(TENANT, "victim") == (victims,)


@pytest.mark.asyncio
async def test_the_block_keeps_the_budget_and_the_fact_cap(tmp_path: Path) -> None:
    async with SqliteMemory(tmp_path / "facts.sqlite3") as store:
        bot = agent(store, max_facts=2, max_prompt_chars=1000)
        deps = Deps(TENANT, "u")
        for i in range(30):
            await store.remember(TENANT, "u", f"stored fact number {i:02} " + "x" * 40)
        model = await run(bot, remember(FACT), deps)
        block = model.instructions[0].split("You are a helpful assistant.")[-1].strip()
        assert 0 < len(block) <= 1000
        assert "Not shown" in block
        assert "full" in json.loads(model.returned[0])["error"]


def remember_all(*facts: str) -> Decide:
    """One model response holding a ``remember`` call per fact, run by pydantic-ai at once."""
    return lambda _: [("remember", {"content": fact}) for fact in facts]


@pytest.mark.asyncio
async def test_three_remembers_in_one_response_keep_the_cap(tmp_path: Path) -> None:
    async with SqliteMemory(tmp_path / "facts.sqlite3") as store:
        model = await run(
            agent(store, max_facts=2), remember_all("one", "two", "three"), Deps(TENANT, "u")
        )
        results = [json.loads(text) for text in model.returned]
        assert len(results) == 3
        full = json.loads(refusal("remember", memory_full(2)).content)
        assert [result for result in results if "error" in result] == [full]
        stored = await store.recall(TENANT, "u")
        assert {result["id"] for result in results if "id" in result} == {f.id for f in stored}
        assert len(stored) == 2


@pytest.mark.asyncio
async def test_two_runs_of_one_end_user_at_once_keep_the_cap(tmp_path: Path) -> None:
    # Each run binds its own tools: the cap holds because the store counts
    # and adds as one step.
    async with SqliteMemory(tmp_path / "facts.sqlite3") as store:
        bot = agent(store, max_facts=2)
        returned: list[str] = []

        async def one(index: int) -> None:
            decide = remember_all(f"run {index} fact one", f"run {index} fact two")
            returned.extend((await run(bot, decide, Deps(TENANT, "u"))).returned)

        async with anyio.create_task_group() as group:
            for index in range(2):
                group.start_soon(one, index)
        assert len(returned) == 4
        assert sum("error" in json.loads(text) for text in returned) == 2
        assert len(await store.recall(TENANT, "u")) == 2
