"""The port's public surface, and the layout rules it depends on."""

from __future__ import annotations

import inspect
from datetime import UTC, datetime

import pytest

import psych_runtime
import psych_runtime.memory
from psych_runtime.memory import port
from psych_runtime.memory.port import Memory, MemoryKey, MemoryStore


def test_all_is_exactly_the_public_api() -> None:
    assert sorted(port.__all__) == sorted(
        [
            "MAX_CONTENT_LENGTH",
            "MAX_CREATED_AT",
            "MAX_KEY_LENGTH",
            "MAX_PAGE_SIZE",
            "MAX_RESTORED_ID_LENGTH",
            "MIN_CREATED_AT",
            "CountsFacts",
            "ExpiresFacts",
            "HasTenant",
            "InvalidContentError",
            "InvalidInputError",
            "InvalidKeyError",
            "InvalidLimitError",
            "ListsEndUsers",
            "PagesFacts",
            "RemembersWithinLimit",
            "Memory",
            "MemoryKey",
            "MemoryStore",
            "MemoryStoreError",
            "RestorePlan",
            "RestoresFacts",
            "SchemaVersionError",
            "Scope",
            "ScrubsDeletions",
            "StalePageError",
            "StoreClosedError",
            "StoreUnavailableError",
            "StoreWrapper",
            "bounded_limit",
            "memory_key",
            "new_memory_id",
            "store_events",
            "validate_content",
            "validate_cutoff",
            "validate_key_part",
            "validate_limit",
            "validate_max_facts",
            "validate_memory_id",
            "validate_page",
            "validate_restored",
            "validate_restored_id",
            "validate_restored_many",
            "validate_scope",
            "validate_seconds",
            "wrap_store",
        ]
    )
    for name in port.__all__:
        assert hasattr(port, name), name


def test_namespace_levels_are_namespaces() -> None:
    # An __init__.py at a namespace level would hide every other distribution.
    assert vars(psych_runtime).get("__file__") is None
    assert vars(psych_runtime.memory).get("__file__") is None


def test_limits() -> None:
    assert port.MAX_CONTENT_LENGTH == 4096
    assert port.MAX_KEY_LENGTH == 256


def test_store_has_exactly_four_abstract_async_methods() -> None:
    assert MemoryStore.__abstractmethods__ == {"remember", "forget", "recall", "erase"}
    for name in MemoryStore.__abstractmethods__:
        method = getattr(MemoryStore, name)
        assert inspect.iscoroutinefunction(method), name
        assert "Raises:" in (method.__doc__ or ""), name
    with pytest.raises(TypeError):
        MemoryStore()  # type: ignore[abstract]


def test_signatures() -> None:
    def params(name: str) -> list[tuple[str, object, object]]:
        sig = inspect.signature(getattr(MemoryStore, name))
        return [(p.name, p.kind, p.default) for p in sig.parameters.values()]

    pos = inspect.Parameter.POSITIONAL_OR_KEYWORD
    kw = inspect.Parameter.KEYWORD_ONLY
    empty = inspect.Parameter.empty
    head = [("self", pos, empty), ("scope", pos, empty), ("end_user_id", pos, empty)]
    assert params("remember") == [*head, ("content", pos, empty)]
    assert params("forget") == [*head, ("memory_id", pos, empty)]
    assert params("recall") == [*head, ("limit", kw, None)]
    assert params("erase") == head


def test_memory_is_immutable_and_hides_content_in_repr() -> None:
    memory = Memory("m1", MemoryKey("acme", "user"), "lives in Berlin", datetime.now(UTC))
    with pytest.raises(AttributeError):
        memory.content = "other"  # type: ignore[misc]
    assert "Berlin" not in repr(memory)
    assert "m1" in repr(memory)
    with pytest.raises(TypeError, match="cannot be subclassed"):

        class Wider(Memory):  # type: ignore[misc]
            pass
