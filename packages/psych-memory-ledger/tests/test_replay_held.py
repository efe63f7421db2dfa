"""A replayed erasure deletes what the end user held then, never what came after.

Above all when the ledger never learnt the erasure's outcome: such an
intent stays in every later replay, so it must be harmless to what the end
user stores afterwards.
"""

from __future__ import annotations

import sqlite3
from contextlib import closing
from datetime import UTC, datetime
from pathlib import Path

import anyio
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from psych_runtime.memory.inproc import InProcessMemory
from psych_runtime.memory.ledger import (
    DeletionLedger,
    LedgerKey,
    Reapplied,
    open_ledger,
    reapply,
    with_ledger,
)
from psych_runtime.memory.port import (
    Memory,
    MemoryStore,
    Scope,
    StoreUnavailableError,
    StoreWrapper,
)
from psych_runtime.memory.sqlite import SqliteMemory

pytestmark = pytest.mark.anyio


class _LocksTheLedgerAfterErase(StoreWrapper):
    """A real store whose erase, once done, leaves the ledger locked by another connection.

    What an operator's second process holding ``BEGIN IMMEDIATE`` on the
    ledger does at the worst moment: the deletion is made, its outcome
    cannot be written.
    """

    __slots__ = ("holder",)

    def __init__(self, store: MemoryStore, ledger_file: Path) -> None:
        super().__init__(store)
        self.holder = sqlite3.connect(ledger_file, isolation_level=None)

    async def erase(self, scope: Scope, end_user_id: str) -> int:
        deleted = await self.wrapped.erase(scope, end_user_id)
        self.holder.execute("BEGIN IMMEDIATE")
        return deleted


def _online_backup(source: Path, target: Path) -> None:
    with closing(sqlite3.connect(source)) as src, closing(sqlite3.connect(target)) as dst:
        src.backup(dst)


async def test_an_erasure_whose_outcome_was_never_written_keeps_what_came_after(
    tmp_path: Path, key: LedgerKey
) -> None:
    ledger_file = tmp_path / "ledger.sqlite3"
    url = f"sqlite:///{ledger_file}"
    live, before, after = (tmp_path / f"{n}.sqlite3" for n in ("live", "before", "after"))
    ledger = open_ledger(url, key, busy_timeout=0)
    async with SqliteMemory(live) as bare:
        faulty = _LocksTheLedgerAfterErase(bare, ledger_file)
        store = with_ledger(faulty, ledger)
        held = [await store.remember("acme", "u1", f"held {n}") for n in range(3)]
        await store.remember("acme", "u2", "another end user")
        before_taken = datetime.now(UTC)
        _online_backup(live, before)
        # The store's answer reaches the caller although the ledger is locked.
        assert await store.erase("acme", "u1") == 3
        with open_ledger(url, key, create=False, busy_timeout=0) as reader:
            (pending,) = reader.entries()
        assert (pending.kind, pending.deleted, pending.done_at) == ("erase", None, None)
        later = await store.remember("acme", "u1", "stored after the erasure")
        after_taken = datetime.now(UTC)
        _online_backup(live, after)

    # Restored from a copy taken after the erasure: the pending intent reads,
    # and the fact stored after the erasure stays.
    async with SqliteMemory(after) as restored:
        counted = await reapply(restored, ledger, since=after_taken, dry_run=True)
        done = await reapply(restored, ledger, since=after_taken)
        assert await restored.recall("acme", "u1") == (later,)
    assert counted == Reapplied(1, 0, 0, dry_run=True)
    assert done == Reapplied(1, 0, 0)
    # Restored from a copy taken before it: what was held goes again.
    async with SqliteMemory(before) as restored:
        assert await reapply(restored, ledger, since=before_taken) == Reapplied(1, 1, 3)
        assert await restored.recall("acme", "u1") == ()
        assert len(await restored.recall("acme", "u2")) == 1
    assert held[0].created_at <= pending.recorded_at < later.created_at

    # Once the other process lets go, closing the ledger writes the outcome,
    # with the instant the store answered: the entry is done, and prunable.
    faulty.holder.execute("ROLLBACK")
    faulty.holder.close()
    ledger.close()
    with open_ledger(url, key) as reopened:
        (entry,) = reopened.entries()
        assert entry.deleted == 3
        assert entry.done_at is not None
        assert pending.recorded_at <= entry.done_at <= after_taken
        assert reopened.prune(datetime.now(UTC)).entries_pruned == 1


async def test_an_outcome_not_written_is_written_by_the_next_deletion(
    ledger_url: str, key: LedgerKey, tmp_path: Path
) -> None:
    ledger_file = Path(ledger_url.removeprefix("sqlite:///"))
    with open_ledger(ledger_url, key, busy_timeout=0) as ledger:
        async with InProcessMemory() as bare:
            faulty = _LocksTheLedgerAfterErase(bare, ledger_file)
            store = with_ledger(faulty, ledger)
            await store.remember("acme", "u1", "x")
            assert await store.erase("acme", "u1") == 1
            assert [e.deleted for e in ledger.entries()] == [None]
            faulty.holder.execute("ROLLBACK")
            faulty.holder.close()
            assert await store.forget("acme", "u2", "unknown") is False
            assert [e.deleted for e in ledger.entries()] == [1]


async def _restored_from(snapshot: tuple[Memory, ...]) -> InProcessMemory:
    restored = InProcessMemory()
    await restored.restore_many(snapshot)
    return restored


_STEPS = st.lists(
    st.tuples(
        st.sampled_from(["remember", "erase", "erase-unrecorded", "forget", "copy"]),
        st.sampled_from(["u1", "u2"]),
        st.integers(0, 4),
    ),
    min_size=1,
    max_size=16,
)


def _facts(memories: tuple[Memory, ...]) -> dict[str, list[str]]:
    found: dict[str, list[str]] = {}
    for memory in memories:
        found.setdefault(memory.key.end_user_id, []).append(memory.id)
    return found


@pytest.mark.parametrize("backend", ["asyncio", "trio"])
@settings(max_examples=25, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(steps=_STEPS)
def test_a_replayed_copy_holds_exactly_what_it_held_and_the_live_store_kept(
    steps: list[tuple[str, str, int]],
    tmp_path_factory: pytest.TempPathFactory,
    key: LedgerKey,
    backend: str,
) -> None:
    """Whatever the order of writes, deletions, copies and unwritten outcomes."""

    async def everything(store: MemoryStore) -> tuple[Memory, ...]:
        return tuple([m for user in ("u1", "u2") for m in await store.recall("acme", user)])

    async def run() -> None:
        url = f"sqlite:///{tmp_path_factory.mktemp('ledger') / 'ledger.sqlite3'}"
        copies: list[tuple[datetime, tuple[Memory, ...]]] = []
        with open_ledger(url, key) as ledger:
            async with InProcessMemory() as bare:
                store = with_ledger(bare, ledger)
                for step in steps:
                    await _step(store, bare, ledger, step, copies)
                live = _facts(await everything(bare))
            for taken, snapshot in copies:
                restored = await _restored_from(snapshot)
                counted = await reapply(restored, ledger, since=taken, dry_run=True)
                done = await reapply(restored, ledger, since=taken)
                assert counted.facts_deleted == done.facts_deleted
                kept = _facts(await everything(restored))
                # Nothing erased or forgotten comes back; nothing else is lost.
                assert kept == {
                    user: ids
                    for user, facts in _facts(snapshot).items()
                    if (ids := [i for i in facts if i in live.get(user, [])])
                }

    anyio.run(run, backend=backend)


async def _step(
    store: MemoryStore,
    bare: InProcessMemory,
    ledger: DeletionLedger,
    taken_step: tuple[str, str, int],
    copies: list[tuple[datetime, tuple[Memory, ...]]],
) -> None:
    step, user, n = taken_step
    if step == "remember":
        await store.remember("acme", user, f"fact {n}")
    elif step == "erase":
        await store.erase("acme", user)
    elif step == "erase-unrecorded":
        # The intent is recorded, the store erases, the outcome is lost.
        await anyio.to_thread.run_sync(ledger._intend, "erase", "acme", user, None)
        await bare.erase("acme", user)
    elif step == "forget":
        facts = await bare.recall("acme", user)
        if facts:
            await store.forget("acme", user, facts[n % len(facts)].id)
    else:
        snapshot = tuple([m for u in ("u1", "u2") for m in await bare.recall("acme", u)])
        copies.append((datetime.now(UTC), snapshot))


class _FailsAfterErasing(StoreWrapper):
    """A real store whose erase deletes, then fails saying it may have taken effect."""

    __slots__ = ()

    async def erase(self, scope: Scope, end_user_id: str) -> int:
        await self.wrapped.erase(scope, end_user_id)
        raise StoreUnavailableError("erase", "the connection was lost", may_have_taken_effect=True)


async def test_an_intent_without_outcome_is_bounded_when_its_process_closes_the_ledger(
    ledger_url: str, key: LedgerKey
) -> None:
    ledger = open_ledger(ledger_url, key)
    async with InProcessMemory() as bare:
        store = with_ledger(_FailsAfterErasing(bare), ledger)
        await store.remember("acme", "u1", "x")
        with pytest.raises(StoreUnavailableError, match="may have taken effect"):
            await store.erase("acme", "u1")
        (pending,) = ledger.entries()
        assert (pending.deleted, pending.done_at) == (None, None)
        # Pending, it is kept by a prune however late.
        assert ledger.prune(datetime.now(UTC)).entries_pruned == 0
    closed_before = datetime.now(UTC)
    ledger.close()
    with open_ledger(ledger_url, key) as reopened:
        (bounded,) = reopened.entries()
        assert bounded.deleted is None
        assert bounded.done_at is not None
        assert closed_before <= bounded.done_at <= datetime.now(UTC)
        # A copy taken after the bound lacks what it may have deleted.
        assert reopened.entries(since=datetime.now(UTC)) == ()
        assert reopened.prune(datetime.now(UTC)).entries_pruned == 1
