"""Rule 3: recall returns every fact of the key, oldest first; limit takes the oldest."""

from __future__ import annotations

from ._cases import MAIN, SAME_TENANT, ids_of, key_of, positions
from ._harness import Harness
from ._support import check

__all__ = ["RecallChecks"]


class RecallChecks(Harness):
    """Checks of rule 3: insertion order, limits, an empty key, order after forget, no writes."""

    async def test_rule3_recall_is_oldest_first(self) -> None:
        """Rule 3: recall returns every fact of the key in insertion order, oldest first."""
        async with self._open() as store:
            # Remembered back to back, many share a timestamp at any clock
            # resolution; only insertion order can put them right.
            facts = [await store.remember(*MAIN, f"fact {index:02}") for index in range(30)]
            recalled = await store.recall(*MAIN)
            check(type(recalled) is tuple, 3, f"recall returned a {type(recalled).__name__}")
            check(
                ids_of(recalled) == ids_of(facts),
                3,
                "recall did not return the facts oldest first in insertion order "
                f"(insertion positions {positions(facts, recalled)})",
            )

    async def test_rule3_limit_takes_the_oldest(self) -> None:
        """Rule 3: recall with limit=n returns the n oldest facts; limit=None all; limit=0 ()."""
        async with self._open() as store:
            facts = [await store.remember(*MAIN, f"fact {index}") for index in range(5)]
            for limit in (None, 0, 1, 2, 4, 5, 6, 100):
                recalled = await store.recall(*MAIN, limit=limit)
                expected = facts if limit is None else facts[:limit]
                check(
                    type(recalled) is tuple and ids_of(recalled) == ids_of(expected),
                    3,
                    f"recall(limit={limit}) of 5 facts returned insertion positions "
                    f"{positions(facts, recalled)}, expected {list(range(len(expected)))}",
                )

    async def test_rule3_recall_of_an_empty_key_is_empty(self) -> None:
        """Rule 3: recall of a key with no facts returns (), with or without a limit."""
        async with self._open() as store:
            await store.remember(*SAME_TENANT, "someone else's fact")
            for limit in (None, 0, 3):
                recalled = await store.recall(*MAIN, limit=limit)
                check(
                    recalled == () and type(recalled) is tuple,
                    3,
                    f"recall(limit={limit}) of a key with no facts returned {recalled!r}",
                )

    async def test_rule3_order_survives_forget(self) -> None:
        """Rule 3: after forgetting some facts the rest keep their insertion order."""
        async with self._open() as store:
            facts = [await store.remember(*MAIN, f"fact {index}") for index in range(8)]
            for index in (0, 3, 7):
                await self._forget(store, *MAIN, facts[index].id)
            later = await store.remember(*MAIN, "remembered after the forgets")
            expected = [facts[index].id for index in (1, 2, 4, 5, 6)] + [later.id]
            check(
                ids_of(await store.recall(*MAIN)) == expected,
                3,
                "after forgetting facts 0, 3 and 7 of 8 and adding one, recall is out of order",
            )
            check(
                ids_of(await store.recall(*MAIN, limit=2)) == expected[:2],
                3,
                "after forgets, recall(limit=2) did not return the two oldest remaining facts",
            )

    async def test_rule3_recall_changes_nothing(self) -> None:
        """Rule 3: recall only reads; repeated recalls return the same facts and delete none."""
        async with self._open() as store:
            facts = [await store.remember(*MAIN, f"fact {index}") for index in range(3)]
            for limit in (None, 1, 0, None):
                await store.recall(*MAIN, limit=limit)
            check(
                ids_of(await store.recall(*MAIN)) == ids_of(facts),
                3,
                "repeated recalls changed the facts of the key",
            )
            check(
                await self.count_stored(store, key_of(MAIN)) == 3,
                3,
                "recall changed the rows stored for the key",
            )
