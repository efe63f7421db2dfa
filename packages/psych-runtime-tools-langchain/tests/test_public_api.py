"""The public surface of psych_runtime.tools.langchain, and the layout it relies on."""

from __future__ import annotations

import importlib.metadata
from pathlib import Path

import psych_runtime
import psych_runtime.memory
import psych_runtime.tools
import psych_runtime.tools.langchain as langchain_
from psych_runtime.tools.builtins import NoEndUserError


def test_all_is_exactly_the_public_api() -> None:
    assert sorted(langchain_.__all__) == [
        "MemoryContext",
        "MemoryMiddleware",
        "NoEndUserError",
        "memory_key_of",
        "memory_tools",
    ]
    for name in langchain_.__all__:
        assert hasattr(langchain_, name), name


def test_namespace_levels_are_namespaces() -> None:
    # An __init__.py at a namespace level would hide every other distribution.
    for namespace in (psych_runtime, psych_runtime.memory, psych_runtime.tools):
        assert vars(namespace).get("__file__") is None, namespace.__name__


def test_leaf_is_typed_and_versioned() -> None:
    assert langchain_.__file__ is not None
    assert (Path(langchain_.__file__).parent / "py.typed").is_file()
    assert langchain_.__version__ == importlib.metadata.version("psych-runtime-tools-langchain")


def test_a_run_without_an_end_user_fails_with_the_error_of_every_front_end() -> None:
    # One class for every agent framework: one ``except`` catches them all.
    assert langchain_.NoEndUserError is NoEndUserError
