"""A schema dumped with pg_dump, restored by pg_restore into a fresh database, replayed.

The binaries are the server's own (``pg_config --bindir``); without them, or
without a server, the test is skipped, except under ``CI=true``.
"""

from __future__ import annotations

import shutil
import subprocess
import uuid
from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import NoReturn

import psycopg
import pytest
from psycopg import sql
from psycopg.conninfo import make_conninfo

from psych_runtime.memory.ledger import DeletionLedger, Reapplied, reapply, with_ledger
from psych_runtime.memory.port import ExpiresFacts, Memory
from psych_runtime.memory.postgres import PostgresMemory

pytestmark = pytest.mark.anyio

Facts = dict[tuple[str, str], tuple[Memory, ...]]


@pytest.fixture
def bindir(unavailable: Callable[[str], NoReturn]) -> Path:
    pg_config = shutil.which("pg_config")
    if pg_config is None:
        unavailable("cannot dump and restore: pg_config is not on PATH")
    found = subprocess.run(
        [pg_config, "--bindir"], capture_output=True, text=True, check=False, timeout=30
    )
    place = Path(found.stdout.strip())
    if not all((place / name).is_file() for name in ("pg_dump", "pg_restore")):
        unavailable("cannot dump and restore: no pg_dump and pg_restore beside pg_config")
    return place


@pytest.fixture
def fresh_database(postgres_dsn: str) -> Iterator[str]:
    """The address of a new, empty database on the test server, dropped after the test."""
    name = f"psych_restore_{uuid.uuid4().hex}"
    with psycopg.connect(postgres_dsn, autocommit=True) as conn:
        conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
    try:
        yield make_conninfo(postgres_dsn, dbname=name)
    finally:
        with psycopg.connect(postgres_dsn, autocommit=True) as conn:
            conn.execute(sql.SQL("DROP DATABASE {} WITH (FORCE)").format(sql.Identifier(name)))


async def _everything(store: PostgresMemory) -> Facts:
    return {
        (tenant, user): await store.recall(tenant, user)
        for tenant in await store.tenants()
        for user in await store.end_users(tenant)
    }


def _run(command: list[str]) -> None:
    done = subprocess.run(command, capture_output=True, text=True, check=False, timeout=120)
    assert done.returncode == 0, done.stderr


async def test_a_dump_restored_into_a_fresh_database_loses_again_what_was_deleted_after_it(
    postgres_dsn: str,
    postgres_schema: str,
    fresh_database: str,
    bindir: Path,
    ledger: DeletionLedger,
) -> None:
    assert ledger.path is not None
    dump = ledger.path.with_name("facts.dump")
    async with PostgresMemory.connect(postgres_dsn, schema=postgres_schema) as live:
        await live.setup()
        store = with_ledger(live, ledger)
        assert isinstance(store, ExpiresFacts)
        for user in ("u1", "u2", "u3"):
            for n in range(3):
                await store.remember("acme", user, f"{user} fact {n}")
        await store.remember("other", "u1", "same id, another tenant")
        await store.remember("retained", "u1", "past its retention")
        young = await store.remember("retained", "u2", "within its retention")
        # Before the dump: the dump has this erase already, and what came after it.
        await store.erase("acme", "u3")
        await store.remember("acme", "u3", "u3 after its erase")
        taken = datetime.now(UTC)
        _run(
            [
                str(bindir / "pg_dump"),
                "--format=custom",
                f"--schema={postgres_schema}",
                f"--file={dump}",
                f"--dbname={postgres_dsn}",
            ]
        )
        dumped = await _everything(live)
        gone = dumped[("acme", "u2")][1]
        assert await store.forget("acme", "u2", gone.id) is True
        assert await store.erase("acme", "u1") == 3
        assert await store.expire("retained", before=young.created_at) == 1
        await store.remember("acme", "u1", "u1 after its erase")
        live_after = await _everything(live)

    _run([str(bindir / "pg_restore"), "--no-owner", f"--dbname={fresh_database}", str(dump)])
    async with PostgresMemory.connect(fresh_database, schema=postgres_schema) as restored:
        assert await _everything(restored) == dumped
        counted = await reapply(restored, ledger, since=taken, dry_run=True)
        first = await reapply(restored, ledger, since=taken)
        second = await reapply(restored, ledger, since=taken)
        after = await _everything(restored)
    assert first == Reapplied(entries=3, erased_end_users=1, facts_deleted=5, expiries=1)
    assert counted == Reapplied(3, 1, 5, expiries=1, dry_run=True)
    assert second.facts_deleted == 0
    # The live store as it was, less what was made after the dump: ids, order,
    # created_at, and the fact u3 stored after an erase older than the dump.
    assert after == {
        place: kept
        for place, facts in live_after.items()
        if (kept := tuple(m for m in facts if m.created_at < taken))
    }
    assert after[("acme", "u3")] == dumped[("acme", "u3")]
    assert ("acme", "u1") not in after
