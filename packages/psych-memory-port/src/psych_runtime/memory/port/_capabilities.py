"""Capabilities beyond the four methods, which a store may provide.

Operators need five things an agent never does: to list whose facts a
store holds (to answer "what do you hold about me"), to count them without
reading them, to read one end user's facts a page at a time (an end user of
any size, in bounded memory), to write a fact exactly as it was (to move
facts between stores), and to delete facts once they are older than the
law or the operator allows (retention). None belongs in `MemoryStore`, whose four methods are
all an agent may call; each is a small protocol instead. A store provides a capability
by having its methods: tools check with ``isinstance(store, ListsEndUsers)``
and report clearly when a store lacks one.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from datetime import UTC, datetime, timedelta
from typing import Final, Protocol, runtime_checkable

from ._errors import InvalidInputError
from ._key import MemoryKey, Scope
from ._memory import Memory
from ._validation import _type_name, validate_content

__all__ = [
    "MAX_CREATED_AT",
    "MAX_PAGE_SIZE",
    "MAX_RESTORED_ID_LENGTH",
    "MIN_CREATED_AT",
    "CountsFacts",
    "ExpiresFacts",
    "ListsEndUsers",
    "PagesFacts",
    "RemembersWithinLimit",
    "RestoresFacts",
    "ScrubsDeletions",
    "validate_cutoff",
    "validate_max_facts",
    "validate_page",
    "validate_restored",
    "validate_restored_id",
    "validate_restored_many",
]

MAX_RESTORED_ID_LENGTH: Final = 64
"""The most characters the id of a restored fact may have."""

MIN_CREATED_AT: Final = datetime.min.replace(tzinfo=UTC)
"""The earliest ``created_at`` a restored fact may have: 0001-01-01T00:00:00Z."""

MAX_CREATED_AT: Final = datetime.max.replace(tzinfo=UTC)
"""The latest ``created_at`` a restored fact may have: 9999-12-31T23:59:59.999999Z.

With `MIN_CREATED_AT`, the range every adapter stores and reads back to the
microsecond: the instants a `datetime` can hold in UTC.
"""

MAX_PAGE_SIZE: Final = 10_000
"""The most facts one `PagesFacts.recall_page` may return."""

_RESTORABLE_ID: Final = re.compile(r"[A-Za-z0-9_-]+")


@runtime_checkable
class ListsEndUsers(Protocol):
    """A store that can say which keys hold facts.

    Both methods return only keys that hold at least one fact now: an end
    user whose facts were all forgotten or erased is not listed.
    """

    async def tenants(self) -> tuple[str, ...]:
        """Every tenant with at least one fact, sorted by code point.

        Raises:
            MemoryStoreError: The store failed (see `MemoryStore`).
        """
        ...

    async def end_users(self, scope: Scope) -> tuple[str, ...]:
        """Every end user of the tenant with at least one fact, sorted by code point.

        Raises:
            TypeError: ``scope`` has the wrong type.
            InvalidKeyError: The tenant breaks a key rule.
            MemoryStoreError: The store failed (see `MemoryStore`).
        """
        ...


@runtime_checkable
class CountsFacts(Protocol):
    """A store that can count a tenant's facts per end user without reading them.

    What moving or auditing a large store needs: how many facts each end
    user holds, at the cost of one query rather than a `MemoryStore.recall`
    of every end user.
    """

    async def fact_counts(self, scope: Scope) -> Mapping[str, int]:
        """How many facts each end user of the tenant holds, in one snapshot.

        Every end user of the tenant holding at least one fact appears, with
        the number of facts `MemoryStore.recall` would return for it, in
        code-point order of end-user ids; no other end user appears (an end
        user whose facts were all forgotten or erased is left out). The
        mapping is the caller's own.

        Raises:
            TypeError: ``scope`` has the wrong type.
            InvalidKeyError: The tenant breaks a key rule.
            MemoryStoreError: The store failed (see `MemoryStore`).
        """
        ...


@runtime_checkable
class PagesFacts(Protocol):
    """A store that can read one end user's facts a page at a time.

    What an operator's reads need for an end user of any size: exporting,
    migrating or counting millions of facts without holding them all in
    memory, and without one query that runs past the store's time bounds.
    Each page is a short read of its own; a caller resumes from the id of
    the last fact it has seen. `MemoryStore.recall` keeps its contract.

    Pages are not a snapshot: a fact remembered while the pages are read
    appears in a later page, and a fact forgotten before its page is read
    does not appear.
    """

    async def recall_page(
        self, scope: Scope, end_user_id: str, *, after: str | None = None, size: int
    ) -> tuple[Memory, ...]:
        """Up to ``size`` facts of the key, oldest first, after the fact ``after``.

        The order is that of `MemoryStore.recall`. ``after=None`` starts at
        the oldest fact; ``after=page[-1].id`` gives the next page. A page
        shorter than ``size`` (possibly empty) is the last one.

        Raises:
            TypeError: An argument has the wrong type (``after`` not ``None``
                or a `str`, ``size`` not an `int` or a `bool`).
            InvalidKeyError: The tenant or end-user id breaks a key rule.
            InvalidInputError: ``size`` is not between 1 and
                `MAX_PAGE_SIZE`.
            StalePageError: ``after`` is not the id of a fact this key
                holds (forgotten or erased since it was read): start again
                from ``None``.
            MemoryStoreError: The store failed (see `MemoryStore`).
        """
        ...


def validate_page(after: object, size: object) -> tuple[str | None, int]:
    """Check the arguments of `PagesFacts.recall_page` and return them.

    Whether ``after`` is held by the key only the store can tell; this
    checks types and the range of ``size``.

    Raises:
        TypeError: ``after`` is neither ``None`` nor a `str`, or ``size`` is
            not an `int` (a `bool` included).
        InvalidInputError: ``size`` is not between 1 and `MAX_PAGE_SIZE`.
    """
    if after is not None and not isinstance(after, str):
        raise TypeError(f"after must be None or a str, not {_type_name(after)}")
    if isinstance(size, bool) or not isinstance(size, int):
        raise TypeError(f"size must be an int, not {_type_name(size)}")
    if not 1 <= size <= MAX_PAGE_SIZE:
        raise InvalidInputError("size", f"must be between 1 and {MAX_PAGE_SIZE}")
    return (None if after is None else str.__str__(after)), int(size)


@runtime_checkable
class RemembersWithinLimit(Protocol):
    """A store that can add a fact only while the end user holds fewer than a number of facts.

    What a cap on an end user's facts needs to hold under concurrency: the
    count and the write as one atomic step of the store, so that callers
    at once (several tool calls of one model response, two runs of one end
    user, two processes on one store) never take the end user past it.
    `MemoryStore.remember` keeps its contract and always adds.
    """

    async def remember_within_limit(
        self, scope: Scope, end_user_id: str, content: str, *, max_facts: int
    ) -> Memory | None:
        """Add a fact as `MemoryStore.remember` does, unless the key already holds ``max_facts``.

        The count and the write are one atomic step: however many calls run
        at once, on however many connections or processes sharing the
        store, the key never holds more than ``max_facts`` facts through
        this method. A fact added by plain `MemoryStore.remember` counts,
        but is not refused. Input is checked as `MemoryStore.remember`
        checks it, and ``max_facts`` by `validate_max_facts`, before
        anything is counted or stored.

        Returns:
            The new fact, or ``None`` when the key already held
            ``max_facts`` facts or more (nothing was stored).

        Raises:
            TypeError: An argument has the wrong type (``max_facts`` not an
                `int`, or a `bool`).
            InvalidKeyError: The tenant or end-user id breaks a key rule.
            InvalidContentError: The content breaks a content rule.
            InvalidInputError: ``max_facts`` is negative.
            MemoryStoreError: The store failed (see `MemoryStore`).
        """
        ...


def validate_max_facts(max_facts: object) -> int:
    """Check the ``max_facts`` of `RemembersWithinLimit.remember_within_limit` and return it.

    Raises:
        TypeError: ``max_facts`` is not an `int` (a `bool` included).
        InvalidInputError: ``max_facts`` is negative.
    """
    if isinstance(max_facts, bool) or not isinstance(max_facts, int):
        raise TypeError(f"max_facts must be an int, not {_type_name(max_facts)}")
    if max_facts < 0:
        raise InvalidInputError("max_facts", "must be zero or more")
    return int(max_facts)


@runtime_checkable
class RestoresFacts(Protocol):
    """A store that can write facts exactly as another store held them.

    `restore` writes one fact; `restore_many` writes many in one call, all
    or none, which is what moving a whole store needs to be fast.
    """

    async def restore(self, memory: Memory) -> bool:
        """Store ``memory`` as given (id, key, content, ``created_at``), after the key's facts.

        Meant for moving facts between stores: ids and times are kept, and
        facts restored in a key's order keep that order. Restoring the same
        fact again changes nothing, so an interrupted copy can be resumed.

        Returns:
            ``True`` if the fact was stored; ``False`` if this key already
            holds a fact with that id, content and ``created_at`` (nothing
            changed).

        Raises:
            TypeError: ``memory`` is not a `Memory`.
            InvalidContentError: The content breaks a content rule.
            InvalidInputError: The id is not restorable (see
                `validate_restored_id`), ``created_at`` is naive or outside
                `MIN_CREATED_AT` to `MAX_CREATED_AT`, or the store already
                holds a different fact with that id. Nothing was stored.
            MemoryStoreError: The store failed (see `MemoryStore`).
        """
        ...

    async def restore_many(self, memories: Iterable[Memory]) -> int:
        """Store every fact of ``memories`` as given, in that order, all or none.

        Each fact goes after its key's facts, as `restore` would put it, and
        facts of several keys may be mixed. Facts the store already holds
        exactly (same id, key, content and ``created_at``) are skipped, so an
        interrupted copy can be resumed; so is a fact given twice.

        Returns:
            How many facts were stored (the skipped ones not counted).

        Raises:
            TypeError: ``memories`` is not iterable, or an item is not a
                `Memory` (the error names its index).
            InvalidContentError: A content breaks a content rule.
            InvalidInputError: An id is not restorable, a ``created_at`` is
                naive or out of range, or an id is held by a different fact
                (in the store, or earlier in ``memories``). Nothing was
                stored.
            MemoryStoreError: The store failed (see `MemoryStore`); whether
                the facts may have been stored all the same, the error says.
        """
        ...


@runtime_checkable
class ScrubsDeletions(Protocol):
    """A store whose deletions may leave bytes of a deleted fact behind until it scrubs them.

    A deletion is committed when `MemoryStore.forget` or `MemoryStore.erase`
    returns, and no call returns the deleted facts again; some stores (an
    embedded database's log, say) still hold copies of the deleted bytes for
    a while. Such a store says so, and wipes them on demand: what an erasure
    receipt needs to say "scrubbed" rather than "pending".
    """

    @property
    def scrub_pending(self) -> bool:
        """Whether bytes of a deleted fact may remain in the store's files."""
        ...

    async def scrub(self) -> bool:
        """Wipe the bytes of every deleted fact now.

        Returns:
            ``True`` when none remain; ``False`` when the store could not
            wipe them all in time (`scrub_pending` stays ``True``).

        Raises:
            MemoryStoreError: The store failed (see `MemoryStore`).
        """
        ...


def validate_restored(memory: object, argument: str = "memory") -> Memory:
    """Check a fact about to be restored; return it with ``created_at`` in UTC.

    `Memory` checks nothing itself, so a hand-built one may hold anything:
    every field is checked as `restore` needs it.

    Args:
        memory: The candidate fact.
        argument: Its name in error messages, such as ``"memories[3]"``.

    Raises:
        TypeError: ``memory`` is not a `Memory`, its key not a `MemoryKey`,
            or its ``created_at`` not a `datetime`.
        InvalidContentError: The content breaks a content rule.
        InvalidInputError: The id is not restorable (see
            `validate_restored_id`), or ``created_at`` is naive or, in UTC,
            outside `MIN_CREATED_AT` to `MAX_CREATED_AT`.
    """
    return _restored(memory, argument)


def _restored(memory: object, argument: str | int) -> Memory:
    # ``argument`` is a name, or the index of the fact in ``memories``: the
    # name is only spelled out for an error, so that a batch of valid facts
    # builds no strings.
    if type(memory) is not Memory:
        raise TypeError(f"{_name(argument)} must be a Memory, not {_type_name(memory)}")
    memory_id: object = memory.id
    if (
        type(memory_id) is not str
        or not 0 < len(memory_id) <= MAX_RESTORED_ID_LENGTH
        or not _RESTORABLE_ID.fullmatch(memory_id)
    ):
        validate_restored_id(memory_id, f"{_name(argument)}.id")
    key: object = memory.key
    if type(key) is not MemoryKey:
        raise TypeError(f"{_name(argument)}.key must be a MemoryKey, not {_type_name(key)}")
    validate_content(memory.content)
    created_at: object = memory.created_at
    if not isinstance(created_at, datetime):
        raise TypeError(
            f"{_name(argument)}.created_at must be a datetime, not {_type_name(created_at)}"
        )
    if created_at.tzinfo is UTC:
        return memory
    offset = created_at.utcoffset()
    if offset is None:
        raise InvalidInputError(f"{_name(argument)}.created_at", "must be timezone-aware")
    # Near either end of the range, the same instant in UTC may fall outside
    # what a datetime can hold: refused here, never an OverflowError later.
    naive = created_at.replace(tzinfo=None)
    if (offset > _ZERO and naive - datetime.min < offset) or (
        offset < _ZERO and datetime.max - naive < -offset
    ):
        raise InvalidInputError(f"{_name(argument)}.created_at", _RANGE_RULE)
    return Memory(memory.id, memory.key, memory.content, created_at.astimezone(UTC))


_ZERO: Final = timedelta(0)
_RANGE_RULE: Final = (
    "must be, in UTC, between 0001-01-01T00:00:00.000000Z and 9999-12-31T23:59:59.999999Z"
)


def _name(argument: str | int) -> str:
    return argument if isinstance(argument, str) else f"memories[{argument}]"


def validate_restored_many(memories: object) -> tuple[Memory, ...]:
    """Check every fact of ``memories`` with `validate_restored`; return them.

    The items are read once, so any iterable will do; each is named by its
    index (``memories[3]``) in an error.

    Raises:
        TypeError: ``memories`` is not iterable, or an item (see
            `validate_restored`) has the wrong type.
        InvalidContentError: A content breaks a content rule.
        InvalidInputError: An id is not restorable, or a ``created_at`` is
            naive or out of range.
    """
    try:
        items = iter(memories)  # type: ignore[call-overload]
    except TypeError:
        raise TypeError(
            f"memories must be an iterable of Memory, not {_type_name(memories)}"
        ) from None
    return tuple([_restored(memory, index) for index, memory in enumerate(items)])


def validate_restored_id(memory_id: object, argument: str = "memory.id") -> str:
    """Check the id of a fact about to be restored, and return it.

    Every adapter hands out ids of ASCII letters, digits, ``-`` and ``_``, so
    an id of that shape can move between any two stores.

    Args:
        memory_id: The candidate id.
        argument: Its name in error messages.

    Raises:
        TypeError: ``memory_id`` is not a `str`.
        InvalidInputError: ``memory_id`` is empty, longer than
            `MAX_RESTORED_ID_LENGTH`, or holds another character.
    """
    if not isinstance(memory_id, str):
        raise TypeError(f"{argument} must be a str, not {_type_name(memory_id)}")
    if not 0 < len(memory_id) <= MAX_RESTORED_ID_LENGTH or not _RESTORABLE_ID.fullmatch(memory_id):
        raise InvalidInputError(
            argument,
            f"must be 1 to {MAX_RESTORED_ID_LENGTH} ASCII letters, digits, '-' or '_'",
        )
    return memory_id


@runtime_checkable
class ExpiresFacts(Protocol):
    """A store that can delete a tenant's facts by age: retention that really deletes.

    Storage limitation asks that personal data be kept no longer than it is
    needed; an operator runs `expire` on a schedule with a cutoff of "now
    minus the retention period". A fact is judged by its ``created_at``
    alone, as the store holds it (a restored fact keeps the time it had),
    never by when it was last read. The deletion is as real as
    `MemoryStore.erase`'s: no soft delete, tombstone or retained copy, the
    same durability, and for a `ScrubsDeletions` store the same wiping of
    the deleted bytes (`ScrubsDeletions.scrub_pending` says when it is
    still to come).
    """

    async def count_expired(self, scope: Scope, *, before: datetime) -> int:
        """How many facts of the tenant, of any end user, were created before ``before``.

        What `expire` would delete now; changes nothing.

        Raises:
            TypeError: ``scope`` or ``before`` has the wrong type.
            InvalidKeyError: The tenant breaks a key rule.
            InvalidInputError: ``before`` is naive or in the future (see
                `validate_cutoff`).
            MemoryStoreError: The store failed (see `MemoryStore`).
        """
        ...

    async def expire(self, scope: Scope, *, before: datetime) -> int:
        """Delete every fact of the tenant, of every end user, created before ``before``.

        The comparison is strict and exact to the microsecond: a fact
        created at ``before`` stays, one a microsecond earlier goes. Facts
        of other tenants, and facts created at or after ``before``, are
        untouched; so are `MemoryStore.remember`, `MemoryStore.forget` and
        `MemoryStore.erase` calls made meanwhile, which keep working. A
        store may delete in several steps, each committed on its own, so
        that no step grows with the number of facts: other calls may see
        the deletion part done. Two calls at once are harmless: each fact
        is deleted once, and counted by the call that deleted it.

        Returns:
            How many facts this call deleted (a fact another call deleted
            meanwhile is not counted).

        Raises:
            TypeError: ``scope`` or ``before`` has the wrong type.
            InvalidKeyError: The tenant breaks a key rule.
            InvalidInputError: ``before`` is naive or in the future (see
                `validate_cutoff`). Nothing was deleted.
            MemoryStoreError: The store failed (see `MemoryStore`). When
                ``may_have_taken_effect`` is ``True`` some facts may be
                deleted for good already: running `expire` again with the
                same ``before`` deletes the rest.
        """
        ...


def validate_cutoff(before: object, *, now: datetime | None = None) -> datetime:
    """Check the cutoff of `ExpiresFacts` and return it in UTC.

    A cutoff earlier than any fact can hold (`MIN_CREATED_AT`) is returned
    as `MIN_CREATED_AT`: it selects the same facts, none.

    Args:
        before: The candidate cutoff.
        now: The present, for the check that the cutoff is not later; the
            clock's when ``None``.

    Raises:
        TypeError: ``before`` is not a `datetime`.
        InvalidInputError: ``before`` is naive (a time without a time zone
            names no instant), or later than ``now`` (a cutoff in the
            future would delete facts younger than the retention period,
            even ones not made yet).
    """
    if not isinstance(before, datetime):
        raise TypeError(f"before must be a timezone-aware datetime, not {_type_name(before)}")
    offset = before.utcoffset()
    if offset is None:
        raise InvalidInputError(
            "before", "must be timezone-aware (a time without a zone names no instant)"
        )
    naive = before.replace(tzinfo=None)
    if offset > _ZERO and naive - datetime.min < offset:
        return MIN_CREATED_AT
    present = datetime.now(UTC) if now is None else now
    if offset < _ZERO and datetime.max - naive < -offset:
        raise InvalidInputError("before", "must not be in the future")
    cutoff = before.astimezone(UTC)
    if cutoff > present:
        raise InvalidInputError("before", "must not be in the future")
    return cutoff
