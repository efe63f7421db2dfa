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

from ._exit import CommandError, ExitCode
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
class _Plan:
    """What the check found for one key."""

    total: int
    """Facts of the key in the source."""
    held: int
    """Of those, how many the destination holds already (the first ones)."""
    after: str | None = None
    """The id of the last of those: the copy reads the source after it."""


@dataclass(frozen=True, slots=True)
class _Known:
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

    Raises:
        CommandError: A store lacks a capability, or a destination key holds
            other facts (refused, nothing copied), or the counts differ at
            the end (refused): either store was written to meanwhile.
        MemoryStoreError: A store failed.
    """
    lists = lister(source, "FROM_URL")
    restores = restorer(destination, "TO_URL")
    tenants = (tenant,) if tenant is not None else await lists.tenants()
    keys = await _keys(lists, tenants)
    plan = await _checked(
        source,
        destination,
        keys,
        _Known(await _occupied(destination, tenants), await _counted(source, tenants)),
        jobs,
    )
    progress.planned(sum(step.total - step.held for step in plan.values()))
    copier = _Copier(source, restores, plan, progress)
    await _share(keys, copier.copy, jobs)
    now = await _source_counts(source, lists, tenants, jobs)
    # An end user erased in the source while being copied: the copies go
    # too (those of an earlier run included), or the destination would
    # bring back what they had erased.
    erased = [key for key in keys if key not in now]
    emptied: list[MemoryKey] = []

    async def erase(key: MemoryKey) -> None:
        if await destination.erase(key.tenant, key.end_user_id):
            emptied.append(key)
        plan[key] = _Plan(0, 0)  # what both stores hold now

    await _each(erased, erase, jobs)
    mismatched = await _mismatched(source, destination, tenants, plan, jobs)
    # Facts written to the source meanwhile (new end users included) were
    # not all copied.
    mismatched.update(
        key for key, count in now.items() if key not in plan or plan[key].total != count
    )
    if mismatched:
        raise CommandError(
            "TO_URL",
            f"after copying, {len(mismatched)} end user(s) hold other facts than in FROM_URL "
            "(was either store written to meanwhile?); run migrate again to finish",
            ExitCode.REFUSED,
        )
    return Migration(
        end_users=len(keys) - len(erased),
        facts=sum(step.total for step in plan.values()),
        copied=copier.copied,
        erased=len(emptied),
    )


async def _checked(
    source: MemoryStore,
    destination: MemoryStore,
    keys: Sequence[MemoryKey],
    known: _Known,
    jobs: int,
) -> dict[MemoryKey, _Plan]:
    # Every key is judged before anything is written, so a refusal copies nothing.
    plan: dict[MemoryKey, _Plan] = {}
    conflicts: list[MemoryKey] = []

    async def check(key: MemoryKey) -> None:
        occupied, totals = known.occupied, known.totals
        if totals is not None and occupied is not None and key not in occupied:
            # Nothing there to disagree with: the copy reads the source.
            plan[key] = _Plan(totals.get(key, 0), 0)
            return
        held = destination if occupied is None or key in occupied else None
        found = await retried(
            partial(_compared, source, held, key, to_end=totals is None), "FROM_URL", "checked"
        )
        if found is None:
            conflicts.append(key)
            return
        step, read = found
        plan[key] = _Plan(read if totals is None else totals.get(key, 0), step.held, step.after)

    await _each(keys, check, jobs)
    if conflicts:
        raise CommandError(
            "TO_URL",
            f"{len(conflicts)} end user(s) there hold facts that are not the first facts of "
            "the same end user in FROM_URL (other ids, contents, times or order); nothing "
            "was copied",
            ExitCode.REFUSED,
        )
    return plan


async def _compared(
    source: MemoryStore, destination: MemoryStore | None, key: MemoryKey, *, to_end: bool
) -> tuple[_Plan, int] | None:
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
    return _Plan(0, held, after), read


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
        plan: dict[MemoryKey, _Plan],
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
                raise CommandError(
                    "FROM_URL",
                    "a fact of an end user was forgotten there while its facts were being "
                    "copied (stop the writers first); the facts copied so far stay in TO_URL",
                    ExitCode.REFUSED,
                ) from None
            step.total = step.held + read
            ends.append(len(batch))
        await self._write(batch, ends)

    async def _write(self, batch: list[Memory], ends: list[int]) -> list[int]:
        # Returns the ends of the keys not done yet, counted from after ``batch``.
        if batch:
            try:
                stored = await self._destination.restore_many(batch)
            except InvalidInputError as exc:
                raise CommandError("TO_URL", f"refused a fact: {exc}", ExitCode.REFUSED) from None
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
    plan: Mapping[MemoryKey, _Plan],
    jobs: int,
) -> set[MemoryKey]:
    # The keys whose facts in the destination are not what was copied.
    counts = await _counted(destination, tenants)
    if counts is not None:
        return {key for key, step in plan.items() if counts.get(key, 0) != step.total}
    mismatched: set[MemoryKey] = set()

    async def verify(key: MemoryKey) -> None:
        # Without counts, the destination is read beside the source, fact by fact.
        found = await retried(
            partial(_compared, source, destination, key, to_end=True), "FROM_URL", "checked"
        )
        if found is None or found[0].held != plan[key].total or found[1] != plan[key].total:
            mismatched.add(key)

    await _each(list(plan), verify, jobs)
    return mismatched


async def _counted(store: MemoryStore, tenants: Sequence[str]) -> dict[MemoryKey, int] | None:
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
    counts = await _counted(source, tenants)
    if counts is not None:
        return counts
    keys = await _keys(lists, tenants)
    found: dict[MemoryKey, int] = {}

    async def count(key: MemoryKey) -> None:
        held = await count_facts(source, key, "FROM_URL")
        if held:
            found[key] = held

    await _each(keys, count, jobs)
    return found


async def _occupied(store: MemoryStore, tenants: Sequence[str]) -> set[MemoryKey] | None:
    # The keys that hold facts in ``store``, when it can say: no other key
    # needs to be read there. ``None``: every key must be read.
    if not isinstance(store, ListsEndUsers):
        return None
    return {
        MemoryKey(tenant, end_user)
        for tenant in tenants
        for end_user in await store.end_users(tenant)
    }


async def _each(
    keys: Sequence[MemoryKey], work: Callable[[MemoryKey], Awaitable[None]], jobs: int
) -> None:
    async def each(mine: Iterator[MemoryKey]) -> None:
        for key in mine:
            await work(key)

    await _share(keys, each, jobs)


async def _share(
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
        raise _first(group_error) from None


def _first(error: BaseException) -> BaseException:
    while isinstance(error, BaseExceptionGroup):
        error = error.exceptions[0]
    return error
