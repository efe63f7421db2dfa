"""Copying every fact of every key from one store to another, as they were."""

from __future__ import annotations

from collections.abc import (
    AsyncIterator,
    Awaitable,
    Callable,
    Container,
    Coroutine,
    Iterator,
    Mapping,
    Sequence,
)
from dataclasses import dataclass
from functools import partial
from typing import Any, Final

import anyio

from psych_runtime.memory.port import (
    CountsFacts,
    InvalidInputError,
    ListsEndUsers,
    Memory,
    MemoryKey,
    MemoryStore,
    RestoresFacts,
    StalePageError,
)

from ._errors import (
    CopyMismatchError,
    FactRefusedError,
    FactsForgottenError,
    HeldFactsConflictError,
)
from ._pages import count_facts, pages, retried
from ._stores import lister, restorer, same_fact

__all__ = ["Migration", "Progress", "migrate"]

# Facts written per call: each batch is one transaction, small enough to
# keep a statement's size and the progress bar's steps modest.
_BATCH: Final = 2_000


@dataclass(frozen=True, slots=True)
class Migration:
    """What a migration found and did."""

    end_users: int
    """Keys in the source (within the tenant, when one was named)."""
    facts: int
    """Facts in those keys, now in both stores."""
    copied: int
    """Facts this run wrote to the destination."""
    erased: int = 0
    """Keys the source erased while they were copied, erased in the destination too."""


class Progress:
    """What the command shows while copying; the default shows nothing."""

    def planned(self, facts: int) -> None:
        """The number of facts about to be copied."""

    def copied(self, facts: int) -> None:
        """That many more facts were copied."""

    def finished_key(self) -> None:
        """One more key holds all its facts in the destination."""


@dataclass(slots=True)
class _KeyPlan:
    """What the check found for one key: what to copy of it."""

    total: int
    """Facts of the key in the source."""
    held: int
    """Of those, how many the destination holds already (the first ones)."""
    after: str | None = None
    """The id of the last of those: the copy reads the source after it."""


@dataclass(frozen=True, slots=True)
class _KeyCensus:
    """What the stores could say about their keys without reading them."""

    occupied: Container[MemoryKey] | None
    """The keys the destination holds facts for; ``None``: it cannot list them."""
    totals: Mapping[MemoryKey, int] | None
    """Each source key's number of facts; ``None``: it cannot count them."""


async def migrate(
    source: MemoryStore,
    destination: MemoryStore,
    tenant: str | None,
    *,
    jobs: int,
    progress: Progress,
) -> Migration:
    """Copy every fact of every key of ``source`` (or of ``tenant``) into ``destination``.

    First every key is checked: the destination's facts for it must be the
    first facts of the source's, the same ids, contents and times in the
    same order (they are what an earlier, interrupted run copied). A key the
    destination does not hold cannot disagree, so when the source can count
    its facts (`CountsFacts`) such a key is not read until it is copied.
    Every key is read a page at a time (`PagesFacts`, when the store
    provides it), so a key of any size is copied in bounded memory.
    Only then are the missing facts restored, each key's in order, ``jobs``
    writers at a time; each writer sends the facts of several keys per call,
    a key's facts always in order, so that a key holds a first part of its
    facts whenever a run stops. Last, both stores are counted again (with
    one query per tenant where they can count) and compared with what was
    copied. A key the source erased meanwhile is erased in the destination
    too, so that a copy never brings back what an end user had erased; any
    other difference is refused.

    The errors name ``source`` and ``destination`` by their roles,
    ``"source"`` and ``"target"``.

    Raises:
        MissingCapabilityError: The source cannot list its users, or the
            destination cannot restore facts as they were; nothing copied.
        HeldFactsConflictError: Destination keys hold other facts; nothing
            copied.
        FactsForgottenError: Source facts were forgotten while they were
            checked (after a few attempts) or copied (the facts copied so
            far stay).
        FactRefusedError: The destination refused a fact.
        CopyMismatchError: The counts differ at the end: either store was
            written to meanwhile.
        MemoryStoreError: A store failed.
    """
    lists = lister(source, "source")
    restores = restorer(destination, "target")
    tenants = (tenant,) if tenant is not None else await lists.tenants()
    keys = await _keys(lists, tenants)
    census = _KeyCensus(await _keys_held(destination, tenants), await _fact_counts(source, tenants))
    plan = await _plan_copy(source, destination, keys, census, jobs)
    progress.planned(sum(step.total - step.held for step in plan.values()))
    copier = _Copier(source, restores, plan, progress)
    await _share_keys(keys, copier.copy, jobs)
    now = await _source_counts(source, lists, tenants, jobs)
    # An end user erased in the source while being copied: the copies go
    # too (those of an earlier run included), or the destination would
    # bring back what they had erased.
    erased = [key for key in keys if key not in now]
    emptied: list[MemoryKey] = []

    async def erase(key: MemoryKey) -> None:
        if await destination.erase(key.tenant, key.end_user_id):
            emptied.append(key)
        plan[key] = _KeyPlan(0, 0)  # what both stores hold now

    await _for_each_key(erased, erase, jobs)
    mismatched = await _mismatched(source, destination, tenants, plan, jobs)
    # Facts written to the source meanwhile (new end users included) were
    # not all copied.
    mismatched.update(
        key for key, count in now.items() if key not in plan or plan[key].total != count
    )
    if mismatched:
        raise CopyMismatchError(len(mismatched))
    return Migration(
        end_users=len(keys) - len(erased),
        facts=sum(step.total for step in plan.values()),
        copied=copier.copied,
        erased=len(emptied),
    )


async def _plan_copy(
    source: MemoryStore,
    destination: MemoryStore,
    keys: Sequence[MemoryKey],
    census: _KeyCensus,
    jobs: int,
) -> dict[MemoryKey, _KeyPlan]:
    # Every key is judged before anything is written, so a refusal copies nothing.
    plan: dict[MemoryKey, _KeyPlan] = {}
    conflicts: list[MemoryKey] = []

    async def check(key: MemoryKey) -> None:
        occupied, totals = census.occupied, census.totals
        if totals is not None and occupied is not None and key not in occupied:
            # Nothing there to disagree with: the copy reads the source.
            plan[key] = _KeyPlan(totals.get(key, 0), 0)
            return
        held = destination if occupied is None or key in occupied else None
        found = await retried(
            partial(_compare_key, source, held, key, to_end=totals is None), "checked", "source"
        )
        if found is None:
            conflicts.append(key)
            return
        step, read = found
        plan[key] = _KeyPlan(read if totals is None else totals.get(key, 0), step.held, step.after)

    await _for_each_key(keys, check, jobs)
    if conflicts:
        raise HeldFactsConflictError(len(conflicts))
    return plan


async def _compare_key(
    source: MemoryStore, destination: MemoryStore | None, key: MemoryKey, *, to_end: bool
) -> tuple[_KeyPlan, int] | None:
    # Reads the key in both stores a page at a time, side by side. ``None``:
    # the destination's facts are not the first of the source's. Else what
    # the destination holds (as a plan without a total) and how many source
    # facts were read (all of them with ``to_end``).
    wanted = aiter(_each_fact(pages(source, key)))
    held = read = 0
    after: str | None = None
    if destination is not None:
        async for page in pages(destination, key):
            for fact in page:
                expected = await anext(wanted, None)
                if expected is None or not same_fact(expected, fact):
                    return None
                held += 1
                after = fact.id
    read = held
    if to_end:
        async for _ in wanted:
            read += 1
    return _KeyPlan(0, held, after), read


async def _each_fact(found: AsyncIterator[tuple[Memory, ...]]) -> AsyncIterator[Memory]:
    async for page in found:
        for fact in page:
            yield fact


class _Copier:
    """Writes the planned facts, several keys per call, each key's in order."""

    def __init__(
        self,
        source: MemoryStore,
        destination: RestoresFacts,
        plan: dict[MemoryKey, _KeyPlan],
        progress: Progress,
    ) -> None:
        self._source = source
        self._destination = destination
        self._plan = plan
        self._progress = progress
        self.copied = 0
        """Facts written so far (those found already held not counted)."""

    async def copy(self, keys: Iterator[MemoryKey]) -> None:
        """Copy the missing facts of each key ``keys`` hands this writer."""
        batch: list[Memory] = []
        # Where each key's facts end in ``batch``: the key is done once a
        # write reaches that far.
        ends: list[int] = []
        for key in keys:
            step = self._plan[key]
            read = 0
            try:
                async for page in pages(self._source, key, after=step.after):
                    batch.extend(page)
                    read += len(page)
                    while len(batch) >= _BATCH:
                        ends = await self._write(batch[:_BATCH], ends)
                        del batch[:_BATCH]
            except StalePageError:
                # The facts copied so far stay; the count at the end would
                # not see a fact forgotten in the source after its copy.
                raise FactsForgottenError("source", "copied", retried=False) from None
            step.total = step.held + read
            ends.append(len(batch))
        await self._write(batch, ends)

    async def _write(self, batch: list[Memory], ends: list[int]) -> list[int]:
        # Returns the ends of the keys not done yet, counted from after ``batch``.
        if batch:
            try:
                stored = await self._destination.restore_many(batch)
            except InvalidInputError as exc:
                raise FactRefusedError(exc) from None
            # Added only once the call returned: other writers add meanwhile.
            self.copied += stored
            self._progress.copied(len(batch))
        written = len(batch)
        for _ in range(sum(1 for end in ends if end <= written)):
            self._progress.finished_key()
        return [end - written for end in ends if end > written]


async def _mismatched(
    source: MemoryStore,
    destination: MemoryStore,
    tenants: Sequence[str],
    plan: Mapping[MemoryKey, _KeyPlan],
    jobs: int,
) -> set[MemoryKey]:
    # The keys whose facts in the destination are not what was copied.
    counts = await _fact_counts(destination, tenants)
    if counts is not None:
        return {key for key, step in plan.items() if counts.get(key, 0) != step.total}
    mismatched: set[MemoryKey] = set()

    async def verify(key: MemoryKey) -> None:
        # Without counts, the destination is read beside the source, fact by fact.
        found = await retried(
            partial(_compare_key, source, destination, key, to_end=True), "checked", "source"
        )
        if found is None or found[0].held != plan[key].total or found[1] != plan[key].total:
            mismatched.add(key)

    await _for_each_key(list(plan), verify, jobs)
    return mismatched


async def _fact_counts(store: MemoryStore, tenants: Sequence[str]) -> dict[MemoryKey, int] | None:
    # Every key's number of facts, when the store can count: one query per
    # tenant instead of reading every key. ``None``: it cannot.
    if not isinstance(store, CountsFacts):
        return None
    return {
        MemoryKey(tenant, end_user): count
        for tenant in tenants
        for end_user, count in (await store.fact_counts(tenant)).items()
    }


async def _keys(lists: ListsEndUsers, tenants: Sequence[str]) -> list[MemoryKey]:
    # Every key of ``tenants`` that holds facts.
    return [MemoryKey(name, user) for name in tenants for user in await lists.end_users(name)]


async def _source_counts(
    source: MemoryStore, lists: ListsEndUsers, tenants: Sequence[str], jobs: int
) -> dict[MemoryKey, int]:
    # Every key of the source holding facts now, with how many.
    counts = await _fact_counts(source, tenants)
    if counts is not None:
        return counts
    keys = await _keys(lists, tenants)
    found: dict[MemoryKey, int] = {}

    async def count(key: MemoryKey) -> None:
        held = await count_facts(source, key, "source")
        if held:
            found[key] = held

    await _for_each_key(keys, count, jobs)
    return found


async def _keys_held(store: MemoryStore, tenants: Sequence[str]) -> set[MemoryKey] | None:
    # The keys that hold facts in ``store``, when it can say: no other key
    # needs to be read there. ``None``: every key must be read.
    if not isinstance(store, ListsEndUsers):
        return None
    return {
        MemoryKey(tenant, end_user)
        for tenant in tenants
        for end_user in await store.end_users(tenant)
    }


async def _for_each_key(
    keys: Sequence[MemoryKey], work: Callable[[MemoryKey], Awaitable[None]], jobs: int
) -> None:
    async def each(mine: Iterator[MemoryKey]) -> None:
        for key in mine:
            await work(key)

    await _share_keys(keys, each, jobs)


async def _share_keys(
    keys: Sequence[MemoryKey],
    worker: Callable[[Iterator[MemoryKey]], Coroutine[Any, Any, None]],
    jobs: int,
) -> None:
    # A few workers share one iterator: each key is taken by exactly one,
    # which handles its facts in order, while several keys go at once.
    pending: Iterator[MemoryKey] = iter(keys)
    try:
        async with anyio.create_task_group() as group:
            for _ in range(max(1, min(jobs, len(keys)))):
                group.start_soon(worker, pending)
    except BaseExceptionGroup as group_error:
        raise _first_error(group_error) from None


def _first_error(error: BaseException) -> BaseException:
    while isinstance(error, BaseExceptionGroup):
        error = error.exceptions[0]
    return error
