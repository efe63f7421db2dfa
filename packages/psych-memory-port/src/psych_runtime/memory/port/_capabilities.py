"""Capabilities beyond the four methods, which a store may provide.

Operators need two things an agent never does: to list whose facts a store
holds (to answer "what do you hold about me", or to count), and to write a
fact exactly as it was (to move facts between stores). Neither belongs in
`MemoryStore`, whose four methods are all an agent may call; each is a small
protocol instead. A store provides a capability by having its methods: tools
check with ``isinstance(store, ListsEndUsers)`` and report clearly when a
store lacks one.
"""

from __future__ import annotations

import re
from typing import Final, Protocol, runtime_checkable

from ._errors import InvalidInputError
from ._key import Scope
from ._memory import Memory
from ._validation import _type_name

__all__ = ["MAX_RESTORED_ID_LENGTH", "ListsEndUsers", "RestoresFacts", "validate_restored_id"]

MAX_RESTORED_ID_LENGTH: Final = 64
"""The most characters the id of a restored fact may have."""

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
class RestoresFacts(Protocol):
    """A store that can write a fact exactly as another store held it."""

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
                `validate_restored_id`), or the store already holds a
                different fact with that id. Nothing was stored.
            MemoryStoreError: The store failed (see `MemoryStore`).
        """
        ...


def validate_restored_id(memory_id: object) -> str:
    """Check the id of a fact about to be restored, and return it.

    Every adapter hands out ids of ASCII letters, digits, ``-`` and ``_``, so
    an id of that shape can move between any two stores.

    Raises:
        TypeError: ``memory_id`` is not a `str`.
        InvalidInputError: ``memory_id`` is empty, longer than
            `MAX_RESTORED_ID_LENGTH`, or holds another character.
    """
    if not isinstance(memory_id, str):
        raise TypeError(f"memory.id must be a str, not {_type_name(memory_id)}")
    if not 0 < len(memory_id) <= MAX_RESTORED_ID_LENGTH or not _RESTORABLE_ID.fullmatch(memory_id):
        raise InvalidInputError(
            "memory.id",
            f"must be 1 to {MAX_RESTORED_ID_LENGTH} ASCII letters, digits, '-' or '_'",
        )
    return memory_id
