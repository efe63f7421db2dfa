"""A process killed at any step of a ledgered deletion never leaves a committed deletion unrecorded.

Real processes, sent SIGKILL at each step, on real SQLite files; the store's
backup is made with SQLite's online backup API before the deletion, then
restored, and the ledger re-applied to it.
"""

from __future__ import annotations

import os
import sqlite3
import subprocess
import sys
from contextlib import closing
from pathlib import Path

import anyio
import pytest

from psych_runtime.memory.ledger import KEY_VARIABLE, LedgerKey, open_ledger, reapply
from psych_runtime.memory.port import Memory
from psych_runtime.memory.sqlite import SqliteMemory

SECRET = b"a secret of thirty-two bytes, kept"

PROCESS = Path(__file__).with_name("_deleting_process.py")
TENANT = "acme"
USER = "user-1"
OTHER = "user-2"
STEPS = ["before-intent", "after-intent", "after-delete", "none"]


async def _fill(path: Path) -> tuple[tuple[Memory, ...], tuple[Memory, ...]]:
    async with SqliteMemory(path) as store:
        for n in range(3):
            await store.remember(TENANT, USER, f"fact {n} of one")
            await store.remember(TENANT, OTHER, f"fact {n} of another")
        return await store.recall(TENANT, USER), await store.recall(TENANT, OTHER)


async def _facts(path: Path) -> tuple[tuple[Memory, ...], tuple[Memory, ...]]:
    async with SqliteMemory(path) as store:
        return await store.recall(TENANT, USER), await store.recall(TENANT, OTHER)


def _copy(source: Path, target: Path) -> None:
    with closing(sqlite3.connect(source)) as src, closing(sqlite3.connect(target)) as dst:
        src.backup(dst)


@pytest.mark.parametrize("step", STEPS)
@pytest.mark.parametrize(("kind", "backend"), [("erase", "asyncio"), ("forget", "trio")])
def test_no_committed_deletion_is_missing_from_the_ledger(
    tmp_path: Path, step: str, kind: str, backend: str
) -> None:
    store_path = tmp_path / "facts.sqlite3"
    backup_path = tmp_path / "backup.sqlite3"
    ledger_url = f"sqlite:///{tmp_path / 'ledger.sqlite3'}"
    mine, others = anyio.run(_fill, store_path)
    _copy(store_path, backup_path)
    target = mine[1]

    finished = subprocess.run(
        [sys.executable, str(PROCESS), str(store_path), ledger_url, step, kind, backend, target.id],
        env={**os.environ, KEY_VARIABLE: SECRET.decode()},
        capture_output=True,
        check=False,
        timeout=60,
    )
    assert finished.returncode == (0 if step == "none" else -9), finished.stderr.decode()

    key = LedgerKey(SECRET)
    left, others_left = anyio.run(_facts, store_path)
    assert others_left == others
    deleted = {memory.id for memory in mine} - {memory.id for memory in left}
    # The steps are reached: nothing deleted before the store's call, the
    # deletion committed from the store's return on.
    assert bool(deleted) == (step in {"after-delete", "none"})
    with open_ledger(ledger_url, key) as ledger:
        entries = ledger.entries()
        recorded_users = {(e.tenant, e.end_user_hash) for e in entries}
        recorded_ids = {e.fact_id for e in entries}
        if deleted:
            assert (TENANT, key.end_user_hash(TENANT, USER)) in recorded_users
            if kind == "forget":
                assert deleted <= recorded_ids
        if step == "before-intent":
            assert entries == ()
        if step in {"after-intent", "after-delete"}:
            assert [entry.deleted for entry in entries] == [None]

        async def restore_and_reapply() -> tuple[int, int]:
            _copy(backup_path, store_path)
            async with SqliteMemory(store_path) as store:
                first = await reapply(store, ledger)
                second = await reapply(store, ledger)
            return first.facts_deleted, second.facts_deleted

        first, second = anyio.run(restore_and_reapply, backend=backend)
    restored, others_restored = anyio.run(_facts, store_path)
    # Every deletion made before the kill is made again on the restored
    # copy, and nothing else: the other end user's facts are as they were.
    assert {memory.id for memory in restored}.isdisjoint(deleted)
    assert others_restored == others
    assert second == 0
    if step in {"before-intent"}:
        assert restored == mine
        assert first == 0
    elif kind == "erase":
        # An intent whose delete never ran is re-applied too: harmless.
        assert restored == ()
        assert first == len(mine)
    else:
        assert restored == tuple(m for m in mine if m.id != target.id)
        assert first == 1
