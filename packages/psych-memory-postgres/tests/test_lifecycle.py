"""One lifecycle, time bounds, and failures that are always the port's."""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from dataclasses import replace
from typing import TYPE_CHECKING, Any
from uuid import uuid4

import anyio
import anyio.to_thread
import psycopg
import pytest
from psycopg import sql
from psycopg_pool import ConnectionPool

from psych_runtime.memory import port
from psych_runtime.memory.postgres import (
    PostgresMemory,
    PostgresMemoryError,
    SchemaVersionError,
    StoreUnavailableError,
)

if TYPE_CHECKING:
    from conftest import Backdoor

pytestmark = pytest.mark.anyio

_BOUND = 60
_OPERATIONS = ("remember", "forget", "recall", "erase", "tenants", "end_users", "restore")


def _calls(store: PostgresMemory) -> dict[str, Callable[[], Awaitable[object]]]:
    fact = port.Memory(uuid4().hex, port.MemoryKey("acme", "u1"), "restored", _moment())
    return {
        "remember": lambda: store.remember("acme", "u1", "not written"),
        "forget": lambda: store.forget("acme", "u1", uuid4().hex),
        "recall": lambda: store.recall("acme", "u1"),
        "erase": lambda: store.erase("acme", "u1"),
        "tenants": store.tenants,
        "end_users": lambda: store.end_users("acme"),
        "restore": lambda: store.restore(fact),
    }


def _moment() -> Any:
    from datetime import UTC, datetime  # noqa: PLC0415 - local to the helper

    return datetime(2026, 1, 2, 3, 4, 5, 678901, tzinfo=UTC)


@pytest.mark.parametrize("operation", _OPERATIONS)
async def test_a_store_is_closed_after_connect_exits(
    postgres_dsn: str, schema: str, operation: str
) -> None:
    async with PostgresMemory.connect(postgres_dsn, schema=schema) as store:
        await store.setup()
        assert "open" in repr(store)
    assert store.closed
    with pytest.raises(port.StoreClosedError) as caught:
        await _calls(store)[operation]()
    assert caught.value.operation == operation
    assert caught.value.state == "closed"
    assert "closed" in repr(store)


async def test_async_with_closes_the_store_and_leaves_the_apps_pool_open(
    postgres_dsn: str, schema: str
) -> None:
    pool = ConnectionPool(
        postgres_dsn, min_size=1, max_size=2, kwargs={"autocommit": True}, open=False
    )
    await anyio.to_thread.run_sync(pool.open)
    try:
        async with PostgresMemory(pool, schema=schema) as store:
            await store.setup()
            fact = await store.remember("acme", "u1", "kept")
        assert store.closed
        assert not pool.closed
        with pytest.raises(port.StoreClosedError):
            await store.recall("acme", "u1")
        # Closing again is harmless; opening again is not allowed.
        await store.aclose()
        await store.aclose()
        with pytest.raises(port.StoreClosedError):
            await store.__aenter__()
        async with PostgresMemory(pool, schema=schema) as again:
            assert await again.recall("acme", "u1") == (fact,)
    finally:
        await anyio.to_thread.run_sync(pool.close)


class _Locked:
    """Another connection's transaction holding the memories table locked."""

    def __init__(self, dsn: str, table: sql.Identifier) -> None:
        self._conn = psycopg.connect(dsn)
        self._conn.execute(sql.SQL("LOCK TABLE {} IN ACCESS EXCLUSIVE MODE").format(table))

    def release(self) -> None:
        self._conn.rollback()
        self._conn.close()


@pytest.mark.parametrize(
    ("bounds", "reason"),
    [
        ({"lock_timeout": 0.3, "statement_timeout": 30.0}, "lock_timeout"),
        ({"lock_timeout": None, "statement_timeout": 0.3}, "statement_timeout"),
    ],
    ids=["lock", "statement"],
)
@pytest.mark.parametrize("operation", ["remember", "forget", "recall", "erase"])
async def test_a_call_blocked_past_its_bound_fails_and_changed_nothing(
    postgres_dsn: str, schema: str, bounds: dict[str, Any], reason: str, operation: str
) -> None:
    async with PostgresMemory.connect(postgres_dsn, schema=schema, **bounds) as store:
        await store.setup()
        fact = await store.remember("acme", "u1", "kept")
        table = sql.Identifier(schema, "memories")
        lock = await anyio.to_thread.run_sync(_Locked, postgres_dsn, table)
        try:
            # The server ends the wait; the scope only guards against a hang.
            with anyio.fail_after(_BOUND), pytest.raises(StoreUnavailableError) as caught:
                await _calls(store)[operation]()
        finally:
            await anyio.to_thread.run_sync(lock.release)
        assert caught.value.operation == operation
        assert reason in caught.value.reason
        assert caught.value.may_have_taken_effect is False
        assert isinstance(caught.value.__cause__, psycopg.OperationalError)
        assert await store.recall("acme", "u1") == (fact,)


@pytest.mark.parametrize("threshold", [None, 5])
async def test_the_bounds_are_all_a_stores_own_connections_keep(
    postgres_dsn: str, schema: str, backdoor: Backdoor, threshold: int | None
) -> None:
    # A store that never prepares (behind a pooler) sets them for each
    # transaction only: a connection handed on afterwards carries the
    # server's own settings. One that may prepare opened its connections
    # with them; no other setting of the store stays on the session.
    defaults = await backdoor.server_defaults("statement_timeout", "lock_timeout", "TimeZone")
    if threshold is not None:
        defaults = ("1500ms", "250ms", defaults[2])
    async with PostgresMemory.connect(
        postgres_dsn,
        schema=schema,
        statement_timeout=1.5,
        lock_timeout=0.25,
        max_size=1,
        prepare_threshold=threshold,
    ) as store:
        await store.setup()
        fact = await store.remember("acme", "u1", "kept")
        await store.recall("acme", "u1")
        await store.restore_many([replace(fact, id="0" * 32)])
        await store.forget("acme", "u1", fact.id)
        await store.erase("acme", "u1")
        names = ("statement_timeout", "lock_timeout", "TimeZone")
        assert await backdoor.settings_of(store, *names) == defaults


@pytest.mark.parametrize(
    ("value", "error"),
    [(0, ValueError), (-1.0, ValueError), (float("inf"), ValueError), ("5", TypeError)],
)
def test_bounds_are_checked(value: object, error: type[Exception]) -> None:
    pool = ConnectionPool("postgresql://nobody@127.0.0.1:1/never", open=False)
    with pytest.raises(error, match="statement_timeout"):
        PostgresMemory(pool, statement_timeout=value)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("value", "error", "rule"),
    [
        (-1, ValueError, "must be a whole number >= 0"),
        (True, TypeError, "must be an int or None, not bool"),
        (1.5, TypeError, "must be an int or None, not float"),
        ("none", TypeError, "must be an int or None, not str"),
    ],
)
async def test_prepare_threshold_is_checked_before_anything_opens(
    value: object, error: type[Exception], rule: str
) -> None:
    # The host does not exist: the check comes first.
    with pytest.raises(error, match=f"^prepare_threshold {rule}"):
        async with PostgresMemory.connect(
            "postgresql://nobody@db.invalid/never",
            prepare_threshold=value,  # type: ignore[arg-type]
        ):
            pytest.fail("opened")


@pytest.mark.parametrize("operation", _OPERATIONS)
async def test_a_schema_dropped_under_a_running_store_is_a_schema_error(
    postgres_dsn: str, schema: str, backdoor: Backdoor, operation: str
) -> None:
    async with PostgresMemory.connect(postgres_dsn, schema=schema) as store:
        await store.setup()
        await store.remember("acme", "u1", "before the drop")
        await backdoor.query(sql.SQL("DROP SCHEMA {} CASCADE").format(sql.Identifier(schema)))
        with pytest.raises(SchemaVersionError) as caught:
            await _calls(store)[operation]()
        assert isinstance(caught.value, port.SchemaVersionError)
        assert caught.value.found is None
        assert caught.value.where == f"PostgreSQL schema {schema!r}"
        # Set up again, the store works without being rebuilt.
        await store.setup()
        assert await store.recall("acme", "u1") == ()


async def test_a_refused_statement_is_a_store_error_naming_no_value(
    postgres_dsn: str, schema: str, backdoor: Backdoor
) -> None:
    # A role that may read the table but not write it: the server's refusal
    # must reach the caller as the port's failure, never as psycopg's.
    async with _login_role(backdoor, "psych_ro") as role:
        async with PostgresMemory.connect(postgres_dsn, schema=schema) as store:
            await store.setup()
            secret = "Jane Roe, SSN 078-05-1120"  # noqa: S105 - personal data, not a password
            await store.remember("acme", secret, secret)
        for statement in (
            "GRANT USAGE ON SCHEMA {schema} TO {role}",
            "GRANT SELECT ON ALL TABLES IN SCHEMA {schema} TO {role}",
        ):
            await backdoor.query(
                sql.SQL(statement).format(schema=sql.Identifier(schema), role=sql.Identifier(role))
            )
        dsn = psycopg.conninfo.make_conninfo(postgres_dsn, user=role)
        async with PostgresMemory.connect(dsn, schema=schema) as store:
            # setup writes nothing on a current schema, so a reader may call it.
            await store.setup()
            assert [m.content for m in await store.recall("acme", secret)] == [secret]
            for call in (
                lambda: store.remember("acme", secret, secret),
                lambda: store.erase("acme", secret),
            ):
                with pytest.raises(PostgresMemoryError) as caught:
                    await call()
                assert isinstance(caught.value, port.MemoryStoreError)
                assert isinstance(caught.value.__cause__, psycopg.errors.InsufficientPrivilege)
                assert "Jane" not in str(caught.value)
                assert "SQLSTATE 42501" in str(caught.value)


@asynccontextmanager
async def _login_role(backdoor: Backdoor, prefix: str) -> AsyncIterator[str]:
    """A new role that may log in, with no grant yet; dropped afterwards."""
    role = f"{prefix}_{uuid4().hex[:12]}"
    await backdoor.query(sql.SQL("CREATE ROLE {} LOGIN").format(sql.Identifier(role)))
    try:
        yield role
    finally:
        await backdoor.query(
            sql.SQL("DROP OWNED BY {role}; DROP ROLE {role}").format(role=sql.Identifier(role))
        )


@pytest.mark.parametrize("prepare_threshold", [5, None])
async def test_the_documented_grants_are_enough_for_every_call(
    postgres_dsn: str, schema: str, backdoor: Backdoor, prepare_threshold: int | None
) -> None:
    # USAGE on the schema, SELECT, INSERT and DELETE on memories, SELECT on
    # schema_version, and EXECUTE on erase_few, which every role has until
    # it is revoked from PUBLIC: then an erase that calls it is refused,
    # clearly, and deletes nothing.
    async with _login_role(backdoor, "psych_app") as role:
        names = {
            "schema": sql.Identifier(schema),
            "role": sql.Identifier(role),
            "memories": sql.Identifier(schema, "memories"),
            "versions": sql.Identifier(schema, "schema_version"),
            "erase_few": sql.Identifier(schema, "erase_few"),
        }
        async with PostgresMemory.connect(postgres_dsn, schema=schema) as store:
            await store.setup()
        for statement in (
            "GRANT USAGE ON SCHEMA {schema} TO {role}",
            "GRANT SELECT, INSERT, DELETE ON {memories} TO {role}",
            "GRANT SELECT ON {versions} TO {role}",
        ):
            await backdoor.query(sql.SQL(statement).format(**names))
        dsn = psycopg.conninfo.make_conninfo(postgres_dsn, user=role)
        async with PostgresMemory.connect(
            dsn, schema=schema, prepare_threshold=prepare_threshold
        ) as store:
            fact = await store.remember("acme", "u1", "kept until erased")
            assert await store.recall("acme", "u1") == (fact,)
            assert await store.forget("acme", "u1", fact.id) is True
            await store.remember("acme", "u1", "erased")
            assert await store.erase("acme", "u1") == 1
            assert await store.erase("acme", "u1") == 0
            await store.remember("acme", "u1", "not erased")
            await backdoor.query(
                sql.SQL("REVOKE EXECUTE ON FUNCTION {erase_few}(text, text) FROM PUBLIC").format(
                    **names
                )
            )
            if prepare_threshold is None:
                with pytest.raises(PostgresMemoryError, match="SQLSTATE 42501") as caught:
                    await store.erase("acme", "u1")
                assert isinstance(caught.value.__cause__, psycopg.errors.InsufficientPrivilege)
                assert await backdoor.count("acme", "u1") == 1
            else:
                # The store's own pool prepares, and sends the DELETE itself.
                assert await store.erase("acme", "u1") == 1
