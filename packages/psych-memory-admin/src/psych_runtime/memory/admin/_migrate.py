"""Copying every fact of every key from one store to another, as they were."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterator, Sequence
from dataclasses import dataclass

import anyio

from psych_runtime.memory.port import InvalidInputError, MemoryKey, MemoryStore

from ._exit import CommandError, ExitCode
from ._stores import held_prefix, lister, restorer

__all__ = ["Migration", "Progress", "migrate"]


@dataclass(frozen=True, slots=True)
class Migration:
    """What a migration found and did."""

    end_users: int
    """Keys in the source (within the tenant, when one was named)."""
    facts: int
    """Facts in those keys, now in both stores."""
    copied: int
    """Facts this run wrote to the destination."""


class Progress:
    """What the command shows while copying; the default shows nothing."""

    def planned(self, facts: int) -> None:
        """The number of facts about to be copied."""

    def copied(self, facts: int) -> None:
        """That many more facts were copied."""

    def finished_key(self) -> None:
        """One more key holds all its facts in the destination."""


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
    same order (they are what an earlier, interrupted run copied). Only then
    are the missing facts restored, each key's in order, ``jobs`` keys at a
    time. Last, every key's facts are counted in both stores.

    Raises:
        CommandError: A store lacks a capability, or a destination key holds
            other facts (refused, nothing copied), or the counts differ at
            the end (refused).
        MemoryStoreError: A store failed.
    """
    lists = lister(source, "FROM_URL")
    restores = restorer(destination, "TO_URL")
    tenants = (tenant,) if tenant is not None else await lists.tenants()
    keys = [
        MemoryKey(name, end_user) for name in tenants for end_user in await lists.end_users(name)
    ]

    plan: dict[MemoryKey, tuple[int, int]] = {}
    conflicts: list[MemoryKey] = []

    async def check(key: MemoryKey) -> None:
        wanted = await source.recall(key.tenant, key.end_user_id)
        held = await destination.recall(key.tenant, key.end_user_id)
        if held_prefix(wanted, held):
            plan[key] = (len(wanted), len(held))
        else:
            conflicts.append(key)

    await _each(keys, check, jobs)
    if conflicts:
        raise CommandError(
            "TO_URL",
            f"{len(conflicts)} end user(s) there hold facts that are not the first facts of "
            "the same end user in FROM_URL (other ids, contents, times or order); nothing "
            "was copied",
            ExitCode.REFUSED,
        )
    progress.planned(sum(total - held for total, held in plan.values()))
    copied = 0

    async def copy(key: MemoryKey) -> None:
        nonlocal copied
        total, held = plan[key]
        if held < total:
            facts = await source.recall(key.tenant, key.end_user_id)
            for fact in facts[held:]:
                try:
                    if await restores.restore(fact):
                        copied += 1
                except InvalidInputError as exc:
                    raise CommandError(
                        "TO_URL", f"refused a fact: {exc}", ExitCode.REFUSED
                    ) from None
                progress.copied(1)
        progress.finished_key()

    await _each(keys, copy, jobs)
    mismatched = 0

    async def verify(key: MemoryKey) -> None:
        nonlocal mismatched
        wanted = await source.recall(key.tenant, key.end_user_id)
        held = await destination.recall(key.tenant, key.end_user_id)
        if len(wanted) != len(held) or not held_prefix(wanted, held):
            mismatched += 1

    await _each(keys, verify, jobs)
    if mismatched:
        raise CommandError(
            "TO_URL",
            f"after copying, {mismatched} end user(s) hold other facts than in FROM_URL "
            "(was either store written to meanwhile?); run migrate again to finish",
            ExitCode.REFUSED,
        )
    return Migration(
        end_users=len(keys), facts=sum(total for total, _ in plan.values()), copied=copied
    )


async def _each(
    keys: Sequence[MemoryKey], work: Callable[[MemoryKey], Awaitable[None]], jobs: int
) -> None:
    # A few workers share one iterator: one key's facts stay in order on one
    # worker, while several keys are copied at once.
    pending: Iterator[MemoryKey] = iter(keys)

    async def worker() -> None:
        for key in pending:
            await work(key)

    try:
        async with anyio.create_task_group() as group:
            for _ in range(max(1, min(jobs, len(keys)))):
                group.start_soon(worker)
    except BaseExceptionGroup as group_error:
        raise _first(group_error) from None


def _first(error: BaseException) -> BaseException:
    while isinstance(error, BaseExceptionGroup):
        error = error.exceptions[0]
    return error
