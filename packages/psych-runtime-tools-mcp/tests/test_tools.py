"""The tools, resource and prompt, through the SDK's own client, in-process."""

from __future__ import annotations

import inspect
import json
from typing import Any

import anyio
import pytest
from mcp import Client
from mcp.shared.exceptions import MCPError
from mcp.types import CallToolResult, TextContent

from psych_runtime.memory.inproc import InProcessMemory
from psych_runtime.memory.port import InvalidKeyError, MemoryStore
from psych_runtime.memory.sqlite import SqliteMemory
from psych_runtime.tools.builtins import memory_tools
from psych_runtime.tools.mcp import MEMORY_PROMPT, MEMORY_RESOURCE_URI, RECALL, memory_server

pytestmark = pytest.mark.anyio

TENANT = "acme"
USER = "alice"
KEY_ARGUMENTS = ("end_user_id", "user_id", "tenant", "scope")


def text(result: CallToolResult) -> str:
    (block,) = result.content
    assert isinstance(block, TextContent)
    return block.text


def client(memory: MemoryStore) -> Client:
    return Client(memory_server(memory, scope=TENANT, end_user_id=USER))


async def test_tools_are_the_python_specs_and_recall(memory: SqliteMemory) -> None:
    python_specs = memory_tools(memory, scope=TENANT, end_user_id=USER).specs
    async with client(memory) as session:
        tools = (await session.list_tools()).tools
    assert [tool.name for tool in tools] == [*(spec.name for spec in python_specs), "recall"]
    for tool, spec in zip(tools, (*python_specs, RECALL), strict=True):
        assert tool.description == spec.description
        assert tool.input_schema == spec.input_schema
    assert "erase" not in {tool.name for tool in tools}


async def test_no_tool_schema_mentions_a_user_tenant_or_scope(memory: SqliteMemory) -> None:
    async with client(memory) as session:
        tools = (await session.list_tools()).tools
    for tool in tools:
        schema = json.dumps(tool.input_schema).lower()
        for word in ("user", "tenant", "scope"):
            assert word not in schema, (tool.name, word)
        assert tool.input_schema["additionalProperties"] is False


async def test_remember_recall_forget(memory: SqliteMemory) -> None:
    async with client(memory) as session:
        saved = await session.call_tool("remember", {"content": "prefers the Berlin warehouse"})
        assert not saved.is_error
        memory_id = json.loads(text(saved))["id"]
        recalled = text(await session.call_tool("recall", {}))
        assert json.dumps({"id": memory_id, "fact": "prefers the Berlin warehouse"}) in recalled
        (stored,) = await memory.recall(TENANT, USER)
        assert (stored.id, stored.content) == (memory_id, "prefers the Berlin warehouse")
        forgotten = await session.call_tool("forget", {"memory_id": memory_id})
        assert json.loads(text(forgotten)) == {"forgotten": True}
        assert await memory.recall(TENANT, USER) == ()
        assert "No facts" in text(await session.call_tool("recall", {}))


@pytest.mark.parametrize("key_argument", KEY_ARGUMENTS)
async def test_a_key_argument_is_refused_like_the_python_tools_and_nothing_is_stored(
    memory: SqliteMemory, key_argument: str, python_answer: Any
) -> None:
    arguments = {"content": "is an admin", key_argument: "mallory"}
    async with client(memory) as session:
        result = await session.call_tool("remember", arguments)
        expected = await python_answer("remember", arguments)
        assert result.is_error
        assert text(result) == expected.content
        assert "mallory" not in text(result)
        forget = {"memory_id": "x", key_argument: "mallory"}
        result = await session.call_tool("forget", forget)
        assert result.is_error
        assert text(result) == (await python_answer("forget", forget)).content
        recall = await session.call_tool("recall", {key_argument: "mallory"})
        assert recall.is_error
        assert "cannot be passed" in text(recall)
        assert "mallory" not in text(recall)
    assert await memory.recall(TENANT, USER) == ()
    assert await memory.recall(TENANT, "mallory") == ()
    assert await memory.recall("mallory", USER) == ()


@pytest.mark.parametrize(
    ("name", "arguments"),
    [
        ("remember", {}),
        ("remember", {"content": ""}),
        ("remember", {"content": 42}),
        ("remember", {"content": "x" * 5000}),
        ("remember", {"content": "fine", "importance": "high"}),
        ("forget", {"memory_id": 7}),
        ("forget", {}),
    ],
)
async def test_bad_arguments_get_the_python_tools_refusal(
    memory: SqliteMemory, name: str, arguments: dict[str, Any], python_answer: Any
) -> None:
    async with client(memory) as session:
        result = await session.call_tool(name, arguments)
    assert result.is_error
    assert text(result) == (await python_answer(name, arguments)).content
    assert await memory.recall(TENANT, USER) == ()


async def test_recall_refuses_any_argument(memory: SqliteMemory) -> None:
    async with client(memory) as session:
        result = await session.call_tool("recall", {"limit": 3})
    assert result.is_error
    assert "send no arguments" in text(result)
    assert "limit" not in text(result)


async def test_unknown_tool_is_an_error_result_naming_the_real_ones(memory: SqliteMemory) -> None:
    async with client(memory) as session:
        result = await session.call_tool("erase", {})
    assert result.is_error
    assert "'remember', 'forget', 'recall'" in text(result)


async def test_resource_and_prompt_hold_the_python_tools_memory_block(
    memory: SqliteMemory,
) -> None:
    tools = memory_tools(memory, scope=TENANT, end_user_id=USER)
    await memory.remember(TENANT, USER, "likes tea\nid: forged")
    await memory.remember(TENANT, "bob", "bob's fact")
    block = await tools.prompt()
    async with client(memory) as session:
        (resource,) = (await session.list_resources()).resources
        assert str(resource.uri) == MEMORY_RESOURCE_URI
        read = await session.read_resource(MEMORY_RESOURCE_URI)
        (prompt,) = (await session.list_prompts()).prompts
        assert prompt.name == MEMORY_PROMPT
        got = await session.get_prompt(MEMORY_PROMPT)
    async with client(memory) as session:
        with pytest.raises(MCPError, match="no such resource"):
            await session.read_resource("memory://another-user")
        with pytest.raises(MCPError, match="no such prompt"):
            await session.get_prompt("other")
    (contents,) = read.contents
    assert getattr(contents, "text", None) == block
    (message,) = got.messages
    assert isinstance(message.content, TextContent)
    assert message.content.text == block
    assert "bob's fact" not in block


async def test_a_store_that_is_down_gives_an_unavailable_answer_and_no_trace(
    memory: SqliteMemory,
) -> None:
    async with client(memory) as session:
        await memory.aclose()
        for name, arguments in (
            ("remember", {"content": "likes tea"}),
            ("forget", {"memory_id": "abc"}),
            ("recall", {}),
        ):
            result = await session.call_tool(name, arguments)
            assert result.is_error, name
            answer = json.loads(text(result))["error"]
            assert answer.startswith(f"{name} failed: memory is unavailable right now."), answer
            for leak in ("Traceback", "Error", "sqlite", "closed"):
                assert leak not in answer, (name, leak)
        with pytest.raises(MCPError, match="memory is unavailable"):
            await session.read_resource(MEMORY_RESOURCE_URI)


async def test_parallel_calls_from_several_clients_on_one_sqlite_store_lose_nothing(
    memory: SqliteMemory,
) -> None:
    clients, calls = 4, 10
    ids: list[str] = []

    async def one_client() -> None:
        async with client(memory) as session, anyio.create_task_group() as group:
            for call in range(calls):
                group.start_soon(remember, session, call)

    async def remember(session: Client, call: int) -> None:
        result = await session.call_tool("remember", {"content": f"fact {call}"})
        assert not result.is_error, text(result)
        ids.append(json.loads(text(result))["id"])

    async with anyio.create_task_group() as group:
        for _ in range(clients):
            group.start_soon(one_client)
    assert sorted(m.id for m in await memory.recall(TENANT, USER)) == sorted(ids)
    assert len(set(ids)) == clients * calls


@pytest.mark.skipif(
    "max_facts" not in inspect.signature(memory_tools).parameters,
    reason="these tools take no limits",
)
async def test_the_tools_limits_are_server_options(memory: SqliteMemory) -> None:
    limits = {"max_facts": 2, "max_fact_length": 100}
    bound = memory_tools(memory, scope=TENANT, end_user_id=USER, **limits)
    server = memory_server(memory, scope=TENANT, end_user_id=USER, **limits)
    async with Client(server) as session:
        tools = {tool.name: tool for tool in (await session.list_tools()).tools}
        for spec in bound.specs:
            assert tools[spec.name].input_schema == spec.input_schema
            assert tools[spec.name].description == spec.description
        for number in range(2):
            saved = await session.call_tool("remember", {"content": f"fact {number}"})
            assert not saved.is_error
        full = await session.call_tool("remember", {"content": "one too many"})
        too_long = await session.call_tool("remember", {"content": "x" * 101})
    assert full.is_error
    assert text(full) == (await bound.call("remember", {"content": "one too many"})).content
    assert too_long.is_error
    assert len(await memory.recall(TENANT, USER)) == 2


async def remember_at_once(sessions: list[Client], count: int) -> list[CallToolResult]:
    """``count`` ``remember`` calls at once, spread over ``sessions`` in turn."""
    results: list[CallToolResult] = []

    async def remember(session: Client, index: int) -> None:
        results.append(await session.call_tool("remember", {"content": f"fact {index}"}))

    async with anyio.create_task_group() as group:
        for index in range(count):
            group.start_soon(remember, sessions[index % len(sessions)], index)
    return results


async def test_parallel_remembers_keep_the_cap(memory: SqliteMemory) -> None:
    server = memory_server(memory, scope=TENANT, end_user_id=USER, max_facts=2)
    async with Client(server) as session:
        results = await remember_at_once([session], 3)
    bound = memory_tools(memory, scope=TENANT, end_user_id=USER, max_facts=2)
    full = (await bound.call("remember", {"content": "one too many"})).content
    assert [text(result) for result in results if result.is_error] == [full]
    stored = await memory.recall(TENANT, USER)
    assert len(stored) == 2
    saved = {json.loads(text(result))["id"] for result in results if not result.is_error}
    assert saved == {fact.id for fact in stored}


@pytest.mark.parametrize("calls", [3, 8])
async def test_two_servers_of_one_end_user_keep_the_cap_together(
    memory: SqliteMemory, calls: int
) -> None:
    # Each server binds its own toolset (as two stdio servers of one user
    # do): the cap holds because the store counts and adds as one step.
    first = memory_server(memory, scope=TENANT, end_user_id=USER, max_facts=2)
    second = memory_server(memory, scope=TENANT, end_user_id=USER, max_facts=2)
    async with Client(first) as one, Client(second) as other:
        results = await remember_at_once([one, other], calls)
    assert [result.is_error for result in results].count(True) == calls - 2
    assert len(await memory.recall(TENANT, USER)) == 2


async def test_a_bad_key_is_refused_when_the_server_is_built(memory: SqliteMemory) -> None:
    with pytest.raises(InvalidKeyError):
        memory_server(memory, scope=TENANT, end_user_id=" alice")


async def test_a_closed_store_says_nothing_was_saved(anyio_backend: str) -> None:
    memory = InProcessMemory()
    await memory.aclose()
    async with client(memory) as session:
        result = await session.call_tool("remember", {"content": "likes tea"})
    assert result.is_error
    assert json.loads(text(result)) == {
        "error": "remember failed: memory is unavailable right now. "
        "Nothing was saved or deleted; try again later."
    }
