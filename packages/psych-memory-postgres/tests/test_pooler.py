"""Behind a transaction pooler, and in a pool shared with other code.

A pooler in transaction mode (PgBouncer here, the pooled endpoints of
managed services alike) lends a server connection to a client for one
transaction, then to another client. So the store must neither rely on a
statement prepared on a connection (the next transaction may run on
another) nor leave a setting on one (the next client would inherit it).
The PgBouncer tests start a PgBouncer of their own (see ``conftest``); the
shared server behind it is the usual test server.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import AbstractContextManager, asynccontextmanager, contextmanager
from dataclasses import replace
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar
from uuid import uuid4

import anyio
import anyio.to_thread
import httpx2
import jwt
import psycopg
import pytest
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.hazmat.primitives.serialization import Encoding, PublicFormat
from mcp import Client
from mcp.client.streamable_http import streamable_http_client
from mcp.types import CallToolResult, TextContent
from psycopg import sql
from psycopg_pool import AsyncConnectionPool, ConnectionPool

from psych_runtime.memory.conformance import MemoryStoreContract
from psych_runtime.memory.port import MemoryKey, MemoryStore, store_events
from psych_runtime.memory.postgres import (
    ConnectionRefusedByServerError,
    PostgresMemory,
    PostgresMemoryError,
    StoreUnavailableError,
    open_url,
)

if TYPE_CHECKING:
    from conftest import Backdoor, Pooler

DSN = os.environ.get("PSYCH_MEMORY_TEST_POSTGRES_DSN", "postgresql://postgres@127.0.0.1:5432/test")

# Settings the store relies on, none of which may stay on a session (the
# conftest's STORE_SETTINGS).
_SETTINGS: tuple[str, ...] = (
    "statement_timeout",
    "lock_timeout",
    "TimeZone",
    "synchronous_commit",
    "DateStyle",
)

# Distinct from any server default, so a setting left behind shows.
_BOUNDS: dict[str, Any] = {"statement_timeout": 1.5, "lock_timeout": 0.75}


def _admin(statement: sql.Composed, params: tuple[object, ...] = ()) -> int:
    with psycopg.connect(DSN, autocommit=True) as conn:
        cursor = conn.execute(statement, params)
        row = cursor.fetchone() if cursor.description is not None else None
        return 0 if row is None else int(row[0])


def _drop(schema: str) -> None:
    _admin(sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(sql.Identifier(schema)))


async def _workload(store: PostgresMemory, tasks: int, rounds: int) -> tuple[int, int]:
    """``tasks`` tasks doing remember, recall, forget and erase; the calls made and failed."""
    failures: list[BaseException] = []
    calls = 0

    async def user(n: int) -> None:
        nonlocal calls
        end_user = f"u{n}"
        for _ in range(rounds):
            try:
                kept = await store.remember("acme", end_user, "kept")
                gone = await store.remember("acme", end_user, "gone")
                assert await store.forget("acme", end_user, gone.id)
                assert await store.recall("acme", end_user) == (kept,)
                assert await store.erase("acme", end_user) == 1
            except Exception as exc:  # noqa: BLE001 - counted, and the first one shown
                failures.append(exc)
            calls += 5

    async with anyio.create_task_group() as group:
        for n in range(tasks):
            group.start_soon(user, n)
    if failures:
        raise AssertionError(f"{len(failures)} rounds failed, the first with {failures[0]!r}")
    return calls, len(failures)


# -- behind PgBouncer in transaction mode ---------------------------------


@pytest.mark.clusters
@pytest.mark.usefixtures("postgres_dsn")
class TestConformanceThroughPgBouncer(MemoryStoreContract):
    """The whole kit, on a store opened by URL through the pooler."""

    max_examples: ClassVar[int] = 10
    cancelled_calls: ClassVar[int] = 30
    pooler: Pooler

    @pytest.fixture(autouse=True)
    def _through(self, pooler: Pooler) -> None:
        self.pooler = pooler

    @asynccontextmanager
    async def open_store(self) -> AsyncIterator[MemoryStore]:
        schema = f"psych_kit_{uuid4().hex}"
        try:
            async with open_url(self.pooler.url(schema=schema, max_size="8")) as store:
                yield store
        finally:
            await anyio.to_thread.run_sync(_drop, schema)

    async def count_stored(self, store: MemoryStore, key: MemoryKey) -> int:
        assert isinstance(store, PostgresMemory)
        return await anyio.to_thread.run_sync(
            _admin,
            sql.SQL("SELECT count(*) FROM {} WHERE tenant = %s AND end_user_id = %s").format(
                sql.Identifier(store.schema, "memories")
            ),
            (key.tenant, key.end_user_id),
        )


@pytest.mark.clusters
@pytest.mark.anyio
async def test_concurrent_calls_through_pgbouncer_all_succeed_and_leave_no_setting(
    pgbouncer: Pooler, schema: str, backdoor: Backdoor
) -> None:
    # Without prepare_threshold=none, psycopg prepares the statements it
    # runs often and the pooler sends the next run to a server connection
    # that never saw them (SQLSTATE 26000): most calls failed so.
    defaults = await backdoor.server_defaults(*_SETTINGS)
    url = pgbouncer.url(schema=schema, max_size="12", statement_timeout="1.5", lock_timeout="0.75")
    async with open_url(url) as store:
        assert isinstance(store, PostgresMemory)
        calls, failed = await _workload(store, tasks=12, rounds=12)
    assert (calls, failed) == (720, 0)
    # Every server connection the pooler has (its pool holds 8) is handed
    # to a plain client: none carries a setting of the store.
    sessions = await anyio.to_thread.run_sync(pgbouncer.sessions, _SETTINGS, 8)
    assert sessions == [defaults] * 8


@pytest.mark.clusters
@pytest.mark.anyio
async def test_the_keyword_turns_prepared_statements_off_through_pgbouncer(
    pooler: Pooler, schema: str
) -> None:
    async with PostgresMemory.connect(
        pooler.dsn, schema=schema, max_size=4, prepare_threshold=None
    ) as store:
        await store.setup()
        calls, failed = await _workload(store, tasks=4, rounds=8)
    assert (calls, failed) == (160, 0)


# -- a pool of the application's, shared with other code ------------------


@pytest.mark.anyio
async def test_a_shared_threaded_pool_gets_its_connections_back_as_they_were(
    postgres_dsn: str, schema: str, backdoor: Backdoor
) -> None:
    defaults = await backdoor.server_defaults(*_SETTINGS)
    pool = ConnectionPool(
        postgres_dsn, min_size=2, max_size=2, kwargs={"autocommit": True}, open=False
    )
    await anyio.to_thread.run_sync(partial(pool.open, wait=True))
    try:
        async with PostgresMemory(pool, schema=schema, **_BOUNDS) as store:
            await store.setup()
            await _workload(store, tasks=4, rounds=3)
        sessions = await anyio.to_thread.run_sync(_pool_sessions, pool)
    finally:
        await anyio.to_thread.run_sync(pool.close)
    assert sessions == [defaults] * 2


@pytest.mark.parametrize("anyio_backend", ["asyncio"])
@pytest.mark.anyio
async def test_a_shared_async_pool_gets_its_connections_back_as_they_were(
    postgres_dsn: str, schema: str, backdoor: Backdoor
) -> None:
    defaults = await backdoor.server_defaults(*_SETTINGS)
    async with AsyncConnectionPool(
        postgres_dsn, min_size=2, max_size=2, kwargs={"autocommit": True}, open=False
    ) as pool:
        await pool.open(wait=True)
        async with PostgresMemory(pool, schema=schema, **_BOUNDS) as store:
            await store.setup()
            await _workload(store, tasks=4, rounds=3)
        query = sql.SQL("SELECT {}").format(
            sql.SQL(", ").join(sql.SQL("current_setting({})").format(name) for name in _SETTINGS)
        )
        sessions = []
        async with pool.connection() as first, pool.connection() as second:
            for conn in (first, second):
                row = await (await conn.execute(query)).fetchone()
                assert row is not None
                sessions.append(tuple(str(value) for value in row))
    assert sessions == [defaults] * 2


def _pool_sessions(pool: ConnectionPool[Any]) -> list[tuple[str, ...]]:
    # Both connections at once: every connection the pool has.
    query = sql.SQL("SELECT {}").format(
        sql.SQL(", ").join(sql.SQL("current_setting({})").format(name) for name in _SETTINGS)
    )
    seen = []
    with pool.connection() as first, pool.connection() as second:
        for conn in (first, second):
            row = conn.execute(query).fetchone()
            assert row is not None
            seen.append(tuple(str(value) for value in row))
    return seen


# -- the pooler's own failures ----------------------------------------------


@pytest.mark.clusters
@pytest.mark.anyio
async def test_backends_terminated_behind_pgbouncer_cost_no_remember_or_recall(
    pooler: Pooler, schema: str, backdoor: Backdoor
) -> None:
    pgbouncer = pooler
    # As directly: the server connections behind the pooler are terminated
    # again and again while calls run. A call whose server connection dies
    # under it (PgBouncer closes the client too) is replayed; one that was
    # idle is replaced by the pooler unseen. No call fails, every fact is
    # stored exactly once, in order. Each round holds writes back until one
    # waits on the server, so a call is surely in flight when it is cut.
    workers, rounds, steps_between = 12, 4, 40
    progress = [0]
    moved = anyio.Event()
    finished = anyio.Event()
    killed: list[int] = []
    stored: dict[str, list[Any]] = {}

    async def run(user: str) -> None:
        nonlocal moved
        n = 0
        while not finished.is_set():
            fact = await store.remember("acme", user, f"{user}-{n}")
            stored.setdefault(user, []).append(fact)
            assert await store.recall("acme", user, limit=3) == tuple(stored[user][:3])
            n += 1
            progress[0] += 1
            moved.set()

    async def terminator() -> None:
        nonlocal moved
        # Each round waits for the calls to have moved on (paced by
        # progress, not by a clock), so server connections are in use.
        for _ in range(rounds):
            start = progress[0]
            while progress[0] < start + steps_between:
                moved = anyio.Event()
                await moved.wait()
            async with backdoor.writes_held():
                killed.append(await backdoor.terminate_pooled(pgbouncer))
        finished.set()

    # Writes wait on the held table for as long as a round takes.
    url = pgbouncer.url(schema=schema, max_size="8", lock_timeout="30")
    replays: list[object] = []
    with anyio.fail_after(120):
        async with open_url(url) as store:
            token = store_events.set(lambda name, attributes: replays.append(attributes))
            try:
                async with anyio.create_task_group() as tasks:
                    tasks.start_soon(terminator)
                    for number in range(workers):
                        tasks.start_soon(run, f"user-{number}")
            finally:
                store_events.reset(token)
            assert min(killed) >= 1
            # Calls were in flight when their server connections died, at
            # least one a round, and none failed.
            assert len(replays) >= rounds
            for user, facts in stored.items():
                assert await store.recall("acme", user) == tuple(facts)
                assert await backdoor.count("acme", user) == len(facts)


@pytest.mark.clusters
@pytest.mark.anyio
async def test_a_call_the_pooler_never_gave_a_server_changed_nothing(
    start_pooler: Callable[..., AbstractContextManager[Pooler]], schema: str
) -> None:
    # Its only server connection held by another client, the pooler closes
    # a waiting client after query_wait_timeout (08P01): the statement never
    # reached the server, so even forget, never replayed once sent, says it
    # changed nothing, and is replayed like any call never sent.
    with start_pooler(default_pool_size=1, query_wait_timeout=1) as pooler:
        async with open_url(pooler.url(schema=schema, max_size="2")) as store:
            fact = await store.remember("acme", "u1", "kept")
            holder = await anyio.to_thread.run_sync(_hold_the_server, pooler.dsn)
            replays: list[object] = []
            token = store_events.set(lambda name, attributes: replays.append(attributes))
            try:
                with pytest.raises(StoreUnavailableError) as caught:
                    await store.forget("acme", "u1", fact.id)
            finally:
                store_events.reset(token)
                await anyio.to_thread.run_sync(holder.close)
            assert caught.value.may_have_taken_effect is False
            assert "pooler" in caught.value.reason
            assert isinstance(caught.value.__cause__, psycopg.errors.ProtocolViolation)
            assert len(replays) == 2
            assert await store.recall("acme", "u1") == (fact,)


@pytest.mark.clusters
@pytest.mark.anyio
@pytest.mark.parametrize("pooler_does", ["refuse", "ignore"])
async def test_a_store_that_may_prepare_is_refused_at_open_behind_pgbouncer(
    start_pooler: Callable[..., AbstractContextManager[Pooler]], schema: str, pooler_does: str
) -> None:
    # A store's own pool that may prepare opens its sessions with the bounds
    # in libpq's options. PgBouncer refuses that startup parameter, or, told
    # to ignore it, drops it and would leave every statement unbounded: both
    # stop the store at open, never at its first call.
    settings = {"ignore_startup_parameters": "options"} if pooler_does == "ignore" else {}
    with start_pooler(**settings) as pooler, pytest.raises(PostgresMemoryError) as caught:
        async with PostgresMemory.connect(pooler.dsn, schema=schema, pool_timeout=5):
            pass
    if pooler_does == "refuse":
        assert isinstance(caught.value, ConnectionRefusedByServerError)
        assert "options" in str(caught.value)
    else:
        assert "statement_timeout" in str(caught.value)
        assert "prepare_threshold=None" in str(caught.value)


# -- behind PgBouncer in session mode -----------------------------------------

# A pooler in session mode lends each client a server connection for as long
# as it stays connected, idle or not; with query_wait_timeout = 0 it never
# tells a client waiting for one that none came. One server connection.
_SESSION_MODE: dict[str, object] = {
    "pool_mode": "session",
    "default_pool_size": 1,
    "query_wait_timeout": 0,
}


@pytest.mark.clusters
@pytest.mark.anyio
async def test_tasks_at_once_behind_a_session_pooler_are_all_served(
    start_pooler: Callable[..., AbstractContextManager[Pooler]], schema: str
) -> None:
    # The pool's idle connection keeps the pooler's only server connection,
    # so a connection the pool opens for more tasks would wait for another
    # one for ever, and the calls given it with it. A connection joins the
    # pool only once a server serves it: the tasks take turns on the one
    # that is served, and none hangs. (Each reads first: a read in flight
    # can be interrupted, so a hang fails the test rather than stalling it.)
    with start_pooler(**_SESSION_MODE) as pooler, anyio.fail_after(60):
        async with PostgresMemory.connect(
            pooler.dsn, schema=schema, prepare_threshold=None
        ) as store:
            await store.setup()
            first = await store.remember("acme", "u0", "first")
            seen: dict[int, tuple[object, ...]] = {}

            async def user(n: int) -> None:
                seen[n] = await store.recall("acme", "u0")
                await store.remember("acme", f"u{n + 1}", "later")

            async with anyio.create_task_group() as group:
                for n in range(8):
                    group.start_soon(user, n)
            assert seen == dict.fromkeys(range(8), (first,))
            for n in range(8):
                assert [m.content for m in await store.recall("acme", f"u{n + 1}")] == ["later"]


@pytest.mark.clusters
@pytest.mark.anyio
async def test_a_call_behind_a_session_pooler_with_every_server_held_ends_in_its_bound(
    start_pooler: Callable[..., AbstractContextManager[Pooler]],
    schema: str,
    backdoor: Backdoor,
    postgres_dsn: str,
) -> None:
    # The pool's one connection, and with it the pooler's one server
    # connection, is held by a remember waiting on a lock. Another call
    # waits pool_timeout for the pool, then opens a connection of its own,
    # which the pooler would keep waiting for ever: after pool_timeout more
    # the call ends, saying it changed nothing, forget included.
    name = f"psych-session-{uuid4().hex[:12]}"
    with start_pooler(**_SESSION_MODE) as pooler:
        url = pooler.url(
            schema=schema, max_size="1", pool_timeout="1", lock_timeout="60",
            statement_timeout="60", application_name=name,
        )  # fmt: skip
        async with open_url(url) as store:
            kept = await store.remember("acme", "u1", "kept")
            locker = await anyio.to_thread.run_sync(partial(psycopg.connect, postgres_dsn))
            try:
                lock = sql.SQL("LOCK TABLE {} IN SHARE MODE").format(backdoor.table)
                await anyio.to_thread.run_sync(locker.execute, lock)
                async with anyio.create_task_group() as group:
                    group.start_soon(store.remember, "acme", "u2", "waited")
                    await backdoor.wait_for_backend(name, "wait_event_type = 'Lock'")
                    with anyio.fail_after(30):
                        with pytest.raises(StoreUnavailableError) as read:
                            await store.recall("acme", "u1")
                        with pytest.raises(StoreUnavailableError) as deleted:
                            await store.forget("acme", "u1", kept.id)
                    await anyio.to_thread.run_sync(locker.close)
            finally:
                await anyio.to_thread.run_sync(locker.close)
            for caught in (read, deleted):
                assert caught.value.may_have_taken_effect is False
                assert "pooler" in caught.value.reason
            assert await store.recall("acme", "u1") == (kept,)
            assert [m.content for m in await store.recall("acme", "u2")] == ["waited"]


@pytest.mark.clusters
@pytest.mark.anyio
async def test_opening_behind_a_session_pooler_with_every_server_held_ends_in_its_bound(
    start_pooler: Callable[..., AbstractContextManager[Pooler]], schema: str
) -> None:
    # Another client keeps the pooler's only server connection: opening
    # waits pool_timeout for its first connection, twice at most, and says
    # it could not; once the other client leaves, the store opens.
    with start_pooler(**_SESSION_MODE) as pooler:
        holder = await anyio.to_thread.run_sync(_hold_the_server, pooler.dsn)
        try:
            with anyio.fail_after(30), pytest.raises(StoreUnavailableError) as caught:
                async with PostgresMemory.connect(
                    pooler.dsn, schema=schema, prepare_threshold=None, pool_timeout=1
                ):
                    pass
        finally:
            await anyio.to_thread.run_sync(holder.close)
        assert caught.value.may_have_taken_effect is False
        assert "pooler" in str(caught.value)
        async with PostgresMemory.connect(
            pooler.dsn, schema=schema, prepare_threshold=None, pool_timeout=1
        ) as store:
            await store.setup()
            assert await store.recall("acme", "u1") == ()


def _hold_the_server(dsn: str) -> psycopg.Connection[Any]:
    # A transaction left open keeps the pooler's server connection lent.
    conn = psycopg.connect(dsn, prepare_threshold=None)
    conn.execute("SELECT 1")
    return conn


# -- a store that never prepares, without a pooler --------------------------


@pytest.mark.anyio
async def test_a_store_that_never_prepares_keeps_every_bound_and_rule(
    postgres_dsn: str, schema: str, backdoor: Backdoor
) -> None:
    # With prepare_threshold=None each bound goes with its statement as one
    # query of the simple protocol: the bounds must still hold, and every
    # statement (the first of a transaction included) must still work.
    async with PostgresMemory.connect(
        postgres_dsn, schema=schema, max_size=2, prepare_threshold=None, lock_timeout=0.3
    ) as store:
        await store.setup()
        await backdoor.load("big", 2_500)
        fact = await store.remember("acme", "u1", "kept")
        assert await store.restore_many([replace(fact, id="1" * 32, content="restored")]) == 1
        assert [m.content for m in await store.recall("acme", "u1")] == ["kept", "restored"]
        assert await store.erase("acme", "big") == 2_500
        locked = await anyio.to_thread.run_sync(_lock_table, postgres_dsn, backdoor.table)
        try:
            with anyio.fail_after(30), pytest.raises(StoreUnavailableError) as caught:
                await store.forget("acme", "u1", fact.id)
        finally:
            await anyio.to_thread.run_sync(locked.close)
        assert "lock_timeout" in caught.value.reason
        assert caught.value.may_have_taken_effect is False
        assert await store.forget("acme", "u1", fact.id)
        # The session keeps none of it.
        assert await backdoor.settings_of(store, "lock_timeout") == (
            await backdoor.server_defaults("lock_timeout")
        )


def _lock_table(dsn: str, table: sql.Identifier) -> psycopg.Connection[Any]:
    conn = psycopg.connect(dsn)
    conn.execute(sql.SQL("LOCK TABLE {} IN ACCESS EXCLUSIVE MODE").format(table))
    return conn


@pytest.mark.anyio
async def test_bounds_given_as_none_leave_the_sessions_own(
    postgres_dsn: str, schema: str, backdoor: Backdoor
) -> None:
    # The application's pool sets lock_timeout on its sessions (as a role
    # setting would); a store told to leave the bounds uses that one.
    pool = ConnectionPool(
        postgres_dsn,
        min_size=1,
        max_size=1,
        kwargs={"autocommit": True, "options": "-c lock_timeout=300"},
        open=False,
    )
    await anyio.to_thread.run_sync(partial(pool.open, wait=True))
    try:
        async with PostgresMemory(
            pool, schema=schema, statement_timeout=None, lock_timeout=None
        ) as store:
            await store.setup()
            fact = await store.remember("acme", "u1", "kept")
            locked = await anyio.to_thread.run_sync(_lock_table, postgres_dsn, backdoor.table)
            try:
                with anyio.fail_after(30), pytest.raises(StoreUnavailableError) as caught:
                    await store.forget("acme", "u1", fact.id)
            finally:
                await anyio.to_thread.run_sync(locked.close)
            assert "lock_timeout" in caught.value.reason
            assert await backdoor.settings_of(store, "lock_timeout", "statement_timeout") == (
                "300ms",
                (await backdoor.server_defaults("statement_timeout"))[0],
            )
    finally:
        await anyio.to_thread.run_sync(pool.close)


@pytest.mark.clusters
@pytest.mark.anyio
async def test_the_durability_of_a_deletion_through_pgbouncer_is_the_servers(
    pooler: Pooler, schema: str
) -> None:
    # The shared test server streams to no standby; the pooler changes
    # nothing of what the server says (its two reads may even run on two
    # server connections).
    async with open_url(pooler.url(schema=schema)) as store:
        assert await store.deletion_durability() == "no_replication"


# -- the operator's command and the MCP server, through the pooler ------------


def _installed(name: str) -> str:
    """A console script beside this Python, or on the PATH."""
    beside = Path(sys.executable).parent / name
    found = str(beside) if beside.exists() else shutil.which(name)
    if found is None:
        pytest.fail(f"the console script {name} is not installed")
    return found


def _operator(*args: str, cwd: Path, stdin: str = "") -> str:
    """Run ``psych-memory`` to its end, never through a shell; what it wrote, once it succeeded."""
    done = subprocess.run(
        [_installed("psych-memory"), *args],
        cwd=cwd,
        input=stdin,
        capture_output=True,
        text=True,
        encoding="utf-8",
        timeout=300,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    return done.stdout


async def _snapshot(url: str) -> dict[tuple[str, str], tuple[Any, ...]]:
    async with open_url(url) as store:
        return {
            (tenant, end_user): await store.recall(tenant, end_user)
            for tenant in await store.tenants()
            for end_user in await store.end_users(tenant)
        }


async def _seed(url: str) -> None:
    async with open_url(url) as store:
        for end_user, content in (("u1", "a"), ("u2", "b"), ("u1", "c\nd"), ("u1", "e")):
            await store.remember("acme", end_user, content)


@pytest.mark.clusters
def test_export_erase_import_and_migrate_through_pgbouncer(
    pooler: Pooler, schema: str, tmp_path: Path
) -> None:
    url = pooler.url(schema=schema)
    copy = f"{schema}_copy"
    try:
        anyio.run(_seed, url)
        before = anyio.run(_snapshot, url)
        exported = _operator("export", url, "--tenant", "acme", "--user", "u1", cwd=tmp_path)
        receipt = _operator(
            "erase", url, "--tenant", "acme", "--user", "u1", "--yes", cwd=tmp_path
        ).splitlines()
        assert "facts deleted:  3" in receipt
        assert "durability:     on a server with no replication" in receipt
        assert ("acme", "u1") not in anyio.run(_snapshot, url)
        _operator("import", url, "-", cwd=tmp_path, stdin=exported)
        assert anyio.run(_snapshot, url) == before
        _operator("migrate", url, pooler.url(schema=copy), cwd=tmp_path)
        assert anyio.run(_snapshot, pooler.url(schema=copy)) == before
    finally:
        _drop(copy)


_ISSUER = "https://idp.example"
_AUDIENCE = "https://memory.example/mcp"


@contextmanager
def _mcp_over_http(store_url: str, public_key: Path) -> Iterator[str]:
    """``psych-memory-mcp --http`` on a free port for tenant ``acme``; its endpoint."""
    process = subprocess.Popen(
        [
            _installed("psych-memory-mcp"), "--http", "--host", "127.0.0.1", "--port", "0",
            "--store", store_url, "--tenant", "acme", "--issuer", _ISSUER,
            "--audience", _AUDIENCE, "--jwt-key-file", str(public_key),
        ],
        stderr=subprocess.PIPE,
        text=True,
    )  # fmt: skip
    assert process.stderr is not None
    try:
        # It says where it listens once it does; its later lines are not read.
        for line in process.stderr:
            if "listening on " in line:
                yield line.split("listening on ", 1)[1].strip()
                break
        else:
            pytest.fail("psych-memory-mcp ended without listening")
    finally:
        process.terminate()
        process.wait(timeout=30)
        process.stderr.close()


@pytest.mark.clusters
def test_the_mcp_server_over_http_serves_through_pgbouncer(
    pooler: Pooler, schema: str, tmp_path: Path
) -> None:
    key = ec.generate_private_key(ec.SECP256R1())
    public = tmp_path / "public.pem"
    pem = key.public_key().public_bytes(Encoding.PEM, PublicFormat.SubjectPublicKeyInfo)
    public.write_bytes(pem)
    now = int(time.time())
    token = jwt.encode(
        {"iss": _ISSUER, "sub": "alice", "aud": _AUDIENCE, "iat": now, "exp": now + 300},
        key,
        algorithm="ES256",
    )

    async def calls(endpoint: str) -> tuple[list[str], str]:
        headers = {"Authorization": f"Bearer {token}"}
        async with (
            httpx2.AsyncClient(headers=headers, timeout=30) as http,
            Client(streamable_http_client(endpoint, http_client=http)) as session,
        ):
            saved: list[str] = []

            async def remember(index: int) -> None:
                result = await session.call_tool("remember", {"content": f"fact {index}"})
                assert not result.is_error, result.content
                saved.append(json.loads(_text(result))["id"])

            async with anyio.create_task_group() as group:
                for index in range(12):
                    group.start_soon(remember, index)
            gone = await session.call_tool("forget", {"memory_id": saved[0]})
            assert json.loads(_text(gone))["forgotten"] is True
            return saved, _text(await session.call_tool("recall", {}))

    with _mcp_over_http(pooler.url(schema=schema, setup="auto"), public) as endpoint:
        saved, recalled = anyio.run(calls, endpoint)
    ids = {json.loads(line)["id"] for line in recalled.splitlines() if line.startswith("{")}
    assert ids == set(saved[1:])


def _text(result: CallToolResult) -> str:
    (block,) = result.content
    assert isinstance(block, TextContent)
    return block.text
