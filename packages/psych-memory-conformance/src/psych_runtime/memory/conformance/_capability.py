"""Rules 10 and 11: the optional capabilities, on a store that provides them."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterable
from datetime import UTC, datetime, timedelta
from typing import Any, Final

from psych_runtime.memory.port import (
    MAX_CREATED_AT,
    MIN_CREATED_AT,
    InvalidInputError,
    ListsEndUsers,
    Memory,
    MemoryStore,
    PagesFacts,
    RestoresFacts,
)

from ._cases import (
    LISTED_KEYS,
    MAIN,
    NO_FACTS_TENANT,
    SAME_END_USER,
    SAME_TENANT,
    Pair,
    ScopeObject,
    ids_of,
    key_of,
)
from ._harness import Harness
from ._paging import pages_of
from ._rules import RuleViolationError
from ._support import check, not_applicable, refuses_invalid_scopes

__all__ = ["CapabilityChecks"]

_RESTORED_AT: Final = datetime(2021, 3, 4, 5, 6, 7, 891011, tzinfo=UTC)
_MICROSECOND: Final = timedelta(microseconds=1)
# Both ends of the range and their neighbours, and times where a store that
# computes the instant from a count of seconds or microseconds since 1970
# (with a float, or an interval of a microsecond) loses or gains one.
_EDGE_TIMES: Final = (
    MIN_CREATED_AT,
    MIN_CREATED_AT + _MICROSECOND,
    datetime(1600, 1, 1, 0, 0, 0, 123457, tzinfo=UTC),
    datetime(1969, 12, 31, 23, 59, 59, 999999, tzinfo=UTC),
    datetime(1970, 1, 1, tzinfo=UTC),
    datetime(2300, 1, 1, 0, 0, 0, 1, tzinfo=UTC),
    MAX_CREATED_AT - _MICROSECOND,
    MAX_CREATED_AT,
)


def _lister(store: MemoryStore) -> ListsEndUsers:
    if not isinstance(store, ListsEndUsers):
        not_applicable("ListsEndUsers")
    return store


def _restorer(store: MemoryStore) -> RestoresFacts:
    if not isinstance(store, RestoresFacts):
        not_applicable("RestoresFacts")
    return store


class CapabilityChecks(Harness):
    """Checks of rules 10 and 11, each skipped as not applicable without its capability.

    Capabilities are optional; their rules are not, for a store that has them.
    """

    async def test_rule10_listed_keys_are_exactly_those_holding_facts(self) -> None:
        """Rule 10: tenants() and end_users() list the keys holding facts, in code-point order."""
        async with self._open() as store:
            lister = _lister(store)
            await _listing_is(lister, (), "a fresh store")
            facts = {pair: await store.remember(*pair, "listed") for pair in LISTED_KEYS}
            await store.remember(*LISTED_KEYS[0], "a second fact of the first key")
            await _listing_is(lister, LISTED_KEYS, "after one remember on each key")
            forgotten, erased = LISTED_KEYS[1], LISTED_KEYS[-1]
            check(
                await store.forget(*forgotten, facts[forgotten].id),
                2,
                "forget of a stored fact's id returned False",
            )
            await store.erase(*erased)
            # A listing may only be judged once the deletes were real.
            for pair, rule in ((forgotten, 2), (erased, 4)):
                stored = await self.count_stored(store, key_of(pair))
                check(
                    stored == 0 and await store.recall(*pair) == (),
                    rule,
                    f"deleting the only facts of key {pair!r} left {stored} row(s)",
                )
            left = tuple(pair for pair in LISTED_KEYS if pair not in {forgotten, erased})
            await _listing_is(
                lister, left, "after forgetting one key's only fact and erasing another"
            )
            for pair in left:
                await store.erase(*pair)
                check(
                    await store.recall(*pair) == ()
                    and await self.count_stored(store, key_of(pair)) == 0,
                    4,
                    f"erase of key {pair!r} left facts behind",
                )
            await _listing_is(lister, (), "after erasing every key")

    async def test_rule10_end_users_refuses_an_invalid_scope(self) -> None:
        """Rule 10: end_users() of an invalid tenant raises TypeError or InvalidKeyError."""
        async with self._open() as store:
            lister = _lister(store)
            await store.remember(*MAIN, "listed")
            await refuses_invalid_scopes(lister.end_users, "end_users", 10)

    async def test_rule11_restored_facts_keep_id_content_time_and_order(self) -> None:
        """Rule 11: restore stores each fact as given, after the key's facts, in restore order."""
        async with self._open() as store:
            restorer = _restorer(store)
            earlier = [
                await store.remember(*MAIN, f"remembered before the restore {index}")
                for index in range(2)
            ]
            check(
                ids_of(await store.recall(*MAIN)) == ids_of(earlier),
                3,
                "recall returns two facts remembered one after the other out of order",
            )
            # Older and older times: the order must come from the restores.
            restored = [
                Memory(
                    f"restored-{index}_Ab9",
                    key_of(MAIN),
                    f"restored fact {index}",
                    _RESTORED_AT - timedelta(days=index),
                )
                for index in range(3)
            ]
            for memory in restored:
                await _restore_answers(restorer, memory, True, "a new fact")  # noqa: FBT003
            recalled = await store.recall(*MAIN)
            expected = (*earlier, *restored)
            by_time = sorted(expected, key=lambda memory: memory.created_at)
            if recalled != expected and recalled == tuple(by_time):
                raise RuleViolationError(
                    3,
                    "recall orders facts by created_at, not by insertion: facts restored with "
                    "older times come first",
                )
            check(
                recalled == expected,
                11,
                f"after restoring 3 facts behind 2 remembered ones, recall returned ids "
                f"{ids_of(recalled)}, not {ids_of(expected)} with their contents and times",
            )
            check(
                all(memory.created_at.utcoffset() == timedelta(0) for memory in recalled),
                11,
                "a restored fact's created_at came back in another timezone than UTC",
            )
            stored = await self.count_stored(store, key_of(MAIN))
            check(stored == 5, 11, f"5 facts, 3 of them restored, left {stored} row(s)")
            later = await store.remember(*MAIN, "remembered after the restore")
            check(
                ids_of(await store.recall(*MAIN)) == [*ids_of(expected), later.id]
                and later.id not in ids_of(restored),
                11,
                "a fact remembered after restored ones does not come last with a fresh id",
            )
            check(
                await store.forget(*MAIN, restored[1].id),
                11,
                "forget of a restored fact's id returned False",
            )

    async def test_rule11_restoring_again_changes_nothing_and_a_taken_id_is_refused(self) -> None:
        """Rule 11: the same fact again answers False; another fact with a taken id is refused."""
        async with self._open() as store:
            restorer = _restorer(store)
            remembered = await store.remember(*SAME_TENANT, "remembered")
            memory = Memory("restored-once", key_of(MAIN), "restored once", _RESTORED_AT)
            await _restore_answers(restorer, memory, True, "a new fact")  # noqa: FBT003
            await _restore_answers(restorer, memory, False, "the same fact again")  # noqa: FBT003
            watched = (MAIN, SAME_TENANT, SAME_END_USER)
            before = [await self._listing(store, pair) for pair in watched]
            for what, taken in (
                ("other content", Memory(memory.id, memory.key, "other", memory.created_at)),
                (
                    "another time",
                    Memory(memory.id, memory.key, memory.content, _RESTORED_AT + timedelta(1)),
                ),
                (
                    "another key",
                    Memory(memory.id, key_of(SAME_END_USER), memory.content, memory.created_at),
                ),
                (
                    "the id of a remembered fact",
                    Memory(remembered.id, key_of(SAME_TENANT), "other", remembered.created_at),
                ),
            ):
                await _refused(
                    restorer.restore, f"restore of a fact with {what} and a taken id", taken
                )
                after = [await self._listing(store, pair) for pair in watched]
                check(
                    after == before,
                    11,
                    f"a refused restore of a fact with {what} and a taken id changed stored facts",
                )

    async def test_rule11_restore_many_keeps_order_and_skips_held_facts(self) -> None:
        """Rule 11: restore_many stores new facts in the given order and counts them."""
        async with self._open() as store:
            restorer = _restorer(store)
            remembered = await store.remember(*MAIN, "remembered before the restore")
            batch = [
                Memory(
                    f"batch-{index}_Ab9",
                    key_of(MAIN if index % 3 else SAME_END_USER),
                    f"restored in a batch {index}",
                    _RESTORED_AT - timedelta(hours=index),
                )
                for index in range(9)
            ]
            await _restore_answers(restorer, batch[1], True, "a new fact")  # noqa: FBT003
            # Held already, given twice: each may be stored at most once.
            given = [*batch[:5], batch[4], *batch[5:]]
            await _restore_many_answers(restorer, given, len(batch) - 1, "a batch")
            main = tuple(memory for memory in batch if memory.key == key_of(MAIN))
            other = tuple(memory for memory in batch if memory.key == key_of(SAME_END_USER))
            for pair, expected in ((MAIN, (remembered, *main)), (SAME_END_USER, other)):
                recalled = await store.recall(*pair)
                check(
                    recalled == expected,
                    11,
                    f"after restore_many, recall of {pair!r} returned ids {ids_of(recalled)}, "
                    f"not {ids_of(expected)} with their contents and times",
                )
                stored = await self.count_stored(store, key_of(pair))
                check(
                    stored == len(expected),
                    11,
                    f"{len(expected)} facts of {pair!r} left {stored} row(s)",
                )
            await _restore_many_answers(restorer, iter(given), 0, "the same batch again")
            await _restore_many_answers(restorer, (), 0, "an empty batch")

    async def test_rule11_restore_many_refuses_a_batch_whole(self) -> None:
        """Rule 11: a batch with a taken id or a bad fact stores none of its facts."""
        async with self._open() as store:
            restorer = _restorer(store)
            held = Memory("held-once", key_of(MAIN), "restored once", _RESTORED_AT)
            await _restore_answers(restorer, held, True, "a new fact")  # noqa: FBT003
            fresh = [
                Memory(f"fresh-{index}", key_of(pair), f"fresh fact {index}", _RESTORED_AT)
                for index, pair in enumerate((MAIN, SAME_TENANT, SAME_END_USER))
            ]
            watched = (MAIN, SAME_TENANT, SAME_END_USER)
            before = [await self._listing(store, pair) for pair in watched]
            for what, batch in (
                (
                    "a taken id at its end",
                    [*fresh, Memory(held.id, held.key, "other content", held.created_at)],
                ),
                (
                    "one id twice with different contents",
                    [*fresh, Memory(fresh[0].id, fresh[0].key, "other", _RESTORED_AT)],
                ),
                (
                    "an id no store hands out at its end",
                    [*fresh, Memory("no spaces allowed", held.key, "x", _RESTORED_AT)],
                ),
            ):
                await _refused(restorer.restore_many, f"restore_many of a batch with {what}", batch)
                after = [await self._listing(store, pair) for pair in watched]
                check(
                    after == before,
                    11,
                    f"a refused restore_many of a batch with {what} stored some of its facts",
                )

    async def test_rule11_times_at_the_ends_of_the_range_read_back_exactly(self) -> None:
        """Rule 11: a created_at from MIN_CREATED_AT to MAX_CREATED_AT reads back exactly."""
        async with self._open() as store:
            restorer = _restorer(store)
            one_by_one = [
                Memory(f"edge-{index}", key_of(MAIN), f"dated {index}", when)
                for index, when in enumerate(_EDGE_TIMES)
            ]
            batch = [
                Memory(f"edge-batch-{index}", key_of(SAME_TENANT), f"dated {index}", when)
                for index, when in enumerate(_EDGE_TIMES)
            ]
            try:
                stored = [await restorer.restore(memory) for memory in one_by_one]
                stored_many = await restorer.restore_many(batch)
            except Exception as exc:
                raise RuleViolationError(
                    11,
                    f"restoring facts dated from {MIN_CREATED_AT.isoformat()} to "
                    f"{MAX_CREATED_AT.isoformat()} raised {type(exc).__name__}",
                ) from exc
            check(
                stored == [True] * len(one_by_one) and stored_many == len(batch),
                11,
                f"restoring facts at the ends of the range returned {stored!r} and "
                f"{stored_many!r}, not True each and {len(batch)}",
            )
            for pair, expected in ((MAIN, one_by_one), (SAME_TENANT, batch)):
                await _read_back(store, pair, tuple(expected))

    async def _listing(self, store: MemoryStore, pair: Pair) -> tuple[tuple[Memory, ...], int]:
        return await store.recall(*pair), await self.count_stored(store, key_of(pair))


async def _listing_is(lister: ListsEndUsers, pairs: Iterable[Pair], when: str) -> None:
    pairs = tuple(pairs)
    tenants = await lister.tenants()
    expected = tuple(sorted({tenant for tenant, _ in pairs}))
    check(
        type(tenants) is tuple and tenants == expected,
        10,
        f"{when}, tenants() returned {tenants!r}, not {expected!r}",
    )
    for tenant in (*expected, NO_FACTS_TENANT):
        users = tuple(sorted(user for owner, user in pairs if owner == tenant))
        for scope in (tenant, ScopeObject(tenant)):
            listed = await lister.end_users(scope)
            check(
                type(listed) is tuple and listed == users,
                10,
                f"{when}, end_users({scope!r}) returned {listed!r}, not {users!r}",
            )


async def _restore_answers(
    restorer: RestoresFacts,
    memory: Memory,
    expected: bool,  # noqa: FBT001
    what: str,
) -> None:
    answer: object = await restorer.restore(memory)
    check(
        type(answer) is bool and answer is expected,
        11,
        f"restore of {what} returned {answer!r}, not {expected!r}",
    )


async def _restore_many_answers(
    restorer: RestoresFacts, memories: Iterable[Memory], expected: int, what: str
) -> None:
    answer: object = await restorer.restore_many(memories)
    check(
        type(answer) is int and answer == expected,
        11,
        f"restore_many of {what} returned {answer!r}, not {expected!r}",
    )


async def _refused(restore: Callable[[Any], Awaitable[object]], what: str, given: object) -> None:
    try:
        answer = await restore(given)
    except InvalidInputError:
        return
    except Exception as exc:
        raise RuleViolationError(
            11, f"{what} raised {type(exc).__name__}; it must raise InvalidInputError"
        ) from exc
    raise RuleViolationError(11, f"{what} returned {answer!r}; it must raise InvalidInputError")


async def _read_back(store: MemoryStore, pair: Pair, expected: tuple[Memory, ...]) -> None:
    """Check that recall, and pages where the store has them, give ``expected`` exactly.

    Raises:
        RuleViolationError: Rule 11, naming the first time that came back changed.
    """
    readers = ["recall"] + (["recall_page"] if isinstance(store, PagesFacts) else [])
    for reader in readers:
        try:
            if isinstance(store, PagesFacts) and reader == "recall_page":
                pages = await pages_of(store, pair, 3, len(expected))
                recalled = tuple(fact for page in pages for fact in page)
            else:
                recalled = await store.recall(*pair)
        except RuleViolationError:
            raise
        except Exception as exc:
            raise RuleViolationError(
                11,
                f"{reader} of facts restored at the ends of the range raised {type(exc).__name__}",
            ) from exc
        # Which facts pages hold is rule 13's; only their times are judged here.
        check(
            ids_of(recalled) == ids_of(expected),
            11 if reader == "recall" else 13,
            f"{reader} of facts restored at the ends of the range gave ids {ids_of(recalled)}, "
            f"not {ids_of(expected)}",
        )
        for given, read in zip(expected, recalled, strict=True):
            check(
                read == given
                and read.created_at.utcoffset() == timedelta(0)
                and read.created_at.replace(tzinfo=None) == given.created_at.replace(tzinfo=None),
                11,
                f"{reader} gave a fact restored at {given.created_at.isoformat()} back with "
                f"created_at {read.created_at.isoformat()}",
            )
