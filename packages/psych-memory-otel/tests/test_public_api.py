"""The distribution's public surface, and the layout rules it depends on."""

from __future__ import annotations

import importlib.metadata

from packaging.requirements import Requirement

import psych_runtime
import psych_runtime.memory
from psych_runtime.memory import otel


def test_version() -> None:
    assert otel.__version__ == "0.1.0"


def test_namespace_levels_are_namespaces() -> None:
    # An __init__.py at a namespace level would hide every other distribution.
    assert getattr(psych_runtime, "__file__", None) is None
    assert getattr(psych_runtime.memory, "__file__", None) is None


def test_all_is_exactly_the_public_api() -> None:
    assert sorted(otel.__all__) == ["MemoryInstrumentor", "instrument", "instrumented"]
    for name in otel.__all__:
        assert hasattr(otel, name), name


def test_the_instrumentor_is_registered_for_opentelemetry_instrument() -> None:
    (entry_point,) = importlib.metadata.entry_points(
        group="opentelemetry_instrumentor", name="psych_memory"
    )
    assert entry_point.dist is not None
    assert entry_point.dist.name == "psych-memory-otel"
    assert entry_point.load() is otel.MemoryInstrumentor


def test_depends_on_the_port_and_the_opentelemetry_api_only() -> None:
    required = importlib.metadata.requires("psych-memory-otel") or []
    assert sorted(Requirement(line).name for line in required) == [
        "opentelemetry-api",
        "psych-memory-port",
    ]
