"""`with_ledger`: any store, its deletions recorded; `reapply`: the record, replayed."""

from __future__ import annotations

import os
from collections.abc import Awaitable, Callable, Iterable, Mapping
from contextlib import suppress
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from types import TracebackType
from typing import Any, Final, Self, cast

import anyio.to_thread

from psych_runtime.memory.port import (
    CountsFacts,
    InvalidInputError,
    ListsEndUsers,
    Memory,
    MemoryStore,
    PagesFacts,
    RestoresFacts,
    Scope,
    StoreClosedError,
    StoreUnavailableError,
    memory_key,
    validate_memory_id,
)

from ._ledger import DeletionLedger, Kind

__all__ = ["Reapplied", "reapply", "with_ledger"]


def with_ledger(store: MemoryStore, ledger: DeletionLedger) -> MemoryStore:
    """Return a store that behaves exactly like ``store`` and records each deletion in ``ledger``.

    The returned store gives the same results and raises the same errors as
    ``store``, and has the same optional capabilities: it is a
    `ListsEndUsers`, `CountsFacts`, `PagesFacts` or `RestoresFacts` exactly
    when ``store`` is, and has ``scrub`` and ``scrub_pending`` exactly when
    ``store`` has them, and ``deletion_durability`` (PostgreSQL) exactly when
    ``store`` has it. Entering, leaving and closing it enter, leave and
    close ``store``; the ledger stays open (it is its opener's to close).

    Each ``erase`` and ``forget`` first records its intent in the ledger,
    committed to disk, then calls the store, then records how many facts
    were deleted: a process stopped at any point leaves either no deletion
    or a recorded one. When the intent cannot be recorded, the deletion is
    refused with `LedgerUnavailableError` and the store is not called.

    Raises:
        TypeError: ``store`` is not a `MemoryStore` or ``ledger`` not a
            `DeletionLedger`.
        InvalidInputError: The ledger is inside ``store``: its SQLite file, or
            its PostgreSQL database and schema.
    """
    if not isinstance(store, MemoryStore):
        raise TypeError(f"store must be a MemoryStore, not {type(store).__qualname__}")
    if not isinstance(ledger, DeletionLedger):
        raise TypeError(f"ledger must be a DeletionLedger, not {type(ledger).__qualname__}")
    if _inside(store, ledger):
        raise InvalidInputError("ledger", "must live outside the store it records")
    return _class_for(store)(store, ledger)


def _inside(store: MemoryStore, ledger: DeletionLedger) -> bool:
    # A SQLite store names its file, a PostgreSQL store its schema and pool.
    store_path = getattr(store, "path", None)
    if ledger.path is not None:
        return isinstance(store_path, str | os.PathLike) and _same_file(
            Path(store_path), ledger.path
        )
    schema = getattr(store, "schema", None)
    conninfo = getattr(getattr(store, "pool", None), "conninfo", None)
    return (
        isinstance(schema, str)
        and isinstance(conninfo, str)
        and ledger._holds_schema_of(conninfo, schema)
    )


def _same_file(first: Path, second: Path) -> bool:
    try:
        return first.samefile(second)
    except OSError:
        return first.resolve() == second.resolve()


# Errors after which the store guarantees that it deleted nothing: the
# intent recorded before is withdrawn. Any other ending leaves it pending,
# and a pending intent is re-applied like a done one.
def _deleted_nothing(exc: BaseException) -> bool:
    if isinstance(exc, StoreUnavailableError):
        return not exc.may_have_taken_effect
    return isinstance(exc, StoreClosedError | InvalidInputError | TypeError)


class _Ledgered(MemoryStore):
    """The four methods and the lifecycle, with deletions recorded."""

    __slots__ = ("_ledger", "_store")

    def __init__(self, store: MemoryStore, ledger: DeletionLedger) -> None:
        self._store = store
        self._ledger = ledger

    def __repr__(self) -> str:
        return f"with_ledger({self._store!r}, {self._ledger!r})"

    async def __aenter__(self) -> Self:
        await self._store.__aenter__()
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self._store.__aexit__(exc_type, exc, tb)

    async def aclose(self) -> None:
        await self._store.aclose()

    async def remember(self, scope: Scope, end_user_id: str, content: str) -> Memory:
        return await self._store.remember(scope, end_user_id, content)

    async def recall(
        self, scope: Scope, end_user_id: str, *, limit: int | None = None
    ) -> tuple[Memory, ...]:
        return await self._store.recall(scope, end_user_id, limit=limit)

    async def forget(self, scope: Scope, end_user_id: str, memory_id: str) -> bool:
        try:
            key = memory_key(scope, end_user_id)
            fact_id = validate_memory_id(memory_id)
        except (TypeError, InvalidInputError):
            # Refused input deletes nothing: the store raises its own error.
            return await self._store.forget(scope, end_user_id, memory_id)
        deleted = await self._recorded(
            "forget",
            key.tenant,
            key.end_user_id,
            fact_id,
            lambda: self._store.forget(scope, end_user_id, memory_id),
        )
        return bool(deleted)

    async def erase(self, scope: Scope, end_user_id: str) -> int:
        try:
            key = memory_key(scope, end_user_id)
        except (TypeError, InvalidInputError):
            return await self._store.erase(scope, end_user_id)
        return await self._recorded(
            "erase",
            key.tenant,
            key.end_user_id,
            None,
            lambda: self._store.erase(scope, end_user_id),
        )

    async def _recorded(
        self,
        kind: Kind,
        tenant: str,
        end_user_id: str,
        fact_id: str | None,
        delete: Callable[[], Awaitable[int]],
    ) -> int:
        ledger = self._ledger
        seq = await anyio.to_thread.run_sync(ledger._intend, kind, tenant, end_user_id, fact_id)
        try:
            deleted = await delete()
        except BaseException as exc:
            if _deleted_nothing(exc):
                # Best effort: a pending intent left behind is harmless.
                with suppress(StoreUnavailableError):
                    await anyio.to_thread.run_sync(ledger._drop, kind, seq)
            raise
        # The deletion is made and its intent is kept whatever happens here:
        # the ledger already holds what a restore needs, so the caller gets
        # the store's answer.
        with suppress(StoreUnavailableError):
            await anyio.to_thread.run_sync(ledger._done, kind, seq, int(deleted))
        return deleted


class _ListsEndUsers(_Ledgered):
    __slots__ = ()

    async def tenants(self) -> tuple[str, ...]:
        return await cast("ListsEndUsers", self._store).tenants()

    async def end_users(self, scope: Scope) -> tuple[str, ...]:
        return await cast("ListsEndUsers", self._store).end_users(scope)


class _CountsFacts(_Ledgered):
    __slots__ = ()

    async def fact_counts(self, scope: Scope) -> Mapping[str, int]:
        return await cast("CountsFacts", self._store).fact_counts(scope)


class _PagesFacts(_Ledgered):
    __slots__ = ()

    async def recall_page(
        self, scope: Scope, end_user_id: str, *, after: str | None = None, size: int
    ) -> tuple[Memory, ...]:
        store = cast("PagesFacts", self._store)
        return await store.recall_page(scope, end_user_id, after=after, size=size)


class _RestoresFacts(_Ledgered):
    __slots__ = ()

    async def restore(self, memory: Memory) -> bool:
        return await cast("RestoresFacts", self._store).restore(memory)

    async def restore_many(self, memories: Iterable[Memory]) -> int:
        return await cast("RestoresFacts", self._store).restore_many(memories)


class _Scrubs(_Ledgered):
    __slots__ = ()

    async def scrub(self) -> bool:
        return cast("bool", await cast("Any", self._store).scrub())


class _TellsScrubPending(_Ledgered):
    __slots__ = ()

    @property
    def scrub_pending(self) -> bool:
        """Whether bytes of a fact the store deleted may remain (the store's own answer)."""
        return cast("bool", cast("Any", self._store).scrub_pending)


class _ReportsDurability(_Ledgered):
    __slots__ = ()

    async def deletion_durability(self) -> str:
        """How durable the store's last deletions are (the store's own answer)."""
        return cast("str", await cast("Any", self._store).deletion_durability())


_CAPABILITIES: Final[tuple[tuple[type[_Ledgered], Any], ...]] = (
    (_ListsEndUsers, ListsEndUsers),
    (_CountsFacts, CountsFacts),
    (_PagesFacts, PagesFacts),
    (_RestoresFacts, RestoresFacts),
)

_classes: dict[tuple[type[_Ledgered], ...], type[_Ledgered]] = {}


def _class_for(store: MemoryStore) -> type[_Ledgered]:
    bases = [mixin for mixin, protocol in _CAPABILITIES if isinstance(store, protocol)]
    if callable(getattr(store, "scrub", None)):
        bases.append(_Scrubs)
    if hasattr(store, "scrub_pending"):
        bases.append(_TellsScrubPending)
    if callable(getattr(store, "deletion_durability", None)):
        bases.append(_ReportsDurability)
    chosen = tuple(bases)
    found = _classes.get(chosen)
    if found is None:
        found = type("LedgeredStore", chosen, {"__slots__": ()}) if chosen else _Ledgered
        _classes[chosen] = found
    return found


@dataclass(frozen=True, slots=True)
class Reapplied:
    """What `reapply` did.

    Attributes:
        entries: The ledger entries it read (after ``since``).
        erased_end_users: End users it found in the store and erased again.
        facts_deleted: Facts it deleted again, by erase and forget together.
    """

    entries: int
    erased_end_users: int
    facts_deleted: int


async def reapply(
    store: MemoryStore, ledger: DeletionLedger, *, since: datetime | None = None
) -> Reapplied:
    """Re-apply every deletion recorded in ``ledger`` to ``store``, a restored copy.

    Each recorded erase erases again the end user of the tenant whose keyed
    hash matches, each recorded forget forgets the fact id again; pending
    intents are re-applied as well. Running it twice deletes nothing the
    second time. ``store`` should be the bare store, not one with the ledger
    attached: a re-application is not a new deletion.

    Args:
        store: The restored store; it must list its end users
            (`ListsEndUsers`), since the ledger holds only keyed hashes.
        ledger: The ledger, opened with its own key.
        since: When the restored copy was taken (timezone-aware): only the
            deletions recorded at or after it are re-applied. ``None``
            re-applies all, which also deletes what an erased end user
            stored after an erase older than the copy.

    Raises:
        TypeError: ``store`` is not a `MemoryStore` that lists its end
            users, ``ledger`` not a `DeletionLedger`, or ``since`` not a
            `datetime`.
        InvalidInputError: ``since`` has no timezone.
        LedgerError: The ledger cannot be read.
        MemoryStoreError: The store fails (what was re-applied before stays
            deleted; running it again finishes the work).
    """
    if not isinstance(cast("object", store), MemoryStore) or not isinstance(store, ListsEndUsers):
        raise TypeError(
            "store must be a MemoryStore that lists its end users (ListsEndUsers): the ledger"
            f" holds only keyed hashes of end users, not {type(store).__qualname__}"
        )
    if not isinstance(ledger, DeletionLedger):
        raise TypeError(f"ledger must be a DeletionLedger, not {type(ledger).__qualname__}")
    entries = await anyio.to_thread.run_sync(lambda: ledger.entries(since=since))
    users: dict[str, dict[str, str]] = {}
    erased = 0
    deleted = 0
    for entry in entries:
        known = users.get(entry.tenant)
        if known is None:
            known = {
                ledger.key.end_user_hash(entry.tenant, user): user
                for user in await store.end_users(entry.tenant)
            }
            users[entry.tenant] = known
        end_user_id = known.get(entry.end_user_hash)
        if end_user_id is None:
            continue
        if entry.kind == "erase":
            count = await store.erase(entry.tenant, end_user_id)
            if count:
                erased += 1
                deleted += count
        elif entry.fact_id is not None and await store.forget(
            entry.tenant, end_user_id, entry.fact_id
        ):
            deleted += 1
    return Reapplied(entries=len(entries), erased_end_users=erased, facts_deleted=deleted)
