"""Rule 1: remember always adds a new fact with a fresh id, and stores it exactly."""

from __future__ import annotations

from datetime import timedelta

from hypothesis import strategies as st

from psych_runtime.memory.port import Memory

from ._cases import CONTENTS, EXACT_CONTENTS, MAIN, SAME_END_USER, SAME_TENANT, ids_of, key_of
from ._harness import Harness
from ._support import BlockingStore, check

__all__ = ["RememberChecks"]


class RememberChecks(Harness):
    """Checks of rule 1 made by one caller; `ConcurrentWriteChecks` has the concurrent ones."""

    async def test_rule1_remember_returns_the_stored_fact(self) -> None:
        """Rule 1: remember returns the new fact: a str id, its key and content, a UTC time."""
        async with self._open() as store:
            fact = await store.remember(*MAIN, "prefers the Berlin warehouse")
            check(isinstance(fact, Memory), 1, f"remember returned {type(fact).__name__}")
            check(
                type(fact.id) is str and fact.id != "",
                1,
                "the id of a fact must be a non-empty str",
            )
            check(
                fact.key == key_of(MAIN),
                1,
                f"remember returned key {fact.key!r}, not {key_of(MAIN)!r}",
            )
            check(
                fact.content == "prefers the Berlin warehouse",
                1,
                "remember returned content other than what was given",
            )
            offset = fact.created_at.utcoffset()
            check(
                offset == timedelta(0),
                1,
                f"created_at must be timezone-aware UTC, got offset {offset!r}",
            )
            recalled = await store.recall(*MAIN)
            check(
                recalled == (fact,),
                1,
                "recall does not return the fact exactly as remember returned it",
            )
            check(
                await self.count_stored(store, key_of(MAIN)) == 1,
                1,
                "one remember must store exactly one fact in the backend",
            )

    async def test_rule1_duplicates_are_kept_with_distinct_ids(self) -> None:
        """Rule 1: the same content remembered three times is three facts with three ids."""
        async with self._open() as store:
            facts = [await store.remember(*MAIN, "likes tea") for _ in range(3)]
            check(
                len(set(ids_of(facts))) == 3,
                1,
                f"remembering the same content three times gave ids {ids_of(facts)}",
            )
            recalled = await store.recall(*MAIN)
            check(
                sorted(ids_of(recalled)) == sorted(ids_of(facts)),
                1,
                f"after three identical remembers recall holds {len(recalled)} fact(s), not 3",
            )
            stored = await self.count_stored(store, key_of(MAIN))
            check(stored == 3, 1, f"the backend stores {stored} row(s) for three remembers")

    async def test_rule1_content_is_stored_exactly(self) -> None:
        """Rule 1: content comes back exactly as given, never trimmed, normalised or rewritten."""
        async with self._open() as store:
            for content in EXACT_CONTENTS:
                fact = await store.remember(*MAIN, content)
                check(
                    fact.content == content,
                    1,
                    f"remember rewrote a content of {len(content)} characters",
                )
            recalled = [memory.content for memory in await store.recall(*MAIN)]
            check(
                sorted(recalled) == sorted(EXACT_CONTENTS),
                1,
                "recall returned contents that differ from what was remembered",
            )

        def example(store: BlockingStore, data: st.DataObject) -> None:
            content = data.draw(CONTENTS, label="content")
            fact = store.remember(*MAIN, content)
            (recalled,) = store.recall(*MAIN)
            check(
                fact.content == content and recalled.content == content,
                1,
                f"content {content!r} did not come back exactly",
            )

        await self._examples(example)

    async def test_rule1_ids_are_never_reused(self) -> None:
        """Rule 1: every remember gets an id no earlier fact had, even after forget and erase."""
        async with self._open() as store:
            seen: set[str] = set()
            for round_ in range(3):
                for pair in (MAIN, SAME_TENANT, SAME_END_USER):
                    for index in range(3):
                        fact = await store.remember(*pair, f"fact {index} of round {round_}")
                        check(
                            fact.id not in seen,
                            1,
                            f"id {fact.id!r} was given to two facts",
                        )
                        seen.add(fact.id)
                await self._forget(store, *MAIN, fact.id)
                await store.erase(*SAME_TENANT)
