"""The optional capabilities: protocols a store may provide, and restored ids."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from datetime import UTC, datetime, timedelta, timezone

import pytest
from hypothesis import given
from hypothesis import strategies as st

from psych_runtime.memory.port import (
    MAX_RESTORED_ID_LENGTH,
    CountsFacts,
    InvalidContentError,
    InvalidInputError,
    ListsEndUsers,
    Memory,
    MemoryKey,
    RestoresFacts,
    Scope,
    validate_max_facts,
    validate_restored,
    validate_restored_id,
    validate_restored_many,
)


class _Lists:
    async def tenants(self) -> tuple[str, ...]:
        return ()

    async def end_users(self, scope: Scope) -> tuple[str, ...]:
        return ()


class _Counts:
    async def fact_counts(self, scope: Scope) -> Mapping[str, int]:
        return {}


class _RestoresOne:
    async def restore(self, memory: Memory) -> bool:
        return False


class _Restores(_RestoresOne):
    async def restore_many(self, memories: Iterable[Memory]) -> int:
        return 0


def test_a_store_provides_a_capability_by_having_its_methods() -> None:
    assert isinstance(_Lists(), ListsEndUsers)
    assert not isinstance(_Lists(), RestoresFacts)
    assert isinstance(_Restores(), RestoresFacts)
    assert not isinstance(_Restores(), ListsEndUsers)
    assert isinstance(_Counts(), CountsFacts)
    assert not isinstance(_Counts(), ListsEndUsers)
    assert not isinstance(_Lists(), CountsFacts)


def test_restoring_one_fact_at_a_time_is_not_the_whole_capability() -> None:
    assert not isinstance(_RestoresOne(), RestoresFacts)


_KEY = MemoryKey("acme", "user-1")
_AT = datetime(2026, 1, 2, 3, 4, 5, 678901, tzinfo=UTC)


def test_a_valid_fact_in_utc_is_returned_as_it_is() -> None:
    memory = Memory("fact-1", _KEY, "likes tea", _AT)
    assert validate_restored(memory) is memory


def test_a_time_in_another_zone_comes_back_as_the_same_instant_in_utc() -> None:
    local = _AT.astimezone(timezone(timedelta(hours=5, minutes=30)))
    restored = validate_restored(Memory("fact-1", _KEY, "likes tea", local))
    assert restored.created_at == _AT
    assert restored.created_at.tzinfo is UTC
    assert (restored.id, restored.key, restored.content) == ("fact-1", _KEY, "likes tea")


@pytest.mark.parametrize(
    ("memory", "error", "named"),
    [
        ("not a fact", TypeError, "memories[2] must be a Memory"),
        (Memory("a b", _KEY, "x", _AT), InvalidInputError, "memories[2].id"),
        (Memory(7, _KEY, "x", _AT), TypeError, "memories[2].id must be a str"),  # type: ignore[arg-type]
        (Memory("a", ("acme", "u"), "x", _AT), TypeError, "memories[2].key must be a MemoryKey"),  # type: ignore[arg-type]
        (Memory("a", _KEY, " ", _AT), InvalidContentError, "content"),
        (Memory("a", _KEY, "x", "2026-01-01"), TypeError, "memories[2].created_at must be a"),  # type: ignore[arg-type]
        (Memory("a", _KEY, "x", datetime(2026, 1, 1)), InvalidInputError, "timezone-aware"),
    ],
)
def test_every_field_of_a_restored_fact_is_checked_and_named(
    memory: object, error: type[Exception], named: str
) -> None:
    with pytest.raises(error, match=named.replace("[", r"\[").replace("]", r"\]")):
        validate_restored(memory, "memories[2]")


@pytest.mark.parametrize(
    "memory_id",
    ["0123456789abcdef0123456789abcdef", "5f0c7a8e-2b1d-4c3e-9f6a-7b8c9d0e1f2a", "a", "A_b-9"],
)
def test_ids_every_adapter_hands_out_are_restorable(memory_id: str) -> None:
    assert validate_restored_id(memory_id) == memory_id


@pytest.mark.parametrize(
    "memory_id",
    ["", "a" * (MAX_RESTORED_ID_LENGTH + 1), "has space", "dot.ted", "é", "a\n", "{uuid}"],
)
def test_other_ids_are_refused_without_being_repeated(memory_id: str) -> None:
    with pytest.raises(InvalidInputError) as caught:
        validate_restored_id(memory_id)
    assert caught.value.argument == "memory.id"
    if memory_id:
        assert memory_id not in str(caught.value)


def test_an_id_that_is_not_a_str_is_a_type_error() -> None:
    with pytest.raises(TypeError, match=r"memory\.id must be a str, not int"):
        validate_restored_id(42)


@given(st.text(max_size=80))
def test_restorable_ids_are_exactly_the_safe_ascii_shape(memory_id: str) -> None:
    safe = set("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-_")
    expected = 0 < len(memory_id) <= MAX_RESTORED_ID_LENGTH and set(memory_id) <= safe
    try:
        validate_restored_id(memory_id)
    except InvalidInputError:
        assert not expected
    else:
        assert expected


def test_many_facts_are_checked_in_order_and_each_named_by_its_index() -> None:
    good = Memory("fact-1", _KEY, "likes tea", _AT)
    assert validate_restored_many(iter([good, good])) == (good, good)
    assert validate_restored_many([]) == ()
    with pytest.raises(InvalidInputError, match=r"memories\[1\]\.id"):
        validate_restored_many([good, Memory("no spaces", _KEY, "x", _AT)])


def test_facts_that_are_not_iterable_are_a_type_error() -> None:
    with pytest.raises(TypeError, match="memories must be an iterable of Memory, not int"):
        validate_restored_many(3)


def test_max_facts_is_a_count_of_zero_or_more() -> None:
    assert validate_max_facts(0) == 0
    assert validate_max_facts(2) == 2
    assert type(validate_max_facts(IntSubclass(3))) is int
    with pytest.raises(TypeError, match="max_facts must be an int, not bool"):
        validate_max_facts(True)
    with pytest.raises(TypeError, match="max_facts must be an int, not float"):
        validate_max_facts(2.0)
    with pytest.raises(InvalidInputError, match="max_facts must be zero or more") as refused:
        validate_max_facts(-1)
    assert refused.value.argument == "max_facts"


class IntSubclass(int):
    pass
