"""The distribution's public surface, and the layout rules it depends on."""

from __future__ import annotations

import psych_runtime
import psych_runtime.memory
from psych_runtime.memory import otel


def test_version() -> None:
    assert otel.__version__ == "0.1.0"


def test_namespace_levels_are_namespaces() -> None:
    # An __init__.py at a namespace level would hide every other distribution.
    assert getattr(psych_runtime, "__file__", None) is None
    assert getattr(psych_runtime.memory, "__file__", None) is None
