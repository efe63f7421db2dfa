"""`StoreWrapper` and `wrap_store`: one way to put something in front of a store.

A wrapper (a deletion ledger, telemetry, a cache of nothing) must behave as
the store it wraps and offer exactly its capabilities: no fewer, or a tool
that checks ``isinstance(store, ListsEndUsers)`` refuses a store that could;
no more, or it promises what the store cannot do. `wrap_store` builds that
class once per set of capabilities, from the wrapper's own class and one
small class per capability the store has.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from datetime import datetime
from types import TracebackType
from typing import Any, ClassVar, Final, Self, TypeVar, cast

from ._capabilities import (
    CountsFacts,
    ExpiresFacts,
    ListsEndUsers,
    PagesFacts,
    RemembersWithinLimit,
    RestoresFacts,
)
from ._key import Scope
from ._memory import Memory
from ._store import MemoryStore

__all__ = ["StoreWrapper", "wrap_store"]

_W = TypeVar("_W", bound="StoreWrapper")


class StoreWrapper(MemoryStore):
    """A store in front of another: forwards every call; a subclass changes what it needs.

    Make one with `wrap_store`, which gives the instance exactly the
    optional capabilities of the store it wraps. By default the four
    methods and the lifecycle (``async with``, `aclose`) go to the wrapped
    store unchanged; a subclass overrides those it changes, and changes a
    capability's methods by naming, in `capability_mixins`, classes of its
    own that define them. Such a class is used only when the wrapped store
    has every public name it defines (as `typing.runtime_checkable`
    protocols check), in place of the forwarding of those names.
    """

    __slots__ = ("_wrapped",)

    capability_mixins: ClassVar[tuple[type[StoreWrapper], ...]] = ()
    """The subclass's own classes for capabilities (see the class docstring)."""

    def __init__(self, store: MemoryStore) -> None:
        if not isinstance(store, MemoryStore):
            raise TypeError(f"store must be a MemoryStore, not {type(store).__qualname__}")
        self._wrapped = store

    @property
    def wrapped(self) -> MemoryStore:
        """The store this one is in front of."""
        return self._wrapped

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self._wrapped!r})"

    async def __aenter__(self) -> Self:
        await self._wrapped.__aenter__()
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self._wrapped.__aexit__(exc_type, exc, tb)

    async def aclose(self) -> None:
        await self._wrapped.aclose()

    async def remember(self, scope: Scope, end_user_id: str, content: str) -> Memory:
        return await self._wrapped.remember(scope, end_user_id, content)

    async def recall(
        self, scope: Scope, end_user_id: str, *, limit: int | None = None
    ) -> tuple[Memory, ...]:
        return await self._wrapped.recall(scope, end_user_id, limit=limit)

    async def forget(self, scope: Scope, end_user_id: str, memory_id: str) -> bool:
        return await self._wrapped.forget(scope, end_user_id, memory_id)

    async def erase(self, scope: Scope, end_user_id: str) -> int:
        return await self._wrapped.erase(scope, end_user_id)


# One forwarding class per capability the port defines, and one each for
# the two halves of `ScrubsDeletions`, which a store may have apart.


class _ListsEndUsers(StoreWrapper):
    __slots__ = ()

    async def tenants(self) -> tuple[str, ...]:
        return await cast("ListsEndUsers", self._wrapped).tenants()

    async def end_users(self, scope: Scope) -> tuple[str, ...]:
        return await cast("ListsEndUsers", self._wrapped).end_users(scope)


class _CountsFacts(StoreWrapper):
    __slots__ = ()

    async def fact_counts(self, scope: Scope) -> Mapping[str, int]:
        return await cast("CountsFacts", self._wrapped).fact_counts(scope)


class _PagesFacts(StoreWrapper):
    __slots__ = ()

    async def recall_page(
        self, scope: Scope, end_user_id: str, *, after: str | None = None, size: int
    ) -> tuple[Memory, ...]:
        store = cast("PagesFacts", self._wrapped)
        return await store.recall_page(scope, end_user_id, after=after, size=size)


class _RemembersWithinLimit(StoreWrapper):
    __slots__ = ()

    async def remember_within_limit(
        self, scope: Scope, end_user_id: str, content: str, *, max_facts: int
    ) -> Memory | None:
        store = cast("RemembersWithinLimit", self._wrapped)
        return await store.remember_within_limit(scope, end_user_id, content, max_facts=max_facts)


class _RestoresFacts(StoreWrapper):
    __slots__ = ()

    async def restore(self, memory: Memory) -> bool:
        return await cast("RestoresFacts", self._wrapped).restore(memory)

    async def restore_many(self, memories: Iterable[Memory]) -> int:
        return await cast("RestoresFacts", self._wrapped).restore_many(memories)


class _ExpiresFacts(StoreWrapper):
    __slots__ = ()

    async def count_expired(self, scope: Scope, *, before: datetime) -> int:
        return await cast("ExpiresFacts", self._wrapped).count_expired(scope, before=before)

    async def expire(self, scope: Scope, *, before: datetime) -> int:
        return await cast("ExpiresFacts", self._wrapped).expire(scope, before=before)


class _Scrubs(StoreWrapper):
    __slots__ = ()

    async def scrub(self) -> bool:
        return cast("bool", await cast("Any", self._wrapped).scrub())


class _TellsScrubPending(StoreWrapper):
    __slots__ = ()

    @property
    def scrub_pending(self) -> bool:
        """Whether bytes of a fact the store deleted may remain (the store's own answer)."""
        return cast("bool", cast("Any", self._wrapped).scrub_pending)


_FORWARDING: Final[tuple[type[StoreWrapper], ...]] = (
    _ListsEndUsers,
    _CountsFacts,
    _PagesFacts,
    _RemembersWithinLimit,
    _RestoresFacts,
    _ExpiresFacts,
    _Scrubs,
    _TellsScrubPending,
)

_classes: dict[tuple[type[StoreWrapper], ...], type[StoreWrapper]] = {}


def _names(mixin: type[StoreWrapper], wrapper: type[StoreWrapper]) -> frozenset[str]:
    # The public names the mixin adds to the wrapper's class.
    inherited = set(wrapper.__mro__) | set(StoreWrapper.__mro__)
    return frozenset(
        name
        for cls in mixin.__mro__
        if cls not in inherited
        for name in vars(cls)
        if not name.startswith("_")
    )


def _has(store: MemoryStore, names: frozenset[str]) -> bool:
    # ``scrub`` must be callable; a capability's other names need only be
    # there, as a runtime-checkable protocol checks them.
    return (
        bool(names)
        and all(hasattr(store, name) for name in names)
        and ("scrub" not in names or callable(getattr(store, "scrub", None)))
    )


def wrap_store(wrapper: type[_W], store: MemoryStore, /, *args: Any, **kwargs: Any) -> _W:
    """An instance of ``wrapper`` in front of ``store``, with exactly ``store``'s capabilities.

    The instance is made with ``wrapper(store, *args, **kwargs)`` from a
    subclass of ``wrapper`` that adds, for each optional capability of
    ``store`` (`ListsEndUsers`, `CountsFacts`, `PagesFacts`,
    `RemembersWithinLimit`, `RestoresFacts`, `ExpiresFacts`, ``scrub``,
    ``scrub_pending``, and any
    the wrapper names in `StoreWrapper.capability_mixins`), the methods
    that forward it, or the wrapper's own. A capability ``store`` lacks is
    absent from the instance: ``isinstance`` answers for it as for
    ``store``. The subclass is made once per set of capabilities.

    Raises:
        TypeError: ``wrapper`` is not a subclass of `StoreWrapper`, or
            ``store`` is not a `MemoryStore`.
    """
    if not isinstance(cast("object", wrapper), type) or not issubclass(wrapper, StoreWrapper):
        raise TypeError(f"wrapper must be a subclass of StoreWrapper, not {wrapper!r}")
    if not isinstance(store, MemoryStore):
        raise TypeError(f"store must be a MemoryStore, not {type(store).__qualname__}")
    own = {_names(mixin, wrapper) for mixin in wrapper.capability_mixins}
    # The wrapper's own class for a capability replaces its forwarding.
    offered = (
        *wrapper.capability_mixins,
        *(mixin for mixin in _FORWARDING if _names(mixin, wrapper) not in own),
    )
    chosen = [mixin for mixin in offered if _has(store, _names(mixin, wrapper))]
    key: tuple[type[StoreWrapper], ...] = (wrapper, *chosen)
    made = _classes.get(key)
    if made is None:
        made = type(wrapper.__name__, (*chosen, wrapper), {"__slots__": ()}) if chosen else wrapper
        made.__qualname__ = wrapper.__qualname__
        made.__module__ = wrapper.__module__
        _classes[key] = made
    return cast("_W", made(store, *args, **kwargs))
