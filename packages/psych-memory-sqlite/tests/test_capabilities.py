"""Operator capabilities: listing whose facts the file holds, restoring facts as they were."""

from __future__ import annotations

import sqlite3
import uuid
from datetime import UTC, datetime, timedelta, timezone
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from psych_runtime.memory.port import (
    InvalidContentError,
    InvalidInputError,
    ListsEndUsers,
    Memory,
    MemoryKey,
    RestoresFacts,
)
from psych_runtime.memory.sqlite import SqliteMemory

pytestmark = pytest.mark.anyio

WHEN = datetime(2024, 5, 17, 8, 30, 0, 123456, tzinfo=UTC)


def fact(memory_id: str, tenant: str = "acme", end_user: str = "user-1", **kw: object) -> Memory:
    content = kw.get("content", f"restored fact {memory_id}")
    created_at = kw.get("created_at", WHEN)
    assert isinstance(content, str)
    assert isinstance(created_at, datetime)
    return Memory(memory_id, MemoryKey(tenant, end_user), content, created_at)


def test_the_store_provides_both_capabilities(db_path: Path) -> None:
    memory = SqliteMemory(db_path)
    assert isinstance(memory, ListsEndUsers)
    assert isinstance(memory, RestoresFacts)


async def test_listing_returns_only_keys_holding_facts_sorted_by_code_point(
    memory: SqliteMemory,
) -> None:
    assert await memory.tenants() == ()
    assert await memory.end_users("acme") == ()
    # Code point order, which is not the order of UTF-16 or of a locale.
    names = ["b", "B", "a", "é", "z", "\uffff", "\U0001f600", "ä"]
    for name in names:
        await memory.remember(name, "u", "fact")
        await memory.remember("acme", name, "fact")
    assert await memory.tenants() == tuple(sorted([*names, "acme"]))
    assert await memory.end_users("acme") == tuple(sorted(names))
    assert await memory.end_users("b") == ("u",)
    gone = await memory.remember("gone", "only", "fact")
    assert "gone" in await memory.tenants()
    assert await memory.forget("gone", "only", gone.id)
    assert await memory.erase("acme", "z") == 1
    assert "gone" not in await memory.tenants()
    assert "z" not in await memory.end_users("acme")
    assert await memory.end_users("nobody") == ()


async def test_end_users_validates_the_scope(memory: SqliteMemory) -> None:
    with pytest.raises(TypeError, match="scope"):
        await memory.end_users(42)  # type: ignore[arg-type]
    with pytest.raises(InvalidInputError, match="scope"):
        await memory.end_users(" acme")


@settings(
    max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    keys=st.sets(
        st.tuples(
            st.sampled_from(["t1", "t2", "Tenant", "\u00e9t"]),
            st.text(
                alphabet=st.characters(codec="utf-8", categories=["L", "N", "S"]),
                min_size=1,
                max_size=6,
            ),
        ),
        max_size=12,
    )
)
async def test_listing_matches_what_was_stored(db_path: Path, keys: set[tuple[str, str]]) -> None:
    path = db_path.with_name(f"listing-{uuid.uuid4().hex}.sqlite3")
    async with SqliteMemory(path) as memory:
        for tenant, end_user in keys:
            await memory.remember(tenant, end_user, "fact")
        assert await memory.tenants() == tuple(sorted({t for t, _ in keys}))
        for tenant in {t for t, _ in keys}:
            assert await memory.end_users(tenant) == tuple(
                sorted(u for t, u in keys if t == tenant)
            )


async def test_restore_keeps_id_and_time_and_appends_after_the_keys_facts(
    memory: SqliteMemory,
) -> None:
    first = await memory.remember("acme", "user-1", "already there")
    # A PostgreSQL id, and a time older than the fact already stored.
    restored = fact(str(uuid.uuid4()), created_at=WHEN - timedelta(days=400))
    assert await memory.restore(restored) is True
    assert await memory.recall("acme", "user-1") == (first, restored)
    # Again, as a resumed copy does: nothing changes.
    assert await memory.restore(restored) is False
    assert await memory.recall("acme", "user-1") == (first, restored)
    # The same instant in another time zone is the same fact.
    shifted = fact(
        restored.id,
        content=restored.content,
        created_at=restored.created_at.astimezone(timezone(timedelta(hours=5))),
    )
    assert await memory.restore(shifted) is False


async def test_restored_facts_keep_their_order_and_can_be_forgotten(
    memory: SqliteMemory,
) -> None:
    facts = [fact(f"id-{i}", content=f"fact {i}", created_at=WHEN) for i in range(5)]
    for item in facts:
        assert await memory.restore(item)
    assert await memory.recall("acme", "user-1") == tuple(facts)
    assert await memory.forget("acme", "user-1", "id-2") is True
    assert await memory.forget("acme", "user-1", "id-2") is False
    assert await memory.recall("acme", "user-1") == (*facts[:2], *facts[3:])
    # A restored id of another key is not found from this one.
    assert await memory.forget("acme", "user-2", "id-3") is False


@pytest.mark.parametrize(
    "other",
    [
        fact("dup-1", content="different content"),
        fact("dup-1", end_user="user-2"),
        fact("dup-1", tenant="beta"),
        fact("dup-1", created_at=WHEN + timedelta(microseconds=1)),
    ],
    ids=["content", "end-user", "tenant", "created-at"],
)
async def test_restoring_a_different_fact_with_a_held_id_is_refused(
    memory: SqliteMemory, db_path: Path, other: Memory
) -> None:
    held = fact("dup-1")
    assert await memory.restore(held)
    with pytest.raises(InvalidInputError, match=r"memory\.id") as caught:
        await memory.restore(other)
    assert caught.value.argument == "memory.id"
    assert other.content not in str(caught.value)
    assert await memory.recall("acme", "user-1") == (held,)
    assert await memory.recall(other.key.tenant, other.key.end_user_id) in ((), (held,))


async def test_an_id_handed_out_by_remember_is_held_too(memory: SqliteMemory) -> None:
    stored = await memory.remember("acme", "user-1", "fact")
    with pytest.raises(InvalidInputError, match=r"memory\.id"):
        await memory.restore(fact(stored.id, end_user="user-2"))


@pytest.mark.parametrize(
    ("bad", "error", "match"),
    [
        (fact("has space"), InvalidInputError, "memory.id"),
        (fact("x" * 65), InvalidInputError, "memory.id"),
        (fact("ok", content="   "), InvalidContentError, "content"),
        (fact("ok", content="a\x00b"), InvalidContentError, "content"),
        (fact("ok", created_at=datetime(2024, 1, 1)), InvalidInputError, "created_at"),
        (Memory("ok", "acme/user-1", "fact", WHEN), TypeError, "memory.key"),  # type: ignore[arg-type]
        ("not a memory", TypeError, "memory"),
    ],
)
async def test_invalid_facts_are_refused_and_store_nothing(
    memory: SqliteMemory, db_path: Path, bad: object, error: type[Exception], match: str
) -> None:
    with pytest.raises(error, match=match):
        await memory.restore(bad)  # type: ignore[arg-type]
    with sqlite3.connect(db_path) as raw:
        assert raw.execute("SELECT count(*) FROM psych_memory_fact").fetchone() == (0,)
    raw.close()
