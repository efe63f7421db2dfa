"""The public surface of psych_runtime.tools.builtins, and the layout it relies on."""

from __future__ import annotations

import importlib.metadata
import inspect
from pathlib import Path

import psych_runtime
import psych_runtime.memory
import psych_runtime.tools
import psych_runtime.tools.builtins as builtins_
from psych_runtime.tools.builtins import MemoryTools, memory_tools, render_memories


def test_all_is_exactly_the_public_api() -> None:
    assert sorted(builtins_.__all__) == [
        "FORGET",
        "KEY_ARGUMENTS",
        "MemoryTools",
        "REMEMBER",
        "RefusedCallError",
        "ToolResult",
        "ToolSpec",
        "UnknownToolError",
        "check_arguments",
        "check_content",
        "memory_full",
        "memory_tools",
        "refusal",
        "render_memories",
    ]
    for name in builtins_.__all__:
        assert hasattr(builtins_, name), name


def test_namespace_levels_are_namespaces() -> None:
    # An __init__.py at a namespace level would hide every other distribution.
    for namespace in (psych_runtime, psych_runtime.memory, psych_runtime.tools):
        assert vars(namespace).get("__file__") is None, namespace.__name__


def test_leaf_is_typed_and_versioned() -> None:
    assert builtins_.__file__ is not None
    assert (Path(builtins_.__file__).parent / "py.typed").is_file()
    assert builtins_.__version__ == importlib.metadata.version("psych-runtime-tools")


def test_memory_tools_requires_scope_and_end_user_as_keywords_without_defaults() -> None:
    params = inspect.signature(memory_tools).parameters
    assert list(params) == ["memory", "scope", "end_user_id"]
    assert params["memory"].kind is inspect.Parameter.POSITIONAL_OR_KEYWORD
    for name in ("scope", "end_user_id"):
        assert params[name].kind is inspect.Parameter.KEYWORD_ONLY, name
        assert params[name].default is inspect.Parameter.empty, name


def test_call_and_prompt_are_async_and_document_what_they_raise() -> None:
    for method in (MemoryTools.call, MemoryTools.prompt):
        assert inspect.iscoroutinefunction(method)
        assert "Raises:" in (method.__doc__ or "")
    for function in (memory_tools, render_memories):
        assert "Raises:" in (function.__doc__ or "")
    assert list(inspect.signature(render_memories).parameters) == ["recalled", "fixed"]
    assert inspect.signature(render_memories).parameters["fixed"].default == ()
    assert inspect.signature(MemoryTools.prompt).parameters["fixed"].default == ()
