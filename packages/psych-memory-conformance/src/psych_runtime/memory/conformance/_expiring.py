"""Rule 14: deleting a tenant's facts by age, on a store that provides it."""

from __future__ import annotations

from collections.abc import Iterable
from datetime import UTC, datetime, timedelta, timezone
from functools import partial
from typing import Any, Final, cast

import anyio
import anyio.lowlevel
from hypothesis import strategies as st

from psych_runtime.memory.port import (
    ExpiresFacts,
    InvalidInputError,
    Memory,
    MemoryKey,
    MemoryStore,
    RestoresFacts,
)

from ._cases import MAIN, SAME_END_USER, Pair, ScopeObject, ids_of, key_of
from ._harness import Harness
from ._rules import RuleViolationError
from ._support import BlockingStore, check, not_applicable, refuses_invalid_scopes

__all__ = ["ExpiringChecks"]

_MICROSECOND: Final = timedelta(microseconds=1)

# The tenant expired, with end users a per-user bug would miss, and tenants
# that a prefix, a pattern (LIKE's "_"), a case-insensitive or a trimmed
# comparison would take for it.
_TENANT: Final = "acme"
_USERS: Final = ("user-1", "user-2", "USER-1", "user-10")
# An end user of the tenant whose facts are all younger than the cutoff.
_WRITER: Final = (_TENANT, "writer")
_OTHERS: Final[tuple[Pair, ...]] = (
    SAME_END_USER,
    ("Acme", "user-1"),
    ("acme-corp", "user-1"),
    ("ac_e", "user-1"),
    ("acm", "user-1"),
)
# Times far from today: restored facts are judged by the time they carry.
_LONG_AGO: Final = datetime(2001, 9, 9, 1, 46, 40, 123456, tzinfo=UTC)


def _expirer(store: MemoryStore) -> ExpiresFacts:
    if not isinstance(store, ExpiresFacts):
        not_applicable("ExpiresFacts")
    return store


async def _past(moment: datetime) -> None:
    # A cutoff a microsecond after a fact just made is a moment ahead of
    # the clock; it must be past before it is a valid cutoff.
    await anyio.lowlevel.checkpoint()
    while datetime.now(UTC) <= moment:
        await anyio.lowlevel.checkpoint()


async def _expire(expirer: ExpiresFacts, scope: object, before: datetime, what: str) -> int:
    """`ExpiresFacts.expire`, its answer judged as a count."""
    try:
        deleted: object = await expirer.expire(cast("Any", scope), before=before)
    except Exception as exc:
        raise RuleViolationError(
            14, f"{what} raised {type(exc).__name__} instead of answering a count"
        ) from exc
    check(type(deleted) is int, 14, f"{what} returned {type(deleted).__name__}, not an int")
    return cast("int", deleted)


async def _count(expirer: ExpiresFacts, before: datetime, what: str) -> int:
    counted: object = await expirer.count_expired(_TENANT, before=before)
    check(type(counted) is int, 14, f"{what} returned {type(counted).__name__}, not an int")
    return cast("int", counted)


class ExpiringChecks(Harness):
    """Checks of rule 14, each skipped as not applicable without `ExpiresFacts`.

    What remains is judged by `MemoryStore.recall` and by the backdoor
    count, so that a store that only hides expired facts fails.
    """

    async def test_rule14_expire_deletes_exactly_the_tenants_older_facts(self) -> None:
        """Rule 14: the tenant's facts of every end user before the cutoff go; nothing else."""
        async with self._open() as store:
            expirer = _expirer(store)
            held: dict[Pair, list[Memory]] = {
                pair: [] for pair in [*((_TENANT, user) for user in _USERS), *_OTHERS]
            }
            # Key after key, round after round: every tenant has old and new facts.
            for number in range(3):
                for pair, facts in held.items():
                    facts.append(await store.remember(*pair, f"fact {number}"))
            mine = sorted(
                (fact for pair, facts in held.items() if pair[0] == _TENANT for fact in facts),
                key=lambda fact: fact.created_at,
            )
            cutoff = mine[len(mine) // 2].created_at
            await _past(cutoff)
            old = {fact.id for fact in mine if fact.created_at < cutoff}
            counted = await _count(expirer, cutoff, "count_expired")
            check(
                counted == len(old),
                14,
                f"count_expired counted {counted} facts; {len(old)} were created before the cutoff",
            )
            deleted = await _expire(expirer, _TENANT, cutoff, "expire")
            check(
                deleted == len(old),
                14,
                f"expire returned {deleted}; it deleted {len(old)} facts created before the cutoff",
            )
            await self._held_exactly(store, held, old, "after expire")
            check(
                await _count(expirer, cutoff, "count_expired after expire") == 0,
                14,
                "count_expired still counted facts after expire deleted them",
            )
            check(
                await _expire(expirer, _TENANT, cutoff, "expire again") == 0,
                14,
                "expire again with the same cutoff counted facts it had deleted already",
            )
            for fact in mine:
                if fact.id in old:
                    check(
                        not await self._forget(store, *_pair(fact), fact.id),
                        14,
                        "forget of an expired fact's id returned True: the fact was kept",
                    )

    async def test_rule14_the_cutoff_is_exact_to_the_microsecond(self) -> None:
        """Rule 14: a fact made at the cutoff stays; the cutoff a microsecond later takes it."""
        async with self._open() as store:
            expirer = _expirer(store)
            fact = await store.remember(*MAIN, "made at the cutoff")
            check(
                await _expire(expirer, _TENANT, fact.created_at, "expire at the fact's time") == 0,
                14,
                "expire with the cutoff at a fact's created_at deleted it (the bound is strict)",
            )
            check(
                await store.recall(*MAIN) == (fact,),
                14,
                "a fact created at the cutoff is gone after expire",
            )
            later = fact.created_at + _MICROSECOND
            await _past(later)
            check(
                await _count(expirer, later, "count_expired a microsecond later") == 1,
                14,
                "count_expired a microsecond after a fact's created_at did not count it",
            )
            check(
                await _expire(expirer, _TENANT, later, "expire a microsecond later") == 1,
                14,
                "expire a microsecond after a fact's created_at did not delete it",
            )
            check(
                await self.count_stored(store, key_of(MAIN)) == 0,
                14,
                "the expired fact's row is still stored (hidden, not deleted)",
            )

    async def test_rule14_restored_facts_are_judged_by_their_own_time(self) -> None:
        """Rule 14: facts restored with old times go or stay by those times, to the microsecond."""
        async with self._open() as store:
            _expirer(store)
            if not isinstance(store, RestoresFacts):
                not_applicable("RestoresFacts (to hold facts with old times)")

        def example(blocking: BlockingStore, data: st.DataObject) -> None:
            cutoff = data.draw(
                st.datetimes(
                    min_value=datetime(1900, 1, 1),
                    max_value=datetime(2100, 1, 1),
                    timezones=st.sampled_from([UTC, timezone(timedelta(hours=-7))]),
                ).filter(lambda moment: moment < datetime.now(UTC)),
                label="cutoff",
            )
            shifts = data.draw(
                st.lists(
                    st.sampled_from([-_MICROSECOND, timedelta(0), _MICROSECOND])
                    | st.timedeltas(
                        min_value=-timedelta(days=3650), max_value=timedelta(days=3650)
                    ),
                    min_size=1,
                    max_size=8,
                ),
                label="created_at minus cutoff",
            )
            facts = [
                Memory(
                    f"restored-{index}",
                    MemoryKey(_TENANT, _USERS[index % len(_USERS)]),
                    f"fact {index}",
                    cutoff.astimezone(UTC) + shift,
                )
                for index, shift in enumerate(shifts)
            ]
            target = cast("Any", blocking.store)
            blocking.run(target.restore_many, facts)
            deleted = blocking.run(target.expire, _TENANT, before=cutoff)
            old = {fact.id for fact in facts if fact.created_at < cutoff}
            check(
                deleted == len(old),
                14,
                f"expire returned {deleted}; {len(old)} restored facts were older than the cutoff",
            )
            for user in _USERS:
                kept = blocking.recall(_TENANT, user)
                wanted = [
                    fact for fact in facts if fact.key.end_user_id == user and fact.id not in old
                ]
                check(
                    list(kept) == wanted,
                    14,
                    f"after expire, end user {user!r} holds ids {ids_of(kept)}, not "
                    f"{ids_of(wanted)}",
                )
                check(
                    blocking.count_stored(MemoryKey(_TENANT, user)) == len(wanted),
                    14,
                    f"end user {user!r} still has rows of expired facts stored",
                )

        await self._examples(example)

    async def test_rule14_invalid_cutoffs_and_tenants_are_refused_and_change_nothing(
        self,
    ) -> None:
        """Rule 14: a naive, future or non-datetime cutoff, or a bad tenant, is refused."""
        async with self._open() as store:
            expirer = _expirer(store)
            fact = await store.remember(*MAIN, "kept")
            await _past(fact.created_at + _MICROSECOND)
            now = datetime.now(UTC)
            refusals: list[tuple[str, object, type[Exception]]] = [
                ("a naive cutoff", now.replace(tzinfo=None), InvalidInputError),
                ("a cutoff in the future", now + timedelta(days=1), InvalidInputError),
                ("a cutoff as text", now.isoformat(), TypeError),
                ("a cutoff as a number", now.timestamp(), TypeError),
                ("no cutoff", None, TypeError),
            ]
            for method in (expirer.expire, expirer.count_expired):
                call = cast("Any", method)
                for what, before, expected in refusals:
                    try:
                        await call(_TENANT, before=before)
                    except expected as exc:
                        if isinstance(exc, InvalidInputError):
                            check(
                                exc.argument == "before",
                                14,
                                f"{method.__name__} with {what} named {exc.argument!r}, "
                                "not 'before'",
                            )
                        continue
                    except Exception as exc:
                        raise RuleViolationError(
                            14,
                            f"{method.__name__} with {what} raised {type(exc).__name__}; it "
                            f"must raise {expected.__name__}",
                        ) from exc
                    raise RuleViolationError(
                        14,
                        f"{method.__name__} with {what} answered; it must raise "
                        f"{expected.__name__}",
                    )
                await refuses_invalid_scopes(partial(call, before=now), method.__name__, 14)
            check(
                await store.recall(*MAIN) == (fact,)
                and await self.count_stored(store, key_of(MAIN)) == 1,
                14,
                "a refused expire changed stored facts",
            )
            check(
                await _expire(expirer, ScopeObject(_TENANT), now, "expire of a scope object") == 1,
                14,
                "expire of a scope object with the tenant did not delete its fact",
            )

    async def test_rule14_calls_made_meanwhile_keep_working(self) -> None:
        """Rule 14: remember, forget and erase during an expire work; two expires count once."""
        async with self._open() as store:
            expirer = _expirer(store)
            old = [
                await store.remember(_TENANT, _USERS[index % len(_USERS)], f"old {index}")
                for index in range(200)
            ]
            cutoff = max(fact.created_at for fact in old) + _MICROSECOND
            await _past(cutoff)
            counts: list[int] = []
            made: list[Memory] = []
            forgotten: list[bool] = []

            failures: list[RuleViolationError] = []

            async def expiring() -> None:
                try:
                    counts.append(await _expire(expirer, _TENANT, cutoff, "a concurrent expire"))
                except RuleViolationError as exc:
                    failures.append(exc)

            async def writing() -> None:
                try:
                    for number in range(20):
                        made.append(await store.remember(*_WRITER, f"new {number}"))
                        await anyio.lowlevel.checkpoint()
                    forgotten.append(await self._forget(store, *_WRITER, made[0].id))
                    await store.erase(_TENANT, "erased-meanwhile")
                except Exception as exc:  # noqa: BLE001 - raised below as the rule's failure.
                    failure = RuleViolationError(
                        14, f"a call made during expire raised {type(exc).__name__}"
                    )
                    failure.__cause__ = exc
                    failures.append(failure)

            async with anyio.create_task_group() as group:
                group.start_soon(expiring)
                group.start_soon(expiring)
                group.start_soon(writing)
            # Raised out here: the rule's own failure, not a group of the tasks'.
            if failures:
                raise failures[0]
            check(
                sum(counts) == len(old),
                14,
                f"two expires at once returned {counts}; together they must count each of the "
                f"{len(old)} old facts once",
            )
            check(forgotten == [True], 14, "a forget during expire did not delete its fact")
            kept = await store.recall(*_WRITER)
            check(
                kept == tuple(made[1:]),
                14,
                f"facts remembered during expire: {ids_of(kept)} held, not {ids_of(made[1:])}",
            )
            for user in _USERS:
                check(
                    await self.count_stored(store, MemoryKey(_TENANT, user)) == 0,
                    14,
                    f"end user {user!r} still holds rows of facts older than the cutoff",
                )

    async def _held_exactly(
        self,
        store: MemoryStore,
        held: dict[Pair, list[Memory]],
        gone: Iterable[str],
        when: str,
    ) -> None:
        gone_ids = set(gone)
        for pair, facts in held.items():
            wanted = tuple(fact for fact in facts if fact.id not in gone_ids)
            kept = await store.recall(*pair)
            check(
                kept == wanted,
                14,
                f"{when}, key {pair!r} holds ids {ids_of(kept)}, not {ids_of(wanted)}",
            )
            stored = await self.count_stored(store, key_of(pair))
            check(
                stored == len(wanted),
                14,
                f"{when}, key {pair!r} has {stored} rows stored, not {len(wanted)} (hidden "
                "facts are not deleted ones)",
            )


def _pair(fact: Memory) -> Pair:
    return fact.key.tenant, fact.key.end_user_id
