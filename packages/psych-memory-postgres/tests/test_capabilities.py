"""The operators' capabilities: listing keys, and restoring facts as they were."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any

import pytest

from psych_runtime.memory.port import (
    InvalidInputError,
    InvalidKeyError,
    ListsEndUsers,
    Memory,
    MemoryKey,
    RestoresFacts,
)
from psych_runtime.memory.postgres import PostgresMemory, SchemaVersionError

if TYPE_CHECKING:
    from conftest import Backdoor

pytestmark = pytest.mark.anyio

_WHEN = datetime(2025, 6, 7, 8, 9, 10, 123456, tzinfo=UTC)


@dataclass(frozen=True)
class _Scope:
    tenant: str


def _fact(memory_id: str, content: str, *, user: str = "u1", when: datetime = _WHEN) -> Memory:
    return Memory(memory_id, MemoryKey("acme", user), content, when)


async def test_the_store_provides_both_capabilities(store: PostgresMemory) -> None:
    assert isinstance(store, ListsEndUsers)
    assert isinstance(store, RestoresFacts)


async def test_keys_are_listed_in_code_point_order_while_they_hold_facts(
    store: PostgresMemory,
) -> None:
    assert await store.tenants() == ()
    tenants = ["b", "a", "Z", "\u00e9", "\U0001f600", "a b", "ab"]
    for tenant in tenants:
        await store.remember(tenant, "someone", "a fact")
    users = ["zed", "Alice", "\u00e9mile", "bob", "\uffff", "\U00010000"]
    kept = {}
    for user in users:
        kept[user] = await store.remember("acme", user, "a fact")
    assert await store.tenants() == tuple(sorted([*tenants, "acme"]))
    assert await store.end_users("acme") == tuple(sorted(users))
    assert await store.end_users(_Scope("acme")) == tuple(sorted(users))
    assert await store.end_users("nobody") == ()
    # Keys without facts are not listed.
    await store.erase("acme", "zed")
    assert await store.forget("acme", "bob", kept["bob"].id)
    assert await store.end_users("acme") == tuple(sorted(set(users) - {"zed", "bob"}))
    await store.erase("b", "someone")
    assert "b" not in await store.tenants()


@pytest.mark.parametrize(
    ("scope", "error"),
    [(42, TypeError), ("", InvalidKeyError), (" acme", InvalidKeyError), (_Scope(""), ValueError)],
)
async def test_end_users_checks_its_scope(
    store: PostgresMemory, scope: Any, error: type[Exception]
) -> None:
    with pytest.raises(error):
        await store.end_users(scope)


async def test_restore_keeps_id_and_time_and_appends(
    store: PostgresMemory, backdoor: Backdoor
) -> None:
    first = await store.remember("acme", "u1", "already here")
    # Shapes other stores hand out: 32 hex digits (SQLite, in-process), a
    # UUID (this adapter before schema version 2), any restorable id.
    restored = [
        _fact("0123456789abcdef0123456789abcdef", "from sqlite"),
        _fact("5f0c1a7e-3b1d-4c55-9a52-0d5d1d6f7a10", "from an old postgres", when=_WHEN),
        _fact("Custom_id-42", "from elsewhere", when=_WHEN - timedelta(days=400)),
    ]
    for fact in restored:
        assert await store.restore(fact) is True
    assert await store.recall("acme", "u1") == (first, *restored)
    # Again, as a resumed copy would: nothing changes.
    for fact in restored:
        assert await store.restore(fact) is False
    assert await backdoor.count("acme", "u1") == 4
    # A restored id is a real id: forget finds it.
    assert await store.forget("acme", "u1", "Custom_id-42") is True
    assert await store.forget("acme", "u1", "Custom_id-42") is False


@pytest.mark.parametrize(
    "other",
    [
        _fact("0123456789abcdef0123456789abcdef", "different words"),
        _fact("0123456789abcdef0123456789abcdef", "same", user="u2"),
        _fact("0123456789abcdef0123456789abcdef", "same", when=_WHEN + timedelta(microseconds=1)),
    ],
    ids=["content", "end user", "time"],
)
async def test_restore_refuses_an_id_held_by_another_fact(
    store: PostgresMemory, backdoor: Backdoor, other: Memory
) -> None:
    assert await store.restore(_fact("0123456789abcdef0123456789abcdef", "same")) is True
    with pytest.raises(InvalidInputError) as caught:
        await store.restore(other)
    assert caught.value.argument == "memory.id"
    assert "different words" not in str(caught.value)
    assert await backdoor.count("acme", "u1") == 1
    assert await backdoor.count("acme", "u2") == 0


async def test_restore_refuses_what_it_cannot_keep_exactly(
    store: PostgresMemory, backdoor: Backdoor
) -> None:
    for memory_id in ["", "has space", "x" * 65, "\u00e9t\u00e9", "a/b"]:
        with pytest.raises(InvalidInputError, match=r"memory\.id"):
            await store.restore(_fact(memory_id, "never stored"))
    with pytest.raises(InvalidInputError, match=r"memory\.created_at"):
        await store.restore(_fact("naive", "never stored", when=datetime(2025, 1, 1)))
    with pytest.raises(TypeError, match="memory must be a Memory"):
        await store.restore("not a memory")  # type: ignore[arg-type]
    assert await backdoor.count("acme", "u1") == 0


async def test_forget_of_an_id_of_no_restorable_shape_is_false_without_a_statement(
    postgres_dsn: str, schema: str
) -> None:
    # No tables: any statement would fail, so a False proves none ran.
    async with PostgresMemory.connect(postgres_dsn, schema=schema) as store:
        for memory_id in ["", "has space", "x" * 65, "\u00e9", "a/b", "{x}"]:
            assert await store.forget("acme", "u1", memory_id) is False
        with pytest.raises(SchemaVersionError):
            await store.forget("acme", "u1", "0123456789abcdef0123456789abcdef")
