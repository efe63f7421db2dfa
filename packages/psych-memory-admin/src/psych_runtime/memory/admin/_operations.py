"""The operations on one open store: count, export, import, erase and expire.

Each returns what it found or did and raises the operation errors of
`_errors` (naming the store by its role, ``"store"``); the command line
words and prints them.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from functools import partial
from itertools import islice
from typing import IO, Final, Literal

from psych_runtime.memory.port import (
    CountsFacts,
    InvalidInputError,
    Memory,
    MemoryKey,
    MemoryStore,
    MemoryStoreError,
    RestoresFacts,
    ScrubsDeletions,
    StoreUnavailableError,
)

from ._errors import HeldFactsConflictError, ImportStoppedError
from ._format import ExportReader, Layout, export_fact
from ._pages import pages, retried
from ._stores import ReportsDurability, expirer, lister, restorer, same_fact

__all__ = [
    "IMPORT_BATCH",
    "ErasureReceipt",
    "ExpiryReceipt",
    "Imported",
    "count_stored",
    "erase_end_user",
    "expire_tenants",
    "export_facts",
    "import_facts",
]

IMPORT_BATCH: Final = 2_000
"""Facts per write of an import: one transaction each, well within a statement timeout."""


async def count_stored(store: MemoryStore, tenant: str | None = None) -> int:
    """How many facts ``store`` holds: in all, or for ``tenant`` (already validated).

    One query per tenant when the store can count (`CountsFacts`), else
    every end user is read.

    Raises:
        MissingCapabilityError: The store cannot list its users.
        MemoryStoreError: The store failed.
    """
    lists = lister(store)
    tenants = (tenant,) if tenant is not None else await lists.tenants()
    total = 0
    for name in tenants:
        if isinstance(store, CountsFacts):
            total += sum((await store.fact_counts(name)).values())
            continue
        for user in await lists.end_users(name):
            total += len(await store.recall(name, user))
    return total


async def export_facts(store: MemoryStore, key: MemoryKey, layout: Layout, stream: IO[str]) -> int:
    """Write the facts of ``key`` to ``stream`` in the export ``layout``; return how many.

    The facts go between the export's head and tail, a page at a time;
    ``stream`` is written from its start (it must be seekable), and written
    again whole when a fact is forgotten between two pages.

    Raises:
        FactsForgottenError: Facts kept being forgotten meanwhile.
        MemoryStoreError: The store failed.
    """
    return await retried(partial(_write_facts, store, key, layout, stream), "exported")


async def _write_facts(store: MemoryStore, key: MemoryKey, layout: Layout, stream: IO[str]) -> int:
    stream.seek(0)
    stream.truncate()
    count = 0
    async for page in pages(store, key):
        stream.write(
            "".join(
                export_fact(fact, layout, first=not count and not index)
                for index, fact in enumerate(page)
            )
        )
        count += len(page)
    return count


@dataclass(frozen=True, slots=True)
class Imported:
    """What an import wrote."""

    written: int
    """Facts this import stored (not those found already held)."""
    batches: int
    """Writes it took, each whole or not at all."""


async def import_facts(store: MemoryStore, key: MemoryKey, reader: ExportReader) -> Imported:
    """Restore the export ``reader`` has checked (the facts of ``key``) into ``store``.

    The store's facts for ``key`` must be the first facts of the export
    (what an earlier import stored): only those after them are written, in
    batches of `IMPORT_BATCH`, each whole or not at all.

    Raises:
        MissingCapabilityError: The store cannot restore facts as they were.
        HeldFactsConflictError: The store holds other facts for ``key``;
            nothing was written.
        FactsForgottenError: The store's facts kept being forgotten while
            they were compared.
        ImportStoppedError: A batch was refused or failed; the earlier ones
            are stored.
        MemoryStoreError: The store failed before anything was written.
    """
    restores = restorer(store)
    held, rest = await retried(partial(_after_held, store, key, reader), "compared")
    return await _restore_in_batches(restores, rest, held)


async def _after_held(
    store: MemoryStore, key: MemoryKey, reader: ExportReader
) -> tuple[int, Iterator[Memory]]:
    # How many facts the store holds for ``key`` (they must be the file's
    # first), and the file's facts after those.
    wanted = reader.facts(key)
    held = 0
    async for page in pages(store, key):
        for fact in page:
            expected = next(wanted, None)
            if expected is None or not same_fact(expected, fact):
                raise HeldFactsConflictError(1, "store")
            held += 1
    return held, wanted


async def _restore_in_batches(
    restores: RestoresFacts, facts: Iterator[Memory], held: int
) -> Imported:
    written = batches = 0
    done = held
    while batch := list(islice(facts, IMPORT_BATCH)):
        try:
            written += await restores.restore_many(batch)
        except (InvalidInputError, MemoryStoreError) as exc:
            raise ImportStoppedError(done, exc) from exc
        batches += 1
        done += len(batch)
    return Imported(written, batches)


ScrubState = Literal["scrubbed", "pending"]


@dataclass(frozen=True, slots=True)
class ErasureReceipt:
    """What an erasure of one end user did, for the record."""

    key: MemoryKey
    """The end user erased."""
    facts_deleted: int
    """Facts this erasure deleted; ``0``: another one had deleted them."""
    erased_at: datetime
    """When the store acknowledged the deletion, in UTC."""
    store: str
    """The store, as it may be shown (its URL without a password)."""
    scrub: ScrubState | None = None
    """Whether the deleted bytes are wiped, for a store that wipes them afterwards."""
    deletion_durability: str | None = None
    """Where the deletion is durable, for a store that says (`ReportsDurability`)."""

    @property
    def outcome(self) -> Literal["erased", "already_erased"]:
        """``"erased"``, or ``"already_erased"`` when it deleted nothing."""
        return "erased" if self.facts_deleted else "already_erased"


async def erase_end_user(store: MemoryStore, key: MemoryKey, shown_as: str) -> ErasureReceipt:
    """Erase every fact of ``key`` from ``store`` and return the receipt.

    When it deleted something, a store that wipes deleted bytes (`ScrubsDeletions`)
    wipes them now, and one that reports it says where the deletion is
    durable. ``shown_as`` is how the receipt names the store.

    Raises:
        MemoryStoreError: The erase failed (the receipt's own questions,
            asked after the deletion, never fail it).
    """
    deleted = await store.erase(key.tenant, key.end_user_id)
    erased_at = datetime.now(UTC)
    if not deleted:
        return ErasureReceipt(key, deleted, erased_at, shown_as)
    scrub, durability = await _after_deletion(store)
    return ErasureReceipt(key, deleted, erased_at, shown_as, scrub, durability)


async def _after_deletion(store: MemoryStore) -> tuple[ScrubState | None, str | None]:
    # What a receipt says once facts were deleted: the wipe of their bytes,
    # done now by a store that does it afterwards, and where it is durable.
    scrub: ScrubState | None = None
    if isinstance(store, ScrubsDeletions):
        scrub = "scrubbed" if await store.scrub() else "pending"
    return scrub, await _durability(store)


@dataclass(frozen=True, slots=True)
class ExpiryReceipt:
    """What an expiry (or its dry run) did, for the record."""

    cutoff: datetime
    """Facts created before this instant (UTC) were expired."""
    facts: tuple[tuple[str, int], ...]
    """Each tenant, in code-point order, with the facts deleted (counted, in a dry run)."""
    expired_at: datetime
    """When the store acknowledged the last deletion (or count), in UTC."""
    store: str
    """The store, as it may be shown (its URL without a password)."""
    dry_run: bool
    """Whether the facts were only counted: nothing was deleted."""
    scrub: ScrubState | None = None
    """Whether the deleted bytes are wiped, for a store that wipes them afterwards."""
    deletion_durability: str | None = None
    """Where the deletion is durable, for a store that says (`ReportsDurability`)."""

    @property
    def total(self) -> int:
        """Facts deleted (counted, in a dry run) in every tenant."""
        return sum(count for _, count in self.facts)


async def expire_tenants(
    store: MemoryStore,
    tenants: tuple[str, ...] | None,
    cutoff: datetime,
    shown_as: str,
    *,
    dry_run: bool,
) -> ExpiryReceipt:
    """Delete (or count) the facts created before ``cutoff`` in ``tenants``; return the receipt.

    ``tenants`` are already validated; ``None`` is every tenant the store
    lists. After a deletion, the receipt's scrub and durability are found as
    for an erase. ``shown_as`` is how the receipt names the store.

    Raises:
        MissingCapabilityError: The store cannot expire facts, or cannot
            list its tenants when ``tenants`` is ``None``. Nothing was done.
        InvalidInputError: ``cutoff`` is in the future (see the port's
            `validate_cutoff`); nothing was done.
        MemoryStoreError: The store failed; earlier tenants' facts may be
            deleted (then the error says ``may_have_taken_effect``).
    """
    expires = expirer(store)
    names = tenants if tenants is not None else await lister(store).tenants()
    done: list[tuple[str, int]] = []
    for tenant in names:
        if dry_run:
            done.append((tenant, await expires.count_expired(tenant, before=cutoff)))
            continue
        try:
            done.append((tenant, await expires.expire(tenant, before=cutoff)))
        except StoreUnavailableError as exc:
            if sum(count for _, count in done) and not exc.may_have_taken_effect:
                raise StoreUnavailableError(
                    exc.operation,
                    f"{exc.reason}, after facts of earlier tenants were deleted for good; "
                    "expire again to delete the rest",
                    may_have_taken_effect=True,
                ) from exc
            raise
    expired_at = datetime.now(UTC)
    receipt = ExpiryReceipt(cutoff, tuple(done), expired_at, shown_as, dry_run)
    if dry_run or not receipt.total:
        return receipt
    scrub, durability = await _after_deletion(store)
    return ExpiryReceipt(cutoff, tuple(done), expired_at, shown_as, dry_run, scrub, durability)


async def _durability(store: MemoryStore) -> str | None:
    # Asked after the deletion, which stands whatever the answer: a server
    # that cannot say makes the receipt say "unknown", not the erase fail.
    if not isinstance(store, ReportsDurability):
        return None
    try:
        return await store.deletion_durability()
    except MemoryStoreError:
        return "unknown"
