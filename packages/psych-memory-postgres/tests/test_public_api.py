"""The adapter's public surface and its place in the namespace."""

from __future__ import annotations

import pickle
from importlib.metadata import entry_points, version

import pytest

import psych_runtime
import psych_runtime.memory
from psych_runtime.memory import port, postgres


def test_all_is_exactly_the_public_api() -> None:
    assert sorted(postgres.__all__) == sorted(
        [
            "DEFAULT_LOCK_TIMEOUT",
            "DEFAULT_POOL_TIMEOUT",
            "DEFAULT_SCHEMA",
            "DEFAULT_STATEMENT_TIMEOUT",
            "SCHEMA_VERSION",
            "ConnectionRefusedByServerError",
            "Pool",
            "PostgresMemory",
            "PostgresMemoryError",
            "SchemaVersionError",
            "StoreUnavailableError",
            "open_url",
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
    assert postgres.SCHEMA_VERSION == 3
    assert postgres.DEFAULT_SCHEMA == "psych_memory"


@pytest.mark.parametrize("taken", [True, False])
def test_store_unavailable_error_is_the_ports_and_pickles(taken: bool) -> None:
    error = postgres.StoreUnavailableError(
        "erase", "the connection broke (AdminShutdown)", may_have_taken_effect=taken
    )
    again = pickle.loads(pickle.dumps(error))
    assert type(again) is postgres.StoreUnavailableError
    assert (again.operation, again.reason, again.may_have_taken_effect) == (
        "erase",
        "the connection broke (AdminShutdown)",
        taken,
    )
    assert str(again) == str(error)
    assert str(error).startswith("erase failed: the connection broke")
    assert isinstance(again, port.StoreUnavailableError)
    assert isinstance(again, postgres.PostgresMemoryError)
    assert isinstance(again, port.MemoryStoreError)


def test_schema_version_error_is_the_ports_and_pickles() -> None:
    error = postgres.SchemaVersionError("psych_memory", 7, 2)
    again = pickle.loads(pickle.dumps(error))
    assert type(again) is postgres.SchemaVersionError
    assert (again.schema, again.where, again.found, again.expected) == (
        "psych_memory",
        "PostgreSQL schema 'psych_memory'",
        7,
        2,
    )
    assert str(again) == str(error)
    assert "upgrade psych-memory-postgres" in str(error)
    assert isinstance(again, port.SchemaVersionError)
    assert isinstance(again, postgres.PostgresMemoryError)


def test_the_adapters_base_error_is_a_store_failure_of_the_port() -> None:
    assert issubclass(postgres.PostgresMemoryError, port.MemoryStoreError)
    assert not issubclass(postgres.PostgresMemoryError, ValueError)


def test_url_schemes_are_registered_as_entry_points() -> None:
    found = {
        point.name: point.value
        for point in entry_points(group="psych_runtime.memory.stores")
        if point.name in {"postgresql", "postgres"}
    }
    assert found == {
        "postgresql": "psych_runtime.memory.postgres:open_url",
        "postgres": "psych_runtime.memory.postgres:open_url",
    }
    for point in entry_points(group="psych_runtime.memory.stores"):
        if point.name in found:
            assert point.load() is postgres.open_url
