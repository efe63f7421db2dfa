"""Rule 5: every call touches only its own key's facts."""

from __future__ import annotations

import anyio
from hypothesis import strategies as st

from ._cases import (
    CASE,
    FACTS_PER_TASK,
    ISOLATION_KEYS,
    JOINED_LEFT,
    JOINED_RIGHT,
    KEY_PARTS,
    MAIN,
    NORMALISED_NFC,
    NORMALISED_NFD,
    SAME_END_USER,
    TASKS,
    ScopeObject,
    ids_of,
    key_of,
)
from ._harness import Harness
from ._support import BlockingStore, check

__all__ = ["IsolationChecks"]


class IsolationChecks(Harness):
    """Checks of rule 5: tenants and end users apart, scope objects, exact keys, concurrency."""

    async def test_rule5_tenants_and_end_users_are_isolated(self) -> None:
        """Rule 5: remember, recall, forget and erase on one key never touch another key's facts."""
        async with self._open() as store:
            facts = {
                pair: await store.remember(*pair, f"fact of {pair!r}") for pair in ISOLATION_KEYS
            }
            for pair, fact in facts.items():
                memories = await store.recall(*pair)
                check(
                    all(memory.key == key_of(pair) for memory in memories),
                    5,
                    f"recall of key {pair!r} returned a fact carrying another key",
                )
                recalled = ids_of(memories)
                check(
                    recalled == [fact.id],
                    5,
                    f"recall of key {pair!r} returned {len(recalled)} fact(s); it holds exactly 1 "
                    "(keys are mixed up)",
                )
                check(fact.key == key_of(pair), 5, f"a fact of {pair!r} carries key {fact.key!r}")
            for pair, fact in facts.items():
                for other in ISOLATION_KEYS:
                    if other != pair:
                        check(
                            not await self._forget(store, *other, fact.id),
                            5,
                            f"forget under key {other!r} deleted a fact of key {pair!r}",
                        )
            await store.erase(*MAIN)
            for pair, fact in facts.items():
                if pair == MAIN:
                    continue
                check(
                    ids_of(await store.recall(*pair)) == [fact.id]
                    and await self.count_stored(store, key_of(pair)) == 1,
                    5,
                    f"erase of {MAIN!r} touched the facts of key {pair!r}",
                )

    async def test_rule5_a_scope_object_and_its_tenant_string_are_one_key(self) -> None:
        """Rule 5: a scope object with `tenant` addresses the same key as that tenant string."""
        async with self._open() as store:
            tenant, user = MAIN
            by_object = await store.remember(
                ScopeObject(tenant), user, "stored through a scope object"
            )
            by_string = await store.remember(tenant, user, "stored through a string")
            check(
                by_object.key == key_of(MAIN),
                5,
                f"remember with a scope object gave key {by_object.key!r}, not {key_of(MAIN)!r}",
            )
            expected = sorted([by_object.id, by_string.id])
            for scope in (
                tenant,
                ScopeObject(tenant),
                ScopeObject(tenant, thread="another conversation"),
            ):
                check(
                    sorted(ids_of(await store.recall(scope, user))) == expected,
                    5,
                    f"recall with scope {scope!r} does not see the facts of tenant {tenant!r}",
                )
            check(
                await store.recall(ScopeObject(SAME_END_USER[0]), user) == (),
                5,
                "a scope object of another tenant sees this tenant's facts",
            )
            check(
                await self._forget(store, ScopeObject(tenant), user, by_string.id),
                5,
                "forget with a scope object could not delete a fact stored with its tenant string",
            )
            await store.remember(tenant, user, "stored through a string again")
            check(
                await store.erase(ScopeObject(tenant, thread="other"), user) > 0,
                5,
                "erase with a scope object did not reach the facts stored with its tenant string",
            )

    async def test_rule5_keys_are_compared_exactly(self) -> None:
        """Rule 5: keys differing only in case, Unicode normalisation or separators never meet."""
        async with self._open() as store:
            for left, right in (
                (MAIN, CASE),
                (NORMALISED_NFC, NORMALISED_NFD),
                (JOINED_LEFT, JOINED_RIGHT),
            ):
                fact = await store.remember(*left, "left")
                check(
                    await store.recall(*right) == (),
                    5,
                    f"key {right!r} sees the facts of key {left!r}",
                )
                check(
                    await store.erase(*right) == 0
                    and ids_of(await store.recall(*left)) == [fact.id],
                    5,
                    f"erase of key {right!r} deleted the facts of key {left!r}",
                )

        def example(store: BlockingStore, data: st.DataObject) -> None:
            first = (data.draw(KEY_PARTS, label="tenant"), data.draw(KEY_PARTS, label="end user"))
            second = (data.draw(KEY_PARTS, label="tenant"), data.draw(KEY_PARTS, label="end user"))
            fact = store.remember(*first, "fact")
            check(fact.key == key_of(first), 5, f"remember under {first!r} gave key {fact.key!r}")
            check(
                ids_of(store.recall(*first)) == [fact.id],
                5,
                f"recall under {first!r} does not return its one fact",
            )
            if second != first:
                check(
                    store.recall(*second) == (),
                    5,
                    f"key {second!r} sees the facts of key {first!r}",
                )
                check(
                    not store.forget(*second, fact.id),
                    5,
                    f"forget under {second!r} deleted a fact of {first!r}",
                )

        await self._examples(example)

    async def test_rule5_many_tasks_on_separate_keys_stay_apart(self) -> None:
        """Rule 5: concurrent calls on many keys leave each key exactly its own facts."""
        async with self._open() as store:
            kept: dict[int, list[str]] = {}

            async def work(task: int) -> None:
                pair = ("acme", f"user-{task}")
                facts = [
                    await store.remember(*pair, f"fact {index}") for index in range(FACTS_PER_TASK)
                ]
                await self._forget(store, *pair, facts[1].id)
                kept[task] = [fact.id for index, fact in enumerate(facts) if index != 1]

            async with anyio.create_task_group() as group:
                for task in range(TASKS):
                    group.start_soon(work, task)
            for task, expected in kept.items():
                pair = ("acme", f"user-{task}")
                recalled = ids_of(await store.recall(*pair))
                check(
                    sorted(recalled) == sorted(expected),
                    5,
                    f"after concurrent work on {TASKS} keys, key {pair!r} holds "
                    f"{len(recalled)} fact(s) instead of its own {len(expected)}",
                )
