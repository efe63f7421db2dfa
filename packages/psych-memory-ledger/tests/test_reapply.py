"""`reapply` on real restored copies: every recorded deletion made again, nothing else."""

from __future__ import annotations

import shutil
import sqlite3
from collections.abc import Callable
from contextlib import closing
from datetime import UTC, datetime
from pathlib import Path

import pytest

from psych_runtime.memory.inproc import InProcessMemory
from psych_runtime.memory.ledger import DeletionLedger, Reapplied, reapply, with_ledger
from psych_runtime.memory.port import ExpiresFacts, Memory, MemoryStore, Scope
from psych_runtime.memory.sqlite import SqliteMemory

pytestmark = pytest.mark.anyio


def _file_copy(source: Path, target: Path) -> None:
    shutil.copyfile(source, target)


def _online_backup(source: Path, target: Path) -> None:
    with closing(sqlite3.connect(source)) as src, closing(sqlite3.connect(target)) as dst:
        src.backup(dst)


async def _all(path: Path, tenant: str = "acme") -> dict[str, tuple[Memory, ...]]:
    async with SqliteMemory(path) as store:
        return {user: await store.recall(tenant, user) for user in await store.end_users(tenant)}


@pytest.mark.parametrize("backup", [_file_copy, _online_backup])
async def test_a_restored_copy_loses_again_what_was_deleted_after_it(
    ledger: DeletionLedger, tmp_path: Path, backup: Callable[[Path, Path], None]
) -> None:
    live = tmp_path / "live.sqlite3"
    copy = tmp_path / "copy.sqlite3"
    async with SqliteMemory(live) as bare:
        store = with_ledger(bare, ledger)
        for user in ("u1", "u2", "u3"):
            for n in range(3):
                await store.remember("acme", user, f"{user} fact {n}")
        await store.remember("other", "u1", "same id, another tenant")
        aged = await store.remember("retained", "u1", "past its retention")
        young = await store.remember("retained", "u2", "within its retention")
        # Deletions before the copy is taken: the copy has them already.
        await store.erase("acme", "u3")
        await store.remember("acme", "u3", "u3 after its erase")
    taken = datetime.now(UTC)
    backup(live, copy)
    before = await _all(copy)
    async with SqliteMemory(live) as bare:
        store = with_ledger(bare, ledger)
        gone = before["u2"][1]
        assert await store.forget("acme", "u2", gone.id) is True
        assert await store.erase("acme", "u1") == 3
        await store.remember("acme", "u1", "u1 after its erase")
        assert isinstance(store, ExpiresFacts)
        assert await store.expire("retained", before=young.created_at) == 1
    shutil.copyfile(copy, live)

    async with SqliteMemory(live) as restored:
        first = await reapply(restored, ledger, since=taken)
        second = await reapply(restored, ledger, since=taken)
        assert await restored.recall("other", "u1") != ()
    assert first == Reapplied(entries=3, erased_end_users=1, facts_deleted=5, expiries=1)
    assert second == Reapplied(entries=3, erased_end_users=0, facts_deleted=0, expiries=1)
    after = await _all(live)
    assert "u1" not in after
    assert after["u2"] == tuple(m for m in before["u2"] if m.id != gone.id)
    # What the copy held past the erase before it stays: ids, order, created_at.
    assert after["u3"] == before["u3"]
    assert await _all(live, "retained") == {"u2": (young,)}
    assert aged.created_at < young.created_at


async def test_without_since_an_erasure_is_made_again_and_keeps_what_came_after(
    ledger: DeletionLedger,
) -> None:
    async with InProcessMemory() as bare:
        store = with_ledger(bare, ledger)
        held = await store.remember("acme", "u1", "x")
        await store.erase("acme", "u1")
        later = await store.remember("acme", "u1", "after the erase")
        assert await reapply(bare, ledger) == Reapplied(1, 0, 0)
        assert await bare.recall("acme", "u1") == (later,)
    # A copy that holds both (as a copy restored from several sources may).
    async with InProcessMemory() as restored:
        assert await restored.restore_many([held, later]) == 2
        assert await reapply(restored, ledger, dry_run=True) == Reapplied(1, 1, 1, dry_run=True)
        assert await reapply(restored, ledger) == Reapplied(1, 1, 1)
        assert await restored.recall("acme", "u1") == (later,)


class _Unlisted(MemoryStore):
    async def remember(self, scope: Scope, end_user_id: str, content: str) -> Memory:
        raise NotImplementedError

    async def recall(
        self, scope: Scope, end_user_id: str, *, limit: int | None = None
    ) -> tuple[Memory, ...]:
        raise NotImplementedError

    async def forget(self, scope: Scope, end_user_id: str, memory_id: str) -> bool:
        raise NotImplementedError

    async def erase(self, scope: Scope, end_user_id: str) -> int:
        raise NotImplementedError


async def test_a_store_that_cannot_list_its_end_users_is_refused(ledger: DeletionLedger) -> None:
    with pytest.raises(TypeError, match="lists its end users"):
        await reapply(_Unlisted(), ledger)
    with pytest.raises(TypeError, match="ledger must be a DeletionLedger, not str"):
        await reapply(InProcessMemory(), "ledger")  # type: ignore[arg-type]
