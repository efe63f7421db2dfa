"""The public surface of psych_runtime.tools.openai_agents, and the layout it relies on."""

from __future__ import annotations

import importlib.metadata
from pathlib import Path

import pytest

import psych_runtime
import psych_runtime.tools
import psych_runtime.tools.openai_agents as openai_agents_
from psych_runtime.memory.inproc import InProcessMemory
from psych_runtime.tools.builtins import NoEndUserError, ToolLimits
from psych_runtime.tools.openai_agents import AgentMemory


def test_all_is_exactly_the_public_api() -> None:
    assert sorted(openai_agents_.__all__) == [
        "AgentMemory",
        "Identity",
        "Instructions",
        "NoEndUserError",
    ]
    for name in openai_agents_.__all__:
        assert hasattr(openai_agents_, name), name


def test_namespace_levels_are_namespaces() -> None:
    for namespace in (psych_runtime, psych_runtime.tools):
        assert vars(namespace).get("__file__") is None, namespace.__name__


def test_leaf_is_typed_and_versioned() -> None:
    assert openai_agents_.__file__ is not None
    assert (Path(openai_agents_.__file__).parent / "py.typed").is_file()
    assert openai_agents_.__version__ == importlib.metadata.version(
        "psych-runtime-tools-openai-agents"
    )


def test_depends_on_no_other_framework() -> None:
    requires = importlib.metadata.requires("psych-runtime-tools-openai-agents") or []
    names = {r.split(";")[0].split("[")[0].split(">")[0].split("<")[0].strip() for r in requires}
    assert names == {"psych-memory-port", "psych-runtime-tools", "openai-agents"}


def test_documented_contracts() -> None:
    for function in (AgentMemory, AgentMemory.bind, AgentMemory.instructions):
        assert "Raises:" in (function.__doc__ or ""), function


def identity(context: object) -> tuple[str, str]:
    return ("acme", "u")


def test_bad_wiring_fails_when_built() -> None:
    memory = InProcessMemory()
    with pytest.raises(TypeError, match="memory must be a MemoryStore"):
        AgentMemory(object(), identity=identity)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="identity must be callable"):
        AgentMemory(memory, identity="acme")  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="limits must be a ToolLimits"):
        AgentMemory(memory, identity=identity, limits={"max_facts": 3})  # type: ignore[arg-type]
    tools = AgentMemory(memory, identity=identity, limits=ToolLimits(max_facts=3))
    with pytest.raises(TypeError, match="base must be None, a str or callable"):
        tools.instructions(3)  # type: ignore[arg-type]
    assert (tools.memory, tools.limits.max_facts) == (memory, 3)
    assert repr(tools) == "AgentMemory(memory=InProcessMemory)"
    assert [tool.name for tool in tools.tools] == ["remember", "forget"]


def test_one_key_is_bound_once() -> None:
    tools = AgentMemory(InProcessMemory(), identity=identity)
    assert tools.bind(None) is tools.bind(None)
    assert tools.bind(None).key.end_user_id == "u"


def test_the_most_recent_end_users_keep_their_bound_tools() -> None:
    tools = AgentMemory[str](InProcessMemory(), identity=lambda user: ("acme", user))
    first = tools.bind("user-0")
    # 1,024 end users are kept: the next 1,024 push the first one out.
    recent = [tools.bind(f"user-{i}") for i in range(1, 1025)]
    assert tools.bind("user-1024") is recent[-1]
    again = tools.bind("user-0")
    assert again is not first
    assert again.key == first.key


def test_identity_must_return_a_pair() -> None:
    tools: AgentMemory[None] = AgentMemory(InProcessMemory(), identity=lambda context: "acme")  # type: ignore[arg-type,return-value]
    with pytest.raises(TypeError, match=r"\(scope, end_user_id\) pair"):
        tools.bind(None)


def test_a_run_without_an_end_user_fails_with_the_error_of_every_front_end() -> None:
    # One class for every agent framework: one ``except`` catches them all.
    assert openai_agents_.NoEndUserError is NoEndUserError
