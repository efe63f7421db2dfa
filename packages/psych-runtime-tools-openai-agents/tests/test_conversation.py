"""Conversations of Agents SDK agents driven by a scripted Model, on a SQLite store.

The model is an implementation of the SDK's own `Model` interface that
returns scripted responses, as the SDK's own tests do. The SDK runs on
asyncio alone (it gathers tools and runs tool calls with ``asyncio``), so
these tests are marked ``asyncio`` rather than run on every anyio backend.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import anyio
import pytest
from agents import (
    Agent,
    FunctionTool,
    Model,
    ModelResponse,
    RunConfig,
    RunContextWrapper,
    Runner,
    Usage,
)
from agents.tool import Tool
from openai.types.responses import (
    ResponseFunctionToolCall,
    ResponseOutputMessage,
    ResponseOutputText,
)

from psych_runtime.memory.port import InvalidKeyError
from psych_runtime.memory.sqlite import SqliteMemory
from psych_runtime.tools.builtins import FORGET, ToolLimits, memory_full, refusal
from psych_runtime.tools.openai_agents import AgentMemory, NoEndUserError

TENANT = "acme"
FACT = "prefers the Berlin warehouse"


@dataclass(frozen=True)
class Context:
    """What the application passes to each run: here, who the run is for."""

    tenant: str
    end_user_id: str | None


# The tool calls the scripted model makes on the first call of a run,
# decided from the instructions it was given.
Decide = Callable[[str], list[tuple[str, object]]]


@dataclass
class ScriptedModel(Model):
    """Makes the decided tool calls, then answers; records what it was sent."""

    decide: Decide
    instructions: list[str] = field(default_factory=list)
    tools: list[list[Tool]] = field(default_factory=list)
    returned: list[str] = field(default_factory=list)

    async def get_response(  # noqa: PLR0917 - the interface's signature
        self,
        system_instructions: str | None,
        input: Any,  # noqa: A002 - the interface's name
        model_settings: Any,
        tools: list[Tool],
        output_schema: Any,
        handoffs: Any,
        tracing: Any,
        **_: Any,
    ) -> ModelResponse:
        self.instructions.append(system_instructions or "")
        self.tools.append(list(tools))
        items = input if isinstance(input, list) else []
        last = items[-1] if items else {}
        if isinstance(last, dict) and last.get("type") == "function_call_output":
            self.returned += [
                str(item["output"])
                for item in items
                if isinstance(item, dict) and item.get("type") == "function_call_output"
            ][-len(self._pending) :]
            return _response([_message("noted")])
        calls = self.decide(self.instructions[-1])
        self._pending = calls
        if not calls:
            return _response([_message("nothing to do")])
        return _response(
            [
                ResponseFunctionToolCall(
                    id=f"fc_{i}",
                    call_id=f"call_{i}",
                    name=name,
                    arguments=args if isinstance(args, str) else json.dumps(args),
                    type="function_call",
                    status="completed",
                )
                for i, (name, args) in enumerate(calls)
            ]
        )

    def stream_response(self, *args: Any, **kwargs: Any) -> AsyncIterator[Any]:
        raise NotImplementedError

    _pending: list[tuple[str, object]] = field(default_factory=list)


def _message(text: str) -> ResponseOutputMessage:
    return ResponseOutputMessage(
        id="msg_1",
        content=[ResponseOutputText(text=text, type="output_text", annotations=[])],
        role="assistant",
        status="completed",
        type="message",
    )


def _response(output: list[Any]) -> ModelResponse:
    return ModelResponse(output=output, usage=Usage(), response_id=None)


def facts_in(instructions: str) -> dict[str, str]:
    """The saved facts of a memory block, by id."""
    facts = {}
    for line in instructions.splitlines():
        if line.startswith("{"):
            entry = json.loads(line)
            if "id" in entry:
                facts[entry["id"]] = entry["fact"]
    return facts


def agent(store: SqliteMemory, **limits: int) -> Agent[Context]:
    memory = AgentMemory[Context](
        store,
        identity=lambda context: (context.tenant, context.end_user_id),
        limits=ToolLimits(**limits),
    )
    return Agent[Context](
        name="assistant",
        instructions=memory.instructions("You are a helpful assistant."),
        tools=memory.tools,
    )


async def run(bot: Agent[Context], decide: Decide, context: Context) -> ScriptedModel:
    model = ScriptedModel(decide)
    await Runner.run(
        bot, "hello", context=context, run_config=RunConfig(model=model, tracing_disabled=True)
    )
    return model


def remember(fact: str) -> Decide:
    return lambda _: [("remember", {"content": fact})]


def forget_all(instructions: str) -> list[tuple[str, object]]:
    return [("forget", {"memory_id": memory_id}) for memory_id in facts_in(instructions)]


@pytest.mark.asyncio
async def test_remembered_fact_is_in_next_prompt_and_gone_after_forget(tmp_path: Path) -> None:
    async with SqliteMemory(tmp_path / "facts.sqlite3") as store:
        bot = agent(store)
        context = Context(TENANT, "user-1")

        first = await run(bot, remember(FACT), context)
        assert first.instructions[0] == "You are a helpful assistant."
        assert json.loads(first.returned[0])["remembered"] is True
        (saved,) = await store.recall(TENANT, "user-1")
        assert saved.content == FACT

        second = await run(bot, forget_all, context)
        assert second.instructions[0].startswith("You are a helpful assistant.\n\nMemory:")
        assert facts_in(second.instructions[0]) == {saved.id: FACT}
        assert json.loads(second.returned[0]) == {"forgotten": True}

        third = await run(bot, lambda _: [], context)
        assert third.instructions[0] == "You are a helpful assistant."
        assert await store.recall(TENANT, "user-1") == ()


@pytest.mark.asyncio
async def test_the_model_sees_our_specs_and_no_identity(tmp_path: Path) -> None:
    async with SqliteMemory(tmp_path / "facts.sqlite3") as store:
        model = await run(agent(store, max_fact_length=120), lambda _: [], Context(TENANT, "u"))
    tools = {tool.name: tool for tool in model.tools[0] if isinstance(tool, FunctionTool)}
    assert set(tools) == {"remember", "forget"}
    assert tools["forget"].description == FORGET.description
    assert tools["forget"].params_json_schema == FORGET.as_openai()["function"]["parameters"]
    assert "120 characters" in tools["remember"].description
    for tool in tools.values():
        assert tool.strict_json_schema
        schema = tool.params_json_schema
        assert schema["additionalProperties"] is False
        text = json.dumps(schema).lower()
        for word in ("tenant", "scope", "user_id", "end_user"):
            assert word not in text, (tool.name, word)


@pytest.mark.asyncio
async def test_a_run_without_end_user_fails_before_the_model_is_called(tmp_path: Path) -> None:
    async with SqliteMemory(tmp_path / "facts.sqlite3") as store:
        model = ScriptedModel(remember(FACT))
        config = RunConfig(model=model, tracing_disabled=True)
        nobody = Context(TENANT, None)
        with pytest.raises(NoEndUserError, match="no end user"):
            await Runner.run(agent(store), "hello", context=nobody, run_config=config)
        with pytest.raises(InvalidKeyError):
            await Runner.run(agent(store), "hello", context=Context(" a", "u"), run_config=config)
        # Without the memory block in its instructions, the tools still refuse to be listed.
        memory = AgentMemory[Context](store, identity=lambda c: (c.tenant, c.end_user_id))
        bare = Agent[Context](name="bare", tools=memory.tools)
        with pytest.raises(NoEndUserError, match="no end user"):
            await Runner.run(bare, "hello", context=nobody, run_config=config)
        assert model.instructions == []


@pytest.mark.asyncio
async def test_end_users_in_parallel_never_see_each_others_facts(tmp_path: Path) -> None:
    async with SqliteMemory(tmp_path / "facts.sqlite3") as store:
        bot = agent(store)
        users = [f"user-{i}" for i in range(8)]
        await asyncio.gather(
            *(run(bot, remember(f"fact of {user}"), Context(TENANT, user)) for user in users)
        )
        seen = await asyncio.gather(
            *(run(bot, lambda _: [], Context(TENANT, user)) for user in users)
        )
        for user, model in zip(users, seen, strict=True):
            assert list(facts_in(model.instructions[0]).values()) == [f"fact of {user}"]
        other_tenant = await run(bot, lambda _: [], Context("globex", users[0]))
        assert facts_in(other_tenant.instructions[0]) == {}


@pytest.mark.asyncio
async def test_a_model_cannot_name_another_user_or_tenant(tmp_path: Path) -> None:
    async with SqliteMemory(tmp_path / "facts.sqlite3") as store:
        await store.remember(TENANT, "victim", "the victim's fact")
        (victims,) = await store.recall(TENANT, "victim")
        attempts: list[tuple[str, object]] = [
            ("remember", {"content": FACT, "end_user_id": "victim"}),
            ("remember", {"content": FACT, "tenant": "globex"}),
            ("remember", {"content": FACT, "user_id": "victim", "scope": "globex"}),
            # A repeated key, which a parsed mapping would have kept only once.
            ("remember", '{"content": "x", "content": "y"}'),
            ("forget", {"memory_id": victims.id, "end_user_id": "victim"}),
            ("forget", {"memory_id": victims.id}),
        ]
        model = await run(agent(store), lambda _: attempts, Context(TENANT, "mallory"))
        results = [json.loads(text) for text in model.returned]
        assert ["error" in result for result in results] == [True] * 5 + [False]
        assert results[-1]["forgotten"] is False
        assert all("victim" not in text and "globex" not in text for text in model.returned)
        assert await store.recall(TENANT, "mallory") == ()
        assert await store.recall("globex", "victim") == ()
        assert await store.recall(TENANT, "victim") == (victims,)


@pytest.mark.asyncio
async def test_parallel_calls_keep_the_fact_cap_and_the_block_its_budget(tmp_path: Path) -> None:
    async with SqliteMemory(tmp_path / "facts.sqlite3") as store:
        bot = agent(store, max_facts=3, max_prompt_chars=1000)
        context = Context(TENANT, "u")
        six = [("remember", {"content": f"fact {i}"}) for i in range(6)]
        model = await run(bot, lambda _: list(six), context)
        assert sum("error" in json.loads(text) for text in model.returned) == 3
        assert len(await store.recall(TENANT, "u")) == 3
        for i in range(30):
            await store.remember(TENANT, "u", f"stored fact number {i:02} " + "x" * 40)
        block = (await run(bot, lambda _: [], context)).instructions[0]
        assert len(block) <= len("You are a helpful assistant.\n\n") + 1000
        assert "Not shown" in block


@pytest.mark.asyncio
async def test_the_agents_own_instructions_may_be_functions(tmp_path: Path) -> None:
    async with SqliteMemory(tmp_path / "facts.sqlite3") as store:
        await store.remember(TENANT, "u", FACT)
        memory = AgentMemory[Context](store, identity=lambda c: (c.tenant, c.end_user_id))

        def plain(context: RunContextWrapper[Context], agent: Agent[Context]) -> str:
            return f"Serve {context.context.end_user_id} as {agent.name}."

        async def awaited(context: RunContextWrapper[Context], agent: Agent[Context]) -> str:
            return f"Serve {context.context.end_user_id} as {agent.name}, later."

        for base, text in ((plain, "Serve u as bot."), (awaited, "Serve u as bot, later.")):
            instructions = memory.instructions(base)
            bot = Agent[Context](name="bot", instructions=instructions, tools=memory.tools)
            seen = (await run(bot, lambda _: [], Context(TENANT, "u"))).instructions[0]
            assert seen.startswith(text + "\n\nMemory:")
            assert list(facts_in(seen).values()) == [FACT]
        bare = Agent[Context](name="bot", instructions=memory.instructions(), tools=memory.tools)
        seen = (await run(bare, lambda _: [], Context(TENANT, "u"))).instructions[0]
        assert seen.startswith("Memory:")


def remember_all(*facts: str) -> Decide:
    """One model response holding a ``remember`` call per fact, run by the SDK at once."""
    return lambda _: [("remember", {"content": fact}) for fact in facts]


@pytest.mark.asyncio
async def test_three_remembers_in_one_response_keep_the_cap(tmp_path: Path) -> None:
    async with SqliteMemory(tmp_path / "facts.sqlite3") as store:
        model = await run(
            agent(store, max_facts=2), remember_all("one", "two", "three"), Context(TENANT, "u")
        )
        results = [json.loads(text) for text in model.returned]
        assert len(results) == 3
        full = json.loads(refusal("remember", memory_full(2)).content)
        assert [result for result in results if "error" in result] == [full]
        stored = await store.recall(TENANT, "u")
        assert {result["id"] for result in results if "id" in result} == {f.id for f in stored}
        assert len(stored) == 2


@pytest.mark.parametrize("agents", ["one agent", "an agent per run"])
@pytest.mark.asyncio
async def test_two_runs_of_one_end_user_at_once_keep_the_cap(tmp_path: Path, agents: str) -> None:
    # An application that builds its agent per request has an AgentMemory
    # per run: the cap holds because the store counts and adds as one step.
    async with SqliteMemory(tmp_path / "facts.sqlite3") as store:
        shared = agent(store, max_facts=2)
        returned: list[str] = []

        async def one(index: int) -> None:
            bot = shared if agents == "one agent" else agent(store, max_facts=2)
            decide = remember_all(f"run {index} fact one", f"run {index} fact two")
            returned.extend((await run(bot, decide, Context(TENANT, "u"))).returned)

        async with anyio.create_task_group() as group:
            for index in range(2):
                group.start_soon(one, index)
        assert len(returned) == 4
        assert sum("error" in json.loads(text) for text in returned) == 2
        assert len(await store.recall(TENANT, "u")) == 2
