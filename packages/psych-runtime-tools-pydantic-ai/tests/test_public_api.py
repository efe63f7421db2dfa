"""The public surface of psych_runtime.tools.pydantic_ai, and the layout it relies on."""

from __future__ import annotations

import importlib.metadata
from pathlib import Path

import pytest

import psych_runtime
import psych_runtime.tools
import psych_runtime.tools.pydantic_ai as pydantic_ai_
from psych_runtime.memory.inproc import InProcessMemory
from psych_runtime.tools.builtins import NoEndUserError, ToolLimits
from psych_runtime.tools.pydantic_ai import MemoryToolset


def test_all_is_exactly_the_public_api() -> None:
    assert sorted(pydantic_ai_.__all__) == [
        "DEFAULT_TOOLSET_ID",
        "Identity",
        "MemoryToolset",
        "NoEndUserError",
    ]
    for name in pydantic_ai_.__all__:
        assert hasattr(pydantic_ai_, name), name


def test_namespace_levels_are_namespaces() -> None:
    for namespace in (psych_runtime, psych_runtime.tools):
        assert vars(namespace).get("__file__") is None, namespace.__name__


def test_leaf_is_typed_and_versioned() -> None:
    assert pydantic_ai_.__file__ is not None
    assert (Path(pydantic_ai_.__file__).parent / "py.typed").is_file()
    assert pydantic_ai_.__version__ == importlib.metadata.version("psych-runtime-tools-pydantic-ai")


def test_depends_on_no_other_framework() -> None:
    requires = importlib.metadata.requires("psych-runtime-tools-pydantic-ai") or []
    names = {r.split(";")[0].split("[")[0].split(">")[0].split("<")[0].strip() for r in requires}
    assert names == {"psych-memory-port", "psych-runtime-tools", "pydantic-ai-slim"}


def test_documented_contracts() -> None:
    for function in (MemoryToolset, MemoryToolset.bind, MemoryToolset.for_run):
        assert "Raises:" in (function.__doc__ or ""), function


def test_bad_wiring_fails_when_built() -> None:
    def identity(deps: object) -> tuple[str, str]:
        return ("acme", "u")

    memory = InProcessMemory()
    with pytest.raises(TypeError, match="memory must be a MemoryStore"):
        MemoryToolset(object(), identity=identity)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="identity must be callable"):
        MemoryToolset(memory, identity="acme")  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="limits must be a ToolLimits"):
        MemoryToolset(memory, identity=identity, limits={"max_facts": 3})  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="id must be a str"):
        MemoryToolset(memory, identity=identity, id=3)  # type: ignore[arg-type]
    toolset = MemoryToolset(memory, identity=identity, limits=ToolLimits(max_facts=3))
    assert (toolset.id, toolset.memory, toolset.limits.max_facts) == ("psych-memory", memory, 3)
    assert repr(toolset) == "MemoryToolset(memory=InProcessMemory, id='psych-memory')"
    assert toolset.bind(None).key.end_user_id == "u"


def test_identity_must_return_a_pair() -> None:
    toolset: MemoryToolset[None] = MemoryToolset(InProcessMemory(), identity=lambda deps: "acme")  # type: ignore[arg-type,return-value]
    with pytest.raises(TypeError, match=r"\(scope, end_user_id\) pair"):
        toolset.bind(None)


def test_a_run_without_an_end_user_fails_with_the_error_of_every_front_end() -> None:
    # One class for every agent framework: one ``except`` catches them all.
    assert pydantic_ai_.NoEndUserError is NoEndUserError
