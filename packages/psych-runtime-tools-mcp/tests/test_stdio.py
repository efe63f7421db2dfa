"""The console script over stdio, in a subprocess, through the SDK's own client."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

import anyio
import pytest
from mcp import Client, StdioServerParameters
from mcp.types import CallToolResult, TextContent

from psych_runtime.memory.admin import store_schemes
from psych_runtime.memory.sqlite import SqliteMemory
from psych_runtime.tools.mcp._server import ARGUMENTS_AS_SENT

if TYPE_CHECKING:
    from conftest import PythonAnswer

pytestmark = pytest.mark.anyio

# The SQLite adapter registers its URL scheme with the opener; until it does,
# the tests that share a file between processes have nothing to open.
needs_sqlite_urls = pytest.mark.skipif(
    "sqlite" not in store_schemes(), reason="no installed backend registers sqlite: URLs"
)

TENANT = "acme"
USER = "alice"


def script() -> str:
    found = shutil.which("psych-memory-mcp", path=str(Path(sys.executable).parent))
    assert found is not None, "the console script is not installed"
    return found


def launch(db_path: Path | None, *, user: str = USER) -> Client:
    store = "memory:" if db_path is None else f"sqlite:///{db_path}"
    return Client(
        StdioServerParameters(
            command=script(),
            args=["--store", store, "--tenant", TENANT, "--user", user],
            # The SDK passes a minimal environment; coverage measurement of
            # the subprocess needs its own variables too.
            env={name: value for name, value in os.environ.items() if name.startswith("COV")},
        )
    )


def text(result: CallToolResult) -> str:
    (block,) = result.content
    assert isinstance(block, TextContent)
    return block.text


async def test_the_console_script_serves_the_tools_over_stdio(
    anyio_backend: str, python_answer: Any
) -> None:
    async with launch(None) as session:
        tools = (await session.list_tools()).tools
        assert [tool.name for tool in tools] == ["remember", "forget", "recall"]
        saved = json.loads(text(await session.call_tool("remember", {"content": "likes tea"})))
        smuggled = {"content": "is an admin", "end_user_id": "mallory"}
        refused = await session.call_tool("remember", smuggled)
        assert refused.is_error
        assert text(refused) == (await python_answer("remember", smuggled)).content
        recalled = text(await session.call_tool("recall", {}))
        assert saved["id"] in recalled
        assert "admin" not in recalled


@needs_sqlite_urls
async def test_the_console_script_serves_one_user_and_closes_the_store(
    db_path: Path, anyio_backend: str, python_answer: Any
) -> None:
    async with launch(db_path) as session:
        tools = (await session.list_tools()).tools
        assert {tool.name for tool in tools} == {"remember", "forget", "recall"}
        for tool in tools:
            assert "user" not in json.dumps(tool.input_schema).lower()
        saved = json.loads(text(await session.call_tool("remember", {"content": "likes tea"})))
        smuggled = {"content": "is an admin", "end_user_id": "mallory"}
        refused = await session.call_tool("remember", smuggled)
        assert refused.is_error
        assert text(refused) == (await python_answer("remember", smuggled)).content
        recalled = text(await session.call_tool("recall", {}))
        assert saved["id"] in recalled
        assert "admin" not in recalled
    # The client closed stdin: the server shut down and closed the store,
    # which leaves no write-ahead log behind.
    assert not await anyio.Path(f"{db_path}-wal").exists()
    async with SqliteMemory(db_path) as memory:
        assert [m.content for m in await memory.recall(TENANT, USER)] == ["likes tea"]
        assert await memory.recall(TENANT, "mallory") == ()


@needs_sqlite_urls
async def test_parallel_calls_from_several_clients_on_one_file_lose_nothing(
    db_path: Path, anyio_backend: str
) -> None:
    clients, calls = 3, 10
    ids: list[str] = []

    async def client(number: int) -> None:
        async with launch(db_path) as session, anyio.create_task_group() as group:
            for call in range(calls):
                group.start_soon(remember, session, f"fact {number}.{call}")

    async def remember(session: Client, content: str) -> None:
        result = await session.call_tool("remember", {"content": content})
        assert not result.is_error, text(result)
        ids.append(json.loads(text(result))["id"])

    async with anyio.create_task_group() as group:
        for number in range(clients):
            group.start_soon(client, number)
    async with SqliteMemory(db_path) as memory:
        stored = await memory.recall(TENANT, USER)
    assert sorted(m.id for m in stored) == sorted(ids)
    assert len(set(ids)) == clients * calls


def test_a_bad_key_is_refused_at_launch_in_one_line(db_path: Path) -> None:
    store = f"sqlite:///{db_path}"
    done = subprocess.run(
        [script(), "--store", store, "--tenant", TENANT, "--user", "alice\n"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 2
    assert done.stdout == ""
    assert done.stderr.count("\n") == 1
    assert done.stderr.startswith("psych-memory-mcp: error: --user: ")
    assert "alice" not in done.stderr
    assert not db_path.exists()


async def exchange(lines: list[str], last: int) -> dict[Any, Any]:
    """Send raw lines to the console script; its answers by id, once ``last`` is answered."""
    environment = {name: value for name, value in os.environ.items() if name.startswith("COV")}
    command = [script(), "--store", "memory:", "--tenant", TENANT, "--user", USER]
    answers: dict[Any, Any] = {}
    with anyio.fail_after(60):
        async with await anyio.open_process(command, env=environment) as process:
            assert process.stdin is not None
            assert process.stdout is not None
            await process.stdin.send(("\n".join(lines) + "\n").encode())
            received = b""
            async for chunk in process.stdout:
                received += chunk
                if not received.endswith(b"\n"):
                    continue
                answers = {
                    message["id"]: message
                    for message in map(json.loads, received.splitlines())
                    if "id" in message
                }
                if last in answers:
                    break
            await process.stdin.aclose()
    return answers


def tool_call(number: int, params: str) -> str:
    return f'{{"jsonrpc":"2.0","id":{number},"method":"tools/call","params":{params}}}'


async def test_a_repeated_key_above_the_arguments_is_answered_with_an_error_over_stdio(
    anyio_backend: str, initialize: dict[str, Any]
) -> None:
    lines = [
        json.dumps(initialize),
        '{"jsonrpc":"2.0","method":"notifications/initialized"}',
        tool_call(2, '{"name":"recall","name":"remember","arguments":{"content":"A"}}'),
        tool_call(3, '{"name":"remember","arguments":{"content":"A"},"arguments":{"content":"B"}}'),
        '{"jsonrpc":"2.0","id":5,"id":6,"method":"tools/call","params":{"name":"recall"}}',
        '{"jsonrpc":"2.0","method":"notifications/initialized","method":"x"}',
        tool_call(4, '{"name":"recall"}'),
    ]
    answers = await exchange(lines, 4)
    message = "Invalid Request: a JSON object in the request repeats a key"
    assert answers[2]["error"] == {"code": -32600, "message": f"{message} (params.name)"}
    assert answers[3]["error"] == {"code": -32600, "message": f"{message} (params.arguments)"}
    assert answers[None]["error"]["code"] == -32600
    assert 5 not in answers
    assert 6 not in answers
    recalled = answers[4]["result"]["content"][0]["text"]
    assert not [line for line in recalled.splitlines() if line.startswith("{")]


async def test_arguments_with_a_repeated_key_are_refused_over_stdio_too(
    anyio_backend: str, python_answer: PythonAnswer, initialize: dict[str, Any]
) -> None:
    repeated = '{"content": "A", "content": "B"}'

    def call(number: int, name: str, arguments: str, meta: dict[str, str] | None = None) -> str:
        extra = "" if meta is None else f',"_meta":{json.dumps(meta)}'
        params = f'{{"name":"{name}","arguments":{arguments}{extra}}}'
        return f'{{"jsonrpc":"2.0","id":{number},"method":"tools/call","params":{params}}}'

    lines = [
        json.dumps(initialize),
        '{"jsonrpc":"2.0","method":"notifications/initialized"}',
        call(2, "remember", repeated),
        # Set by the client, the key that carries arguments as sent is ignored.
        call(3, "remember", '{"content":"kept"}', {ARGUMENTS_AS_SENT: repeated}),
        call(4, "recall", "{}"),
    ]
    answers = {number: message["result"] for number, message in (await exchange(lines, 4)).items()}
    (refused,) = answers[2]["content"]
    assert answers[2]["isError"] is True
    assert refused["text"] == (await python_answer("remember", repeated)).content
    assert answers[3]["isError"] is False
    recalled = answers[4]["content"][0]["text"]
    assert '"kept"' in recalled
    assert '"A"' not in recalled
    assert '"B"' not in recalled
