"""`with_ledger`: any store, its deletions recorded; `reapply`: the record, replayed."""

from __future__ import annotations

import os
from collections.abc import Awaitable, Callable
from contextlib import suppress
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any, cast

import anyio.to_thread

from psych_runtime.memory.port import (
    ExpiresFacts,
    InvalidInputError,
    ListsEndUsers,
    MemoryStore,
    Scope,
    StoreClosedError,
    StoreUnavailableError,
    StoreWrapper,
    memory_key,
    validate_cutoff,
    validate_memory_id,
    validate_scope,
    wrap_store,
)

from ._errors import LedgerError
from ._ledger import DeletionLedger, Kind

__all__ = ["Reapplied", "reapply", "with_ledger"]


def with_ledger(store: MemoryStore, ledger: DeletionLedger) -> MemoryStore:
    """Return a store that behaves exactly like ``store`` and records each deletion in ``ledger``.

    The returned store gives the same results and raises the same errors as
    ``store``, and has the same optional capabilities: it is a
    `ListsEndUsers`, `CountsFacts`, `PagesFacts`, `RestoresFacts` or
    `ExpiresFacts` exactly when ``store`` is, and has ``scrub`` and ``scrub_pending`` exactly when
    ``store`` has them, and ``deletion_durability`` (PostgreSQL) exactly when
    ``store`` has it. Entering, leaving and closing it enter, leave and
    close ``store``; the ledger stays open (it is its opener's to close).

    Each ``erase``, ``forget`` and ``expire`` first records its intent in the ledger,
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
    return wrap_store(_Ledgered, store, ledger)


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
# and a pending intent is re-applied like a done one: bounded by the instant
# it was recorded, it never deletes a fact stored after it.
def _deleted_nothing(exc: BaseException) -> bool:
    if isinstance(exc, StoreUnavailableError):
        return not exc.may_have_taken_effect
    return isinstance(exc, StoreClosedError | InvalidInputError | TypeError)


class _Ledgered(StoreWrapper):
    """The store's calls, with deletions recorded."""

    __slots__ = ("_ledger",)

    def __init__(self, store: MemoryStore, ledger: DeletionLedger) -> None:
        super().__init__(store)
        self._ledger = ledger

    def __repr__(self) -> str:
        return f"with_ledger({self.wrapped!r}, {self._ledger!r})"

    async def forget(self, scope: Scope, end_user_id: str, memory_id: str) -> bool:
        try:
            key = memory_key(scope, end_user_id)
            fact_id = validate_memory_id(memory_id)
        except (TypeError, InvalidInputError):
            # Refused input deletes nothing: the store raises its own error.
            return await self.wrapped.forget(scope, end_user_id, memory_id)
        deleted = await self._recorded(
            "forget",
            key.tenant,
            key.end_user_id,
            fact_id,
            lambda: self.wrapped.forget(scope, end_user_id, memory_id),
        )
        return bool(deleted)

    async def erase(self, scope: Scope, end_user_id: str) -> int:
        try:
            key = memory_key(scope, end_user_id)
        except (TypeError, InvalidInputError):
            return await self.wrapped.erase(scope, end_user_id)
        return await self._recorded(
            "erase",
            key.tenant,
            key.end_user_id,
            None,
            lambda: self.wrapped.erase(scope, end_user_id),
        )

    async def _recorded(  # noqa: PLR0913 - the fields of one ledger row, and the deletion
        self,
        kind: Kind,
        tenant: str,
        end_user_id: str | None,
        fact_id: str | None,
        delete: Callable[[], Awaitable[int]],
        *,
        cutoff: datetime | None = None,
    ) -> int:
        ledger = self._ledger
        seq = await anyio.to_thread.run_sync(
            ledger._intend, kind, tenant, end_user_id, fact_id, cutoff
        )
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


class _ExpiresFacts(_Ledgered):
    __slots__ = ()

    async def count_expired(self, scope: Scope, *, before: datetime) -> int:
        return await cast("ExpiresFacts", self.wrapped).count_expired(scope, before=before)

    async def expire(self, scope: Scope, *, before: datetime) -> int:
        store = cast("ExpiresFacts", self.wrapped)
        try:
            tenant = validate_scope(scope)
            cutoff = validate_cutoff(before)
        except (TypeError, InvalidInputError):
            return await store.expire(scope, before=before)
        return await self._recorded(
            "expire", tenant, None, None, lambda: store.expire(scope, before=before), cutoff=cutoff
        )


class _ReportsDurability(_Ledgered):
    __slots__ = ()

    async def deletion_durability(self) -> str:
        """How durable the store's last deletions are (the store's own answer)."""
        return cast("str", await cast("Any", self.wrapped).deletion_durability())


_Ledgered.capability_mixins = (_ExpiresFacts, _ReportsDurability)


@dataclass(frozen=True, slots=True)
class Reapplied:
    """What `reapply` did, or with ``dry_run`` would do.

    Attributes:
        entries: The ledger entries it read (those `DeletionLedger.entries`
            gives for ``since``).
        erased_end_users: End users it found in the store and erased again
            (that had facts).
        facts_deleted: Facts it deleted again, by erase, forget and expiry
            together.
        expiries: Recorded expiries it ran again.
        dry_run: Whether it only counted, deleting nothing.
    """

    entries: int
    erased_end_users: int
    facts_deleted: int
    expiries: int = 0
    dry_run: bool = False


async def reapply(
    store: MemoryStore,
    ledger: DeletionLedger,
    *,
    since: datetime | None = None,
    dry_run: bool = False,
) -> Reapplied:
    """Re-apply every deletion recorded in ``ledger`` to ``store``, a restored copy.

    Each recorded erase deletes again the facts that the end user of the
    tenant whose keyed hash matches held at the erasure (those created at
    or before the instant its intent was recorded, `LedgerEntry.recorded_at`),
    never a fact created after it; each recorded forget forgets the fact id
    again; each recorded expiry expires the tenant again with the recorded
    cutoff; in the order they were recorded. Intents whose outcome was never
    recorded are re-applied the same way: what they may have deleted is
    bounded by the instant they were recorded, whatever became of them.
    Running it twice deletes nothing the second time; a run stopped midway
    is finished by running it again. ``store`` should be the bare store,
    not one with the ledger attached: a re-application is not a new
    deletion.

    Args:
        store: The restored store; it must list its end users
            (`ListsEndUsers`), since the ledger holds only keyed hashes, and
            expire by age (`ExpiresFacts`) when the entries read hold an
            expiry.
        ledger: The ledger, opened with its own key (`open_ledger` refuses
            another key, so a wrong key is never taken for "nothing to do").
        since: When the restored copy was taken (timezone-aware): only the
            deletions a copy taken then may lack are re-applied (see
            `DeletionLedger.entries`). ``None`` re-applies all, which
            deletes nothing more than a later instant would: what an
            erased end user stored after the erasure is kept either way.
        dry_run: Count what would be deleted again, deleting nothing.

    Raises:
        TypeError: ``store`` is not a `MemoryStore` that lists its end
            users, ``ledger`` not a `DeletionLedger`, or ``since`` not a
            `datetime`.
        InvalidInputError: ``since`` has no timezone.
        LedgerError: The ledger cannot be read, or it records an expiry and
            ``store`` cannot expire facts by age (nothing was deleted).
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
    if not isinstance(cast("object", dry_run), bool):
        raise TypeError(f"dry_run must be a bool, not {type(dry_run).__qualname__}")
    entries = await anyio.to_thread.run_sync(lambda: ledger.entries(since=since))
    if any(entry.kind == "expire" for entry in entries) and not isinstance(store, ExpiresFacts):
        raise LedgerError(
            "the ledger records expiries and this store cannot expire facts by age"
            " (ExpiresFacts); nothing was re-applied"
        )
    replay = _Counting(store, ledger) if dry_run else _Deleting(store, ledger)
    erased = deleted = expiries = 0
    for entry in entries:
        if entry.kind == "expire":
            if entry.cutoff is not None:
                expiries += 1
                deleted += await replay.expire(entry.tenant, entry.cutoff)
            continue
        end_user_id = await replay.end_user(entry.tenant, entry.end_user_hash)
        if end_user_id is None:
            continue
        if entry.kind == "erase":
            count = await replay.erase(entry.tenant, end_user_id, entry.recorded_at)
            if count:
                erased += 1
                deleted += count
        elif entry.fact_id is not None:
            deleted += await replay.forget(entry.tenant, end_user_id, entry.fact_id)
    return Reapplied(len(entries), erased, deleted, expiries, dry_run)


class _Deleting:
    """The deletions of a replay, made on the store."""

    def __init__(self, store: ListsEndUsers, ledger: DeletionLedger) -> None:
        self._store = store
        self._ledger = ledger
        self._users: dict[str, dict[str, str]] = {}

    async def end_user(self, tenant: str, hashed: str | None) -> str | None:
        """The end user of ``tenant`` in the store whose keyed hash is ``hashed``."""
        known = self._users.get(tenant)
        if known is None:
            key = self._ledger.key
            users = await self._store.end_users(tenant)
            known = {key.end_user_hash(tenant, user): user for user in users}
            self._users[tenant] = known
        return None if hashed is None else known.get(hashed)

    async def erase(self, tenant: str, end_user_id: str, held_at: datetime) -> int:
        """Delete the facts ``end_user_id`` held at an erasure recorded at ``held_at``."""
        store = cast("MemoryStore", self._store)
        facts = await store.recall(tenant, end_user_id)
        held = [memory.id for memory in facts if memory.created_at <= held_at]
        if not held:
            return 0
        if len(held) == len(facts):
            # Nothing was stored after the erasure: one call, as the store
            # erases. (The runbook keeps traffic off during a replay.)
            return await store.erase(tenant, end_user_id)
        # Facts stored after the erasure are in the copy too, and were never
        # erased: only the older ones go, one by one.
        deleted = 0
        for fact_id in held:
            deleted += await store.forget(tenant, end_user_id, fact_id)
        return deleted

    async def forget(self, tenant: str, end_user_id: str, fact_id: str) -> int:
        return int(await cast("MemoryStore", self._store).forget(tenant, end_user_id, fact_id))

    async def expire(self, tenant: str, cutoff: datetime) -> int:
        return await cast("ExpiresFacts", self._store).expire(tenant, before=cutoff)


class _Counting(_Deleting):
    """The same replay, only counted: the facts it would delete, each once, in order.

    The facts of each end user met are read once; those the replay would
    already have deleted are remembered, so that a fact is counted by the
    first entry that would delete it, as the real replay would.
    """

    def __init__(self, store: ListsEndUsers, ledger: DeletionLedger) -> None:
        super().__init__(store, ledger)
        self._left: dict[tuple[str, str], dict[str, datetime]] = {}
        self._gone: dict[str, list[datetime]] = {}
        self._cutoffs: dict[str, datetime] = {}

    async def _facts(self, tenant: str, end_user_id: str) -> dict[str, datetime]:
        found = self._left.get((tenant, end_user_id))
        if found is None:
            cutoff = self._cutoffs.get(tenant)
            memories = await cast("MemoryStore", self._store).recall(tenant, end_user_id)
            found = {
                m.id: m.created_at for m in memories if cutoff is None or m.created_at >= cutoff
            }
            self._left[(tenant, end_user_id)] = found
        return found

    def _remove(self, tenant: str, created: list[datetime]) -> int:
        self._gone.setdefault(tenant, []).extend(created)
        return len(created)

    async def erase(self, tenant: str, end_user_id: str, held_at: datetime) -> int:
        facts = await self._facts(tenant, end_user_id)
        held = [fact_id for fact_id, created in facts.items() if created <= held_at]
        return self._remove(tenant, [facts.pop(fact_id) for fact_id in held])

    async def forget(self, tenant: str, end_user_id: str, fact_id: str) -> int:
        facts = await self._facts(tenant, end_user_id)
        if fact_id not in facts:
            return 0
        return self._remove(tenant, [facts.pop(fact_id)])

    async def expire(self, tenant: str, cutoff: datetime) -> int:
        store = cast("ExpiresFacts", self._store)
        earlier = self._cutoffs.get(tenant)
        if earlier is not None and cutoff <= earlier:
            return 0
        # Facts the store holds before the cutoff, less those an earlier
        # expiry or erase or forget of this replay would have deleted.
        count = await store.count_expired(tenant, before=cutoff)
        if earlier is not None:
            count -= await store.count_expired(tenant, before=earlier)
        count -= sum(
            1
            for created in self._gone.get(tenant, ())
            if created < cutoff and (earlier is None or created >= earlier)
        )
        count = max(0, count)
        self._cutoffs[tenant] = cutoff
        for (facts_tenant, _), facts in self._left.items():
            if facts_tenant == tenant:
                for fact_id in [i for i, created in facts.items() if created < cutoff]:
                    del facts[fact_id]
        return count
