"""Memory in a ``create_agent`` agent and a plain ``ToolNode``, driven by LangChain's fake model.

LangGraph runs its graphs on asyncio alone (its executor and streams are
asyncio tasks), so these tests use ``pytest.mark.asyncio`` instead of anyio's
asyncio and trio backends.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

import anyio
import pytest
import pytest_asyncio
from langchain.agents import create_agent
from langchain_core.language_models.fake_chat_models import GenericFakeChatModel
from langchain_core.messages import AIMessage, BaseMessage, SystemMessage, ToolMessage
from langchain_core.outputs import ChatResult
from langchain_core.utils.function_calling import convert_to_openai_tool
from langgraph.graph import END, START, MessagesState, StateGraph
from langgraph.prebuilt import ToolNode
from pydantic import Field

from psych_runtime.memory.port import memory_key
from psych_runtime.memory.sqlite import SqliteMemory
from psych_runtime.tools.builtins import (
    FORGET,
    REMEMBER,
    MemoryTools,
    ToolLimits,
    memory_full,
    refusal,
)
from psych_runtime.tools.langchain import (
    MemoryContext,
    MemoryMiddleware,
    NoEndUserError,
    memory_tools,
)

Step = Callable[[list[BaseMessage]], AIMessage]


class ScriptedModel(GenericFakeChatModel):
    """LangChain's fake chat model, recording every prompt; each reply is computed from it."""

    prompts: list[list[BaseMessage]] = Field(default_factory=list)
    bound: list[dict[str, Any]] = Field(default_factory=list)

    def bind_tools(self, tools: Sequence[Any], **kwargs: Any) -> ScriptedModel:
        self.bound = [convert_to_openai_tool(tool) for tool in tools]
        return self

    def _generate(
        self,
        messages: list[BaseMessage],
        stop: list[str] | None = None,
        run_manager: Any = None,
        **kwargs: Any,
    ) -> ChatResult:
        self.prompts.append(list(messages))
        return super()._generate(messages, stop, run_manager, **kwargs)


def scripted(*steps: Step) -> ScriptedModel:
    holder: list[ScriptedModel] = []

    def replies() -> Iterator[AIMessage]:
        for step in steps:
            yield step(holder[0].prompts[-1])

    model = ScriptedModel(messages=replies())
    holder.append(model)
    return model


def call(name: str, arguments: dict[str, Any], call_id: str = "c1") -> Step:
    return lambda _: AIMessage(
        content="", tool_calls=[{"name": name, "args": arguments, "id": call_id}]
    )


def say(text: str) -> Step:
    return lambda _: AIMessage(content=text)


def system_text(prompt: list[BaseMessage]) -> str:
    first = prompt[0]
    return first.text if isinstance(first, SystemMessage) else ""


def tool_messages(result: dict[str, Any]) -> list[ToolMessage]:
    return [m for m in result["messages"] if isinstance(m, ToolMessage)]


@pytest_asyncio.fixture
async def store(tmp_path: Path) -> AsyncIterator[SqliteMemory]:
    async with SqliteMemory(tmp_path / "memory.sqlite3") as memory:
        yield memory


async def run(
    store: SqliteMemory, model: ScriptedModel, tenant: str, user: str, text: str
) -> dict[str, Any]:
    agent = create_agent(
        model,
        system_prompt="You are a helpful assistant.",
        middleware=[MemoryMiddleware(store)],
        context_schema=MemoryContext,
    )
    result: dict[str, Any] = await agent.ainvoke(
        {"messages": [{"role": "user", "content": text}]},
        context=MemoryContext(tenant=tenant, end_user_id=user),
    )
    return result


@pytest.mark.asyncio
async def test_remember_then_prompt_then_forget_across_three_runs(store: SqliteMemory) -> None:
    fact = "Prefers the Berlin warehouse"
    first = scripted(call("remember", {"content": fact}), say("Noted."))
    result = await run(store, first, "acme", "alice", "Ship from Berlin from now on.")
    (saved,) = await store.recall("acme", "alice")
    assert saved.content == fact
    assert json.loads(tool_messages(result)[0].text) == {"remembered": True, "id": saved.id}
    assert fact not in system_text(first.prompts[0])

    second = scripted(
        lambda prompt: AIMessage(
            content="",
            tool_calls=[{"name": "forget", "args": {"memory_id": saved.id}, "id": "c2"}],
        ),
        say("Forgotten."),
    )
    result = await run(store, second, "acme", "alice", "Forget the warehouse.")
    prompt = system_text(second.prompts[0])
    assert prompt.startswith("You are a helpful assistant.")
    assert fact in prompt
    assert saved.id in prompt
    assert json.loads(tool_messages(result)[0].text) == {"forgotten": True}
    assert await store.recall("acme", "alice") == ()

    third = scripted(say("Hello."))
    await run(store, third, "acme", "alice", "Hi.")
    assert system_text(third.prompts[0]) == "You are a helpful assistant."


@pytest.mark.asyncio
async def test_the_block_is_the_python_tools_block_with_their_budget(store: SqliteMemory) -> None:
    for index in range(40):
        await store.remember("acme", "alice", f"Fact number {index} " + "x" * 200)
    limits = ToolLimits(max_prompt_chars=2000)
    model = scripted(say("Hello."))
    agent = create_agent(model, middleware=[MemoryMiddleware(store, limits=limits)])
    await agent.ainvoke(
        {"messages": [{"role": "user", "content": "Hi."}]}, context=MemoryContext("acme", "alice")
    )
    expected = await MemoryTools(store, memory_key("acme", "alice"), limits=limits).prompt()
    assert system_text(model.prompts[0]) == expected
    assert len(expected) <= 2000


@pytest.mark.asyncio
async def test_two_end_users_in_parallel_never_see_each_other(store: SqliteMemory) -> None:
    facts = {"alice": "Alice works nights", "bob": "Bob is vegetarian"}
    models = {
        user: scripted(call("remember", {"content": fact}), say("Noted."))
        for user, fact in facts.items()
    }
    await asyncio.gather(*(run(store, models[user], "acme", user, "x") for user in facts))
    later = {user: scripted(say("Hi.")) for user in facts}
    await asyncio.gather(*(run(store, later[user], "acme", user, "x") for user in facts))
    for user, other in (("alice", "bob"), ("bob", "alice")):
        prompt = system_text(later[user].prompts[0])
        assert facts[user] in prompt
        assert facts[other] not in prompt
        assert [m.content for m in await store.recall("acme", user)] == [facts[user]]


@pytest.mark.asyncio
async def test_a_model_cannot_name_another_user_or_tenant(store: SqliteMemory) -> None:
    bob = await store.remember("acme", "bob", "Bob is vegetarian")
    model = scripted(
        call("remember", {"content": "Injected", "end_user_id": "bob", "tenant": "other"}, "c1"),
        call("forget", {"memory_id": bob.id, "scope": "acme", "end_user_id": "bob"}, "c2"),
        call("forget", {"memory_id": bob.id, "runtime": {"context": {"end_user_id": "bob"}}}, "c3"),
        say("Done."),
    )
    result = await run(store, model, "acme", "alice", "x")
    refused = tool_messages(result)
    assert [m.status for m in refused] == ["error", "error", "success"]
    assert json.loads(refused[2].text)["forgotten"] is False
    assert await store.recall("acme", "bob") == (bob,)
    assert await store.recall("acme", "alice") == ()
    assert await store.recall("other", "bob") == ()


@pytest.mark.asyncio
async def test_the_model_sees_only_the_python_tools_schemas(store: SqliteMemory) -> None:
    model = scripted(say("Hi."))
    await run(store, model, "acme", "alice", "x")
    by_name = {tool["function"]["name"]: tool["function"] for tool in model.bound}
    for spec in (REMEMBER, FORGET):
        shown = by_name[spec.name]
        assert shown["description"] == spec.description
        assert shown["parameters"] == spec.input_schema
        assert not {"tenant", "end_user_id", "scope", "runtime"} & set(
            shown["parameters"]["properties"]
        )


@pytest.mark.asyncio
async def test_a_run_without_an_end_user_fails_before_the_model_is_called(
    store: SqliteMemory,
) -> None:
    model = scripted(say("Hi."))
    agent = create_agent(model, middleware=[MemoryMiddleware(store)])
    with pytest.raises(NoEndUserError, match="names no tenant and end user"):
        await agent.ainvoke({"messages": [{"role": "user", "content": "x"}]})
    half = create_agent(model, middleware=[MemoryMiddleware(store)])
    with pytest.raises(NoEndUserError):
        await half.ainvoke(
            {"messages": [{"role": "user", "content": "x"}]}, context={"tenant": "acme"}
        )
    assert model.prompts == []


@pytest.mark.asyncio
async def test_identity_from_config_configurable(store: SqliteMemory) -> None:
    model = scripted(call("remember", {"content": "Speaks French"}), say("Noted."))
    agent = create_agent(model, middleware=[MemoryMiddleware(store)])
    configurable = {"tenant": "acme", "end_user_id": "carol"}
    await agent.ainvoke(
        {"messages": [{"role": "user", "content": "x"}]}, config={"configurable": configurable}
    )
    assert [m.content for m in await store.recall("acme", "carol")] == ["Speaks French"]


@pytest.mark.asyncio
async def test_plain_tool_node_runs_for_the_configured_user(store: SqliteMemory) -> None:
    builder = StateGraph(MessagesState)
    builder.add_node("tools", ToolNode(memory_tools(store)))
    builder.add_edge(START, "tools")
    builder.add_edge("tools", END)
    node = builder.compile()
    message = AIMessage(
        content="", tool_calls=[{"name": "remember", "args": {"content": "Likes tea"}, "id": "t1"}]
    )
    config: Any = {"configurable": {"tenant": "acme", "end_user_id": "dave"}}
    result = await node.ainvoke({"messages": [message]}, config=config)
    answer = result["messages"][-1]
    (saved,) = await store.recall("acme", "dave")
    assert json.loads(answer.text) == {"remembered": True, "id": saved.id}
    with pytest.raises(NoEndUserError):
        await node.ainvoke({"messages": [message]})
    assert len(await store.recall("acme", "dave")) == 1


def test_memory_tools_refuses_what_is_not_a_store() -> None:
    with pytest.raises(TypeError, match="memory must be a MemoryStore"):
        memory_tools(object())  # type: ignore[arg-type]


def calls(*contents: str) -> Step:
    """One model response holding a ``remember`` call per content, run by LangGraph at once."""
    return lambda _: AIMessage(
        content="",
        tool_calls=[
            {"name": "remember", "args": {"content": content}, "id": f"c{index}"}
            for index, content in enumerate(contents)
        ],
    )


async def capped_run(
    store: SqliteMemory, model: ScriptedModel, user: str, limits: ToolLimits
) -> dict[str, Any]:
    agent = create_agent(
        model, middleware=[MemoryMiddleware(store, limits=limits)], context_schema=MemoryContext
    )
    result: dict[str, Any] = await agent.ainvoke(
        {"messages": [{"role": "user", "content": "Remember these."}]},
        context=MemoryContext(tenant="acme", end_user_id=user),
    )
    return result


@pytest.mark.asyncio
async def test_three_remembers_in_one_response_keep_the_cap(store: SqliteMemory) -> None:
    # LangChain binds the tools afresh for every call: the cap holds because
    # the store counts and adds as one step.
    limits = ToolLimits(max_facts=2)
    model = scripted(calls("fact one", "fact two", "fact three"), say("Noted."))
    result = await capped_run(store, model, "alice", limits)
    answers = tool_messages(result)
    assert len(answers) == 3
    full = refusal("remember", memory_full(2)).content
    assert sorted(m.status for m in answers) == ["error", "success", "success"]
    assert [m.text for m in answers if m.status == "error"] == [full]
    stored = await store.recall("acme", "alice")
    assert len(stored) == 2
    saved = {json.loads(m.text)["id"] for m in answers if m.status == "success"}
    assert saved == {fact.id for fact in stored}


@pytest.mark.asyncio
async def test_two_runs_of_one_end_user_at_once_keep_the_cap(store: SqliteMemory) -> None:
    limits = ToolLimits(max_facts=2)
    models = [
        scripted(calls(f"run {index} fact one", f"run {index} fact two"), say("Noted."))
        for index in range(2)
    ]
    results: list[dict[str, Any]] = []

    async def one(model: ScriptedModel) -> None:
        results.append(await capped_run(store, model, "alice", limits))

    async with anyio.create_task_group() as group:
        for model in models:
            group.start_soon(one, model)
    answers = [m for result in results for m in tool_messages(result)]
    assert sorted(m.status for m in answers) == ["error", "error", "success", "success"]
    assert len(await store.recall("acme", "alice")) == 2
