"""The store failures of the port: their hierarchy, messages and pickling."""

from __future__ import annotations

import pickle

import pytest

from psych_runtime.memory.port import (
    InvalidContentError,
    InvalidInputError,
    InvalidKeyError,
    InvalidLimitError,
    Memory,
    MemoryStore,
    MemoryStoreError,
    SchemaVersionError,
    Scope,
    StoreClosedError,
    StoreUnavailableError,
)

STORE_ERRORS: list[Exception] = [
    StoreUnavailableError("remember", "the server did not answer", may_have_taken_effect=True),
    StoreUnavailableError("recall", "the file stayed locked", may_have_taken_effect=False),
    StoreClosedError("forget"),
    StoreClosedError("erase", "not open"),
    SchemaVersionError("schema 'memory'", None, 1),
    SchemaVersionError("file x.sqlite3", 3, 1),
    SchemaVersionError("file x.sqlite3", 1, 2),
]
INPUT_ERRORS: list[Exception] = [
    InvalidInputError("content", "must not be empty"),
    InvalidKeyError("tenant", "must not be empty"),
    InvalidContentError("content", "must not be empty"),
    InvalidLimitError("limit", "must be None or an int >= 0"),
]


def test_store_failures_are_not_value_errors() -> None:
    # Catching a caller's mistake (ValueError) must never swallow an outage.
    for cls in (StoreUnavailableError, StoreClosedError, SchemaVersionError):
        assert issubclass(cls, MemoryStoreError)
        assert not issubclass(cls, ValueError)
    assert not issubclass(InvalidInputError, MemoryStoreError)


@pytest.mark.parametrize("error", STORE_ERRORS + INPUT_ERRORS, ids=repr)
def test_every_error_pickles_with_its_attributes(error: Exception) -> None:
    copy = pickle.loads(pickle.dumps(error))
    assert type(copy) is type(error)
    assert str(copy) == str(error)
    assert vars(copy) == vars(error)


def test_unavailable_says_whether_the_call_may_have_taken_effect() -> None:
    unknown = StoreUnavailableError("erase", "the connection broke", may_have_taken_effect=True)
    assert unknown.may_have_taken_effect is True
    assert "may have taken effect" in str(unknown)
    assert str(unknown).startswith("erase failed: the connection broke")
    nothing = StoreUnavailableError("erase", "busy", may_have_taken_effect=False)
    assert nothing.may_have_taken_effect is False
    assert "changed nothing" in str(nothing)
    with pytest.raises(TypeError):
        StoreUnavailableError("erase", "busy", True)  # type: ignore[call-arg]


def test_closed_says_what_to_do() -> None:
    assert "cannot be used again" in str(StoreClosedError("recall"))
    assert "open it first" in str(StoreClosedError("recall", "not open"))
    assert StoreClosedError("recall").state == "closed"


def test_schema_version_advice_follows_the_versions() -> None:
    assert "no memory layout yet" in str(SchemaVersionError("db", None, 1))
    assert "upgrade the adapter" in str(SchemaVersionError("db", 2, 1))
    assert "older than 2" in str(SchemaVersionError("db", 1, 2))


class _Minimal(MemoryStore):
    async def remember(self, scope: Scope, end_user_id: str, content: str) -> Memory:
        raise NotImplementedError

    async def forget(self, scope: Scope, end_user_id: str, memory_id: str) -> bool:
        raise NotImplementedError

    async def recall(
        self, scope: Scope, end_user_id: str, *, limit: int | None = None
    ) -> tuple[Memory, ...]:
        raise NotImplementedError

    async def erase(self, scope: Scope, end_user_id: str) -> int:
        raise NotImplementedError


@pytest.mark.anyio
async def test_the_default_lifecycle_is_a_context_manager() -> None:
    store = _Minimal()
    async with store as entered:
        assert entered is store
    await store.aclose()  # closing again is harmless
