"""Memory in an ADK ``LlmAgent``, driven by a scripted ``BaseLlm`` under ``InMemoryRunner``.

ADK runs agents on asyncio alone (its runner and flows are asyncio tasks and
queues), so these tests use ``pytest.mark.asyncio`` instead of anyio's
asyncio and trio backends.
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import AsyncGenerator, AsyncIterator, Callable
from pathlib import Path
from typing import Any

import anyio
import pytest
import pytest_asyncio
from google.adk.agents import LlmAgent
from google.adk.models import BaseLlm
from google.adk.models.llm_request import LlmRequest
from google.adk.models.llm_response import LlmResponse
from google.adk.runners import InMemoryRunner
from google.genai import types
from pydantic import Field, ValidationError

from psych_runtime.memory.port import MemoryStoreError, memory_key
from psych_runtime.memory.sqlite import SqliteMemory
from psych_runtime.tools.adk import NoEndUserError, memory_instruction, memory_tools
from psych_runtime.tools.builtins import (
    FORGET,
    REMEMBER,
    MemoryTools,
    ToolLimits,
    memory_full,
    refusal,
)

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


async def run_bare(store: SqliteMemory, model: ScriptedLlm, user: str) -> list[Any]:
    """A run of an agent given the memory tools alone, without the memory instruction."""
    agent = LlmAgent(name="assistant", model=model, tools=memory_tools(store))
    runner = InMemoryRunner(agent=agent, app_name="acme")
    session = await runner.session_service.create_session(app_name="acme", user_id=user)
    message = types.Content(role="user", parts=[types.Part(text="x")])
    return [
        event
        async for event in runner.run_async(
            user_id=user, session_id=session.id, new_message=message
        )
    ]


def adk_errors(records: list[logging.LogRecord]) -> list[logging.LogRecord]:
    return [r for r in records if r.name.startswith("google_adk") and r.levelno >= logging.ERROR]


@pytest.mark.asyncio
async def test_a_run_without_an_end_user_fails_before_the_model_is_called(
    store: SqliteMemory, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    model = scripted(say("Hi."))
    with pytest.raises(NoEndUserError, match="names no end user"):
        await run(store, model, "", "x")
    # The tools alone refuse too, when ADK offers them to the model.
    with pytest.raises(NoEndUserError, match="names no end user"):
        await run_bare(store, model, "")
    assert model.requests == []
    # The application gets the exception; ADK's log gets no traceback of it.
    assert adk_errors(caplog.records) == []


@pytest.mark.asyncio
async def test_adk_itself_refuses_a_session_without_a_user_id(store: SqliteMemory) -> None:
    model = scripted(say("Hi."))
    with pytest.raises(ValidationError, match="user_id"):
        await run(store, model, None, "x")  # type: ignore[arg-type]
    assert model.requests == []


@pytest.mark.asyncio
async def test_other_failures_are_still_in_adks_log(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    # Only a run without an end user is kept out of ADK's log: a store that
    # fails is logged by ADK as any other failure.
    caplog.set_level(logging.DEBUG)
    closed = SqliteMemory(tmp_path / "closed.sqlite3")
    await closed.aclose()
    model = scripted(say("Hi."))
    with pytest.raises(MemoryStoreError):
        await run(closed, model, "alice", "x")
    assert model.requests == []
    assert adk_errors(caplog.records) != []


class ParallelLlm(BaseLlm):
    """A model answering first with one ``remember`` call per content in one response, then text."""

    contents: list[str] = Field(default_factory=list)
    requests: list[LlmRequest] = Field(default_factory=list)

    async def generate_content_async(
        self, llm_request: LlmRequest, stream: bool = False
    ) -> AsyncGenerator[LlmResponse, None]:
        self.requests.append(llm_request)
        if len(self.requests) == 1:
            parts = [
                types.Part(function_call=types.FunctionCall(name="remember", args={"content": c}))
                for c in self.contents
            ]
        else:
            parts = [types.Part(text="Noted.")]
        yield LlmResponse(content=types.Content(role="model", parts=parts))


async def capped_run(store: SqliteMemory, model: BaseLlm, user: str) -> list[Any]:
    limits = ToolLimits(max_facts=2)
    agent = LlmAgent(
        name="assistant",
        model=model,
        instruction=memory_instruction(store, INSTRUCTION, limits=limits),
        tools=memory_tools(store, limits=limits),
    )
    runner = InMemoryRunner(agent=agent, app_name="acme")
    session = await runner.session_service.create_session(app_name="acme", user_id=user)
    message = types.Content(role="user", parts=[types.Part(text="Remember these.")])
    return [
        event
        async for event in runner.run_async(
            user_id=user, session_id=session.id, new_message=message
        )
    ]


@pytest.mark.asyncio
async def test_three_remembers_in_one_response_keep_the_cap(store: SqliteMemory) -> None:
    # ADK binds the tools afresh for every call: the cap holds because the
    # store counts and adds as one step.
    model = ParallelLlm(model="parallel", contents=["fact one", "fact two", "fact three"])
    results = tool_results(await capped_run(store, model, "alice"))
    assert len(results) == 3
    refused = [result for result in results if "error" in result]
    assert refused == [json.loads(refusal("remember", memory_full(2)).content)]
    stored = await store.recall("acme", "alice")
    assert {result["id"] for result in results if "id" in result} == {fact.id for fact in stored}
    assert len(stored) == 2


@pytest.mark.asyncio
async def test_two_runs_of_one_end_user_at_once_keep_the_cap(store: SqliteMemory) -> None:
    models = [
        ParallelLlm(model="parallel", contents=[f"run {index} fact one", f"run {index} fact two"])
        for index in range(2)
    ]
    results: list[dict[str, Any]] = []

    async def one(model: ParallelLlm) -> None:
        results.extend(tool_results(await capped_run(store, model, "alice")))

    async with anyio.create_task_group() as group:
        for model in models:
            group.start_soon(one, model)
    assert len(results) == 4
    assert sum("error" in result for result in results) == 2
    assert len(await store.recall("acme", "alice")) == 2
