"""A ledger in a PostgreSQL schema: recorded, reopened, refused inside the store's own schema.

The server comes from the root conftest (``postgres_dsn``): without one these
tests are skipped, except under ``CI=true``.
"""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from psych_runtime.memory.inproc import InProcessMemory
from psych_runtime.memory.ledger import (
    LedgerError,
    LedgerKey,
    LedgerKeyMismatchError,
    open_ledger,
    reapply,
    with_ledger,
)
from psych_runtime.memory.port import ExpiresFacts, InvalidInputError, Memory, MemoryKey
from psych_runtime.memory.postgres import PostgresMemory

pytestmark = pytest.mark.anyio


def _url(dsn: str, schema: str) -> str:
    return f"{dsn}{'&' if '?' in dsn else '?'}schema={schema}"


async def test_deletions_are_recorded_in_the_schema_and_reapplied(
    postgres_dsn: str, postgres_schema: str, key: LedgerKey
) -> None:
    url = _url(postgres_dsn, postgres_schema)
    with open_ledger(url, key) as ledger:
        assert ledger.path is None
        assert ledger.postgres_place == (postgres_dsn, postgres_schema)
        assert repr(ledger) == f"DeletionLedger(schema={postgres_schema!r})"
        async with InProcessMemory() as bare:
            store = with_ledger(bare, ledger)
            gone = await store.remember("acme", "u1", "x")
            await store.remember("acme", "u1", "y")
            assert await store.forget("acme", "u1", gone.id) is True
            assert await store.forget("acme", "u1", "\ud800") is False
            assert await store.erase("acme", "u2") == 0
    with open_ledger(url, key) as again:
        forget, erase = again.entries()
        assert (forget.kind, forget.fact_id, forget.deleted) == ("forget", gone.id, 1)
        assert (erase.kind, erase.end_user_hash, erase.deleted) == (
            "erase",
            key.end_user_hash("acme", "u2"),
            0,
        )
        async with InProcessMemory() as restored:
            # Stored before the erasure, as a copy taken before it holds it.
            await restored.restore(
                Memory("from-a-backup", MemoryKey("acme", "u2"), "back", erase.recorded_at)
            )
            done = await reapply(restored, again)
            assert (done.entries, done.facts_deleted) == (2, 1)
    with pytest.raises(LedgerKeyMismatchError):
        open_ledger(url, LedgerKey(b"o" * 32))


async def test_a_ledger_in_the_stores_own_schema_is_refused(
    postgres_dsn: str, postgres_schema: str, key: LedgerKey
) -> None:
    with open_ledger(_url(postgres_dsn, postgres_schema), key) as ledger:
        async with PostgresMemory.connect(postgres_dsn, schema=postgres_schema) as inside:
            with pytest.raises(InvalidInputError, match="ledger must live outside"):
                with_ledger(inside, ledger)
        other = f"{postgres_schema}_store"
        try:
            async with PostgresMemory.connect(postgres_dsn, schema=other) as apart:
                await apart.setup()
                store = with_ledger(apart, ledger)
                # The server's answer on how durable a deletion is, through the wrapper.
                assert await store.deletion_durability() == await apart.deletion_durability()  # type: ignore[attr-defined]
        finally:
            ledger._conn._conn.execute(f'DROP SCHEMA IF EXISTS "{other}" CASCADE')  # type: ignore[attr-defined]


def test_a_postgresql_url_must_name_its_schema_once(key: LedgerKey) -> None:
    for url in (
        "postgresql://h/db",
        "postgresql://h/db?schema=",
        "postgresql://h/db?schema=a&schema=b",
    ):
        with pytest.raises(InvalidInputError, match="ledger must name its schema once"):
            open_ledger(url, key)


def test_an_unreachable_server_is_a_ledger_error(key: LedgerKey, unused_tcp_port: int) -> None:
    url = f"postgresql://postgres@127.0.0.1:{unused_tcp_port}/test?schema=s"
    with pytest.raises(LedgerError, match="cannot be reached"):
        open_ledger(url, key, busy_timeout=1)


async def test_an_expiry_is_recorded_and_the_schema_is_pruned(
    postgres_dsn: str, postgres_schema: str, key: LedgerKey
) -> None:
    url = _url(postgres_dsn, postgres_schema)
    with open_ledger(url, key) as ledger:
        async with InProcessMemory() as bare:
            store = with_ledger(bare, ledger)
            assert isinstance(store, ExpiresFacts)
            await store.remember("acme", "u1", "old")
            await store.erase("acme", "u1")
            middle = datetime.now(UTC)
            await store.remember("acme", "u1", "aging")
            cutoff = datetime.now(UTC)
            assert await store.expire("acme", before=cutoff) == 1
        erase, expire = ledger.entries()
        assert (expire.kind, expire.end_user_hash, expire.cutoff, expire.deleted) == (
            "expire",
            None,
            cutoff,
            1,
        )
        pruned = ledger.prune(middle)
        assert (pruned.entries_pruned, pruned.entries_kept) == (1, 1)
        assert ledger.entries() == (expire,)
        assert erase.last_at < middle
