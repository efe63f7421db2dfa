"""What the operations need of a store beyond the port's `MemoryStore`, checked by shape."""

from __future__ import annotations

from typing import Protocol, runtime_checkable

from psych_runtime.memory.port import (
    ExpiresFacts,
    ListsEndUsers,
    Memory,
    MemoryStore,
    RestoresFacts,
)

from ._errors import MissingCapabilityError

__all__ = ["ReportsDurability", "expirer", "lister", "restorer", "same_fact"]


@runtime_checkable
class ReportsDurability(Protocol):
    """A store that says, read from its server, where an acknowledged deletion is durable.

    PostgreSQL's answer is ``"synchronous_standbys"``, ``"primary_only"`` or
    ``"no_replication"``. Checked by shape, so the command never imports an
    adapter.
    """

    async def deletion_durability(self) -> str:
        """Where a deletion acknowledged now is durable."""
        ...


def lister(store: MemoryStore, role: str = "store") -> ListsEndUsers:
    """``store`` as a store that lists its keys.

    Raises:
        MissingCapabilityError: It does not provide `ListsEndUsers` (naming
            its ``role``).
    """
    if not isinstance(store, ListsEndUsers):
        raise MissingCapabilityError(role, "list its users", "ListsEndUsers")
    return store


def restorer(store: MemoryStore, role: str = "store") -> RestoresFacts:
    """``store`` as a store that writes facts as they were.

    Raises:
        MissingCapabilityError: It does not provide `RestoresFacts` (naming
            its ``role``).
    """
    if not isinstance(store, RestoresFacts):
        raise MissingCapabilityError(role, "restore facts as they were", "RestoresFacts")
    return store


def expirer(store: MemoryStore, role: str = "store") -> ExpiresFacts:
    """``store`` as a store that deletes facts by age.

    Raises:
        MissingCapabilityError: It does not provide `ExpiresFacts` (naming
            its ``role``).
    """
    if not isinstance(store, ExpiresFacts):
        raise MissingCapabilityError(role, "expire facts by age", "ExpiresFacts")
    return store


def same_fact(one: Memory, other: Memory) -> bool:
    """Whether two facts are the same fact: id, key, content and time."""
    return (one.id, one.key, one.content, one.created_at) == (
        other.id,
        other.key,
        other.content,
        other.created_at,
    )
