"""Retention on PostgreSQL: expire deletes in batches, each a durable transaction of its own.

What the server really ran is recorded past the adapter: a statement-level
trigger logs every ``DELETE`` with its transaction, the rows it deleted and
the ``synchronous_commit`` it ran under.
"""

from __future__ import annotations

import threading
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING

import anyio
import anyio.lowlevel
import anyio.to_thread
import psycopg
import pytest
from psycopg import sql

from psych_runtime.memory.port import InvalidInputError, Memory, MemoryKey
from psych_runtime.memory.postgres import PostgresMemory, StoreUnavailableError

if TYPE_CHECKING:
    from conftest import Backdoor

pytestmark = pytest.mark.anyio

LARGE = 5_000
USERS = 50
_OLD = datetime(2001, 1, 1, tzinfo=UTC)


def made(index: int) -> datetime:
    return _OLD + timedelta(microseconds=index)


async def load_aged(backdoor: Backdoor, tenant: str, count: int, users: int = USERS) -> None:
    """Give ``tenant`` ``count`` facts over ``users`` end users, the i-th made at `made` (i)."""
    await backdoor.query(
        sql.SQL(
            "INSERT INTO {} (id, tenant, end_user_id, content, created_at)"
            " SELECT md5(%s || g), %s, 'u-' || (g %% %s), %s || ' fact ' || g,"
            " %s::timestamptz + g * interval '1 microsecond'"
            " FROM generate_series(0, %s - 1) AS g"
        ).format(backdoor.table),
        (tenant, tenant, users, tenant, _OLD, count),
    )


async def held(backdoor: Backdoor, tenant: str) -> int:
    rows = await backdoor.query(
        sql.SQL("SELECT count(*) FROM {} WHERE tenant = %s").format(backdoor.table), (tenant,)
    )
    return int(rows[0][0])


async def record_deletes(backdoor: Backdoor) -> None:
    log = sql.Identifier(backdoor.schema, "deletes")
    function = sql.Identifier(backdoor.schema, "record_delete")
    await backdoor.query(
        sql.SQL(
            "CREATE TABLE {} (n bigint GENERATED ALWAYS AS IDENTITY, xact bigint,"
            " deleted bigint, synced text)"
        ).format(log)
    )
    await backdoor.query(
        sql.SQL(
            "CREATE FUNCTION {}() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN"
            " INSERT INTO {} (xact, deleted, synced) SELECT txid_current(), count(*),"
            " current_setting('synchronous_commit') FROM gone; RETURN NULL; END $$"
        ).format(function, log)
    )
    await backdoor.query(
        sql.SQL(
            "CREATE TRIGGER record_delete AFTER DELETE ON {} REFERENCING OLD TABLE AS gone"
            " FOR EACH STATEMENT EXECUTE FUNCTION {}()"
        ).format(backdoor.table, function)
    )


async def deletes(backdoor: Backdoor) -> list[tuple[int, int, str]]:
    rows = await backdoor.query(
        sql.SQL("SELECT xact, deleted, synced FROM {} ORDER BY n").format(
            sql.Identifier(backdoor.schema, "deletes")
        )
    )
    return [(int(xact), int(deleted), str(synced)) for xact, deleted, synced in rows]


async def test_expire_deletes_a_large_tenant_in_durable_transactions_of_its_own(
    store: PostgresMemory, backdoor: Backdoor
) -> None:
    await load_aged(backdoor, "acme", LARGE)
    await load_aged(backdoor, "globex", 100)
    await record_deletes(backdoor)
    cutoff = made(LARGE - 1)
    assert await store.count_expired("acme", before=cutoff) == LARGE - 1

    assert await store.expire("acme", before=cutoff) == LARGE - 1

    ran = await deletes(backdoor)
    # Several batches, each committed on its own, the first of a thousand
    # rows and none of more than the walk allows; every one synced as an
    # erase's deletion is.
    assert len(ran) >= 3
    assert len({xact for xact, _, _ in ran}) == len(ran)
    assert max(deleted for _, deleted, _ in ran) < LARGE - 1
    assert sum(deleted for _, deleted, _ in ran) == LARGE - 1
    assert {synced for _, _, synced in ran} == {"remote_apply"}
    assert await held(backdoor, "acme") == 1
    assert await held(backdoor, "globex") == 100
    (kept,) = await store.recall("acme", f"u-{(LARGE - 1) % USERS}")
    assert kept.created_at == cutoff
    assert await store.count_expired("acme", before=cutoff) == 0
    assert await store.expire("acme", before=cutoff) == 0


async def test_a_bad_cutoff_is_refused_before_any_statement(
    store: PostgresMemory, backdoor: Backdoor
) -> None:
    await load_aged(backdoor, "acme", 10)
    await record_deletes(backdoor)
    with pytest.raises(InvalidInputError, match="must not be in the future"):
        await store.expire("acme", before=datetime.now(UTC) + timedelta(hours=1))
    with pytest.raises(InvalidInputError, match="timezone-aware"):
        await store.expire("acme", before=datetime(2001, 1, 2))
    with pytest.raises(TypeError, match="before must be a timezone-aware datetime"):
        await store.count_expired("acme", before=None)  # type: ignore[arg-type]
    assert await deletes(backdoor) == []
    assert await held(backdoor, "acme") == 10


async def test_a_failed_batch_after_others_committed_says_so_and_a_rerun_finishes(
    postgres_dsn: str, schema: str, backdoor: Backdoor
) -> None:
    async with PostgresMemory.connect(postgres_dsn, schema=schema, lock_timeout=0.2) as store:
        await store.setup()
        await load_aged(backdoor, "acme", LARGE)
        locked = threading.Event()
        release = threading.Event()

        def lock_the_last_end_users_row() -> None:
            # "u-9" comes last in key order: earlier batches commit first.
            with psycopg.connect(postgres_dsn) as conn:
                conn.execute(
                    sql.SQL(
                        "SELECT 1 FROM {} WHERE tenant = 'acme' AND end_user_id = 'u-9'"
                        " ORDER BY seq LIMIT 1 FOR UPDATE"
                    ).format(backdoor.table)
                )
                locked.set()
                release.wait(60)
                conn.rollback()

        holder = threading.Thread(target=lock_the_last_end_users_row)
        holder.start()
        try:
            await anyio.to_thread.run_sync(locked.wait, 60)
            with pytest.raises(StoreUnavailableError) as caught:
                await store.expire("acme", before=made(LARGE))
        finally:
            release.set()
            await anyio.to_thread.run_sync(holder.join)
        error = caught.value
        assert error.operation == "expire"
        assert error.may_have_taken_effect is True
        assert "expire again" in error.reason
        left = await held(backdoor, "acme")
        assert 0 < left < LARGE
        assert await store.expire("acme", before=made(LARGE)) == left
        assert await held(backdoor, "acme") == 0


async def test_a_writer_keeps_working_and_two_expiries_count_each_fact_once(
    postgres_dsn: str, schema: str, backdoor: Backdoor
) -> None:
    # Three connections open before the calls start, one for each caller:
    # with one, the writer queued for a connection behind both expiries
    # while the pool grew, which measured the pool's growth under load,
    # not whether an expiry stops a writer.
    async with PostgresMemory.connect(postgres_dsn, schema=schema, min_size=3, max_size=8) as store:
        await store.setup()
        await _writer_beside_two_expiries(store, backdoor)


async def _writer_beside_two_expiries(store: PostgresMemory, backdoor: Backdoor) -> None:
    await load_aged(backdoor, "acme", LARGE * 2)
    counts: list[int] = []
    written: list[Memory] = []
    failures: list[BaseException] = []
    expiring = 2

    async def expire() -> None:
        nonlocal expiring
        try:
            counts.append(await store.expire("acme", before=made(LARGE * 2)))
        finally:
            expiring -= 1

    async def write() -> None:
        # Another end user of the same tenant, as fast as the store allows.
        while expiring:
            try:
                written.append(await store.remember("acme", "writer", "new fact"))
            except Exception as exc:  # noqa: BLE001 - every failure is counted.
                failures.append(exc)
            await anyio.lowlevel.checkpoint()

    async with anyio.create_task_group() as group:
        group.start_soon(expire)
        group.start_soon(expire)
        group.start_soon(write)
    assert failures == []
    assert sum(counts) == LARGE * 2
    assert len(written) > 1
    assert await store.recall("acme", "writer") == tuple(written)
    assert await held(backdoor, "acme") == len(written)


async def test_restored_facts_are_judged_by_their_own_time(postgres_dsn: str, schema: str) -> None:
    # Without a statement bound, batches aim at their own target alone.
    async with PostgresMemory.connect(postgres_dsn, schema=schema, statement_timeout=None) as store:
        await store.setup()
        key = MemoryKey("acme", "moved")
        facts = [
            Memory(f"old-{index}", key, f"restored {index}", made(index)) for index in range(5)
        ]
        await store.restore_many(facts)
        now = await store.remember("acme", "moved", "made today")
        assert await store.expire("acme", before=made(3)) == 3
        assert await store.recall("acme", "moved") == (*facts[3:], now)


async def test_a_first_batch_held_up_changed_nothing(
    postgres_dsn: str, schema: str, backdoor: Backdoor
) -> None:
    async with PostgresMemory.connect(postgres_dsn, schema=schema, lock_timeout=0.1) as store:
        await store.setup()
        await load_aged(backdoor, "acme", 10)
        locked = threading.Event()
        release = threading.Event()

        def lock_every_row() -> None:
            with psycopg.connect(postgres_dsn) as conn:
                conn.execute(sql.SQL("SELECT 1 FROM {} FOR UPDATE").format(backdoor.table))
                locked.set()
                release.wait(60)
                conn.rollback()

        holder = threading.Thread(target=lock_every_row)
        holder.start()
        try:
            await anyio.to_thread.run_sync(locked.wait, 60)
            with pytest.raises(StoreUnavailableError) as caught:
                await store.expire("acme", before=made(10))
        finally:
            release.set()
            await anyio.to_thread.run_sync(holder.join)
        assert caught.value.may_have_taken_effect is False
        assert "expire again" not in caught.value.reason
        assert await held(backdoor, "acme") == 10
