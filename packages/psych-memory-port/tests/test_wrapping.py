"""`wrap_store`: a wrapper has exactly the capabilities of the store it wraps."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from datetime import datetime
from typing import Any, ClassVar

import pytest
from hypothesis import given
from hypothesis import strategies as st

from psych_runtime.memory.port import (
    CountsFacts,
    ExpiresFacts,
    ListsEndUsers,
    Memory,
    MemoryKey,
    MemoryStore,
    PagesFacts,
    RemembersWithinLimit,
    RestoresFacts,
    Scope,
    ScrubsDeletions,
    StoreWrapper,
    memory_key,
    new_memory_id,
    wrap_store,
)

pytestmark = pytest.mark.anyio


class _Store(MemoryStore):
    """The smallest store: a list of facts, and a record of what was called."""

    def __init__(self) -> None:
        self.facts: list[Memory] = []
        self.calls: list[str] = []

    async def remember(self, scope: Scope, end_user_id: str, content: str) -> Memory:
        memory = Memory(new_memory_id(), memory_key(scope, end_user_id), content, _AT)
        self.facts.append(memory)
        return memory

    async def recall(
        self, scope: Scope, end_user_id: str, *, limit: int | None = None
    ) -> tuple[Memory, ...]:
        key = memory_key(scope, end_user_id)
        return tuple(m for m in self.facts if m.key == key)[:limit]

    async def forget(self, scope: Scope, end_user_id: str, memory_id: str) -> bool:
        held = [m for m in await self.recall(scope, end_user_id) if m.id == memory_id]
        self.facts = [m for m in self.facts if m not in held]
        return bool(held)

    async def erase(self, scope: Scope, end_user_id: str) -> int:
        held = await self.recall(scope, end_user_id)
        self.facts = [m for m in self.facts if m not in held]
        return len(held)

    async def aclose(self) -> None:
        self.calls.append("aclose")


_AT = datetime.fromisoformat("2026-01-31T12:00:00+00:00")


class _Lists(_Store):
    async def tenants(self) -> tuple[str, ...]:
        return tuple(sorted({m.key.tenant for m in self.facts}))

    async def end_users(self, scope: Scope) -> tuple[str, ...]:
        return ("u1",)


class _Counts(_Store):
    async def fact_counts(self, scope: Scope) -> Mapping[str, int]:
        return {"u1": len(self.facts)}


class _Pages(_Store):
    async def recall_page(
        self, scope: Scope, end_user_id: str, *, after: str | None = None, size: int
    ) -> tuple[Memory, ...]:
        return (await self.recall(scope, end_user_id))[:size]


class _Limits(_Store):
    async def remember_within_limit(
        self, scope: Scope, end_user_id: str, content: str, *, max_facts: int
    ) -> Memory | None:
        if len(await self.recall(scope, end_user_id)) >= max_facts:
            return None
        return await self.remember(scope, end_user_id, content)


class _Restores(_Store):
    async def restore(self, memory: Memory) -> bool:
        self.facts.append(memory)
        return True

    async def restore_many(self, memories: Iterable[Memory]) -> int:
        added = list(memories)
        self.facts.extend(added)
        return len(added)


class _Expires(_Store):
    async def count_expired(self, scope: Scope, *, before: datetime) -> int:
        return sum(1 for m in self.facts if m.created_at < before)

    async def expire(self, scope: Scope, *, before: datetime) -> int:
        self.calls.append("expire")
        return 0


class _Scrubs(_Store):
    pending = True

    @property
    def scrub_pending(self) -> bool:
        return self.pending

    async def scrub(self) -> bool:
        self.pending = False
        return True


class _ScrubsWithoutSaying(_Store):
    async def scrub(self) -> bool:
        return False


class _Durable(_Store):
    async def deletion_durability(self) -> str:
        return "remote_apply"


_MIXINS = (
    _Lists,
    _Counts,
    _Pages,
    _Limits,
    _Restores,
    _Expires,
    _Scrubs,
    _ScrubsWithoutSaying,
    _Durable,
)
_PROTOCOLS = (
    ListsEndUsers,
    CountsFacts,
    PagesFacts,
    RemembersWithinLimit,
    RestoresFacts,
    ExpiresFacts,
    ScrubsDeletions,
)
_NAMES = (
    "tenants",
    "end_users",
    "fact_counts",
    "recall_page",
    "remember_within_limit",
    "restore",
    "restore_many",
    "count_expired",
    "expire",
    "scrub",
    "scrub_pending",
    "deletion_durability",
)


def _store_with(chosen: Iterable[type[_Store]]) -> _Store:
    bases = tuple(mixin for mixin in _MIXINS if mixin in set(chosen)) or (_Store,)
    chosen_store: _Store = type("Chosen", bases, {})()
    return chosen_store


class _Counting(StoreWrapper):
    """A wrapper of our own: counts expiries, and reports durability."""

    __slots__ = ("expiries",)

    def __init__(self, store: MemoryStore, start: int) -> None:
        super().__init__(store)
        self.expiries = start


class _CountsExpiries(_Counting):
    __slots__ = ()

    async def count_expired(self, scope: Scope, *, before: datetime) -> int:
        return int(await _as("ExpiresFacts", self.wrapped).count_expired(scope, before=before))

    async def expire(self, scope: Scope, *, before: datetime) -> int:
        self.expiries += 1
        return int(await _as("ExpiresFacts", self.wrapped).expire(scope, before=before))


class _ReportsDurability(_Counting):
    __slots__ = ()

    async def deletion_durability(self) -> str:
        return f"wrapped: {await self.wrapped.deletion_durability()}"  # type: ignore[attr-defined]


_Counting.capability_mixins = (_CountsExpiries, _ReportsDurability)

_BY_NAME: dict[str, type] = {protocol.__name__: protocol for protocol in _PROTOCOLS}


def _as(protocol: str, store: object) -> Any:
    # The capability, checked as a caller checks it, then called untyped.
    assert isinstance(store, _BY_NAME[protocol])
    return store


@given(chosen=st.sets(st.sampled_from(_MIXINS)))
def test_a_capability_is_there_exactly_when_the_wrapped_store_has_it(
    chosen: set[type[_Store]],
) -> None:
    bare = _store_with(chosen)
    for wrapped in (wrap_store(StoreWrapper, bare), wrap_store(_Counting, bare, 0)):
        assert wrapped.wrapped is bare
        for protocol in _PROTOCOLS:
            assert isinstance(wrapped, protocol) is isinstance(bare, protocol), protocol
        for name in _NAMES:
            # The port forwards nothing it does not define: deletion_durability
            # is there only through a wrapper that names it.
            expected = hasattr(bare, name) and (
                name != "deletion_durability" or isinstance(wrapped, _Counting)
            )
            assert hasattr(wrapped, name) is expected, name


@given(chosen=st.sets(st.sampled_from(_MIXINS)))
def test_the_class_is_made_once_per_set_of_capabilities(chosen: set[type[_Store]]) -> None:
    first = wrap_store(StoreWrapper, _store_with(chosen))
    second = wrap_store(StoreWrapper, _store_with(chosen))
    assert type(first) is type(second)
    assert isinstance(first, StoreWrapper)


async def test_every_call_reaches_the_wrapped_store() -> None:
    bare = _store_with(_MIXINS)
    store = wrap_store(StoreWrapper, bare)
    async with store as entered:
        assert entered is store
        fact = await store.remember("acme", "u1", "a fact")
        assert await store.recall("acme", "u1", limit=1) == (fact,)
        assert await _as("ListsEndUsers", store).tenants() == ("acme",)
        assert await _as("ListsEndUsers", store).end_users("acme") == ("u1",)
        assert await _as("CountsFacts", store).fact_counts("acme") == {"u1": 1}
        assert await _as("PagesFacts", store).recall_page("acme", "u1", size=5) == (fact,)
        limited = _as("RemembersWithinLimit", store)
        assert await limited.remember_within_limit("acme", "u1", "a second", max_facts=1) is None
        assert await _as("ExpiresFacts", store).count_expired("acme", before=_AT) == 0
        assert await _as("ExpiresFacts", store).expire("acme", before=_AT) == 0
        scrubs = _as("ScrubsDeletions", store)
        assert [scrubs.scrub_pending, await scrubs.scrub(), scrubs.scrub_pending] == [
            True,
            True,
            False,
        ]
        assert await store.forget("acme", "u1", fact.id) is True
        restored = _as("RestoresFacts", store)
        assert await restored.restore(fact) is True
        again = Memory("again", MemoryKey("acme", "u1"), "again", _AT)
        assert await restored.restore_many([again]) == 1
        assert await store.erase("acme", "u1") == 2
    assert bare.calls == ["expire", "aclose"]
    assert repr(store) == f"StoreWrapper({bare!r})"


async def test_a_wrappers_own_class_replaces_the_forwarding_of_its_capability() -> None:
    bare = _store_with([_Expires, _Durable])
    store = wrap_store(_Counting, bare, 10)
    assert isinstance(store, _Counting)
    assert await _as("ExpiresFacts", store).expire("acme", before=_AT) == 0
    assert store.expiries == 11
    assert bare.calls == ["expire"]
    assert await store.deletion_durability() == "wrapped: remote_apply"  # type: ignore[attr-defined]
    # A store without the capability: the wrapper's class for it is left out.
    plain = wrap_store(_Counting, _Store(), 0)
    assert not isinstance(plain, ExpiresFacts)
    assert not hasattr(plain, "deletion_durability")


class _Subclass(StoreWrapper):
    capability_mixins: ClassVar[tuple[type[StoreWrapper], ...]] = ()


def test_wrong_arguments_are_refused() -> None:
    with pytest.raises(TypeError, match="wrapper must be a subclass of StoreWrapper"):
        wrap_store(int, _Store())  # type: ignore[type-var]
    with pytest.raises(TypeError, match="wrapper must be a subclass of StoreWrapper"):
        wrap_store("StoreWrapper", _Store())  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="store must be a MemoryStore, not object"):
        wrap_store(_Subclass, object())  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="store must be a MemoryStore, not str"):
        StoreWrapper("store")  # type: ignore[arg-type]
