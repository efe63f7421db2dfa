"""A PostgreSQL ledger straight and behind PgBouncer, in transaction and statement mode.

A pooler in transaction mode lends a server connection to a client for one
transaction, then to another client: the ledger must neither rely on a
statement prepared on a connection (``prepare_threshold=none`` turns that
off, as for the store) nor on a setting of its session (each write sets
``synchronous_commit`` for its own transaction), and must leave no setting
behind. A pooler in statement mode runs no transaction of several
statements, which the ledger needs: it is refused by name.

The PgBouncer here is the test's own, started as the PostgreSQL adapter's
tests start theirs; the server behind it is the usual test server (root
conftest: skipped without one, or without pgbouncer, except under
``CI=true``).
"""

from __future__ import annotations

import os
import pwd
import shutil
import socket
import subprocess
import tempfile
import time
import uuid
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import ExitStack, asynccontextmanager, contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import ClassVar, NoReturn

import anyio.to_thread
import psycopg
import pytest
from psycopg import sql
from psycopg.conninfo import conninfo_to_dict, make_conninfo

from psych_runtime.memory.conformance import MemoryStoreContract
from psych_runtime.memory.inproc import InProcessMemory
from psych_runtime.memory.ledger import (
    DeletionLedger,
    LedgerError,
    LedgerKey,
    LedgerUnavailableError,
    open_ledger,
    reapply,
    with_ledger,
)
from psych_runtime.memory.port import ExpiresFacts, Memory, MemoryKey, MemoryStore

# The most server connections the pooler opens per database and role.
_POOLED = 2


@dataclass
class Bouncer:
    """A PgBouncer of the test's own in front of the test server."""

    port: int
    dbname: str

    def dsn(self, user: str) -> str:
        return f"postgresql://{user}@127.0.0.1:{self.port}/{self.dbname}"

    def ledger_url(self, user: str, schema: str) -> str:
        return f"{self.dsn(user)}?schema={schema}&prepare_threshold=none"

    def sessions(self, user: str, setting: str) -> list[str]:
        """``setting`` of every server connection the pooler has for ``user``, as a client sees it.

        Each client holds a transaction open until all have read, so each
        is lent a server connection of its own: all `_POOLED` of them.
        """
        seen = []
        with ExitStack() as stack:
            for _ in range(_POOLED):
                conn = stack.enter_context(psycopg.connect(self.dsn(user), prepare_threshold=None))
                row = conn.execute("SELECT current_setting(%s)", (setting,)).fetchone()
                assert row is not None
                seen.append(str(row[0]))
        return seen


def _binary(unavailable: Callable[[str], NoReturn]) -> str:
    found = shutil.which("pgbouncer") or shutil.which("pgbouncer", path="/usr/sbin:/usr/local/sbin")
    if found is None:
        unavailable("cannot start a private PgBouncer: pgbouncer is not installed")
    if os.geteuid() == 0:
        try:
            pwd.getpwnam("postgres")
        except KeyError:
            unavailable("cannot start a private PgBouncer as root without a 'postgres' user")
    return found


@contextmanager
def _pgbouncer(
    binary: str, server_dsn: str, users: tuple[str, ...], pool_mode: str
) -> Iterator[Bouncer]:
    """Run a PgBouncer for ``users`` (trusted) in ``pool_mode``; stop it on exit.

    It refuses to run as root: as ``postgres`` then, with its files in a
    temporary folder of that user's, on a free local port.
    """
    server = conninfo_to_dict(server_dsn)
    dbname = str(server.get("dbname", "postgres"))
    folder = Path(tempfile.mkdtemp(prefix="psych-ledger-pooler-"))
    as_root = os.geteuid() == 0
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = int(probe.getsockname()[1])
    (folder / "users.txt").write_text("".join(f'"{user}" ""\n' for user in users))
    target = f"host={server.get('host', '127.0.0.1')} port={server.get('port', 5432)}"
    settings = {
        "listen_addr": "127.0.0.1",
        "listen_port": port,
        "unix_socket_dir": "",
        "auth_type": "trust",
        "auth_file": folder / "users.txt",
        "pool_mode": pool_mode,
        "default_pool_size": _POOLED,
        "max_client_conn": 100,
        "logfile": folder / "pgbouncer.log",
        "pidfile": "",
        "admin_users": ",".join(users),
    }
    (folder / "pgbouncer.ini").write_text(
        f"[databases]\n{dbname} = {target} dbname={dbname}\n\n[pgbouncer]\n"
        + "".join(f"{name} = {value}\n" for name, value in settings.items())
    )
    if as_root:
        for path in (folder, *folder.iterdir()):
            shutil.chown(path, "postgres")
    process = subprocess.Popen(
        [binary, str(folder / "pgbouncer.ini")],
        user="postgres" if as_root else None,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        bouncer = Bouncer(port, dbname)
        _wait_until_serving(bouncer.dsn(users[0]), process, folder)
        yield bouncer
    finally:
        process.terminate()
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
        shutil.rmtree(folder, ignore_errors=True)


def _wait_until_serving(dsn: str, process: subprocess.Popen[bytes], folder: Path) -> None:
    # PgBouncer announces nowhere that it listens: a connection is tried
    # every 10 ms until one answers, or the process ends. (Autocommit: a
    # pooler in statement mode refuses a transaction block.)
    deadline = time.monotonic() + 30
    while True:
        try:
            with psycopg.connect(dsn, connect_timeout=2, autocommit=True, prepare_threshold=None):
                return
        except psycopg.OperationalError:
            if process.poll() is not None or time.monotonic() > deadline:
                log = folder / "pgbouncer.log"
                said = log.read_text(errors="replace")[-2000:] if log.exists() else ""
                raise RuntimeError(f"pgbouncer did not start: {said}") from None
            time.sleep(0.01)


@pytest.fixture(scope="module")
def lax_role(postgres_dsn: str) -> Iterator[str]:
    """A role of the test's own whose sessions start with ``synchronous_commit = off``.

    As a database's or a role's default does on a server tuned for speed.
    It owns the schemas `_schema_of` makes for it (a grant on the database
    would race with the other workers' own).
    """
    role = f"psych_ledger_test_{uuid.uuid4().hex[:16]}"
    with psycopg.connect(postgres_dsn, autocommit=True) as conn:
        conn.execute(sql.SQL("CREATE ROLE {} LOGIN").format(sql.Identifier(role)))
        conn.execute(
            sql.SQL("ALTER ROLE {} SET synchronous_commit = off").format(sql.Identifier(role))
        )
    yield role
    with psycopg.connect(postgres_dsn, autocommit=True) as conn:
        conn.execute(sql.SQL("DROP OWNED BY {}").format(sql.Identifier(role)))
        conn.execute(sql.SQL("DROP ROLE {}").format(sql.Identifier(role)))


@pytest.fixture(scope="module")
def bouncer(
    postgres_dsn: str, lax_role: str, unavailable: Callable[[str], NoReturn]
) -> Iterator[Bouncer]:
    """A PgBouncer in transaction mode for the role and ``postgres``'s own user."""
    user = str(conninfo_to_dict(postgres_dsn).get("user", "postgres"))
    with _pgbouncer(_binary(unavailable), postgres_dsn, (lax_role, user), "transaction") as found:
        yield found


def _schema_of(dsn: str, schema: str, role: str) -> None:
    """Make the test's schema, empty, for ``role``: a schema prepared for the ledger."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(
            sql.SQL("CREATE SCHEMA {} AUTHORIZATION {}").format(
                sql.Identifier(schema), sql.Identifier(role)
            )
        )


def _watch_commits(dsn: str, role: str, schema: str) -> None:
    """Note, as each transaction writing a ledger entry commits, its ``synchronous_commit``.

    A deferred constraint trigger runs at the commit itself, after every
    statement of the transaction: what it reads is what the commit uses.
    """
    names = {
        "seen": sql.Identifier(schema, "seen"),
        "note": sql.Identifier(schema, "note"),
        "table": sql.Identifier(schema, "psych_ledger_deletion"),
    }
    with psycopg.connect(make_conninfo(dsn, user=role), autocommit=True) as conn:
        conn.execute(sql.SQL("CREATE TABLE {seen} (op text, setting text)").format(**names))
        conn.execute(
            sql.SQL(
                "CREATE FUNCTION {note}() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN"
                " INSERT INTO {seen} VALUES (TG_OP, current_setting('synchronous_commit'));"
                " RETURN NULL; END $$"
            ).format(**names)
        )
        conn.execute(
            sql.SQL(
                "CREATE CONSTRAINT TRIGGER note AFTER INSERT OR UPDATE OR DELETE ON {table}"
                " DEFERRABLE INITIALLY DEFERRED FOR EACH ROW EXECUTE FUNCTION {note}()"
            ).format(**names)
        )


def _seen(dsn: str, schema: str) -> list[tuple[str, str, int]]:
    with psycopg.connect(dsn, autocommit=True) as conn:
        rows = conn.execute(
            sql.SQL("SELECT op, setting, count(*) FROM {} GROUP BY 1, 2 ORDER BY 1, 2").format(
                sql.Identifier(schema, "seen")
            )
        ).fetchall()
    return [(str(op), str(setting), int(count)) for op, setting, count in rows]


@pytest.mark.clusters
@pytest.mark.anyio
async def test_thirty_erases_through_a_transaction_pooler_are_recorded_durably_and_leave_nothing(
    postgres_dsn: str, postgres_schema: str, bouncer: Bouncer, lax_role: str, key: LedgerKey
) -> None:
    # Before (measured): 12 of 30 erases refused (psycopg prepared its
    # statements on one server connection, and the next transaction ran on
    # the other), 30 of 36 commits made with the role's synchronous_commit =
    # off, and the server connection the ledger was opened on left with
    # synchronous_commit = on for the pooler's next client.
    assert (
        await anyio.to_thread.run_sync(bouncer.sessions, lax_role, "synchronous_commit")
        == ["off"] * _POOLED
    )
    _schema_of(postgres_dsn, postgres_schema, lax_role)
    url = bouncer.ledger_url(lax_role, postgres_schema)
    with open_ledger(url, key) as ledger:
        await anyio.to_thread.run_sync(_watch_commits, postgres_dsn, lax_role, postgres_schema)
        # Another client holds a server connection during every other
        # erase, so the ledger's transactions run on both of the pooler's,
        # the one its opening ran on among them.
        holder = await anyio.to_thread.run_sync(
            lambda: psycopg.connect(bouncer.dsn(lax_role), prepare_threshold=None)
        )
        try:
            async with InProcessMemory() as bare:
                store = with_ledger(bare, ledger)
                for n in range(30):
                    await store.remember("acme", f"u{n}", "x")
                    if n % 2:
                        await anyio.to_thread.run_sync(holder.execute, "SELECT 1")
                    assert await store.erase("acme", f"u{n}") == 1
                    # Ended, not dropped: PgBouncer closes a server
                    # connection whose client left inside a transaction.
                    await anyio.to_thread.run_sync(holder.rollback)
        finally:
            await anyio.to_thread.run_sync(holder.close)
        entries = ledger.entries()
    assert len(entries) == 30
    assert all(e.done_at is not None and e.deleted == 1 for e in entries)
    assert await anyio.to_thread.run_sync(_seen, postgres_dsn, postgres_schema) == [
        ("INSERT", "on", 30),
        ("UPDATE", "on", 30),
    ]
    assert (
        await anyio.to_thread.run_sync(bouncer.sessions, lax_role, "synchronous_commit")
        == ["off"] * _POOLED
    )


@pytest.mark.anyio
async def test_a_write_commits_durably_straight_on_a_lax_server(
    postgres_dsn: str, postgres_schema: str, lax_role: str, key: LedgerKey
) -> None:
    server = conninfo_to_dict(postgres_dsn)
    url = (
        f"postgresql://{lax_role}@{server.get('host', '127.0.0.1')}:{server.get('port', 5432)}"
        f"/{server.get('dbname', 'postgres')}?schema={postgres_schema}"
    )
    _schema_of(postgres_dsn, postgres_schema, lax_role)
    with open_ledger(url, key) as ledger:
        await anyio.to_thread.run_sync(_watch_commits, postgres_dsn, lax_role, postgres_schema)
        async with InProcessMemory() as bare:
            store = with_ledger(bare, ledger)
            gone = await store.remember("acme", "u1", "x")
            assert await store.forget("acme", "u1", "no-such-fact") is False
            assert await store.forget("acme", "u1", gone.id) is True
        # The session keeps its own setting: only the transactions are durable.
        conn = ledger._conn._conn  # type: ignore[attr-defined]
        assert conn.execute("SHOW synchronous_commit").fetchone() == ("off",)
    assert await anyio.to_thread.run_sync(_seen, postgres_dsn, postgres_schema) == [
        ("DELETE", "on", 1),
        ("INSERT", "on", 2),
        ("UPDATE", "on", 1),
    ]


@pytest.mark.clusters
def test_a_pooler_in_statement_mode_is_refused_by_name(
    postgres_dsn: str,
    postgres_schema: str,
    key: LedgerKey,
    unavailable: Callable[[str], NoReturn],
) -> None:
    user = str(conninfo_to_dict(postgres_dsn).get("user", "postgres"))
    with _pgbouncer(_binary(unavailable), postgres_dsn, (user,), "statement") as statement:
        url = statement.ledger_url(user, postgres_schema)
        rule = "a pooler in statement mode cannot run the ledger's transactions; use transaction"
        with pytest.raises(LedgerError, match=rule):
            open_ledger(url, key)
        with open_ledger(f"{postgres_dsn}?schema={postgres_schema}", key):
            pass
        with pytest.raises(LedgerError, match=rule):
            open_ledger(url, key, create=False)


@pytest.mark.clusters
@pytest.mark.anyio
async def test_a_pooled_ledger_is_recorded_reopened_reapplied_and_pruned(
    postgres_dsn: str, postgres_schema: str, bouncer: Bouncer, key: LedgerKey
) -> None:
    # test_postgres's scenarios, every call of the ledger through the pooler.
    user = str(conninfo_to_dict(postgres_dsn).get("user", "postgres"))
    url = bouncer.ledger_url(user, postgres_schema)
    with open_ledger(url, key) as ledger:
        async with InProcessMemory() as bare:
            store = with_ledger(bare, ledger)
            assert isinstance(store, ExpiresFacts)
            gone = await store.remember("acme", "u1", "x")
            assert await store.forget("acme", "u1", gone.id) is True
            assert await store.forget("acme", "u1", "no-such-fact") is False
            await store.remember("acme", "u2", "y")
            assert await store.erase("acme", "u2") == 1
            middle = datetime.now(UTC)
            await store.remember("acme", "u3", "aging")
            assert await store.expire("acme", before=datetime.now(UTC)) == 1
    with open_ledger(url, key, create=False) as again:
        forget, erase, expire = again.entries()
        assert [(e.kind, e.deleted) for e in (forget, erase, expire)] == [
            ("forget", 1),
            ("erase", 1),
            ("expire", 1),
        ]
        async with InProcessMemory() as restored:
            await restored.restore(
                Memory("from-a-backup", MemoryKey("acme", "u2"), "back", erase.recorded_at)
            )
            done = await reapply(restored, again)
            assert (done.entries, done.facts_deleted) == (3, 1)
        pruned = again.prune(middle)
        assert (pruned.entries_pruned, pruned.entries_kept) == (2, 1)
        assert again.entries() == (expire,)


def _admin(bouncer: Bouncer, user: str, *commands: str) -> None:
    """Run commands on the pooler's console (the simple protocol only: a client-side cursor)."""
    console = f"postgresql://{user}@127.0.0.1:{bouncer.port}/pgbouncer"
    with psycopg.connect(console, autocommit=True, cursor_factory=psycopg.ClientCursor) as conn:
        for command in commands:
            conn.execute(command)


@pytest.mark.clusters
@pytest.mark.anyio
async def test_a_ledger_cut_off_refuses_deletions_until_it_connects_again(
    postgres_dsn: str,
    postgres_schema: str,
    key: LedgerKey,
    unavailable: Callable[[str], NoReturn],
) -> None:
    user = str(conninfo_to_dict(postgres_dsn).get("user", "postgres"))
    with _pgbouncer(_binary(unavailable), postgres_dsn, (user,), "transaction") as pooler:
        name = pooler.dbname
        with open_ledger(pooler.ledger_url(user, postgres_schema), key, busy_timeout=1) as ledger:
            async with InProcessMemory() as bare:
                store = with_ledger(bare, ledger)
                await store.remember("acme", "u1", "x")
                # The pooler drops the ledger's connection and takes no new one.
                await anyio.to_thread.run_sync(
                    _admin, pooler, user, f"DISABLE {name}", f"KILL {name}"
                )
                try:
                    # The first finds its connection lost, the second that
                    # none can be made: neither reaches the store.
                    for _ in range(2):
                        with pytest.raises(LedgerUnavailableError) as raised:
                            await store.erase("acme", "u1")
                        assert raised.value.may_have_taken_effect is False
                    assert len(await bare.recall("acme", "u1")) == 1
                finally:
                    await anyio.to_thread.run_sync(
                        _admin, pooler, user, f"ENABLE {name}", f"RESUME {name}"
                    )
                assert await store.erase("acme", "u1") == 1
            (entry,) = ledger.entries()
    assert (entry.kind, entry.deleted) == ("erase", 1)


class _LedgeredOnPostgres(MemoryStoreContract):
    """The kit on the in-process store, its deletions recorded in a PostgreSQL ledger."""

    _ledger: DeletionLedger
    _bare: ClassVar[dict[int, InProcessMemory]] = {}

    @pytest.fixture
    def ledger_address(self) -> str:
        """The ledger's URL but for its schema."""
        raise NotImplementedError

    @pytest.fixture(autouse=True)
    def _use_ledger(
        self, ledger_address: str, postgres_schema: str, key: LedgerKey
    ) -> Iterator[None]:
        with open_ledger(f"{ledger_address}schema={postgres_schema}", key) as self._ledger:
            yield

    @asynccontextmanager
    async def open_store(self) -> AsyncIterator[MemoryStore]:
        async with InProcessMemory() as bare:
            store = with_ledger(bare, self._ledger)
            self._bare[id(store)] = bare
            try:
                yield store
            finally:
                del self._bare[id(store)]

    async def count_stored(self, store: MemoryStore, key: MemoryKey) -> int:
        return len(self._bare[id(store)]._facts.get(key, ()))


class TestLedgeredStraight(_LedgeredOnPostgres):
    max_examples: ClassVar[int] = 25

    @pytest.fixture
    def ledger_address(self, postgres_dsn: str) -> str:
        return f"{postgres_dsn}{'&' if '?' in postgres_dsn else '?'}"


@pytest.mark.clusters
class TestLedgeredThroughPgBouncer(_LedgeredOnPostgres):
    max_examples: ClassVar[int] = 10
    cancelled_calls: ClassVar[int] = 30

    @pytest.fixture
    def ledger_address(self, bouncer: Bouncer, postgres_dsn: str) -> str:
        user = str(conninfo_to_dict(postgres_dsn).get("user", "postgres"))
        return f"{bouncer.dsn(user)}?prepare_threshold=none&"
