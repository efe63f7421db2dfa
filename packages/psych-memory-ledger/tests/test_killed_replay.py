"""A replay killed at random points, again and again, leaves the invariant once rerun.

Real processes replay a real ledger onto a SQLite file restored from an
online backup, and are sent SIGKILL just before or just after one of the
store's deletions, chosen at random (the seed is in the test's name); each
rerun is killed again, and a last one finishes. Then every recorded deletion
is made again and every other fact is as the live store holds it.
"""

from __future__ import annotations

import os
import random
import sqlite3
import subprocess
import sys
from contextlib import closing
from datetime import UTC, datetime
from pathlib import Path

import anyio
import pytest

from psych_runtime.memory.ledger import KEY_VARIABLE, LedgerKey, open_ledger, reapply, with_ledger
from psych_runtime.memory.port import ExpiresFacts, Memory
from psych_runtime.memory.sqlite import SqliteMemory

SECRET = b"a secret of thirty-two bytes, kept"
PROCESS = Path(__file__).with_name("_replaying_process.py")
USERS = [f"user-{n}" for n in range(12)]
Facts = dict[tuple[str, str], tuple[Memory, ...]]


async def _everything(path: Path) -> Facts:
    async with SqliteMemory(path) as store:
        return {
            (tenant, user): await store.recall(tenant, user)
            for tenant in await store.tenants()
            for user in await store.end_users(tenant)
        }


def _copy(source: Path, target: Path) -> None:
    with closing(sqlite3.connect(source)) as src, closing(sqlite3.connect(target)) as dst:
        src.backup(dst)


async def _live(path: Path, ledger_url: str, backup: Path) -> tuple[datetime, int]:
    """Fill the store, back it up, delete through the ledger; the instant and the calls to make."""
    async with SqliteMemory(path) as store:
        for user in USERS:
            for n in range(3):
                await store.remember("acme", user, f"fact {n} of {user}")
        cutoffs = [await store.remember("retained", user, "aging") for user in USERS[:4]]
    taken = datetime.now(UTC)
    _copy(path, backup)
    with open_ledger(ledger_url, LedgerKey(SECRET)) as ledger:
        async with SqliteMemory(path) as bare:
            ledgered = with_ledger(bare, ledger)
            assert isinstance(ledgered, ExpiresFacts)
            for user in USERS[:5]:
                await ledgered.erase("acme", user)
            for user in USERS[5:9]:
                (first, *_) = await ledgered.recall("acme", user)
                await ledgered.forget("acme", user, first.id)
            await ledgered.expire("retained", before=cutoffs[2].created_at)
            await ledgered.expire("retained", before=cutoffs[3].created_at)
            return taken, len(ledger.entries(since=taken))


@pytest.mark.parametrize("seed", [11, 22, 33])
def test_a_replay_killed_again_and_again_finishes_on_a_rerun(tmp_path: Path, seed: int) -> None:
    store_path = tmp_path / "facts.sqlite3"
    backup = tmp_path / "backup.sqlite3"
    ledger_url = f"sqlite:///{tmp_path / 'ledger.sqlite3'}"
    taken, calls = anyio.run(_live, store_path, ledger_url, backup)
    wanted = anyio.run(_everything, store_path)
    _copy(backup, store_path)
    restored = anyio.run(_everything, store_path)
    assert restored != wanted

    chosen = random.Random(seed)
    backend = "trio" if seed % 2 else "asyncio"
    for attempt in range(3):
        kill_at = chosen.randrange(calls)
        when = chosen.choice(["before", "after"])
        finished = subprocess.run(
            [
                sys.executable,
                str(PROCESS),
                str(store_path),
                ledger_url,
                taken.isoformat(),
                str(kill_at),
                when,
                backend,
            ],
            env={**os.environ, KEY_VARIABLE: SECRET.decode()},
            capture_output=True,
            check=False,
            timeout=60,
        )
        # The first run makes every call; a rerun finds some end users erased
        # already, makes fewer, and may finish before the chosen one.
        assert finished.returncode in ({-9} if attempt == 0 else {-9, 0}), finished.stderr.decode()
        # Part done: each end user holds some of the restored facts, in their
        # order, and at least those the live store kept.
        now = anyio.run(_everything, store_path)
        for place, facts in restored.items():
            left = {memory.id for memory in now.get(place, ())}
            assert now.get(place, ()) == tuple(m for m in facts if m.id in left)
            assert {memory.id for memory in wanted.get(place, ())} <= left

    async def rerun() -> tuple[int, int]:
        with open_ledger(ledger_url, LedgerKey(SECRET)) as ledger:
            async with SqliteMemory(store_path) as store:
                last = await reapply(store, ledger, since=taken)
                again = await reapply(store, ledger, since=taken)
        return last.entries, again.facts_deleted

    entries, again = anyio.run(rerun, backend=backend)
    assert (entries, again) == (calls, 0)
    assert anyio.run(_everything, store_path) == wanted
