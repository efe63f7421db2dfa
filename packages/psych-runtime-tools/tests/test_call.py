"""MemoryTools.call: the tools run against the bound key, and bad calls change nothing."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

import pytest

from psych_runtime.memory.inproc import InProcessMemory
from psych_runtime.memory.port import (
    MAX_CONTENT_LENGTH,
    InvalidKeyError,
    Memory,
    MemoryKey,
    MemoryStore,
    Scope,
)
from psych_runtime.tools.builtins import (
    DEFAULT_MAX_FACT_LENGTH,
    MemoryTools,
    ToolResult,
    UnknownToolError,
    memory_tools,
)

pytestmark = pytest.mark.anyio

PERSONAL = "lives at Hauptstrasse 5"


@dataclass(frozen=True)
class RuntimeScope:
    tenant: str


@pytest.fixture
def memory() -> InProcessMemory:
    return InProcessMemory()


@pytest.fixture
def tools(memory: InProcessMemory) -> MemoryTools:
    return memory_tools(memory, scope="acme", end_user_id="u1")


def payload(result: ToolResult) -> dict[str, Any]:
    data: dict[str, Any] = json.loads(result.content)
    # Compact: no whitespace between tokens.
    assert result.content == json.dumps(data, separators=(",", ":"))
    return data


async def snapshot(memory: InProcessMemory) -> dict[tuple[str, str], tuple[Memory, ...]]:
    keys = [("acme", "u1"), ("acme", "u2"), ("other", "u1")]
    return {key: await memory.recall(*key) for key in keys}


# Binding


def test_binding_validates_the_key_at_bind_time(memory: InProcessMemory) -> None:
    with pytest.raises(InvalidKeyError, match="end_user_id"):
        memory_tools(memory, scope="acme", end_user_id=" u1")
    with pytest.raises(InvalidKeyError, match="scope"):
        memory_tools(memory, scope="", end_user_id="u1")
    with pytest.raises(TypeError, match="end_user_id"):
        memory_tools(memory, scope="acme", end_user_id=None)  # type: ignore[arg-type]


def test_binding_requires_scope_and_end_user(memory: InProcessMemory) -> None:
    with pytest.raises(TypeError):
        memory_tools(memory, scope="acme")  # type: ignore[call-arg]
    with pytest.raises(TypeError):
        memory_tools(memory, end_user_id="u1")  # type: ignore[call-arg]
    with pytest.raises(TypeError):
        memory_tools(memory, "acme", "u1")  # type: ignore[call-arg]


def test_binding_refuses_what_is_not_a_store() -> None:
    with pytest.raises(TypeError, match="memory must be a MemoryStore"):
        memory_tools(object(), scope="acme", end_user_id="u1")  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="key must be a MemoryKey"):
        MemoryTools(InProcessMemory(), ("acme", "u1"))  # type: ignore[arg-type]


def test_binding_accepts_the_runtimes_scope_object(memory: InProcessMemory) -> None:
    tools = memory_tools(memory, scope=RuntimeScope("acme"), end_user_id="u1")
    assert tools.key == MemoryKey("acme", "u1")
    assert tools.memory is memory
    assert repr(tools) == (
        "MemoryTools(memory=InProcessMemory, key=MemoryKey(tenant='acme', end_user_id='u1'))"
    )


# remember and forget


async def test_remember_stores_under_the_bound_key_only(
    memory: InProcessMemory, tools: MemoryTools
) -> None:
    result = await tools.call("remember", {"content": "prefers the Berlin warehouse"})
    assert result.is_error is False
    data = payload(result)
    assert data == {"remembered": True, "id": data["id"]}
    (fact,) = await memory.recall("acme", "u1")
    assert (fact.id, fact.content) == (data["id"], "prefers the Berlin warehouse")
    assert await memory.recall("acme", "u2") == ()
    assert await memory.recall("other", "u1") == ()


async def test_remember_accepts_json_text_and_keeps_content_exactly(
    memory: InProcessMemory, tools: MemoryTools
) -> None:
    content = '  two lines\n\tand a tab, "quotes" and ünïcödé '
    result = await tools.call("remember", json.dumps({"content": content}))
    assert result.is_error is False
    (fact,) = await memory.recall("acme", "u1")
    assert fact.content == content


async def test_remember_always_adds(memory: InProcessMemory, tools: MemoryTools) -> None:
    first = payload(await tools.call("remember", {"content": "likes tea"}))
    second = payload(await tools.call("remember", {"content": "likes tea"}))
    assert first["id"] != second["id"]
    assert len(await memory.recall("acme", "u1")) == 2


async def test_remember_accepts_content_at_the_length_limit(
    memory: InProcessMemory, tools: MemoryTools
) -> None:
    result = await tools.call("remember", {"content": "x" * DEFAULT_MAX_FACT_LENGTH})
    assert result.is_error is False
    unlimited = memory_tools(memory, scope="acme", end_user_id="u1", max_fact_length=None)
    result = await unlimited.call("remember", {"content": "x" * MAX_CONTENT_LENGTH})
    assert result.is_error is False
    assert len(await memory.recall("acme", "u1")) == 2


async def test_without_a_cap_of_its_own_the_ports_limit_still_holds(
    memory: InProcessMemory,
) -> None:
    unlimited = memory_tools(memory, scope="acme", end_user_id="u1", max_fact_length=None)
    result = await unlimited.call("remember", {"content": LONG})
    message = payload(result)["error"]
    assert f"'content' must be at most {MAX_CONTENT_LENGTH} characters (got 4097)" in message
    assert await memory.recall("acme", "u1") == ()


async def test_forget_deletes_by_id_once(memory: InProcessMemory, tools: MemoryTools) -> None:
    fact = await memory.remember("acme", "u1", "likes tea")
    keep = await memory.remember("acme", "u1", "likes coffee")
    result = await tools.call("forget", {"memory_id": fact.id})
    assert (result.is_error, payload(result)) == (False, {"forgotten": True})
    again = await tools.call("forget", json.dumps({"memory_id": fact.id}))
    assert again.is_error is False
    assert payload(again)["forgotten"] is False
    assert await memory.recall("acme", "u1") == (keep,)


async def test_forget_cannot_reach_another_users_fact(
    memory: InProcessMemory, tools: MemoryTools
) -> None:
    theirs = await memory.remember("acme", "u2", "likes tea")
    other_tenant = await memory.remember("other", "u1", "likes tea")
    for fact in (theirs, other_tenant):
        result = await tools.call("forget", {"memory_id": fact.id})
        assert payload(result)["forgotten"] is False
    assert await memory.recall("acme", "u2") == (theirs,)
    assert await memory.recall("other", "u1") == (other_tenant,)


async def test_forget_of_an_unknown_id_is_an_answer_not_an_error(tools: MemoryTools) -> None:
    for memory_id in ("", "no such id", "x" * 10_000):
        result = await tools.call("forget", {"memory_id": memory_id})
        assert result.is_error is False
        data = payload(result)
        assert data["forgotten"] is False
        # The answer does not repeat the id the model sent.
        assert set(data) == {"forgotten", "reason"}


# Bad arguments: an error result saying what to fix, and nothing changed.

LONG = "x" * (MAX_CONTENT_LENGTH + 1)
UNKNOWN_NAME = "an argument not in the tool's schema was given; send only 'content'"

BAD_REMEMBER: list[tuple[object, str]] = [
    ({}, "missing required argument 'content'"),
    ({"text": PERSONAL}, UNKNOWN_NAME),
    ({"content": PERSONAL, "end_user_id": "u2"}, "'end_user_id' cannot be passed"),
    ({"content": PERSONAL, "tenant": "other"}, "'tenant' cannot be passed"),
    ({"content": PERSONAL, "scope": "other"}, "'scope' cannot be passed"),
    ({"content": PERSONAL, "user_id": "u2"}, "'user_id' cannot be passed"),
    ({"content": PERSONAL, "a": 1, "b": 2, "c": 3, "d": 4}, UNKNOWN_NAME),
    ({"content": "likes tea", PERSONAL: 1}, UNKNOWN_NAME),
    ({"content": "likes tea", "end_user_id": "u2", "tenant": "x"}, "'end_user_id' and 'tenant'"),
    ({"content": PERSONAL, 1: "x"}, "argument names must be strings"),
    ({"content": None}, "'content' must be a string, not null"),
    ({"content": 42}, "'content' must be a string, not a number"),
    ({"content": True}, "'content' must be a string, not a boolean"),
    ({"content": [PERSONAL]}, "'content' must be a string, not an array"),
    ({"content": {"fact": PERSONAL}}, "'content' must be a string, not an object"),
    ({"content": ""}, "'content' must not be empty"),
    ({"content": " \n\t "}, "'content' must not be only whitespace"),
    ({"content": LONG}, f"at most {DEFAULT_MAX_FACT_LENGTH} characters (got 4097)"),
    ({"content": "x" * (DEFAULT_MAX_FACT_LENGTH + 1)}, "save a shorter fact"),
    ({"content": PERSONAL + "\x00"}, "control character"),
    ({"content": PERSONAL + "\x1b[2J"}, "control character"),
    ({"content": PERSONAL + "\x85"}, "control character"),
    ({"content": PERSONAL + "\ud800"}, "lone surrogate"),
    ('{"content": "' + PERSONAL + '"', "not valid JSON"),
    ("", "not valid JSON"),
    ("[" * 100_000, "not valid JSON"),
    ('{"content": NaN}', "NaN or Infinity, which JSON does not allow"),
    ('{"content": -Infinity}', "NaN or Infinity, which JSON does not allow"),
    ('{"content": "a", "content": "' + PERSONAL + '"}', "argument 'content' appears more"),
    ('{"tenant": "a", "tenant": "' + PERSONAL + '"}', "argument 'tenant' appears more than once"),
    ('{"content": "a", "' + PERSONAL + '": 1, "' + PERSONAL + '": 2}', "an argument name appears"),
    ('{"content": {"' + PERSONAL + '": 1, "' + PERSONAL + '": 2}}', "not an object"),
    ('{"content": [{"' + PERSONAL + '": 1, "' + PERSONAL + '": 2}]}', "not an array"),
    ('"' + PERSONAL + '"', "must be a JSON object"),
    ("[]", "must be a JSON object"),
    ("null", "not null"),
    (None, "not null"),
    ([("content", PERSONAL)], "not an array"),
    (b'{"content": "x"}', "not bytes"),
    (42, "not a number"),
]


@pytest.mark.parametrize(("arguments", "expected"), BAD_REMEMBER)
async def test_bad_remember_arguments_give_an_error_result_and_store_nothing(
    memory: InProcessMemory, tools: MemoryTools, arguments: object, expected: str
) -> None:
    before = await snapshot(memory)
    result = await tools.call("remember", arguments)
    assert result.is_error is True
    message = payload(result)["error"]
    assert expected in message
    assert message.startswith("remember was not run: ")
    assert message.endswith("Nothing was changed.")
    assert PERSONAL not in message
    assert await snapshot(memory) == before


BAD_FORGET: list[tuple[object, str]] = [
    ({}, "missing required argument 'memory_id'"),
    ({"id": "m1"}, "an argument not in the tool's schema was given; send only 'memory_id'"),
    ({"memory_id": "m1", PERSONAL: "m2"}, "send only 'memory_id'"),
    ('{"memory_id": {"' + PERSONAL + '": 1, "' + PERSONAL + '": 2}}', "not an object"),
    ({"memory_id": "m1", "end_user_id": "u2"}, "'end_user_id' cannot be passed"),
    ({"memory_id": 7}, "'memory_id' must be a string, not a number"),
    ({"memory_id": None}, "'memory_id' must be a string, not null"),
    ('{"memory_id": ', "not valid JSON"),
    ("[1]", "must be a JSON object"),
]


async def test_a_key_repeated_inside_a_value_is_neither_echoed_nor_called_an_argument(
    memory: InProcessMemory, tools: MemoryTools
) -> None:
    # Reported against the previous wording, which named the nested key.
    personal = "Jane Roe, SSN 078-05-1120"
    arguments = json.dumps({"content": {personal: 1}})[:-2] + f', "{personal}": 2}}}}'
    assert arguments.count(personal) == 2
    result = await tools.call("remember", arguments)
    message = payload(result)["error"]
    assert message == (
        "remember was not run: 'content' must be a string, not an object. Nothing was changed."
    )
    for part in ("Jane", "Roe", "SSN", "078-05-1120"):
        assert part not in message
    assert await memory.recall("acme", "u1") == ()


@pytest.mark.parametrize(("arguments", "expected"), BAD_FORGET)
async def test_bad_forget_arguments_give_an_error_result_and_delete_nothing(
    memory: InProcessMemory, tools: MemoryTools, arguments: object, expected: str
) -> None:
    await memory.remember("acme", "u1", "likes tea")
    await memory.remember("acme", "u2", "likes tea")
    before = await snapshot(memory)
    result = await tools.call("forget", arguments)
    assert result.is_error is True
    message = payload(result)["error"]
    assert expected in message
    assert message.startswith("forget was not run: ")
    assert PERSONAL not in message
    assert await snapshot(memory) == before


async def test_a_forget_that_names_the_end_user_is_refused_even_for_a_real_fact(
    memory: InProcessMemory, tools: MemoryTools
) -> None:
    fact = await memory.remember("acme", "u1", "likes tea")
    result = await tools.call("forget", {"memory_id": fact.id, "end_user_id": "u1"})
    assert result.is_error is True
    assert await memory.recall("acme", "u1") == (fact,)


# Routing and store failures raise: they are not the model's to fix.


async def test_an_unknown_tool_name_raises(memory: InProcessMemory, tools: MemoryTools) -> None:
    with pytest.raises(UnknownToolError, match="'search'") as caught:
        await tools.call("search", {"content": PERSONAL})
    assert caught.value.name == "search"
    assert isinstance(caught.value, LookupError)
    with pytest.raises(UnknownToolError, match=r"'Remember'"):
        await tools.call("Remember", {"content": PERSONAL})
    with pytest.raises(UnknownToolError) as long_name:
        await tools.call("n" * 1000, {})
    assert "n" * 41 not in str(long_name.value)
    with pytest.raises(TypeError, match="name must be a str"):
        await tools.call(None, {"content": PERSONAL})  # type: ignore[arg-type]
    assert await memory.recall("acme", "u1") == ()


class StoreDownError(Exception):
    pass


class BrokenStore(MemoryStore):
    """A backend whose database is unreachable."""

    async def remember(self, scope: Scope, end_user_id: str, content: str) -> Memory:
        raise StoreDownError("connection refused")

    async def forget(self, scope: Scope, end_user_id: str, memory_id: str) -> bool:
        raise StoreDownError("connection refused")

    async def recall(
        self, scope: Scope, end_user_id: str, *, limit: int | None = None
    ) -> tuple[Memory, ...]:
        raise StoreDownError("connection refused")

    async def erase(self, scope: Scope, end_user_id: str) -> int:
        raise StoreDownError("connection refused")


async def test_store_failures_propagate() -> None:
    tools = memory_tools(BrokenStore(), scope="acme", end_user_id="u1")
    with pytest.raises(StoreDownError):
        await tools.call("remember", {"content": "likes tea"})
    with pytest.raises(StoreDownError):
        await tools.call("forget", {"memory_id": "m1"})
    with pytest.raises(StoreDownError):
        await tools.prompt()


async def test_bad_arguments_never_reach_a_broken_store() -> None:
    # Refused before the store is asked, so a bad call is an error result
    # even while the database is down.
    tools = memory_tools(BrokenStore(), scope="acme", end_user_id="u1")
    result = await tools.call("remember", {"content": ""})
    assert result.is_error is True
