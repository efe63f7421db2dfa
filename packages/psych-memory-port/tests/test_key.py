"""MemoryKey and memory_key: the isolation boundary."""

from __future__ import annotations

import copy
import pickle
from dataclasses import dataclass

import pytest
from hypothesis import given
from hypothesis import strategies as st

from psych_runtime.memory.port import InvalidKeyError, MemoryKey, _key, memory_key


@dataclass(frozen=True)
class RuntimeScope:
    tenant: str


def test_fields_are_required() -> None:
    with pytest.raises(TypeError):
        MemoryKey("acme")  # type: ignore[call-arg]
    with pytest.raises(TypeError):
        MemoryKey()  # type: ignore[call-arg]


def test_fields_are_validated_on_construction() -> None:
    with pytest.raises(InvalidKeyError, match=r"^tenant "):
        MemoryKey("", "user")
    with pytest.raises(InvalidKeyError, match=r"^end_user_id "):
        MemoryKey("acme", " user")
    with pytest.raises(TypeError, match=r"^end_user_id "):
        MemoryKey("acme", None)  # type: ignore[arg-type]


def test_key_is_immutable() -> None:
    key = MemoryKey("acme", "user")
    with pytest.raises(AttributeError):
        key.tenant = "other"  # type: ignore[misc]
    with pytest.raises(AttributeError):
        del key.end_user_id
    with pytest.raises(AttributeError):
        key._tenant = "other"
    with pytest.raises(AttributeError):
        key.extra = 1
    assert key == MemoryKey("acme", "user")


def test_key_cannot_be_subclassed() -> None:
    with pytest.raises(TypeError, match="cannot be subclassed"):

        class Lenient(MemoryKey):  # type: ignore[misc]
            pass


def test_equality_and_hash_are_exact() -> None:
    key = MemoryKey("acme", "user")
    assert key == MemoryKey("acme", "user")
    assert hash(key) == hash(MemoryKey("acme", "user"))
    assert key != MemoryKey("acme", "User")
    assert key != MemoryKey("Acme", "user")
    assert key != MemoryKey("user", "acme")
    assert key != ("acme", "user")
    assert len({key, MemoryKey("acme", "user"), MemoryKey("acme", "other")}) == 2


def test_no_normalisation() -> None:
    composed = MemoryKey("acme", "caf\u00e9")
    decomposed = MemoryKey("acme", "cafe\u0301")
    assert composed != decomposed


def test_repr_and_match() -> None:
    key = MemoryKey("acme", "user")
    assert repr(key) == "MemoryKey(tenant='acme', end_user_id='user')"
    match key:
        case MemoryKey(tenant, end_user_id):
            assert (tenant, end_user_id) == ("acme", "user")


def test_pickle_and_copy_round_trip() -> None:
    key = MemoryKey("acme", "user")
    assert pickle.loads(pickle.dumps(key)) == key
    assert copy.copy(key) == key
    assert copy.deepcopy(key) == key


def test_memory_key_from_str_scope() -> None:
    assert memory_key("acme", "user") == MemoryKey("acme", "user")


def test_memory_key_from_scope_object() -> None:
    assert memory_key(RuntimeScope("acme"), "user") == MemoryKey("acme", "user")


def test_memory_key_names_the_scope_argument() -> None:
    with pytest.raises(InvalidKeyError) as info:
        memory_key("", "user")
    assert info.value.argument == "scope"
    with pytest.raises(InvalidKeyError) as info:
        memory_key(RuntimeScope(" acme"), "user")
    assert info.value.argument == "scope.tenant"
    with pytest.raises(InvalidKeyError) as info:
        memory_key("acme", "")
    assert info.value.argument == "end_user_id"


@pytest.mark.parametrize("scope", [None, 42, b"acme", object()])
def test_memory_key_refuses_scope_without_tenant(scope: object) -> None:
    with pytest.raises(TypeError, match=r"^scope must be a str or an object"):
        memory_key(scope, "user")  # type: ignore[arg-type]


def test_memory_key_refuses_non_str_tenant_attribute() -> None:
    with pytest.raises(TypeError, match=r"^scope\.tenant must be a str"):
        memory_key(RuntimeScope(42), "user")  # type: ignore[arg-type]


def test_memory_key_refuses_non_str_end_user_id() -> None:
    with pytest.raises(TypeError, match=r"^end_user_id must be a str"):
        memory_key("acme", 42)  # type: ignore[arg-type]


_part = st.text(
    st.characters(blacklist_categories=("Cc", "Cs", "Zs", "Zl", "Zp")), min_size=1, max_size=20
)


@given(_part, _part)
def test_memory_key_agrees_with_constructor(tenant: str, end_user_id: str) -> None:
    key = memory_key(tenant, end_user_id)
    assert key == MemoryKey(tenant, end_user_id)
    assert (key.tenant, key.end_user_id) == (tenant, end_user_id)
    assert memory_key(RuntimeScope(tenant), end_user_id) == key


def test_recent_keys_are_reused_and_the_cache_stays_bounded() -> None:
    first = memory_key("acme", "cached-user")
    assert memory_key("acme", "cached-user") is first
    for n in range(_key._RECENT_KEYS_MAX + 10):
        memory_key("acme", f"user-{n}")
    assert len(_key._RECENT_KEYS) <= _key._RECENT_KEYS_MAX
    assert memory_key("acme", "cached-user") == first


def test_only_plain_valid_strings_are_remembered() -> None:
    class Sly(str):
        __slots__ = ()

    before = dict(_key._RECENT_KEYS)
    memory_key(Sly("acme"), "sly-user")
    memory_key("acme", Sly("sly-user-2"))
    with pytest.raises(InvalidKeyError):
        memory_key("acme", " padded")
    with pytest.raises(InvalidKeyError):
        memory_key("acme", " padded")  # refused again: a refusal is never cached
    added = set(_key._RECENT_KEYS) - set(before)
    assert not any("sly-user" in user or user == " padded" for _, user in added)
