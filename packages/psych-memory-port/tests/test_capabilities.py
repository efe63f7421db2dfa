"""The optional capabilities: protocols a store may provide, and restored ids."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from psych_runtime.memory.port import (
    MAX_RESTORED_ID_LENGTH,
    InvalidInputError,
    ListsEndUsers,
    Memory,
    RestoresFacts,
    Scope,
    validate_restored_id,
)


class _Lists:
    async def tenants(self) -> tuple[str, ...]:
        return ()

    async def end_users(self, scope: Scope) -> tuple[str, ...]:
        return ()


class _Restores:
    async def restore(self, memory: Memory) -> bool:
        return False


def test_a_store_provides_a_capability_by_having_its_methods() -> None:
    assert isinstance(_Lists(), ListsEndUsers)
    assert not isinstance(_Lists(), RestoresFacts)
    assert isinstance(_Restores(), RestoresFacts)
    assert not isinstance(_Restores(), ListsEndUsers)


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
