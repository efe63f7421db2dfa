"""Rule 4: erase deletes every fact of the key for good and counts what it deleted."""

from __future__ import annotations

import anyio

from psych_runtime.memory.port import Memory

from ._cases import FACTS_PER_TASK, MAIN, TASKS, ids_of, key_of
from ._harness import Harness
from ._support import check

__all__ = ["EraseChecks"]


class EraseChecks(Harness):
    """Checks of rule 4, looking through the backdoor for rows a soft delete would keep."""

    async def test_rule4_erase_counts_and_deletes_everything(self) -> None:
        """Rule 4: erase returns how many facts it deleted and leaves none, not even hidden rows."""
        async with self._open() as store:
            facts = [await store.remember(*MAIN, f"fact {index}") for index in range(4)]
            await self._forget(store, *MAIN, facts[0].id)
            erased = await store.erase(*MAIN)
            check(
                type(erased) is int and erased == 3,
                4,
                f"erase of a key holding 3 facts (one more forgotten) returned {erased!r}",
            )
            check(await store.recall(*MAIN) == (), 4, "recall after erase is not ()")
            stored = await self.count_stored(store, key_of(MAIN))
            check(
                stored == 0,
                4,
                f"after erase the backend still holds {stored} row(s) for the key "
                "(a soft delete, tombstone or retained copy)",
            )
            for fact in facts:
                check(
                    not await self._forget(store, *MAIN, fact.id),
                    4,
                    "forget of an erased fact's id returned True",
                )

    async def test_rule4_erase_of_an_empty_key_is_zero(self) -> None:
        """Rule 4: erase of a key with no facts, or erased already, returns 0."""
        async with self._open() as store:
            erased = await store.erase(*MAIN)
            check(erased == 0, 4, f"erase of a key that never had facts returned {erased!r}")
            await store.remember(*MAIN, "fact")
            check(await store.erase(*MAIN) == 1, 4, "erase of a key with 1 fact did not return 1")
            erased = await store.erase(*MAIN)
            check(erased == 0, 4, f"a second erase of the same key returned {erased!r}")

    async def test_rule4_erased_facts_never_come_back(self) -> None:
        """Rule 4: after erase, new facts of the key start from nothing; old ones never reappear."""
        async with self._open() as store:
            old = [await store.remember(*MAIN, f"old {index}") for index in range(3)]
            await store.erase(*MAIN)
            new = await store.remember(*MAIN, "new")
            check(
                ids_of(await store.recall(*MAIN)) == [new.id],
                4,
                "after erase and one remember, recall holds more than the new fact",
            )
            check(new.id not in ids_of(old), 1, "a fact remembered after erase reused an old id")
            stored = await self.count_stored(store, key_of(MAIN))
            check(stored == 1, 4, f"after erase and one remember the backend holds {stored} rows")

    async def test_rule4_erase_racing_remembers_counts_every_fact_once(self) -> None:
        """Rule 4: erases racing remembers count every fact that is not left, exactly once."""
        async with self._open() as store:
            remembered: list[Memory] = []
            erased: list[int] = []

            async def remember_some(task: int) -> None:
                remembered.extend(
                    [
                        await store.remember(*MAIN, f"task {task} fact {index}")
                        for index in range(FACTS_PER_TASK)
                    ]
                )

            async def erase_once() -> None:
                erased.append(await store.erase(*MAIN))

            async with anyio.create_task_group() as group:
                for task in range(TASKS):
                    group.start_soon(remember_some, task)
                    if task % 8 == 0:
                        group.start_soon(erase_once)
            left = await store.recall(*MAIN)
            check(
                sum(erased) + len(left) == len(remembered),
                4,
                f"{len(remembered)} facts were remembered while erase ran {len(erased)} times: "
                f"the erases counted {sum(erased)} and {len(left)} are left",
            )
            stored = await self.count_stored(store, key_of(MAIN))
            check(
                stored == len(left),
                4,
                f"recall shows {len(left)} fact(s) but the backend holds {stored} row(s)",
            )
