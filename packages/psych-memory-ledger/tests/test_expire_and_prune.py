"""Expiry by age through the ledger, a replay's dry run, and the ledger's pruning."""

from __future__ import annotations

import sqlite3
from contextlib import closing
from datetime import UTC, datetime, timedelta, timezone
from pathlib import Path
from typing import Self

import anyio
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from psych_runtime.memory.inproc import InProcessMemory
from psych_runtime.memory.ledger import (
    DeletionLedger,
    LedgerError,
    LedgerKey,
    LedgerUnavailableError,
    Pruned,
    open_ledger,
    reapply,
    with_ledger,
)
from psych_runtime.memory.port import (
    ExpiresFacts,
    InvalidInputError,
    Memory,
    MemoryStore,
    Scope,
)

USERS = ("u1", "u2", "u3")


@pytest.mark.anyio
async def test_an_expiry_is_recorded_with_its_tenant_cutoff_and_count(
    ledger: DeletionLedger,
) -> None:
    async with InProcessMemory() as bare:
        store = with_ledger(bare, ledger)
        assert isinstance(store, ExpiresFacts)
        old = await store.remember("acme", "u1", "old")
        young = await store.remember("acme", "u2", "young")
        await store.remember("other", "u1", "another tenant")
        cutoff = young.created_at
        assert await store.count_expired("acme", before=cutoff) == 1
        # Given at another offset, recorded in UTC.
        elsewhere = cutoff.astimezone(timezone(timedelta(hours=2)))
        assert await store.expire("acme", before=elsewhere) == 1
        assert await bare.recall("acme", "u1") == ()
        assert await bare.recall("acme", "u2") == (young,)
        assert len(await bare.recall("other", "u1")) == 1
        assert await store.expire("acme", before=cutoff) == 0
    first, second = ledger.entries()
    assert (first.kind, first.tenant, first.end_user_hash, first.fact_id) == (
        "expire",
        "acme",
        None,
        None,
    )
    assert (first.cutoff, first.deleted, second.deleted) == (cutoff, 1, 0)
    assert first.cutoff is not None
    assert first.cutoff.utcoffset() == timedelta(0)
    assert first.done_at is not None
    assert first.recorded_at <= first.done_at == first.last_at
    assert old.created_at < cutoff


@pytest.mark.anyio
async def test_an_expiry_the_store_refuses_is_its_error_and_recorded_nowhere(
    ledger: DeletionLedger,
) -> None:
    async with InProcessMemory() as bare:
        store = with_ledger(bare, ledger)
        assert isinstance(store, ExpiresFacts)
        with pytest.raises(InvalidInputError, match="before"):
            await store.expire("acme", before=datetime(2026, 1, 1))
        with pytest.raises(InvalidInputError, match="before"):
            await store.expire("acme", before=datetime.now(UTC) + timedelta(days=1))
        with pytest.raises(InvalidInputError, match="scope"):
            await store.expire("", before=datetime.now(UTC))
    assert ledger.entries() == ()


@pytest.mark.anyio
async def test_an_expiry_the_ledger_cannot_record_is_refused(ledger: DeletionLedger) -> None:
    assert ledger.path is not None
    with closing(sqlite3.connect(ledger.path)) as raw, raw:
        raw.execute(
            "CREATE TRIGGER refuse BEFORE INSERT ON psych_ledger_deletion"
            " BEGIN SELECT RAISE(ABORT, 'refused'); END"
        )
    async with InProcessMemory() as bare:
        store = with_ledger(bare, ledger)
        assert isinstance(store, ExpiresFacts)
        await store.remember("acme", "u1", "old")
        with pytest.raises(LedgerUnavailableError) as caught:
            await store.expire("acme", before=datetime.now(UTC))
        assert caught.value.may_have_taken_effect is False
        assert len(await bare.recall("acme", "u1")) == 1


@pytest.mark.anyio
async def test_a_replay_of_an_expiry_needs_a_store_that_expires(
    ledger: DeletionLedger,
) -> None:
    async with InProcessMemory() as bare:
        store = with_ledger(bare, ledger)
        assert isinstance(store, ExpiresFacts)
        await store.expire("acme", before=datetime.now(UTC))
    async with _Listing() as unexpiring:
        assert not isinstance(unexpiring, ExpiresFacts)
        await unexpiring.remember("acme", "u1", "kept: nothing is re-applied")
        with pytest.raises(LedgerError, match="cannot expire facts by age"):
            await reapply(unexpiring, ledger)
        assert len(await unexpiring.recall("acme", "u1")) == 1


class _Listing(MemoryStore):
    """An in-process store that lists its end users and does not expire."""

    def __init__(self) -> None:
        self.store = InProcessMemory()

    async def __aenter__(self) -> Self:
        await self.store.__aenter__()
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.store.aclose()

    async def aclose(self) -> None:
        await self.store.aclose()

    async def remember(self, scope: Scope, end_user_id: str, content: str) -> Memory:
        return await self.store.remember(scope, end_user_id, content)

    async def recall(
        self, scope: Scope, end_user_id: str, *, limit: int | None = None
    ) -> tuple[Memory, ...]:
        return await self.store.recall(scope, end_user_id, limit=limit)

    async def forget(self, scope: Scope, end_user_id: str, memory_id: str) -> bool:
        return await self.store.forget(scope, end_user_id, memory_id)

    async def erase(self, scope: Scope, end_user_id: str) -> int:
        return await self.store.erase(scope, end_user_id)

    async def tenants(self) -> tuple[str, ...]:
        return await self.store.tenants()

    async def end_users(self, scope: Scope) -> tuple[str, ...]:
        return await self.store.end_users(scope)


# Each operation on the live store: (kind, end user, n), n picking a fact of
# the snapshot: the id a forget names, the created_at an expiry cuts off at.
Operation = tuple[str, str, int]
_OPERATIONS = st.lists(
    st.tuples(
        st.sampled_from(["erase", "forget", "expire"]), st.sampled_from(USERS), st.integers(0, 11)
    ),
    max_size=8,
)


@settings(
    max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(operations=_OPERATIONS)
def test_a_replay_restores_the_live_state_and_its_dry_run_counts_it_exactly(
    tmp_path: Path, key: LedgerKey, operations: list[Operation]
) -> None:
    anyio.run(_replay_matches_live, tmp_path, key, operations)


async def _replay_matches_live(tmp_path: Path, key: LedgerKey, operations: list[Operation]) -> None:
    path = tmp_path / f"ledger-{datetime.now(UTC).timestamp()}-{id(operations)}.sqlite3"
    with open_ledger(f"sqlite:///{path}", key) as ledger:
        async with InProcessMemory() as live:
            for n in range(12):
                await live.remember("acme", USERS[n % 3], f"fact {n}")
            await live.remember("other", "u1", "another tenant")
            snapshot = await _everything(live)
            facts = sorted(
                (m for ms in snapshot.values() for m in ms if m.key.tenant == "acme"),
                key=lambda m: m.created_at,
            )
            taken = datetime.now(UTC)
            store = with_ledger(live, ledger)
            assert isinstance(store, ExpiresFacts)
            for kind, user, n in operations:
                if kind == "erase":
                    await store.erase("acme", user)
                elif kind == "forget":
                    await store.forget("acme", user, facts[n].id)
                else:
                    await store.expire("acme", before=facts[n].created_at)
            wanted = await _everything(live)
        async with InProcessMemory() as restored:
            await restored.restore_many(m for ms in snapshot.values() for m in ms)
            counted = await reapply(restored, ledger, since=taken, dry_run=True)
            assert await _everything(restored) == snapshot
            done = await reapply(restored, ledger, since=taken)
            assert await _everything(restored) == wanted
            again = await reapply(restored, ledger, since=taken)
    assert counted.dry_run is True
    assert done.dry_run is False
    assert (counted.entries, counted.erased_end_users, counted.facts_deleted, counted.expiries) == (
        done.entries,
        done.erased_end_users,
        done.facts_deleted,
        done.expiries,
    )
    assert done.facts_deleted == sum(map(len, snapshot.values())) - sum(map(len, wanted.values()))
    assert again.facts_deleted == 0


async def _everything(store: InProcessMemory) -> dict[tuple[str, str], tuple[Memory, ...]]:
    return {
        (tenant, user): await store.recall(tenant, user)
        for tenant in await store.tenants()
        for user in await store.end_users(tenant)
    }


@pytest.mark.anyio
async def test_prune_removes_what_a_replay_since_the_instant_would_not_read(
    ledger: DeletionLedger,
) -> None:
    async with InProcessMemory() as bare:
        store = with_ledger(bare, ledger)
        await store.remember("acme", "u1", "x")
        await store.erase("acme", "u1")
        ledger._intend("erase", "acme", "u9", None)  # an intent never done, older
        middle = datetime.now(UTC)
        await store.remember("acme", "u2", "y")
        await store.erase("acme", "u2")
        ledger._intend("forget", "acme", "u3", "an-id")  # an intent never done, newer
    # The older intent is read too: its deletion may have committed after
    # ``middle``, so a copy taken then may still hold what it deleted.
    read_after = ledger.entries(since=middle)
    assert [(entry.kind, entry.done_at is None) for entry in read_after] == [
        ("erase", True),
        ("erase", False),
        ("forget", True),
    ]
    pruned = ledger.prune(middle)
    assert isinstance(pruned, Pruned)
    assert (pruned.before, pruned.entries_pruned, pruned.entries_kept) == (middle, 1, 3)
    assert pruned.pruned_at >= middle
    assert ledger.entries() == read_after
    assert ledger.prune(middle).entries_pruned == 0


def test_prune_refuses_a_bad_instant_and_a_closed_ledger(ledger: DeletionLedger) -> None:
    with pytest.raises(TypeError, match="before must be a datetime, not str"):
        ledger.prune("2026-01-01")  # type: ignore[arg-type]
    with pytest.raises(InvalidInputError, match="before must be timezone-aware"):
        ledger.prune(datetime(2026, 1, 1))
    with pytest.raises(InvalidInputError, match="before must not be in the future"):
        ledger.prune(datetime.now(UTC) + timedelta(minutes=1))
    ledger.close()
    with pytest.raises(LedgerError, match="closed"):
        ledger.prune(datetime.now(UTC))
