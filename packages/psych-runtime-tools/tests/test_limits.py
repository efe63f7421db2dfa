"""Caps per end user: a full memory refuses, evicts nothing, and holds under parallel calls."""

from __future__ import annotations

import json
import re
from typing import Any

import anyio
import anyio.lowlevel
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from psych_runtime.memory.inproc import InProcessMemory
from psych_runtime.memory.port import (
    MAX_CONTENT_LENGTH,
    Memory,
    MemoryStore,
    RemembersWithinLimit,
    Scope,
    memory_key,
)
from psych_runtime.tools.builtins import (
    DEFAULT_MAX_FACT_LENGTH,
    DEFAULT_MAX_FACTS,
    DEFAULT_MAX_PROMPT_CHARS,
    MIN_PROMPT_CHARS,
    MemoryTools,
    ToolLimits,
    memory_full,
    memory_tools,
)

pytestmark = pytest.mark.anyio

PERSONAL = "lives at Hauptstrasse 5"


class NetworkedMemory(MemoryStore):
    """The in-process adapter, yielding to other tasks around every call.

    A store over a network or a thread pool lets other tasks run while it
    works; the in-process adapter alone never does, which would hide any
    race between counting the facts and adding one.
    """

    def __init__(self) -> None:
        self.inner = InProcessMemory()

    async def remember(self, scope: Scope, end_user_id: str, content: str) -> Memory:
        await anyio.lowlevel.checkpoint()
        fact = await self.inner.remember(scope, end_user_id, content)
        await anyio.lowlevel.checkpoint()
        return fact

    async def forget(self, scope: Scope, end_user_id: str, memory_id: str) -> bool:
        await anyio.lowlevel.checkpoint()
        return await self.inner.forget(scope, end_user_id, memory_id)

    async def recall(
        self, scope: Scope, end_user_id: str, *, limit: int | None = None
    ) -> tuple[Memory, ...]:
        await anyio.lowlevel.checkpoint()
        facts = await self.inner.recall(scope, end_user_id, limit=limit)
        await anyio.lowlevel.checkpoint()
        return facts

    async def erase(self, scope: Scope, end_user_id: str) -> int:
        return await self.inner.erase(scope, end_user_id)


class NetworkedCappedMemory(NetworkedMemory):
    """`NetworkedMemory` that also counts and adds as one step, as `RemembersWithinLimit` asks.

    The in-process adapter keeps the step atomic under its lock; the
    checkpoints around it let other tasks run while the step is under way,
    as a store over a network would.
    """

    async def remember_within_limit(
        self, scope: Scope, end_user_id: str, content: str, *, max_facts: int
    ) -> Memory | None:
        await anyio.lowlevel.checkpoint()
        fact = await self.inner.remember_within_limit(
            scope, end_user_id, content, max_facts=max_facts
        )
        await anyio.lowlevel.checkpoint()
        return fact


def error(result: Any) -> str:
    assert result.is_error is True
    text: str = json.loads(result.content)["error"]
    return text


# Binding


def test_defaults_are_documented_values() -> None:
    tools = memory_tools(InProcessMemory(), scope="acme", end_user_id="u1")
    assert (tools.max_facts, tools.max_fact_length, tools.max_prompt_chars) == (
        DEFAULT_MAX_FACTS,
        DEFAULT_MAX_FACT_LENGTH,
        DEFAULT_MAX_PROMPT_CHARS,
    )
    assert (DEFAULT_MAX_FACTS, DEFAULT_MAX_FACT_LENGTH, DEFAULT_MAX_PROMPT_CHARS) == (
        50,
        300,
        20_000,
    )
    none = memory_tools(
        InProcessMemory(),
        scope="acme",
        end_user_id="u1",
        max_facts=None,
        max_fact_length=None,
        max_prompt_chars=None,
    )
    assert (none.max_facts, none.max_fact_length, none.max_prompt_chars) == (None, None, None)


BAD_LIMITS: list[tuple[dict[str, Any], type[Exception], str]] = [
    ({"max_facts": 0}, ValueError, "max_facts must be None or at least 1 (got 0)"),
    ({"max_facts": -5}, ValueError, "max_facts must be None or at least 1"),
    ({"max_facts": True}, TypeError, "max_facts must be None or an int, not bool"),
    ({"max_facts": 2.0}, TypeError, "max_facts must be None or an int, not float"),
    ({"max_fact_length": 0}, ValueError, "max_fact_length must be None or at least 1"),
    (
        {"max_fact_length": MAX_CONTENT_LENGTH + 1},
        ValueError,
        f"max_fact_length must be None or at most {MAX_CONTENT_LENGTH}",
    ),
    ({"max_fact_length": "300"}, TypeError, "max_fact_length must be None or an int"),
    (
        {"max_prompt_chars": MIN_PROMPT_CHARS - 1},
        ValueError,
        f"max_prompt_chars must be at least {MIN_PROMPT_CHARS}",
    ),
    ({"max_prompt_chars": 0}, ValueError, "header"),
    ({"max_prompt_chars": False}, TypeError, "max_prompt_chars must be None or an int"),
]


@pytest.mark.parametrize(("limits", "error_type", "words"), BAD_LIMITS)
def test_limits_are_checked_when_the_tools_are_wired(
    limits: dict[str, Any], error_type: type[Exception], words: str
) -> None:
    with pytest.raises(error_type, match=re.escape(words)):
        memory_tools(InProcessMemory(), scope="acme", end_user_id="u1", **limits)


def test_the_smallest_limits_are_accepted() -> None:
    tools = memory_tools(
        InProcessMemory(),
        scope="acme",
        end_user_id="u1",
        max_facts=1,
        max_fact_length=1,
        max_prompt_chars=MIN_PROMPT_CHARS,
    )
    assert (tools.max_facts, tools.max_fact_length, tools.max_prompt_chars) == (
        1,
        1,
        MIN_PROMPT_CHARS,
    )
    full_length = memory_tools(
        InProcessMemory(), scope="a", end_user_id="u", max_fact_length=MAX_CONTENT_LENGTH
    )
    assert full_length.max_fact_length == MAX_CONTENT_LENGTH


@pytest.mark.parametrize(("limits", "error_type", "words"), BAD_LIMITS)
def test_the_limits_object_refuses_what_the_tools_refuse(
    limits: dict[str, Any], error_type: type[Exception], words: str
) -> None:
    with pytest.raises(error_type, match=re.escape(words)):
        ToolLimits(**limits)


def test_the_limits_object_binds_the_tools_and_cannot_change() -> None:
    limits = ToolLimits(max_facts=None, max_fact_length=120)
    assert limits == ToolLimits(None, 120, DEFAULT_MAX_PROMPT_CHARS)
    with pytest.raises(AttributeError):
        limits.max_facts = 3  # type: ignore[misc]
    tools = MemoryTools(InProcessMemory(), memory_key("acme", "u1"), limits=limits)
    assert tools.limits is limits
    assert (tools.max_facts, tools.max_fact_length, tools.max_prompt_chars) == (
        None,
        120,
        DEFAULT_MAX_PROMPT_CHARS,
    )
    assert tools.specs[0].input_schema["properties"]["content"]["maxLength"] == 120
    bound = memory_tools(InProcessMemory(), scope="acme", end_user_id="u1", max_facts=7)
    assert bound.limits == ToolLimits(max_facts=7)
    assert ToolLimits().fact_length == DEFAULT_MAX_FACT_LENGTH
    assert ToolLimits(max_fact_length=None).fact_length == MAX_CONTENT_LENGTH


def test_the_limits_object_is_not_given_beside_single_limits() -> None:
    key = memory_key("acme", "u1")
    with pytest.raises(TypeError, match="give either limits or max_facts"):
        MemoryTools(InProcessMemory(), key, max_facts=3, limits=ToolLimits())
    with pytest.raises(TypeError, match="limits must be a ToolLimits, not dict"):
        MemoryTools(InProcessMemory(), key, limits={"max_facts": 3})  # type: ignore[arg-type]


# The cap


async def test_a_full_memory_refuses_and_evicts_nothing(anyio_backend: str) -> None:
    memory = InProcessMemory()
    tools = memory_tools(memory, scope="acme", end_user_id="u1", max_facts=3)
    ids = []
    for i in range(3):
        result = await tools.call("remember", {"content": f"fact {i}"})
        ids.append(json.loads(result.content)["id"])
    before = await memory.recall("acme", "u1")
    assert [fact.id for fact in before] == ids
    result = await tools.call("remember", {"content": PERSONAL})
    text = error(result)
    assert text == f"remember was not run: {memory_full(3)}. Nothing was changed."
    assert "memory is full" in text
    assert "forget" in text
    assert "tell the user" in text
    assert PERSONAL not in text
    assert await memory.recall("acme", "u1") == before
    # Forgetting makes room for exactly one more.
    forgotten = await tools.call("forget", {"memory_id": ids[0]})
    assert json.loads(forgotten.content) == {"forgotten": True}
    assert (await tools.call("remember", {"content": PERSONAL})).is_error is False
    assert (await tools.call("remember", {"content": "one too many"})).is_error is True
    assert [fact.content for fact in await memory.recall("acme", "u1")] == [
        "fact 1",
        "fact 2",
        PERSONAL,
    ]


async def test_the_cap_counts_this_end_user_only(anyio_backend: str) -> None:
    memory = InProcessMemory()
    for i in range(5):
        await memory.remember("acme", "u2", f"theirs {i}")
        await memory.remember("other", "u1", f"other tenant {i}")
    tools = memory_tools(memory, scope="acme", end_user_id="u1", max_facts=2)
    for i in range(2):
        assert (await tools.call("remember", {"content": f"mine {i}"})).is_error is False
    assert (await tools.call("remember", {"content": "mine 2"})).is_error is True


async def test_facts_stored_past_the_cap_elsewhere_are_kept_and_shown(
    anyio_backend: str,
) -> None:
    # Another process, or an application writing to the store directly, can
    # put the end user past the cap; the tools then refuse, and delete nothing.
    memory = InProcessMemory()
    for i in range(5):
        await memory.remember("acme", "u1", f"fact {i}")
    tools = memory_tools(memory, scope="acme", end_user_id="u1", max_facts=3)
    assert (await tools.call("remember", {"content": "more"})).is_error is True
    assert len(await memory.recall("acme", "u1")) == 5
    assert (await tools.prompt()).count('{"id": ') == 5


async def test_without_a_cap_remember_always_adds(anyio_backend: str) -> None:
    memory = InProcessMemory()
    tools = memory_tools(memory, scope="acme", end_user_id="u1", max_facts=None)
    for i in range(DEFAULT_MAX_FACTS + 5):
        assert (await tools.call("remember", {"content": f"fact {i}"})).is_error is False
    assert len(await memory.recall("acme", "u1")) == DEFAULT_MAX_FACTS + 5


async def test_bad_arguments_are_refused_before_the_count(anyio_backend: str) -> None:
    memory = InProcessMemory()
    tools = memory_tools(memory, scope="acme", end_user_id="u1", max_facts=1)
    await tools.call("remember", {"content": "only"})
    # The full memory is not the model's first problem: its call is.
    assert "must not be empty" in error(await tools.call("remember", {"content": ""}))
    too_long = error(await tools.call("remember", {"content": PERSONAL * 20}))
    assert "save a shorter fact" in too_long
    assert PERSONAL not in too_long


async def parallel_remembers(tools: MemoryTools, count: int) -> list[bool]:
    refused: list[bool] = []

    async def one(index: int) -> None:
        result = await tools.call("remember", {"content": f"parallel fact {index}"})
        refused.append(result.is_error)

    async with anyio.create_task_group() as group:
        for index in range(count):
            group.start_soon(one, index)
    return refused


async def test_parallel_remembers_never_pass_the_cap(anyio_backend: str) -> None:
    store = NetworkedMemory()
    tools = memory_tools(store, scope="acme", end_user_id="u1", max_facts=5)
    refused = await parallel_remembers(tools, 40)
    assert len(await store.inner.recall("acme", "u1")) == 5
    assert refused.count(False) == 5
    assert refused.count(True) == 35


@settings(
    suppress_health_check=[HealthCheck.function_scoped_fixture],
    deadline=None,
    max_examples=40,
)
@given(
    cap=st.integers(1, 8),
    already=st.integers(0, 10),
    calls=st.integers(1, 25),
)
async def test_parallel_remembers_fill_the_cap_exactly(
    anyio_backend: str, cap: int, already: int, calls: int
) -> None:
    store = NetworkedMemory()
    for index in range(already):
        await store.inner.remember("acme", "u1", f"earlier {index}")
    tools = memory_tools(store, scope="acme", end_user_id="u1", max_facts=cap)
    refused = await parallel_remembers(tools, calls)
    stored = await store.inner.recall("acme", "u1")
    expected = max(already, min(cap, already + calls))
    assert len(stored) == expected
    assert refused.count(False) == expected - already
    # Nothing stored earlier was evicted.
    assert [fact.content for fact in stored[:already]] == [f"earlier {i}" for i in range(already)]


async def test_with_a_store_that_keeps_the_cap_it_holds_across_toolsets(
    anyio_backend: str,
) -> None:
    # One toolset per call, as a framework that binds the tools afresh for
    # each call does: no lock is shared, the store's own step keeps the cap.
    store = NetworkedCappedMemory()
    assert isinstance(store, RemembersWithinLimit)
    refused: list[bool] = []

    async def one(index: int) -> None:
        tools = memory_tools(store, scope="acme", end_user_id="u1", max_facts=5)
        result = await tools.call("remember", {"content": f"parallel fact {index}"})
        refused.append(result.is_error)

    async with anyio.create_task_group() as group:
        for index in range(40):
            group.start_soon(one, index)
    assert len(await store.inner.recall("acme", "u1")) == 5
    assert refused.count(False) == 5


async def test_the_store_saying_full_is_the_memory_full_refusal(anyio_backend: str) -> None:
    store = NetworkedCappedMemory()
    for index in range(3):
        await store.inner.remember("acme", "u1", f"earlier {index}")
    first = memory_tools(store, scope="acme", end_user_id="u1", max_facts=3)
    second = memory_tools(store, scope="acme", end_user_id="u1", max_facts=3)
    for tools in (first, second):
        text = error(await tools.call("remember", {"content": PERSONAL}))
        assert text == f"remember was not run: {memory_full(3)}. Nothing was changed."
    assert len(await store.inner.recall("acme", "u1")) == 3
    # Without a cap the store's plain remember adds, whatever the end user holds.
    uncapped = memory_tools(store, scope="acme", end_user_id="u1", max_facts=None)
    assert (await uncapped.call("remember", {"content": PERSONAL})).is_error is False
    assert len(await store.inner.recall("acme", "u1")) == 4


def test_one_toolset_serves_one_loop_after_another() -> None:
    # An asyncio lock cannot serve trio, and an old loop's lock cannot serve
    # a new loop: each run gets its own, and the cap holds throughout.
    store = NetworkedMemory()
    tools = memory_tools(store, scope="acme", end_user_id="u1", max_facts=4)
    refused: list[bool] = []
    for backend in ("asyncio", "trio", "asyncio", "trio"):
        refused += anyio.run(parallel_remembers, tools, 3, backend=backend)
    assert refused.count(False) == 4
    assert len(anyio.run(store.inner.recall, "acme", "u1")) == 4


def test_the_tools_say_so_when_no_loop_of_theirs_runs() -> None:
    tools = memory_tools(NetworkedMemory(), scope="acme", end_user_id="u1", max_facts=4)
    # A coroutine driven by hand, outside any event loop.
    call = tools.call("remember", {"content": "likes tea"})
    with pytest.raises(RuntimeError, match="asyncio or trio"):
        call.send(None)
