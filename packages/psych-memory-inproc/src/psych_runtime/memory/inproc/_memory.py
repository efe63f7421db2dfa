"""The in-process adapter: a table in this process's memory, behind one lock."""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Iterable, Iterator
from datetime import UTC, datetime
from itertools import islice
from typing import Final

from psych_runtime.memory.port import (
    InvalidInputError,
    Memory,
    MemoryKey,
    MemoryStore,
    Scope,
    StalePageError,
    StoreClosedError,
    memory_key,
    validate_content,
    validate_limit,
    validate_memory_id,
    validate_page,
    validate_restored,
    validate_restored_many,
)

from ._facts import Facts
from ._reaper import REAPER, STEP, emptied

__all__ = ["InProcessMemory"]

_IDS_PER_READ: Final = 256

ERASED_AT_ONCE: Final = STEP
"""An erased key with at most this many facts is taken apart under the lock."""


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
    (`recall_page`) and `RestoresFacts` (`restore`: O(1); `restore_many`:
    O(facts given)).
    Restoring needs to know which ids the whole store holds; that index is
    built on the first restore and kept from then on, so a store that never
    restores pays nothing for it.
    """

    __slots__ = ("_closed", "_facts", "_id_index", "_lock", "_random", "_random_at")

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._facts: dict[MemoryKey, Facts] = {}
        # id -> the table of the key holding it, once a restore has needed
        # it. An entry naming an erased table is stale until the reaper
        # removes it.
        self._id_index: dict[str, Facts] | None = None
        self._closed = False
        # Random hexadecimal digits read ahead for new ids, and how many of
        # them were handed out.
        self._random = ""
        self._random_at = 0

    async def aclose(self) -> None:
        """Close the store and drop every fact it held; closing again does nothing."""
        with self._lock:
            self._closed = True
            self._facts = {}
            self._id_index = None

    async def remember(self, scope: Scope, end_user_id: str, content: str) -> Memory:
        key = memory_key(scope, end_user_id)
        content = validate_content(content)
        created_at = datetime.now(UTC)
        with self._lock:
            if self._closed:
                raise StoreClosedError("remember")
            # 128 random bits from the operating system: unguessable across
            # tenants and never repeated in practice. They are read for many
            # ids at once, since one system call per id cost more than the
            # rest of the call.
            at = self._random_at
            if at == len(self._random):
                self._random = os.urandom(16 * _IDS_PER_READ).hex()
                at = 0
            self._random_at = at + 32
            memory = Memory(self._random[at : at + 32], key, content, created_at)
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
            if self._closed:
                raise StoreClosedError("forget")
            table = self._facts
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
            if self._closed:
                raise StoreClosedError("recall")
            table = self._facts
            facts = table.get(key)
            if facts is None:
                return ()
            if limit is None:
                return tuple(facts.values())
            return tuple(islice(facts.values(), limit))

    async def erase(self, scope: Scope, end_user_id: str) -> int:
        key = memory_key(scope, end_user_id)
        with self._lock:
            if self._closed:
                raise StoreClosedError("erase")
            facts = self._facts.pop(key, None)
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

        See `PagesFacts`. A page costs O(``size``) wherever it starts, so
        reading a key of any size page by page costs O(its facts).

        Raises:
            TypeError: ``after`` or ``size`` has the wrong type, or the key does.
            InvalidKeyError: The tenant or end-user id breaks a key rule.
            InvalidInputError: ``size`` is not between 1 and `MAX_PAGE_SIZE`.
            StalePageError: The key holds no fact with the id ``after``.
            StoreClosedError: The store was closed.
        """
        key = memory_key(scope, end_user_id)
        after, size = validate_page(after, size)
        with self._lock:
            if self._closed:
                raise StoreClosedError("recall_page")
            facts = self._facts.get(key)
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
        """Every tenant with at least one fact, sorted by code point (see `ListsEndUsers`).

        Raises:
            StoreClosedError: The store was closed.
        """
        with self._lock:
            if self._closed:
                raise StoreClosedError("tenants")
            keys = tuple(self._facts)
        # Sorting happens outside the lock: the keys are a snapshot.
        return tuple(sorted({key.tenant for key in keys}))

    async def end_users(self, scope: Scope) -> tuple[str, ...]:
        """Every end user of the tenant with at least one fact, sorted by code point.

        See `ListsEndUsers`.

        Raises:
            TypeError: ``scope`` has the wrong type.
            InvalidKeyError: The tenant breaks a key rule.
            StoreClosedError: The store was closed.
        """
        # The port's one reader of scopes, so the tenant is read and checked
        # exactly as every other call does; the end user is a placeholder.
        tenant = memory_key(scope, "-").tenant
        with self._lock:
            if self._closed:
                raise StoreClosedError("end_users")
            keys = tuple(self._facts)
        return tuple(sorted(key.end_user_id for key in keys if key.tenant == tenant))

    async def fact_counts(self, scope: Scope) -> dict[str, int]:
        """How many facts each end user of the tenant holds, by end user (see `CountsFacts`).

        Raises:
            TypeError: ``scope`` has the wrong type.
            InvalidKeyError: The tenant breaks a key rule.
            StoreClosedError: The store was closed.
        """
        tenant = memory_key(scope, "-").tenant
        with self._lock:
            if self._closed:
                raise StoreClosedError("fact_counts")
            counts = [
                (key.end_user_id, len(facts))
                for key, facts in self._facts.items()
                if key.tenant == tenant
            ]
        return dict(sorted(counts))

    async def restore(self, memory: Memory) -> bool:
        """Store ``memory`` as given, after its key's facts (see `RestoresFacts`).

        The id, key, content and ``created_at`` are kept; a ``created_at`` in
        another time zone is stored as the same instant in UTC.

        Returns:
            ``True`` if the fact was stored; ``False`` if its key already
            holds this very fact (nothing changed).

        Raises:
            TypeError: ``memory`` is not a `Memory`, or one of its fields
                has the wrong type.
            InvalidContentError: The content breaks a content rule.
            InvalidInputError: The id is not restorable, ``created_at`` is
                naive, or the store holds a different fact with that id.
                Nothing was stored.
            StoreClosedError: The store was closed.
        """
        memory = validate_restored(memory)
        with self._lock:
            if self._closed:
                raise StoreClosedError("restore")
            return self._restore_locked((memory,), batch=False) == 1

    async def restore_many(self, memories: Iterable[Memory]) -> int:
        """Store every fact as given, in order, all or none (see `RestoresFacts`).

        Returns:
            How many facts were stored; facts held exactly are skipped.

        Raises:
            TypeError: As `RestoresFacts.restore_many`.
            InvalidContentError: As `RestoresFacts.restore_many`.
            InvalidInputError: As `RestoresFacts.restore_many`; nothing was stored.
            StoreClosedError: The store was closed.
        """
        checked = validate_restored_many(memories)
        with self._lock:
            if self._closed:
                raise StoreClosedError("restore_many")
            return self._restore_locked(checked, batch=True)

    def _restore_locked(self, memories: tuple[Memory, ...], *, batch: bool) -> int:
        # Called with the lock held. Every id is judged before anything is
        # stored, so a refusal leaves the table as it was.
        ids = self._id_index
        if ids is None:
            ids = self._id_index = {held: facts for facts in self._facts.values() for held in facts}
        new: dict[str, Memory] = {}
        for index, memory in enumerate(memories):
            memory_id = memory.id
            holder = ids.get(memory_id)
            # An entry naming an erased table is stale: that id is free.
            held = new.get(memory_id) if holder is None or holder.erased else holder[memory_id]
            if held is None:
                new[memory_id] = memory
            elif held != memory:
                argument = f"memories[{index}].id" if batch else "memory.id"
                raise InvalidInputError(argument, "is held by a different fact in this store")
        for memory in new.values():
            self._add_locked(memory)
        return len(new)
