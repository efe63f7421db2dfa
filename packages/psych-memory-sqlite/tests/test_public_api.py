"""The adapter's public surface, and the layout rules it depends on."""

from __future__ import annotations

import inspect
from importlib.metadata import entry_points

import psych_runtime
import psych_runtime.memory
import psych_runtime.memory.sqlite as sqlite_adapter
from psych_runtime.memory import port
from psych_runtime.memory.port import MemoryStore
from psych_runtime.memory.sqlite import (
    DatabaseFileError,
    DatabaseFileMovedError,
    DatabaseUnavailableError,
    SchemaVersionError,
    SqliteMemory,
    SqliteMemoryError,
    StoreUnavailableError,
)


def test_all_is_exactly_the_public_api() -> None:
    assert sorted(sqlite_adapter.__all__) == sorted(
        [
            "SCHEMA_VERSION",
            "DatabaseFileError",
            "DatabaseFileMovedError",
            "DatabaseUnavailableError",
            "Durability",
            "SchemaVersionError",
            "SqliteMemory",
            "SqliteMemoryError",
            "StoreUnavailableError",
            "open_url",
        ]
    )
    for name in sqlite_adapter.__all__:
        assert hasattr(sqlite_adapter, name), name


def test_version() -> None:
    assert sqlite_adapter.__version__ == "0.1.0"


def test_namespace_levels_are_namespaces() -> None:
    # An __init__.py at a namespace level would hide every other distribution.
    assert getattr(psych_runtime, "__file__", None) is None
    assert getattr(psych_runtime.memory, "__file__", None) is None


def test_is_a_memory_store_with_documented_lifecycle() -> None:
    assert issubclass(SqliteMemory, MemoryStore)
    assert not inspect.isabstract(SqliteMemory)
    for name in ("open", "scrub", "tenants", "end_users", "restore", "recall_page", "erase"):
        method = getattr(SqliteMemory, name)
        assert inspect.iscoroutinefunction(method), name
        assert "Raises:" in (method.__doc__ or ""), name
    assert inspect.iscoroutinefunction(SqliteMemory.aclose)
    assert "never raises" in (SqliteMemory.aclose.__doc__ or "")


def test_errors_are_the_ports_store_failures() -> None:
    for error in (
        DatabaseFileError,
        SchemaVersionError,
        DatabaseUnavailableError,
        DatabaseFileMovedError,
    ):
        assert issubclass(error, SqliteMemoryError)
    assert issubclass(SqliteMemoryError, port.MemoryStoreError)
    assert issubclass(SchemaVersionError, port.SchemaVersionError)
    assert issubclass(DatabaseUnavailableError, port.StoreUnavailableError)
    assert issubclass(DatabaseFileMovedError, DatabaseUnavailableError)
    # The 0.1 name is the same class, not a subclass.
    assert DatabaseUnavailableError is StoreUnavailableError
    assert StoreUnavailableError.__name__ == "StoreUnavailableError"
    # Operational trouble with the file is not bad input to the port.
    assert not issubclass(SqliteMemoryError, ValueError)


def test_provides_every_capability_of_the_port() -> None:
    store = SqliteMemory("unopened.sqlite3")
    for capability in (
        port.ListsEndUsers,
        port.CountsFacts,
        port.PagesFacts,
        port.RestoresFacts,
        port.ScrubsDeletions,
    ):
        assert isinstance(store, capability), capability.__name__


def test_open_url_is_registered_as_the_sqlite_scheme() -> None:
    (entry,) = entry_points(group="psych_runtime.memory.stores", name="sqlite")
    assert entry.value == "psych_runtime.memory.sqlite:open_url"
    assert entry.load() is sqlite_adapter.open_url
