"""Fixtures for the PostgreSQL adapter's tests: a real server, a schema each.

The server (``postgres_dsn``) and a fresh schema per test
(``postgres_schema``) come from the repository's root conftest, which skips
the tests without a server and fails them under ``CI=true``.
"""

from __future__ import annotations

import os
import pwd
import shutil
import socket
import subprocess
import tempfile
import time
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import AbstractContextManager, ExitStack, asynccontextmanager, contextmanager
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any, NoReturn

import anyio.to_thread
import psycopg
import pytest
from psycopg import sql
from psycopg.conninfo import conninfo_to_dict, make_conninfo
from psycopg_pool import AsyncConnectionPool, ConnectionPool

from psych_runtime.memory.postgres import DEFAULT_STATEMENT_TIMEOUT, PostgresMemory


@pytest.fixture
def schema(postgres_schema: str) -> str:
    """The test's own schema (the root conftest's `postgres_schema`), by its short name here."""
    return postgres_schema


@pytest.fixture
async def store(postgres_dsn: str, schema: str) -> AsyncIterator[PostgresMemory]:
    """A set-up store with a pool of its own, in a schema of its own."""
    async with PostgresMemory.connect(postgres_dsn, schema=schema, max_size=8) as memory:
        await memory.setup()
        yield memory


class Backdoor:
    """A separate connection to the server, past the store under test.

    Tests read the table through it (the store offers no such view), and use
    it to lock, count and terminate. Every method runs in a worker thread, so
    the event loop, and the store's own calls, keep running meanwhile.
    """

    def __init__(self, dsn: str, schema: str) -> None:
        self.dsn = dsn
        self.schema = schema
        self.table = sql.Identifier(schema, "memories")

    def labelled(self, application_name: str) -> str:
        """The server's address, with connections labelled so they can be found."""
        return make_conninfo(self.dsn, application_name=application_name)

    async def query(
        self, statement: sql.SQL | sql.Composed, params: tuple[Any, ...] = ()
    ) -> list[Any]:
        """Run one statement on a fresh autocommit connection; return its rows."""

        def run() -> list[Any]:
            with psycopg.connect(self.dsn, autocommit=True) as conn:
                cursor = conn.execute(statement, params)
                return cursor.fetchall() if cursor.description is not None else []

        return await anyio.to_thread.run_sync(run)

    async def load(self, end_user_id: str, count: int) -> None:
        """Give the end user ``end_user_id`` of tenant ``acme`` ``count`` facts, in one statement.

        Straight into the table: the store's own calls would take minutes
        for a big key.
        """
        await self.query(
            sql.SQL(
                "INSERT INTO {} (id, tenant, end_user_id, content)"
                " SELECT md5(%s::text || g), 'acme', %s, 'fact ' || g"
                " FROM generate_series(1, %s) AS g"
            ).format(self.table),
            (end_user_id, end_user_id, count),
        )

    async def count(self, tenant: str, end_user_id: str) -> int:
        """How many facts of this key the table holds."""
        rows = await self.query(
            sql.SQL("SELECT count(*) FROM {} WHERE tenant = %s AND end_user_id = %s").format(
                self.table
            ),
            (tenant, end_user_id),
        )
        return int(rows[0][0])

    @asynccontextmanager
    async def threaded_store(
        self,
        dsn: str,
        *,
        min_size: int = 1,
        max_size: int = 8,
        wait: float = 20,
        statement_timeout: float = DEFAULT_STATEMENT_TIMEOUT,
    ) -> AsyncIterator[PostgresMemory]:
        """A set-up store in this schema on a synchronous pool (worker threads).

        `PostgresMemory.connect` picks the asynchronous pool on asyncio; this
        is the threaded path there, built as an application would. ``dsn``
        may carry a label (`labelled`).
        """
        pool = ConnectionPool(
            dsn,
            min_size=min_size,
            max_size=max_size,
            timeout=wait,
            kwargs={"autocommit": True},
            open=False,
        )
        await anyio.to_thread.run_sync(partial(pool.open, wait=True, timeout=wait))
        try:
            async with PostgresMemory(
                pool, schema=self.schema, statement_timeout=statement_timeout
            ) as store:
                await store.setup()
                yield store
        finally:
            await anyio.to_thread.run_sync(pool.close)

    async def server_defaults(self, *names: str) -> tuple[str, ...]:
        """Settings as a fresh session of the server has them."""
        rows = await self.query(_settings_query(names))
        return tuple(str(value) for value in rows[0])

    async def settings_of(self, store: PostgresMemory, *names: str) -> tuple[str, ...]:
        """Settings of a connection of the store's pool (one it has used, when it has one)."""
        query = _settings_query(names)
        pool = store.pool
        if isinstance(pool, AsyncConnectionPool):
            async with pool.connection() as conn:
                row = await (await conn.execute(query)).fetchone()
        else:

            def read() -> Any:
                with pool.connection() as conn:
                    return conn.execute(query).fetchone()

            row = await anyio.to_thread.run_sync(read)
        assert row is not None
        return tuple(str(value) for value in row)

    async def wait_for_backend(self, application_name: str, condition: str) -> None:
        """Return once a backend serving that application meets ``condition``.

        ``condition`` is SQL over ``pg_stat_activity``: the server's own
        view is the only way to see where a call in flight has got to.
        """
        query = sql.SQL(
            "SELECT count(*) FROM pg_stat_activity WHERE application_name = %s AND ({})"
        ).format(sql.SQL(condition))
        await self._until_counted(query, (application_name,))

    async def _until_counted(self, count: sql.SQL | sql.Composed, params: tuple[Any, ...]) -> None:
        # Polled: the server has no way to say when one of its views changes.
        while True:
            rows = await self.query(count, params)
            if rows[0][0] >= 1:
                return
            await anyio.sleep(0.01)

    async def terminate_pooled(self, pooler: Pooler) -> int:
        """Terminate every server connection of the pooler, and wait until they are gone."""
        pids = await anyio.to_thread.run_sync(pooler.server_pids)
        rows = await self.query(
            sql.SQL(
                "SELECT count(*) FILTER (WHERE pg_terminate_backend(pid, 10000))"
                " FROM unnest(%s::int[]) AS pid"
            ),
            (pids,),
        )
        return int(rows[0][0])

    @asynccontextmanager
    async def writes_held(self) -> AsyncIterator[None]:
        """Hold the table against writes for the block; enter it once a write waits.

        Reads go on (``SHARE`` mode lets them); a write that arrives waits on
        its server connection, so inside the block at least one call is in
        flight on the server, for certain, whatever the machine's speed.
        """
        conn = await anyio.to_thread.run_sync(partial(psycopg.connect, self.dsn))
        try:
            lock = sql.SQL("LOCK TABLE {} IN SHARE MODE").format(self.table)
            await anyio.to_thread.run_sync(conn.execute, lock)
            waiting = sql.SQL(
                "SELECT count(*) FROM pg_stat_activity WHERE %s = ANY(pg_blocking_pids(pid))"
            )
            await self._until_counted(waiting, (conn.info.backend_pid,))
            yield
        finally:
            await anyio.to_thread.run_sync(conn.close)

    async def terminate(self, application_name: str) -> int:
        """Terminate every backend serving that application, and wait until they are gone."""
        rows = await self.query(
            sql.SQL(
                "SELECT count(*) FILTER (WHERE pg_terminate_backend(pid, 10000))"
                " FROM pg_stat_activity WHERE application_name = %s"
            ),
            (application_name,),
        )
        return int(rows[0][0])


@pytest.fixture
def backdoor(postgres_dsn: str, schema: str) -> Backdoor:
    """The back door into the schema of the test's store."""
    return Backdoor(postgres_dsn, schema)


def _settings_query(names: tuple[str, ...]) -> sql.Composed:
    return sql.SQL("SELECT {}").format(
        sql.SQL(", ").join(sql.SQL("current_setting({})").format(name) for name in names)
    )


# -- a private PgBouncer in transaction mode --------------------------------


@dataclass
class Pooler:
    """A PgBouncer of our own in transaction mode, in front of the test server."""

    port: int
    dbname: str
    user: str
    folder: Path

    @property
    def dsn(self) -> str:
        """The pooler's address, for the same database and role as the server's."""
        return f"postgresql://{self.user}@127.0.0.1:{self.port}/{self.dbname}"

    def server_pids(self) -> list[int]:
        """The server process ids of the pooler's server connections, from its admin console."""
        admin = f"postgresql://{self.user}@127.0.0.1:{self.port}/pgbouncer"
        # The console speaks the simple protocol only: a client-side cursor.
        with psycopg.connect(admin, autocommit=True, cursor_factory=psycopg.ClientCursor) as conn:
            cursor = conn.execute("SHOW SERVERS")
            assert cursor.description is not None
            column = [c.name for c in cursor.description].index("remote_pid")
            return [int(row[column]) for row in cursor.fetchall()]

    def sessions(self, names: tuple[str, ...], count: int) -> list[tuple[str, ...]]:
        """Settings ``names`` of ``count`` server sessions at once, as a plain client sees them.

        Each client holds a transaction open until all have read, so the
        pooler must give each a server connection of its own: with
        ``count`` at least its pool size, every one it has.
        """
        query = _settings_query(names)
        seen = []
        with ExitStack() as stack:
            for _ in range(count):
                conn = stack.enter_context(psycopg.connect(self.dsn, prepare_threshold=None))
                row = conn.execute(query).fetchone()
                assert row is not None
                seen.append(tuple(str(value) for value in row))
        return seen

    def url(self, **options: str) -> str:
        """A store URL through the pooler, prepared statements off unless ``options`` say."""
        query = "&".join(f"{name}={value}" for name, value in {
            "prepare_threshold": "none", **options}.items())  # fmt: skip
        return f"{self.dsn}?{query}"


def _pgbouncer_binary(unavailable: Callable[[str], NoReturn]) -> str:
    """The pgbouncer program, or `unavailable`."""
    found = shutil.which("pgbouncer") or shutil.which("pgbouncer", path="/usr/sbin:/usr/local/sbin")
    if found is None:
        unavailable(
            "cannot start a private PgBouncer: pgbouncer is not installed"
            " (Debian: apt-get install pgbouncer)"
        )
    if os.geteuid() == 0 and not _has_user("postgres"):
        unavailable(
            "cannot start a private PgBouncer: running as root, and there is no"
            " 'postgres' user to run pgbouncer as"
        )
    return found


def _has_user(name: str) -> bool:
    try:
        pwd.getpwnam(name)
    except KeyError:
        return False
    return True


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


@contextmanager
def start_pgbouncer(binary: str, server_dsn: str, **settings: object) -> Iterator[Pooler]:
    """Run a PgBouncer in transaction mode in front of ``server_dsn``; stop it on exit.

    ``settings`` are added to (or replace) its ``[pgbouncer]`` section. It
    runs as ``postgres`` when the tests run as root (it refuses root), on a
    free local port, with its files in a temporary folder removed on exit.
    """
    server = conninfo_to_dict(server_dsn)
    dbname = str(server.get("dbname", "postgres"))
    user = str(server.get("user", "postgres"))
    folder = Path(tempfile.mkdtemp(prefix="psych-pooler-"))
    as_root = os.geteuid() == 0
    if as_root:
        shutil.chown(folder, "postgres")
    port = _free_port()
    section = {
        "listen_addr": "127.0.0.1",
        "listen_port": port,
        "unix_socket_dir": "",
        "auth_type": "trust",
        "auth_file": folder / "users.txt",
        "pool_mode": "transaction",
        "default_pool_size": _POOLED,
        "max_client_conn": 500,
        "logfile": folder / "pgbouncer.log",
        "pidfile": "",
        "admin_users": user,
        **settings,
    }
    target = f"host={server.get('host', '127.0.0.1')} port={server.get('port', 5432)}"
    (folder / "users.txt").write_text(f'"{user}" ""\n')
    (folder / "pgbouncer.ini").write_text(
        f"[databases]\n{dbname} = {target} dbname={dbname}\n\n[pgbouncer]\n"
        + "".join(f"{name} = {value}\n" for name, value in section.items())
    )
    if as_root:
        for written in folder.iterdir():
            shutil.chown(written, "postgres")
    process = subprocess.Popen(
        [binary, str(folder / "pgbouncer.ini")],
        user="postgres" if as_root else None,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        pooler = Pooler(port, dbname, user, folder)
        _wait_until_serving(pooler, process)
        yield pooler
    finally:
        process.terminate()
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
        shutil.rmtree(folder, ignore_errors=True)


def _wait_until_serving(pooler: Pooler, process: subprocess.Popen[bytes]) -> None:
    # PgBouncer announces nowhere that it listens: a connection is tried
    # every 10 ms until one answers, or the process ends.
    deadline = time.monotonic() + 30
    while True:
        try:
            with psycopg.connect(pooler.dsn, connect_timeout=2, prepare_threshold=None) as conn:
                conn.execute("SELECT 1")
                return
        except psycopg.OperationalError:
            if process.poll() is not None or time.monotonic() > deadline:
                log = pooler.folder / "pgbouncer.log"
                said = log.read_text(errors="replace")[-2000:] if log.exists() else ""
                raise RuntimeError(f"pgbouncer did not start: {said}") from None
            time.sleep(0.01)


@pytest.fixture(scope="session")
def pgbouncer(postgres_dsn: str, unavailable: Callable[[str], NoReturn]) -> Iterator[Pooler]:
    """A PgBouncer in transaction mode for this test session (`unavailable` without it)."""
    with start_pgbouncer(_pgbouncer_binary(unavailable), postgres_dsn) as pooler:
        yield pooler


# Settings the store relies on, none of which may stay on a server session.
STORE_SETTINGS: tuple[str, ...] = (
    "statement_timeout",
    "lock_timeout",
    "TimeZone",
    "synchronous_commit",
    "DateStyle",
)

# What the pooler's pool holds at most (its default_pool_size).
_POOLED = 8


@pytest.fixture
def pooler(pgbouncer: Pooler, postgres_dsn: str) -> Iterator[Pooler]:
    """The session's PgBouncer, whose every server session is checked after the test.

    A second, plain client of the pooler takes every server connection it
    has and must find each as a fresh session of the server: the store
    left none of its settings behind.
    """
    yield pgbouncer
    with psycopg.connect(postgres_dsn, autocommit=True) as conn:
        row = conn.execute(_settings_query(STORE_SETTINGS)).fetchone()
    assert row is not None
    fresh = tuple(str(value) for value in row)
    assert pgbouncer.sessions(STORE_SETTINGS, _POOLED) == [fresh] * _POOLED


@pytest.fixture
def start_pooler(
    postgres_dsn: str, unavailable: Callable[[str], NoReturn]
) -> Callable[..., AbstractContextManager[Pooler]]:
    """`start_pgbouncer` in front of the test server, for a test's own settings."""
    return partial(start_pgbouncer, _pgbouncer_binary(unavailable), postgres_dsn)
