"""Rule 2: forget answers True or False and deletes only the fact it names."""

from __future__ import annotations

import anyio

from ._cases import (
    CASE,
    MAIN,
    SAME_END_USER,
    SAME_TENANT,
    SWAPPED,
    TASKS,
    UNKNOWN_IDS,
    ids_of,
    key_of,
)
from ._harness import Harness
from ._support import check

__all__ = ["ForgetChecks"]


class ForgetChecks(Harness):
    """Checks of rule 2: a stored id, a gone one, an unknown one, another key's, a race."""

    async def test_rule2_forget_deletes_exactly_that_fact(self) -> None:
        """Rule 2: forget of a stored id returns True and deletes that fact and no other."""
        async with self._open() as store:
            facts = [await store.remember(*MAIN, f"fact {index}") for index in range(3)]
            check(
                await self._forget(store, *MAIN, facts[1].id),
                2,
                "forget of a stored fact's id returned False",
            )
            remaining = ids_of(await store.recall(*MAIN))
            check(
                sorted(remaining) == sorted([facts[0].id, facts[2].id]),
                2,
                f"after forgetting the middle one of 3 facts recall returned {len(remaining)}",
            )
            stored = await self.count_stored(store, key_of(MAIN))
            check(
                stored == 2,
                2,
                f"forget returned True but the backend still holds {stored} row(s) of 2 "
                "remaining facts (a soft delete keeps what forget must delete)",
            )

    async def test_rule2_forget_of_a_gone_id_is_false(self) -> None:
        """Rule 2: forget of an id already forgotten or erased returns False and deletes nothing."""
        async with self._open() as store:
            first = await store.remember(*MAIN, "first")
            kept = await store.remember(*MAIN, "kept")
            check(await self._forget(store, *MAIN, first.id), 2, "forget of a stored id gave False")
            check(
                not await self._forget(store, *MAIN, first.id),
                2,
                "forgetting the same id twice returned True the second time",
            )
            check(
                ids_of(await store.recall(*MAIN)) == [kept.id],
                2,
                "a second forget of a gone id deleted another fact",
            )
            await store.erase(*MAIN)
            check(await store.recall(*MAIN) == (), 4, "erase left facts that recall still returns")
            check(
                not await self._forget(store, *MAIN, kept.id),
                2,
                "forget of an erased fact's id returned True",
            )

    async def test_rule2_forget_of_an_unknown_id_is_false(self) -> None:
        """Rule 2: forget of an unknown or malformed id returns False and deletes nothing."""
        async with self._open() as store:
            facts = [await store.remember(*MAIN, f"fact {index}") for index in range(2)]
            near = facts[0].id
            candidates = [
                *UNKNOWN_IDS,
                near + " ",
                " " + near,
                "0" + near,
                near + "\x00",
                near[:-1],
                near.upper() if near.upper() != near else near.lower(),
            ]
            for candidate in candidates:
                if candidate in ids_of(facts):
                    continue
                check(
                    not await self._forget(store, *MAIN, candidate),
                    2,
                    f"forget of an id no fact has ({len(candidate)} characters) returned True",
                )
            check(
                sorted(ids_of(await store.recall(*MAIN))) == sorted(ids_of(facts)),
                2,
                "forget of unknown ids deleted facts",
            )
            check(
                await self.count_stored(store, key_of(MAIN)) == 2,
                2,
                "forget of unknown ids changed the rows stored for the key",
            )
            check(
                not await self._forget(store, *SAME_TENANT, "unknown"),
                2,
                "forget on a key with no facts returned True",
            )

    async def test_rule2_forget_of_another_keys_id_is_false(self) -> None:
        """Rule 2: forget under another end user or tenant returns False and keeps the fact."""
        async with self._open() as store:
            fact = await store.remember(*MAIN, "belongs to acme/user-1")
            for other in (SAME_TENANT, SAME_END_USER, SWAPPED, CASE):
                check(
                    not await self._forget(store, *other, fact.id),
                    2,
                    f"forget under key {other!r} of a fact of key {MAIN!r} returned True",
                )
            check(
                ids_of(await store.recall(*MAIN)) == [fact.id],
                2,
                "forget under another key deleted the owner's fact",
            )
            check(
                await self.count_stored(store, key_of(MAIN)) == 1,
                2,
                "forget under another key changed the owner's stored rows",
            )

    async def test_rule2_many_tasks_forgetting_one_fact_succeed_once(self) -> None:
        """Rule 2: of many concurrent forgets of one id exactly one returns True."""
        async with self._open() as store:
            target = await store.remember(*MAIN, "forgotten concurrently")
            kept = await store.remember(*MAIN, "kept")
            answers: list[bool] = []

            async def forget_it() -> None:
                answers.append(await self._forget(store, *MAIN, target.id))

            async with anyio.create_task_group() as group:
                for _ in range(TASKS):
                    group.start_soon(forget_it)
            check(
                answers.count(True) == 1,
                2,
                f"{len(answers)} concurrent forgets of one id returned True "
                f"{answers.count(True)} times",
            )
            check(
                ids_of(await store.recall(*MAIN)) == [kept.id],
                2,
                "concurrent forgets of one id deleted another fact",
            )
