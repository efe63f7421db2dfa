"""The reference model: the port's rules in their plainest possible form."""

from __future__ import annotations

from psych_runtime.memory.port import MemoryKey

__all__ = ["ReferenceModel"]


class ReferenceModel:
    """What a correct store holds after a sequence of calls.

    Each key owns a list of ``(id, content)`` pairs in insertion order; ids are
    whatever the backend under test returned, so the model never invents one.
    """

    def __init__(self) -> None:
        self._facts: dict[MemoryKey, list[tuple[str, str]]] = {}
        self.issued: list[str] = []

    def facts(self, key: MemoryKey) -> list[tuple[str, str]]:
        """The facts of ``key``, oldest first."""
        return list(self._facts.get(key, ()))

    def remember(self, key: MemoryKey, memory_id: str, content: str) -> None:
        """Record a fact the backend stored under ``memory_id``."""
        self._facts.setdefault(key, []).append((memory_id, content))
        self.issued.append(memory_id)

    def forget(self, key: MemoryKey, memory_id: str) -> bool:
        """Delete the fact ``memory_id`` of ``key``; whether there was one."""
        facts = self._facts.get(key, [])
        for index, (candidate, _) in enumerate(facts):
            if candidate == memory_id:
                del facts[index]
                return True
        return False

    def recall(self, key: MemoryKey, limit: int | None) -> list[tuple[str, str]]:
        """The first ``limit`` facts of ``key`` (all of them for ``None``)."""
        facts = self.facts(key)
        return facts if limit is None else facts[:limit]

    def erase(self, key: MemoryKey) -> int:
        """Delete every fact of ``key``; how many there were."""
        return len(self._facts.pop(key, []))
