"""``created_at`` kept to the microsecond over the whole range the port allows.

Restored facts at both ends of the range and at instants far from 1970
come back exactly from `restore`, `restore_many`, `recall` and
`recall_page`, whatever the session's ``TimeZone`` and ``DateStyle``. A
row someone else wrote outside the range fails clearly.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from datetime import UTC, datetime
from functools import partial
from typing import TYPE_CHECKING, Any

import anyio.to_thread
import psycopg
import pytest
from hypothesis import given
from hypothesis import strategies as st
from psycopg import sql
from psycopg_pool import ConnectionPool

from psych_runtime.memory.port import MAX_CREATED_AT, MIN_CREATED_AT, Memory, MemoryKey
from psych_runtime.memory.postgres import PostgresMemory, PostgresMemoryError
from psych_runtime.memory.postgres._conversations import utc

if TYPE_CHECKING:
    from conftest import Backdoor

pytestmark = pytest.mark.anyio

_INSTANTS = (
    MIN_CREATED_AT,
    MAX_CREATED_AT,
    datetime(1600, 1, 1, 0, 0, 0, 123457, tzinfo=UTC),
    datetime(2300, 1, 1, 0, 0, 0, 1, tzinfo=UTC),
    datetime(1, 1, 1, 0, 0, 0, 1, tzinfo=UTC),
)

# A session far from UTC (+14:00, and a local mean time with seconds in
# 1600) that writes dates day first: neither may shift or misread a time.
_FAR_SESSION = b"SET TimeZone TO 'Pacific/Kiritimati'; SET DateStyle TO 'SQL, DMY'"


def _far_from_utc(conn: psycopg.Connection[Any]) -> None:
    conn.execute(_FAR_SESSION)


@asynccontextmanager
async def _store(backdoor: Backdoor, session: str) -> AsyncIterator[PostgresMemory]:
    if session == "utc":
        async with PostgresMemory.connect(backdoor.dsn, schema=backdoor.schema) as store:
            await store.setup()
            yield store
        return
    pool = ConnectionPool(
        backdoor.dsn, kwargs={"autocommit": True}, configure=_far_from_utc, open=False
    )
    await anyio.to_thread.run_sync(partial(pool.open, wait=True, timeout=20))
    try:
        async with PostgresMemory(pool, schema=backdoor.schema) as store:
            await store.setup()
            yield store
    finally:
        await anyio.to_thread.run_sync(pool.close)


def _facts(end_user_id: str) -> list[Memory]:
    key = MemoryKey("acme", end_user_id)
    return [Memory(f"t{n}", key, f"fact {n}", when) for n, when in enumerate(_INSTANTS)]


async def _stored_exactly(backdoor: Backdoor, facts: list[Memory]) -> bool:
    # Compared on the server, as instants: no client conversion involved.
    rows = await backdoor.query(
        sql.SQL(
            "SELECT bool_and(stored.created_at = given.at::timestamptz) AND count(*) = %s"
            " FROM unnest(%s::text[], %s::text[]) AS given (id, at)"
            " JOIN {} AS stored ON stored.id = given.id"
        ).format(backdoor.table),
        (
            len(facts),
            [fact.id for fact in facts],
            [fact.created_at.isoformat() for fact in facts],
        ),
    )
    return bool(rows[0][0])


@pytest.mark.parametrize("session", ["utc", "far from utc"])
async def test_every_instant_of_the_range_is_kept_to_the_microsecond(
    backdoor: Backdoor, session: str
) -> None:
    async with _store(backdoor, session) as store:
        one_by_one = _facts("one")
        for fact in one_by_one:
            assert await store.restore(fact) is True
        together = [
            Memory(f"m{fact.id}", MemoryKey("acme", "many"), fact.content, fact.created_at)
            for fact in _facts("many")
        ]
        assert await store.restore_many(together) == len(together)
        # Held exactly: restoring them again stores nothing and refuses nothing.
        assert await store.restore_many([*one_by_one, *together]) == 0
        for facts in (one_by_one, together):
            user = facts[0].key.end_user_id
            assert await store.recall("acme", user) == tuple(facts)
            first = await store.recall_page("acme", user, size=2)
            rest = await store.recall_page("acme", user, after=first[-1].id, size=10)
            assert (*first, *rest) == tuple(facts)
            assert all(fact.created_at.tzinfo is UTC for fact in (*first, *rest))
            assert await _stored_exactly(backdoor, facts)


@given(st.datetimes())
def test_a_time_read_from_the_server_is_the_same_instant_in_utc(naive: datetime) -> None:
    # The arithmetic that replaces `datetime.replace` keeps every field.
    moment = utc(naive)
    assert moment == naive.replace(tzinfo=UTC)
    assert moment.tzinfo is UTC


@pytest.mark.parametrize("written", ["10000-01-01 00:00:00+00", "0001-12-31 23:59:59.999999+00 BC"])
@pytest.mark.parametrize("session", ["utc", "far from utc"])
async def test_a_time_outside_the_range_written_by_someone_else_fails_clearly(
    backdoor: Backdoor, session: str, written: str
) -> None:
    async with _store(backdoor, session) as store:
        fact = await store.remember("acme", "u1", "written by this store")
        await backdoor.query(
            sql.SQL("UPDATE {} SET created_at = %s::timestamptz WHERE id = %s").format(
                backdoor.table
            ),
            (written, fact.id),
        )
        reads = (
            store.recall("acme", "u1"),
            store.recall_page("acme", "u1", size=5),
        )
        for read in reads:
            with pytest.raises(PostgresMemoryError, match=r"created_at lies outside the years"):
                await read
        # The fact is still there, and erasing it needs no reading.
        assert await store.erase("acme", "u1") == 1
