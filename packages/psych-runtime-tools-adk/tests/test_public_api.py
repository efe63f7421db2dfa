"""The public surface of psych_runtime.tools.adk, and the layout it relies on."""

from __future__ import annotations

import importlib.metadata
from pathlib import Path

import psych_runtime
import psych_runtime.memory
import psych_runtime.tools
import psych_runtime.tools.adk as adk_
from psych_runtime.tools.builtins import NoEndUserError


def test_all_is_exactly_the_public_api() -> None:
    assert sorted(adk_.__all__) == [
        "NoEndUserError",
        "StoreMemoryService",
        "memory_instruction",
        "memory_key_of",
        "memory_tools",
    ]
    for name in adk_.__all__:
        assert hasattr(adk_, name), name


def test_namespace_levels_are_namespaces() -> None:
    # An __init__.py at a namespace level would hide every other distribution.
    for namespace in (psych_runtime, psych_runtime.memory, psych_runtime.tools):
        assert vars(namespace).get("__file__") is None, namespace.__name__


def test_leaf_is_typed_and_versioned() -> None:
    assert adk_.__file__ is not None
    assert (Path(adk_.__file__).parent / "py.typed").is_file()
    assert adk_.__version__ == importlib.metadata.version("psych-runtime-tools-adk")


def test_a_run_without_an_end_user_fails_with_the_error_of_every_front_end() -> None:
    # One class for every agent framework: one ``except`` catches them all.
    assert adk_.NoEndUserError is NoEndUserError
