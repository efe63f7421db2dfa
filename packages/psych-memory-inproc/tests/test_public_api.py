"""The adapter's public surface, and the layout rules it depends on."""

from __future__ import annotations

import importlib.metadata

import psych_runtime
import psych_runtime.memory
from psych_runtime.memory import inproc
from psych_runtime.memory.inproc import InProcessMemory
from psych_runtime.memory.port import ListsEndUsers, RestoresFacts


def test_all_is_exactly_the_public_api() -> None:
    assert sorted(inproc.__all__) == ["InProcessMemory", "open_url"]
    for name in inproc.__all__:
        assert hasattr(inproc, name), name


def test_version() -> None:
    assert inproc.__version__ == "0.1.0"


def test_namespace_levels_are_namespaces() -> None:
    # An __init__.py at a namespace level would hide every other distribution.
    assert getattr(psych_runtime, "__file__", None) is None
    assert getattr(psych_runtime.memory, "__file__", None) is None


def test_provides_the_operator_capabilities() -> None:
    assert isinstance(InProcessMemory(), ListsEndUsers)
    assert isinstance(InProcessMemory(), RestoresFacts)


def test_the_scheme_memory_is_registered_for_open_memory() -> None:
    (entry_point,) = importlib.metadata.entry_points(
        group="psych_runtime.memory.stores", name="memory"
    )
    assert entry_point.value == "psych_runtime.memory.inproc:open_url"
    assert entry_point.dist is not None
    assert entry_point.dist.name == "psych-memory-inproc"
    assert entry_point.load() is inproc.open_url
