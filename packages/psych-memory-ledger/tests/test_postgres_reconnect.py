"""A PostgreSQL ledger whose connection is cut connects again, and records every deletion.

The server ends the ledger's session (``pg_terminate_backend``, as an
administrator, a restart or a failover does); the next write finds the
connection lost, opens another and is made on it. The server comes from
the root conftest (``postgres_dsn``): skipped without one, except under
``CI=true``.
"""

from __future__ import annotations

from datetime import UTC, datetime
from uuid import uuid4

import anyio.to_thread
import psycopg
import pytest
from psycopg import sql

from psych_runtime.memory.inproc import InProcessMemory
from psych_runtime.memory.ledger import LedgerError, LedgerKey, open_ledger, with_ledger

pytestmark = pytest.mark.anyio


def _terminate(dsn: str, application_name: str) -> int:
    """End every session of that application, and return once they are gone (how many)."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        row = conn.execute(
            "SELECT count(*) FILTER (WHERE pg_terminate_backend(pid, 10000))"
            " FROM pg_stat_activity WHERE application_name = %s",
            (application_name,),
        ).fetchone()
    assert row is not None
    return int(row[0])


async def test_every_deletion_after_the_connection_is_cut_is_recorded(
    postgres_dsn: str, postgres_schema: str, key: LedgerKey
) -> None:
    name = f"psych-ledger-{uuid4().hex}"
    url = f"{postgres_dsn}?schema={postgres_schema}&application_name={name}"
    with open_ledger(url, key) as ledger:
        async with InProcessMemory() as bare:
            store = with_ledger(bare, ledger)
            for n in range(3):
                kept = await store.remember("acme", f"u{n}", "kept")
                gone = await store.remember("acme", f"u{n}", "gone")
                # Cut before each of the three writes' kinds: an intent, an
                # outcome, a withdrawal (a forget that deleted nothing).
                assert await anyio.to_thread.run_sync(_terminate, postgres_dsn, name) == 1
                assert await store.forget("acme", f"u{n}", gone.id) is True
                assert await anyio.to_thread.run_sync(_terminate, postgres_dsn, name) == 1
                assert await store.forget("acme", f"u{n}", "no-such-fact") is False
                assert await anyio.to_thread.run_sync(_terminate, postgres_dsn, name) == 1
                assert await store.erase("acme", f"u{n}") == 1
                assert await bare.recall("acme", f"u{n}") == ()
                assert kept.id != gone.id
        assert await anyio.to_thread.run_sync(_terminate, postgres_dsn, name) == 1
        entries = ledger.entries()
    assert [(e.kind, e.deleted) for e in entries] == [("forget", 1), ("erase", 1)] * 3
    assert all(e.done_at is not None for e in entries)
    assert [e.end_user_hash for e in entries] == [
        key.end_user_hash("acme", f"u{n}") for n in range(3) for _ in range(2)
    ]


async def test_a_prune_and_a_new_opening_after_a_cut_work(
    postgres_dsn: str, postgres_schema: str, key: LedgerKey
) -> None:
    name = f"psych-ledger-{uuid4().hex}"
    url = f"{postgres_dsn}?schema={postgres_schema}&application_name={name}"
    with open_ledger(url, key) as ledger:
        async with InProcessMemory() as bare:
            store = with_ledger(bare, ledger)
            await store.remember("acme", "u1", "x")
            assert await store.erase("acme", "u1") == 1
        assert await anyio.to_thread.run_sync(_terminate, postgres_dsn, name) == 1
        pruned = ledger.prune(datetime.now(UTC))
        assert (pruned.entries_pruned, pruned.entries_kept) == (1, 0)
        assert await anyio.to_thread.run_sync(_terminate, postgres_dsn, name) == 1
        assert ledger.entries() == ()
    with open_ledger(url, key, create=False) as again:
        assert again.entries() == ()


def _cut_by_trigger(dsn: str, schema: str, *, at_commit: bool, condition: str) -> None:
    """Make the server end the session writing the ledger's table, inside the write itself.

    A trigger on the ledger's table terminates its own backend when
    ``condition`` holds (SQL, where ``{cuts}`` is a sequence of the test's):
    at the commit with ``at_commit``, otherwise in the middle of the
    statement. The server aborts the transaction either way; the client
    sees its connection lost, and cannot tell whether it committed.
    """
    names = {
        "cuts": sql.Identifier(schema, "cuts"),
        "cut": sql.Identifier(schema, "cut"),
        "table": sql.Identifier(schema, "psych_ledger_deletion"),
        "when": sql.SQL("DEFERRABLE INITIALLY DEFERRED" if at_commit else "NOT DEFERRABLE"),
    }
    test = sql.SQL(condition).format(cuts=sql.Literal(f'"{schema}".cuts'))
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(sql.SQL("CREATE SEQUENCE {cuts}").format(**names))
        conn.execute(
            sql.SQL(
                "CREATE FUNCTION {cut}() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN"
                " IF {test} THEN PERFORM pg_terminate_backend(pg_backend_pid()); END IF;"
                " RETURN NULL; END $$"
            ).format(test=test, **names)
        )
        conn.execute(
            sql.SQL(
                "CREATE CONSTRAINT TRIGGER cut AFTER INSERT OR UPDATE OR DELETE ON {table}"
                " {when} FOR EACH ROW EXECUTE FUNCTION {cut}()"
            ).format(**names)
        )


async def test_a_write_cut_in_the_middle_is_made_once_on_a_new_connection(
    postgres_dsn: str, postgres_schema: str, key: LedgerKey
) -> None:
    # The first run of every write is cut (the sequence's odd values): an
    # intent, an outcome, a withdrawal. Each is made again, once.
    url = f"{postgres_dsn}?schema={postgres_schema}"
    with open_ledger(url, key) as ledger:
        await anyio.to_thread.run_sync(
            lambda: _cut_by_trigger(
                postgres_dsn, postgres_schema, at_commit=False, condition="nextval({cuts}) % 2 = 1"
            )
        )
        async with InProcessMemory() as bare:
            store = with_ledger(bare, ledger)
            await store.remember("acme", "u1", "x")
            assert await store.erase("acme", "u1") == 1
            assert await store.forget("acme", "u1", "no-such-fact") is False
        (entry,) = ledger.entries()
    assert (entry.kind, entry.deleted, entry.done_at is not None) == ("erase", 1, True)
    with psycopg.connect(postgres_dsn, autocommit=True) as conn:
        row = conn.execute(
            sql.SQL("SELECT last_value FROM {}").format(sql.Identifier(postgres_schema, "cuts"))
        ).fetchone()
    # Four writes, each run twice.
    assert row == (8,)


async def test_a_prune_cut_at_its_commit_says_it_may_be_done_and_runs_again(
    postgres_dsn: str, postgres_schema: str, key: LedgerKey
) -> None:
    url = f"{postgres_dsn}?schema={postgres_schema}"
    with open_ledger(url, key) as ledger:
        async with InProcessMemory() as bare:
            store = with_ledger(bare, ledger)
            await store.remember("acme", "u1", "x")
            assert await store.erase("acme", "u1") == 1
        # Only the first commit that deletes an entry is cut.
        _cut_by_trigger(
            postgres_dsn,
            postgres_schema,
            at_commit=True,
            condition="TG_OP = 'DELETE' AND nextval({cuts}) = 1",
        )
        with pytest.raises(LedgerError, match=r"lost as the pruning committed .*: it may be done"):
            ledger.prune(datetime.now(UTC))
        # The server aborted it: the entry is there, and a prune removes it.
        assert len(ledger.entries()) == 1
        pruned = ledger.prune(datetime.now(UTC))
        assert (pruned.entries_pruned, pruned.entries_kept) == (1, 0)
