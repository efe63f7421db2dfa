"""The adapter's public surface and its place in the namespace."""

from __future__ import annotations

import pickle
from importlib.metadata import version

import psych_runtime
import psych_runtime.memory
from psych_runtime.memory import postgres


def test_all_is_exactly_the_public_api() -> None:
    assert sorted(postgres.__all__) == sorted(
        [
            "DEFAULT_SCHEMA",
            "SCHEMA_VERSION",
            "Pool",
            "PostgresMemory",
            "PostgresMemoryError",
            "SchemaVersionError",
            "StoreUnavailableError",
        ]
    )
    for name in postgres.__all__:
        assert hasattr(postgres, name), name


def test_namespace_levels_stay_namespaces() -> None:
    # An __init__.py at a namespace level would hide every other distribution.
    assert getattr(psych_runtime, "__file__", None) is None
    assert getattr(psych_runtime.memory, "__file__", None) is None


def test_version_and_defaults() -> None:
    assert version("psych-memory-postgres") == postgres.__version__ == "0.1.0"
    assert postgres.SCHEMA_VERSION == 1
    assert postgres.DEFAULT_SCHEMA == "psych_memory"


def test_store_unavailable_error_pickles_and_says_what_failed() -> None:
    error = postgres.StoreUnavailableError("erase", "the connection broke (AdminShutdown)")
    again = pickle.loads(pickle.dumps(error))
    assert (again.operation, again.reason) == ("erase", "the connection broke (AdminShutdown)")
    assert str(again) == str(error)
    assert str(error).startswith("erase did not complete: the connection broke")
    assert isinstance(again, postgres.PostgresMemoryError)
