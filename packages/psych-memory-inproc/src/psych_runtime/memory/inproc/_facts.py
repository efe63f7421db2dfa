"""One key's facts: insertion order for `recall`, links for pages that start anywhere."""

from __future__ import annotations

from itertools import pairwise
from typing import Final

from psych_runtime.memory.port import Memory

__all__ = ["LINKED_ABOVE", "Facts"]

LINKED_ABOVE: Final = 64
"""Above this many facts a key also links each fact to its neighbours."""


class Facts(dict[str, Memory]):
    """One key's facts by id, oldest first, as a dictionary keeps them.

    A dictionary cannot start iterating at a given key, so a page that
    starts after a fact would cost O(position of that fact). Once the key
    holds more than `LINKED_ABOVE` facts, each fact therefore also knows the
    ids of the facts just before and after it, so that a page costs O(its
    size) wherever it starts; smaller keys, by far the most common, pay
    nothing for the links and scan their few facts instead. The links are
    kept once made, even if the key shrinks again.

    Every method is called with the store's lock held.

    Attributes:
        erased: Set when the key was erased: the facts are no longer the
            store's, and an entry of the id index that still names this
            table is stale.
    """

    __slots__ = ("_before", "_first", "_last", "_later", "erased")

    def __init__(self) -> None:
        super().__init__()
        self.erased = False
        # id -> id of the next (``_later``) and the previous (``_before``)
        # fact; a fact without one is absent. None while the key is small.
        self._later: dict[str, str] | None = None
        self._before: dict[str, str] | None = None
        self._first: str | None = None
        self._last: str | None = None

    def add(self, memory: Memory) -> None:
        """Store ``memory`` after every fact the key holds (its id is new to the key)."""
        memory_id = memory.id
        self[memory_id] = memory
        later, before = self._later, self._before
        if later is not None and before is not None:
            last = self._last
            if last is None:
                self._first = memory_id
            else:
                later[last] = memory_id
                before[memory_id] = last
            self._last = memory_id
        elif len(self) > LINKED_ABOVE:
            ids = list(self)
            self._later = dict(pairwise(ids))
            self._before = {following: previous for previous, following in pairwise(ids)}
            self._first, self._last = ids[0], ids[-1]

    def discard(self, memory_id: str) -> bool:
        """Delete the fact ``memory_id``; ``False`` if the key does not hold it."""
        if self.pop(memory_id, None) is None:
            return False
        later, before = self._later, self._before
        if later is not None and before is not None:
            previous = before.pop(memory_id, None)
            following = later.pop(memory_id, None)
            if previous is None:
                self._first = following
            elif following is None:
                del later[previous]
            else:
                later[previous] = following
            if following is None:
                self._last = previous
            elif previous is None:
                del before[following]
            else:
                before[following] = previous
        return True

    def page(self, after: str | None, size: int) -> tuple[Memory, ...] | None:
        """Up to ``size`` facts after the fact ``after``; ``None`` if the key does not hold it."""
        if after is not None and after not in self:
            return None
        later = self._later
        if later is None:
            # At most LINKED_ABOVE facts: scanning them costs O(1).
            start = 0 if after is None else list(self).index(after) + 1
            return tuple(self.values())[start : start + size]
        memory_id = self._first if after is None else later.get(after)
        page: list[Memory] = []
        append = page.append
        for _ in range(size):
            if memory_id is None:
                break
            append(self[memory_id])
            memory_id = later.get(memory_id)
        return tuple(page)

    def links(self) -> tuple[dict[str, str], ...]:
        """The tables of links, for dismantling an erased key."""
        later, before = self._later, self._before
        return () if later is None or before is None else (later, before)
