"""The operator capabilities: listing keys and restoring facts as they were."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime, timedelta, timezone

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from psych_runtime.memory.inproc import InProcessMemory
from psych_runtime.memory.inproc._facts import Facts
from psych_runtime.memory.port import (
    InvalidContentError,
    InvalidInputError,
    InvalidKeyError,
    Memory,
    MemoryKey,
    StoreClosedError,
)
from psych_runtime.memory.store_backed import StoreBackedMemory

pytestmark = pytest.mark.anyio

WHEN = datetime(2024, 5, 17, 8, 30, 0, 123456, tzinfo=UTC)


@dataclass(frozen=True)
class RuntimeScope:
    tenant: str


@pytest.fixture
def memory() -> InProcessMemory:
    return InProcessMemory()


def fact(memory_id: str, tenant: str = "acme", user: str = "u1", content: str = "fact") -> Memory:
    return Memory(memory_id, MemoryKey(tenant, user), content, WHEN)


# Listing keys.


async def test_tenants_and_end_users_are_sorted_by_code_point(memory: InProcessMemory) -> None:
    # Code point order, not a locale's: upper case before lower, accents last.
    for tenant, user in [("b", "é"), ("a", "b"), ("B", "x"), ("a", "Z"), ("a", "a"), ("é", "x")]:
        await memory.remember(tenant, user, "fact")
    await memory.remember("a", "b", "a second fact of the same key")
    assert await memory.tenants() == ("B", "a", "b", "é")
    assert await memory.end_users("a") == ("Z", "a", "b")
    assert await memory.end_users(RuntimeScope("b")) == ("é",)
    assert await memory.end_users("nobody") == ()


async def test_only_keys_holding_a_fact_are_listed(memory: InProcessMemory) -> None:
    assert await memory.tenants() == ()
    forgotten = await memory.remember("acme", "forgotten", "fact")
    await memory.remember("acme", "erased", "fact")
    await memory.remember("acme", "kept", "fact")
    await memory.remember("globex", "erased", "fact")
    await memory.forget("acme", "forgotten", forgotten.id)
    await memory.erase("acme", "erased")
    await memory.erase("globex", "erased")
    assert await memory.tenants() == ("acme",)
    assert await memory.end_users("acme") == ("kept",)
    assert await memory.end_users("globex") == ()


async def test_end_users_checks_the_tenant_as_every_call_does(memory: InProcessMemory) -> None:
    with pytest.raises(InvalidKeyError) as caught:
        await memory.end_users(" acme")
    assert caught.value.argument == "scope"
    with pytest.raises(InvalidKeyError) as caught:
        await memory.end_users(RuntimeScope(""))
    assert caught.value.argument == "scope.tenant"
    with pytest.raises(TypeError, match=r"^scope must be a str"):
        await memory.end_users(42)  # type: ignore[arg-type]


async def test_listing_a_closed_store_is_refused(memory: InProcessMemory) -> None:
    await memory.aclose()
    for call, name in [(memory.tenants(), "tenants"), (memory.end_users("acme"), "end_users")]:
        with pytest.raises(StoreClosedError) as caught:
            await call
        assert caught.value.operation == name


# Restoring facts.


async def test_restore_keeps_id_and_time_and_appends_after_the_key(
    memory: InProcessMemory,
) -> None:
    first = await memory.remember("acme", "u1", "remembered")
    restored = fact("restored-1", content="from the old store")
    assert await memory.restore(restored) is True
    last = await memory.remember("acme", "u1", "remembered later")
    assert await memory.recall("acme", "u1") == (first, restored, last)
    assert await memory.recall("acme", "u2") == ()
    # A restored fact is an ordinary fact from then on.
    assert await memory.forget("acme", "u1", "restored-1") is True
    assert await memory.recall("acme", "u1") == (first, last)


async def test_restoring_the_same_fact_again_changes_nothing(memory: InProcessMemory) -> None:
    restored = fact("f1")
    assert await memory.restore(restored) is True
    later = await memory.remember("acme", "u1", "later")
    assert await memory.restore(fact("f1")) is False
    assert await memory.recall("acme", "u1") == (restored, later)


async def test_an_id_held_by_a_different_fact_is_refused_anywhere(
    memory: InProcessMemory,
) -> None:
    remembered = await memory.remember("acme", "u1", "remembered")
    assert await memory.restore(fact("f1")) is True
    clashes = [
        fact("f1", content="Secret content"),
        Memory("f1", MemoryKey("acme", "u1"), "fact", WHEN + timedelta(seconds=1)),
        fact("f1", user="u2"),
        fact("f1", tenant="globex"),
        fact(remembered.id, user="u2", content="remembered"),
        # The id of a fact remembered after the index was built.
        fact((await memory.remember("acme", "u3", "late")).id, user="u4"),
    ]
    before = {user: await memory.recall("acme", user) for user in ("u1", "u2", "u3", "u4")}
    for clash in clashes:
        with pytest.raises(InvalidInputError) as caught:
            await memory.restore(clash)
        assert caught.value.argument == "memory.id"
        assert "Secret" not in str(caught.value)
    after = {user: await memory.recall("acme", user) for user in ("u1", "u2", "u3", "u4")}
    assert after == before
    assert await memory.recall("globex", "u1") == ()


async def test_ids_freed_by_forget_and_erase_can_be_restored(memory: InProcessMemory) -> None:
    forgotten = await memory.remember("acme", "u1", "forgotten")
    erased = await memory.remember("acme", "u2", "erased")
    await memory.restore(fact("built-the-index"))
    assert await memory.forget("acme", "u1", forgotten.id) is True
    assert await memory.erase("acme", "u2") == 1
    moved = [fact(forgotten.id, user="u3"), fact(erased.id, user="u3")]
    for moving in moved:
        assert await memory.restore(moving) is True
    assert await memory.recall("acme", "u3") == tuple(moved)


async def test_a_store_that_never_restores_keeps_no_index_of_ids(
    memory: InProcessMemory,
) -> None:
    # The four methods then do what they did before restore existed.
    kept = await memory.remember("acme", "u1", "kept")
    gone = await memory.remember("acme", "u1", "gone")
    await memory.remember("acme", "u2", "erased")
    await memory.forget("acme", "u1", gone.id)
    await memory.erase("acme", "u2")
    await memory.recall("acme", "u1")
    await memory.tenants()
    await memory.end_users("acme")
    assert memory._id_index is None
    await memory.restore(fact("f1"))
    table = memory._facts[MemoryKey("acme", "u1")]
    index = id_index(memory)
    assert index == {kept.id: table, "f1": table}
    assert all(held is table for held in index.values())


def id_index(memory: InProcessMemory) -> dict[str, Facts] | None:
    return memory._id_index


async def test_a_time_in_another_zone_is_kept_as_the_same_instant_in_utc(
    memory: InProcessMemory,
) -> None:
    berlin = WHEN.astimezone(timezone(timedelta(hours=2)))
    assert await memory.restore(Memory("f1", MemoryKey("acme", "u1"), "fact", berlin)) is True
    (stored,) = await memory.recall("acme", "u1")
    assert stored.created_at == WHEN
    assert stored.created_at.tzinfo is UTC
    assert await memory.restore(fact("f1")) is False


@pytest.mark.parametrize(
    ("bad", "error", "argument"),
    [
        (fact(""), InvalidInputError, "memory.id"),
        (fact("has space"), InvalidInputError, "memory.id"),
        (fact("x" * 65), InvalidInputError, "memory.id"),
        (fact("ok", content="   "), InvalidContentError, "content"),
        (fact("ok", content="x" * 4097), InvalidContentError, "content"),
        (
            Memory("ok", MemoryKey("acme", "u1"), "fact", WHEN.replace(tzinfo=None)),
            InvalidInputError,
            "memory.created_at",
        ),
    ],
)
async def test_invalid_facts_are_refused_and_nothing_is_stored(
    memory: InProcessMemory, bad: Memory, error: type[InvalidInputError], argument: str
) -> None:
    with pytest.raises(error) as caught:
        await memory.restore(bad)
    assert type(caught.value) is error
    assert caught.value.argument == argument
    assert await memory.tenants() == ()


@pytest.mark.parametrize(
    ("bad", "message"),
    [
        ("not a fact", "^memory must be a Memory, not str$"),
        (Memory(7, MemoryKey("acme", "u1"), "fact", WHEN), "^memory.id must be a str"),  # type: ignore[arg-type]
        (Memory("ok", ("acme", "u1"), "fact", WHEN), "^memory.key must be a MemoryKey"),  # type: ignore[arg-type]
        (Memory("ok", MemoryKey("acme", "u1"), b"fact", WHEN), "^content must be a str"),  # type: ignore[arg-type]
        (Memory("ok", MemoryKey("acme", "u1"), "fact", "2024-05-17"), "^memory.created_at must"),  # type: ignore[arg-type]
    ],
)
async def test_wrong_types_are_type_errors(
    memory: InProcessMemory, bad: object, message: str
) -> None:
    with pytest.raises(TypeError, match=message):
        await memory.restore(bad)  # type: ignore[arg-type]
    assert await memory.tenants() == ()


async def test_restoring_into_a_closed_store_is_refused(memory: InProcessMemory) -> None:
    await memory.aclose()
    with pytest.raises(StoreClosedError) as caught:
        await memory.restore(fact("f1"))
    assert caught.value.operation == "restore"


async def test_store_backed_memory_provides_the_same_capabilities() -> None:
    memory = StoreBackedMemory(object())
    assert await memory.restore(fact("f1")) is True
    assert await memory.tenants() == ("acme",)
    assert await memory.end_users("acme") == ("u1",)


keys = st.tuples(st.sampled_from(["acme", "globex"]), st.sampled_from(["u1", "u2", "u3"]))


@settings(suppress_health_check=[HealthCheck.function_scoped_fixture], max_examples=50)
@given(writes=st.lists(st.tuples(keys, st.sampled_from(["remember", "restore"])), max_size=30))
async def test_a_copy_made_by_restore_is_exact_and_a_second_copy_adds_nothing(
    anyio_backend: str, writes: list[tuple[tuple[str, str], str]]
) -> None:
    source, target = InProcessMemory(), InProcessMemory()
    for number, ((tenant, user), how) in enumerate(writes):
        if how == "remember":
            await source.remember(tenant, user, f"fact {number}")
        else:
            await source.restore(fact(f"id-{number}", tenant, user, f"fact {number}"))

    async def copy() -> list[bool]:
        stored: list[bool] = []
        for tenant in await source.tenants():
            for user in await source.end_users(tenant):
                held = await source.recall(tenant, user)
                stored.extend([await target.restore(one) for one in held])
        return stored

    assert await copy() == [True] * len(writes)
    assert await copy() == [False] * len(writes)
    assert await target.tenants() == await source.tenants()
    for tenant in await source.tenants():
        assert await target.end_users(tenant) == await source.end_users(tenant)
        for user in await source.end_users(tenant):
            assert await target.recall(tenant, user) == await source.recall(tenant, user)


batches = st.lists(
    st.tuples(st.sampled_from(["a", "b", "c", "d"]), keys, st.sampled_from(["x", "y"])),
    max_size=12,
)


@settings(suppress_health_check=[HealthCheck.function_scoped_fixture], max_examples=100)
@given(batch=batches)
async def test_a_batch_is_stored_as_one_restore_after_another_or_not_at_all(
    anyio_backend: str, batch: list[tuple[str, tuple[str, str], str]]
) -> None:
    facts = [fact(memory_id, tenant, user, content) for memory_id, (tenant, user), content in batch]
    one_by_one, batched = InProcessMemory(), InProcessMemory()
    try:
        expected: int | None = sum([await one_by_one.restore(one) for one in facts])
    except InvalidInputError:
        expected = None
    if expected is None:
        with pytest.raises(InvalidInputError, match=r"memories\[\d+\]\.id"):
            await batched.restore_many(facts)
        assert await batched.tenants() == ()
        return
    assert await batched.restore_many(iter(facts)) == expected
    assert await batched.restore_many(facts) == 0
    assert await batched.tenants() == await one_by_one.tenants()
    for tenant in await one_by_one.tenants():
        for user in await one_by_one.end_users(tenant):
            assert await batched.recall(tenant, user) == await one_by_one.recall(tenant, user)


async def test_a_refused_batch_names_the_fact_by_its_index(memory: InProcessMemory) -> None:
    await memory.restore(fact("taken"))
    with pytest.raises(InvalidInputError) as refused:
        await memory.restore_many([fact("fresh"), fact("taken", content="other")])
    assert refused.value.argument == "memories[1].id"
    with pytest.raises(InvalidInputError) as alone:
        await memory.restore(fact("taken", content="other"))
    assert alone.value.argument == "memory.id"
    assert await memory.recall("acme", "u1") == (fact("taken"),)


async def test_a_closed_store_refuses_a_batch(memory: InProcessMemory) -> None:
    await memory.aclose()
    with pytest.raises(StoreClosedError):
        await memory.restore_many([fact("f1")])


# Retention.


async def test_expire_deletes_the_tenants_older_facts_across_end_users(
    memory: InProcessMemory,
) -> None:
    await memory.restore_many(
        [fact(f"old-{user}", user=user) for user in ("u1", "u2")] + [fact("other", tenant="globex")]
    )
    kept = await memory.remember("acme", "u1", "made today")
    await memory.restore(fact("restored-later", user="u3"))
    cutoff = WHEN + timedelta(microseconds=1)
    assert await memory.count_expired("acme", before=cutoff) == 3
    assert await memory.expire("acme", before=cutoff) == 3
    assert await memory.recall("acme", "u1") == (kept,)
    assert await memory.end_users("acme") == ("u1",)
    assert await memory.tenants() == ("acme", "globex")
    # The index of ids follows: an expired id may be restored again.
    assert await memory.restore(fact("old-u1"))


async def test_a_key_gone_before_its_turn_is_skipped(memory: InProcessMemory) -> None:
    await memory.restore(fact("old"))
    key = MemoryKey("acme", "u1")
    ids = ["old"]
    await memory.erase("acme", "u1")
    # What expire does for a key erased between its snapshot and its deletion.
    with memory._lock:
        assert memory._expire_locked(key, ids, WHEN + timedelta(days=1)) == 0


async def test_remember_within_limit_checks_input_then_refuses_a_closed_store(
    memory: InProcessMemory,
) -> None:
    # Input is checked as remember checks it (key, content), then max_facts.
    with pytest.raises(InvalidKeyError):
        await memory.remember_within_limit("acme", " ", "\x00", max_facts=-1)
    with pytest.raises(InvalidContentError):
        await memory.remember_within_limit("acme", "u1", "\x00", max_facts=-1)
    with pytest.raises(InvalidInputError, match="max_facts"):
        await memory.remember_within_limit("acme", "u1", "fact", max_facts=-1)
    await memory.aclose()
    with pytest.raises(InvalidInputError, match="max_facts"):
        await memory.remember_within_limit("acme", "u1", "fact", max_facts=-1)
    with pytest.raises(StoreClosedError) as caught:
        await memory.remember_within_limit("acme", "u1", "fact", max_facts=0)
    assert caught.value.operation == "remember_within_limit"
