"""The in-process adapter: a table in this process's memory, behind one lock."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterable, Iterator
from datetime import UTC, datetime
from itertools import islice
from typing import Final

from psych_runtime.memory.port import (
    Memory,
    MemoryKey,
    MemoryStore,
    RestorePlan,
    Scope,
    StalePageError,
    StoreClosedError,
    memory_key,
    new_memory_id,
    validate_content,
    validate_cutoff,
    validate_limit,
    validate_max_facts,
    validate_memory_id,
    validate_page,
    validate_restored,
    validate_restored_many,
    validate_scope,
)

from ._facts import Facts
from ._reaper import REAPER, STEP, emptied

__all__ = ["InProcessMemory"]

ERASED_AT_ONCE: Final = STEP
"""An erased key with at most this many facts is taken apart under the lock."""


def _new_fact(scope: Scope, end_user_id: str, content: str) -> Memory:
    # The fact `remember` would add, its input checked as `remember` checks it.
    key = memory_key(scope, end_user_id)
    content = validate_content(content)
    return Memory(new_memory_id(), key, content, datetime.now(UTC))


def _unindex(ids: dict[str, Facts] | None, freed: Iterable[str], facts: Facts) -> None:
    # Called with the lock held. Only an entry that still names the erased
    # table goes: the id may have been restored since, into a live one.
    if ids is None:
        return
    for memory_id in freed:
        if ids.get(memory_id) is facts:
            del ids[memory_id]


class InProcessMemory(MemoryStore):
    """Facts kept in a dictionary in this process, lost when it ends.

    Meant for tests and single-process deployments. Each key's facts live in
    their own insertion-ordered table, so every operation costs the same
    however much other end users have stored: `remember` and `forget` are
    O(1), `recall` is O(facts of the key, or ``limit``), `recall_page` is
    O(``size``) wherever the page starts, and `erase` is O(1) in the call.

    One `threading.Lock` guards the table. It is held only for the few
    dictionary operations of a call (at most ``size`` steps for a page) and
    never across an ``await``, so the store is safe to share between tasks
    on asyncio or trio and between threads that each run their own event
    loop. An erased key leaves the table at once; when it held more than
    4,096 facts, a background thread frees them and their index entries in
    small steps, so that no caller waits for a large erase.

    There is nothing to open: ``async with InProcessMemory() as memory:`` and
    a bare ``InProcessMemory()`` are both ready. Closing drops every fact at
    once; afterwards each call raises `StoreClosedError`.

    Beyond the four methods it provides the port's operator capabilities
    `ListsEndUsers` (`tenants`, `end_users`: O(keys in the store)),
    `CountsFacts` (`fact_counts`: O(keys in the store)), `PagesFacts`
    (`recall_page`), `RestoresFacts` (`restore`: O(1); `restore_many`:
    O(facts given)), `RemembersWithinLimit` (`remember_within_limit`: O(1),
    the count and the write in one step under the lock) and `ExpiresFacts`
    (`expire`, `count_expired`: O(keys in the store + facts of the tenant),
    the lock held for steps of at most 4,096 facts).
    Restoring needs to know which ids the whole store holds; that index is
    built on the first restore and kept from then on, so a store that never
    restores pays nothing for it.
    """

    __slots__ = ("_closed", "_facts", "_id_index", "_lock")

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._facts: dict[MemoryKey, Facts] = {}
        # id -> the table of the key holding it, once a restore has needed
        # it. An entry naming an erased table is stale until the reaper
        # removes it.
        self._id_index: dict[str, Facts] | None = None
        self._closed = False

    async def aclose(self) -> None:
        """Close the store and drop every fact it held; closing again does nothing."""
        with self._lock:
            self._closed = True
            self._facts = {}
            self._id_index = None

    def _open_table(self, operation: str) -> dict[MemoryKey, Facts]:
        # Called with the lock held, first thing, by every call: the table,
        # or the refusal of a closed store.
        if self._closed:
            raise StoreClosedError(operation)
        return self._facts

    async def remember(self, scope: Scope, end_user_id: str, content: str) -> Memory:
        memory = _new_fact(scope, end_user_id, content)
        with self._lock:
            self._open_table("remember")
            self._add_locked(memory)
        return memory

    async def remember_within_limit(
        self, scope: Scope, end_user_id: str, content: str, *, max_facts: int
    ) -> Memory | None:
        """Add a fact unless the key holds ``max_facts``; see `RemembersWithinLimit`.

        The count and the write happen under the store's lock, in one step:
        O(1), like `remember`.
        """
        memory = _new_fact(scope, end_user_id, content)
        max_facts = validate_max_facts(max_facts)
        with self._lock:
            facts = self._open_table("remember_within_limit").get(memory.key)
            if (0 if facts is None else len(facts)) >= max_facts:
                return None
            self._add_locked(memory)
        return memory

    def _add_locked(self, memory: Memory) -> None:
        # Called with the lock held, for an id the store does not hold.
        table = self._facts
        facts = table.get(memory.key)
        if facts is None:
            facts = table[memory.key] = Facts()
        facts.add(memory)
        ids = self._id_index
        if ids is not None:
            ids[memory.id] = facts

    async def forget(self, scope: Scope, end_user_id: str, memory_id: str) -> bool:
        key = memory_key(scope, end_user_id)
        memory_id = validate_memory_id(memory_id)
        with self._lock:
            table = self._open_table("forget")
            facts = table.get(key)
            if facts is None or not facts.discard(memory_id):
                return False
            ids = self._id_index
            if ids is not None:
                del ids[memory_id]
            if not facts:
                # An end user with no facts leaves no trace in the table.
                del table[key]
            return True

    async def recall(
        self, scope: Scope, end_user_id: str, *, limit: int | None = None
    ) -> tuple[Memory, ...]:
        key = memory_key(scope, end_user_id)
        limit = validate_limit(limit)
        with self._lock:
            facts = self._open_table("recall").get(key)
            if facts is None:
                return ()
            if limit is None:
                return tuple(facts.values())
            return tuple(islice(facts.values(), limit))

    async def erase(self, scope: Scope, end_user_id: str) -> int:
        key = memory_key(scope, end_user_id)
        with self._lock:
            facts = self._open_table("erase").pop(key, None)
            if facts is None:
                return 0
            facts.erased = True
            count = len(facts)
            if count <= ERASED_AT_ONCE:
                _unindex(self._id_index, facts, facts)
                return count
        # Out of the table, the facts are no longer the store's: no call can
        # see them. Freeing them, and their entries in the id index, takes
        # time proportional to their number, so it happens in small steps.
        REAPER.submit(self._dismantled(facts))
        return count

    def _dismantled(self, facts: Facts) -> Iterator[None]:
        """Free an erased key's facts and their index entries, a step at a time."""
        for links in facts.links():
            yield from emptied(links)
        pop = facts.popitem
        while facts:
            # Freeing the facts needs no lock: no call can reach them.
            freed = [pop()[0] for _ in range(min(STEP, len(facts)))]
            if self._id_index is not None:
                with self._lock:
                    # Read again under the lock: a close may have dropped it.
                    _unindex(self._id_index, freed, facts)
                # A thread woken by the release of the lock needs the GIL
                # too: handing it over now keeps this thread from taking the
                # lock again first, step after step.
                time.sleep(0)
            yield

    async def recall_page(
        self, scope: Scope, end_user_id: str, *, after: str | None = None, size: int
    ) -> tuple[Memory, ...]:
        """Up to ``size`` facts of the key, oldest first, after the fact ``after``.

        See `PagesFacts.recall_page`. A page costs O(``size``) wherever it
        starts, so reading a key of any size page by page costs O(its facts).
        """
        key = memory_key(scope, end_user_id)
        after, size = validate_page(after, size)
        with self._lock:
            facts = self._open_table("recall_page").get(key)
            if facts is not None:
                page = facts.page(after, size)
            elif after is None:
                page = ()
            else:
                page = None
        if page is None:
            raise StalePageError
        return page

    async def tenants(self) -> tuple[str, ...]:
        """Every tenant with at least one fact; see `ListsEndUsers.tenants`."""
        with self._lock:
            keys = tuple(self._open_table("tenants"))
        # Sorting happens outside the lock: the keys are a snapshot.
        return tuple(sorted({key.tenant for key in keys}))

    async def end_users(self, scope: Scope) -> tuple[str, ...]:
        """Every end user of the tenant with at least one fact; see `ListsEndUsers.end_users`."""
        tenant = validate_scope(scope)
        with self._lock:
            keys = tuple(self._open_table("end_users"))
        return tuple(sorted(key.end_user_id for key in keys if key.tenant == tenant))

    async def fact_counts(self, scope: Scope) -> dict[str, int]:
        """How many facts each end user of the tenant holds; see `CountsFacts.fact_counts`."""
        tenant = validate_scope(scope)
        with self._lock:
            counts = [
                (key.end_user_id, len(facts))
                for key, facts in self._open_table("fact_counts").items()
                if key.tenant == tenant
            ]
        return dict(sorted(counts))

    async def restore(self, memory: Memory) -> bool:
        """Store ``memory`` as given, after its key's facts; see `RestoresFacts.restore`.

        A ``created_at`` in another time zone is stored as the same instant in UTC.
        """
        plan = RestorePlan((validate_restored(memory),), batch=False)
        with self._lock:
            return self._restore_locked(self._open_table("restore"), plan) == 1

    async def restore_many(self, memories: Iterable[Memory]) -> int:
        """Store every fact as given, in order, all or none; see `RestoresFacts.restore_many`."""
        plan = RestorePlan(validate_restored_many(memories), batch=True)
        with self._lock:
            return self._restore_locked(self._open_table("restore_many"), plan)

    async def count_expired(self, scope: Scope, *, before: datetime) -> int:
        """How many facts of the tenant were created before ``before``; see `ExpiresFacts`."""
        tenant = validate_scope(scope)
        cutoff = validate_cutoff(before)
        return sum(
            1
            for facts in self._tenant_facts(tenant, "count_expired")
            for memory in facts
            if memory.created_at < cutoff
        )

    async def expire(self, scope: Scope, *, before: datetime) -> int:
        """Delete every fact of the tenant created before ``before``; see `ExpiresFacts.expire`.

        The tenant's keys and facts are read in snapshots, then the old
        facts are deleted key by key, at most 4,096 under the lock at a
        time, so other threads' calls go on in between. Each fact is judged
        again under the lock when it is deleted: one restored meanwhile
        under the same id is deleted only if it is old too. Tasks on the
        caller's own event loop wait for the whole call (the adapter never
        awaits while it deletes).
        """
        tenant = validate_scope(scope)
        cutoff = validate_cutoff(before)
        deleted = 0
        with self._lock:
            keys = [key for key in self._open_table("expire") if key.tenant == tenant]
        for key in keys:
            with self._lock:
                facts = self._open_table("expire").get(key)
                # A C-level copy: the lock is held for no Python step per fact.
                held = [] if facts is None else list(facts.values())
            old = [memory.id for memory in held if memory.created_at < cutoff]
            for start in range(0, len(old), ERASED_AT_ONCE):
                with self._lock:
                    deleted += self._expire_locked(key, old[start : start + ERASED_AT_ONCE], cutoff)
        return deleted

    def _tenant_facts(self, tenant: str, operation: str) -> list[list[Memory]]:
        # Snapshots of each key's facts, copied under the lock, read outside it.
        with self._lock:
            return [
                list(facts.values())
                for key, facts in self._open_table(operation).items()
                if key.tenant == tenant
            ]

    def _expire_locked(self, key: MemoryKey, old: list[str], cutoff: datetime) -> int:
        # Called with the lock held: deletes those of ``old`` the key still
        # holds and that are still older than the cutoff.
        table = self._open_table("expire")
        facts = table.get(key)
        if facts is None:
            return 0
        gone = [
            memory_id
            for memory_id in old
            if (memory := facts.get(memory_id)) is not None and memory.created_at < cutoff
        ]
        for memory_id in gone:
            facts.discard(memory_id)
        ids = self._id_index
        if ids is not None:
            for memory_id in gone:
                del ids[memory_id]
        if not facts:
            del table[key]
        return len(gone)

    def _restore_locked(self, table: dict[MemoryKey, Facts], plan: RestorePlan) -> int:
        # Called with the lock held. Every id is judged before anything is
        # stored, so a refusal leaves the table as it was.
        ids = self._id_index
        if ids is None:
            ids = self._id_index = {held: facts for facts in table.values() for held in facts}
        held: dict[str, Memory] = {}
        for memory in plan.facts:
            holder = ids.get(memory.id)
            # An entry naming an erased table is stale: that id is free.
            if holder is not None and not holder.erased:
                held[memory.id] = holder[memory.id]
        fresh = plan.to_store(held)
        for memory in fresh:
            self._add_locked(memory)
        return len(fresh)
