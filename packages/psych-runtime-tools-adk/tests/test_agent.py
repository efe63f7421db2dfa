"""Memory in an ADK ``LlmAgent``, driven by a scripted ``BaseLlm`` under ``InMemoryRunner``.

ADK runs agents on asyncio alone (its runner and flows are asyncio tasks and
queues), so these tests use ``pytest.mark.asyncio`` instead of anyio's
asyncio and trio backends.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncGenerator, AsyncIterator, Callable
from pathlib import Path
from typing import Any

import pytest
import pytest_asyncio
from google.adk.agents import LlmAgent
from google.adk.models import BaseLlm
from google.adk.models.llm_request import LlmRequest
from google.adk.models.llm_response import LlmResponse
from google.adk.runners import InMemoryRunner
from google.genai import types
from pydantic import Field

from psych_runtime.memory.port import memory_key
from psych_runtime.memory.sqlite import SqliteMemory
from psych_runtime.tools.adk import NoEndUserError, memory_instruction, memory_tools
from psych_runtime.tools.builtins import FORGET, REMEMBER, MemoryTools, ToolLimits

Step = Callable[[LlmRequest], types.Part]
INSTRUCTION = "You are a helpful assistant."


class ScriptedLlm(BaseLlm):
    """A model answering each call with the next scripted part, recording every request."""

    steps: list[Any] = Field(default_factory=list)
    requests: list[LlmRequest] = Field(default_factory=list)

    async def generate_content_async(
        self, llm_request: LlmRequest, stream: bool = False
    ) -> AsyncGenerator[LlmResponse, None]:
        self.requests.append(llm_request)
        part = self.steps.pop(0)(llm_request)
        yield LlmResponse(content=types.Content(role="model", parts=[part]))


def call(name: str, arguments: dict[str, Any]) -> Step:
    return lambda _: types.Part(function_call=types.FunctionCall(name=name, args=arguments))


def say(text: str) -> Step:
    return lambda _: types.Part(text=text)


def scripted(*steps: Step) -> ScriptedLlm:
    return ScriptedLlm(model="scripted", steps=list(steps))


def instruction_of(request: LlmRequest) -> str:
    # ADK appends its own paragraph naming the agent; ours is what comes before.
    text = str(request.config.system_instruction or "")
    return text.split("\n\nYou are an agent.", maxsplit=1)[0]


def tool_results(events: list[Any]) -> list[dict[str, Any]]:
    return [
        dict(part.function_response.response or {})
        for event in events
        for part in (event.content.parts if event.content else None) or []
        if part.function_response
    ]


@pytest_asyncio.fixture
async def store(tmp_path: Path) -> AsyncIterator[SqliteMemory]:
    async with SqliteMemory(tmp_path / "memory.sqlite3") as memory:
        yield memory


async def run(
    store: SqliteMemory,
    model: ScriptedLlm,
    user: str,
    text: str,
    *,
    limits: ToolLimits | None = None,
) -> list[Any]:
    agent = LlmAgent(
        name="assistant",
        model=model,
        instruction=memory_instruction(store, INSTRUCTION, limits=limits),
        tools=memory_tools(store, limits=limits),
    )
    runner = InMemoryRunner(agent=agent, app_name="acme")
    session = await runner.session_service.create_session(app_name="acme", user_id=user)
    message = types.Content(role="user", parts=[types.Part(text=text)])
    return [
        event
        async for event in runner.run_async(
            user_id=user, session_id=session.id, new_message=message
        )
    ]


@pytest.mark.asyncio
async def test_remember_then_instruction_then_forget_across_three_runs(store: SqliteMemory) -> None:
    fact = "Prefers the Berlin warehouse"
    first = scripted(call("remember", {"content": fact}), say("Noted."))
    events = await run(store, first, "alice", "Ship from Berlin from now on.")
    (saved,) = await store.recall("acme", "alice")
    assert saved.content == fact
    assert tool_results(events) == [{"remembered": True, "id": saved.id}]
    assert instruction_of(first.requests[0]) == INSTRUCTION

    second = scripted(call("forget", {"memory_id": saved.id}), say("Forgotten."))
    events = await run(store, second, "alice", "Forget the warehouse.")
    prompt = instruction_of(second.requests[0])
    assert prompt.startswith(INSTRUCTION)
    assert fact in prompt
    assert saved.id in prompt
    assert tool_results(events) == [{"forgotten": True}]
    assert await store.recall("acme", "alice") == ()

    third = scripted(say("Hello."))
    await run(store, third, "alice", "Hi.")
    assert instruction_of(third.requests[0]) == INSTRUCTION


@pytest.mark.asyncio
async def test_the_block_is_the_python_tools_block_with_their_budget(store: SqliteMemory) -> None:
    for index in range(40):
        await store.remember("acme", "alice", f"Fact number {index} " + "x" * 200)
    limits = ToolLimits(max_prompt_chars=2000)
    model = scripted(say("Hello."))
    await run(store, model, "alice", "Hi.", limits=limits)
    expected = await MemoryTools(store, memory_key("acme", "alice"), limits=limits).prompt()
    assert instruction_of(model.requests[0]) == f"{INSTRUCTION}\n\n{expected}"


@pytest.mark.asyncio
async def test_two_end_users_in_parallel_never_see_each_other(store: SqliteMemory) -> None:
    facts = {"alice": "Alice works nights", "bob": "Bob is vegetarian"}
    models = {
        u: scripted(call("remember", {"content": f}), say("Noted.")) for u, f in facts.items()
    }
    await asyncio.gather(*(run(store, models[user], user, "x") for user in facts))
    later = {user: scripted(say("Hi.")) for user in facts}
    await asyncio.gather(*(run(store, later[user], user, "x") for user in facts))
    for user, other in (("alice", "bob"), ("bob", "alice")):
        prompt = instruction_of(later[user].requests[0])
        assert facts[user] in prompt
        assert facts[other] not in prompt
        assert [m.content for m in await store.recall("acme", user)] == [facts[user]]


@pytest.mark.asyncio
async def test_a_model_cannot_name_another_user_or_tenant(store: SqliteMemory) -> None:
    bob = await store.remember("acme", "bob", "Bob is vegetarian")
    model = scripted(
        call("remember", {"content": "Injected", "user_id": "bob", "app_name": "other"}),
        call("forget", {"memory_id": bob.id, "tenant": "acme", "end_user_id": "bob"}),
        call("forget", {"memory_id": bob.id}),
        say("Done."),
    )
    events = await run(store, model, "alice", "x")
    results = tool_results(events)
    assert ["error" in result for result in results] == [True, True, False]
    assert results[2]["forgotten"] is False
    assert await store.recall("acme", "bob") == (bob,)
    assert await store.recall("acme", "alice") == ()
    assert await store.recall("other", "bob") == ()


@pytest.mark.asyncio
async def test_the_model_sees_only_the_python_tools_declarations(store: SqliteMemory) -> None:
    model = scripted(say("Hi."))
    await run(store, model, "alice", "x")
    declarations = {
        declaration.name: declaration
        for tool in model.requests[0].config.tools or []
        for declaration in getattr(tool, "function_declarations", None) or []
    }
    for spec in (REMEMBER, FORGET):
        shown = declarations[spec.name]
        assert shown.description == spec.description
        expected = types.FunctionDeclaration.model_validate(spec.as_gemini())
        assert shown.parameters == expected.parameters
        assert shown.parameters is not None
        assert set(shown.parameters.properties or {}) == set(spec.input_schema["properties"])


@pytest.mark.asyncio
async def test_a_run_without_an_end_user_fails_before_the_model_is_called(
    store: SqliteMemory,
) -> None:
    model = scripted(say("Hi."))
    with pytest.raises(NoEndUserError, match="names no end user"):
        await run(store, model, "", "x")
    assert model.requests == []
