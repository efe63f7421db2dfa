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
        "DEFAULT_MAX_FACTS",
        "DEFAULT_MAX_FACT_LENGTH",
        "DEFAULT_MAX_PROMPT_CHARS",
        "FORGET",
        "KEY_ARGUMENTS",
        "MIN_PROMPT_CHARS",
        "MemoryTools",
        "NoEndUserError",
        "REMEMBER",
        "RefusedCallError",
        "ToolLimits",
        "ToolResult",
        "ToolSpec",
        "UnknownToolError",
        "check_arguments",
        "check_content",
        "memory_full",
        "memory_tool_specs",
        "memory_tools",
        "refusal",
        "render_memories",
        "run_key",
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
    assert list(params) == [
        "memory",
        "scope",
        "end_user_id",
        "max_facts",
        "max_fact_length",
        "max_prompt_chars",
    ]
    assert params["memory"].kind is inspect.Parameter.POSITIONAL_OR_KEYWORD
    for name in ("scope", "end_user_id"):
        assert params[name].kind is inspect.Parameter.KEYWORD_ONLY, name
        assert params[name].default is inspect.Parameter.empty, name
    limits = {
        "max_facts": builtins_.DEFAULT_MAX_FACTS,
        "max_fact_length": builtins_.DEFAULT_MAX_FACT_LENGTH,
        "max_prompt_chars": builtins_.DEFAULT_MAX_PROMPT_CHARS,
    }
    for name, default in limits.items():
        assert params[name].kind is inspect.Parameter.KEYWORD_ONLY, name
        assert params[name].default == default, name


def test_call_and_prompt_are_async_and_document_what_they_raise() -> None:
    for method in (MemoryTools.call, MemoryTools.prompt):
        assert inspect.iscoroutinefunction(method)
        assert "Raises:" in (method.__doc__ or "")
    for function in (memory_tools, render_memories):
        assert "Raises:" in (function.__doc__ or "")
    # Backward compatible: what was positional stays so, the rest is keyword-only.
    render = inspect.signature(render_memories).parameters
    assert list(render) == ["recalled", "fixed", "max_chars"]
    assert render["fixed"].default == ()
    assert render["max_chars"].kind is inspect.Parameter.KEYWORD_ONLY
    assert render["max_chars"].default is None
    prompt = inspect.signature(MemoryTools.prompt).parameters
    assert list(prompt) == ["self", "fixed", "max_chars"]
    assert prompt["fixed"].default == ()
    assert prompt["max_chars"].kind is inspect.Parameter.KEYWORD_ONLY
    call = inspect.signature(MemoryTools.call).parameters
    assert list(call) == ["self", "name", "arguments"]
