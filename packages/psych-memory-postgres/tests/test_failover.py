"""Replication and failover, for real: a primary and a streaming standby of our own.

Each pair is started from the installed PostgreSQL binaries (``pg_config
--bindir``) on free local ports, in a temporary folder; the shared test
server is never touched. The binaries refuse to run as root, so as root they
run as the ``postgres`` user. Without them the tests are skipped, except
under ``CI=true``, where that fails the run.

The failover is the hard one: the primary is stopped with ``pg_ctl stop -m
immediate`` (its processes die without a goodbye, as in a crash) while
writers and erasers run through one store on a multi-host URL, and the
standby is promoted with ``pg_ctl promote``. The servers run with ``fsync =
off``: only processes die here, never the machine, so the kernel keeps every
write a process made, and what the test measures is replication alone.

At the end, a pair that Patroni manages (one etcd, two nodes in
synchronous mode) is switched over with ``patronictl`` and failed over by
killing its primary's postmaster, under the same writers and erasers.
"""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections import Counter
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import asynccontextmanager, contextmanager, suppress
from contextvars import Token
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any, NoReturn
from uuid import uuid4

import anyio
import anyio.to_thread
import psycopg
import pytest
from psycopg import sql
from psycopg_pool import ConnectionPool

from psych_runtime.memory.port import StoreClosedError, StoreUnavailableError, store_events
from psych_runtime.memory.postgres import PostgresMemory, PostgresMemoryError, open_url
from psych_runtime.memory.postgres._url import parse_url

pytestmark = [pytest.mark.anyio, pytest.mark.clusters, pytest.mark.xdist_group("clusters")]

# A bug must end a test rather than hang the run; the waits are on servers.
_BOUND = 90
_SCHEMA = "psych_failover"


# -- the binaries ---------------------------------------------------------


def _binaries(unavailable: Callable[[str], NoReturn]) -> Path:
    """The folder holding initdb, pg_ctl and pg_basebackup, or `unavailable`."""
    pg_config = shutil.which("pg_config")
    if pg_config is None:
        unavailable("cannot start a private primary and standby: pg_config is not on PATH")
    found = subprocess.run(
        [pg_config, "--bindir"], capture_output=True, text=True, check=False, timeout=30
    )
    folder = Path(found.stdout.strip())
    missing = [
        name for name in ("initdb", "pg_ctl", "pg_basebackup") if not (folder / name).is_file()
    ]
    if found.returncode != 0 or missing:
        unavailable(
            "cannot start a private primary and standby: the PostgreSQL server binaries"
            f" are not in {folder} ({', '.join(missing)})"
        )
    if os.geteuid() == 0 and shutil.which("runuser") is None:
        unavailable(
            "cannot start a private primary and standby: running as root, and runuser"
            " is missing to run PostgreSQL as 'postgres'"
        )
    return folder


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


@dataclass
class Server:
    """One PostgreSQL server of a pair: its data folder and port."""

    data: Path
    port: int

    @property
    def dsn(self) -> str:
        return f"postgresql://postgres@127.0.0.1:{self.port}/postgres"

    def query(self, statement: str | sql.Composed, params: tuple[Any, ...] = ()) -> list[Any]:
        """Run one statement on a fresh autocommit connection; return its rows."""
        with psycopg.connect(self.dsn, autocommit=True, connect_timeout=5) as conn:
            cursor = conn.execute(statement, params)
            return cursor.fetchall() if cursor.description is not None else []

    def wait_for(self, condition: str, params: tuple[Any, ...] = (), *, bound: float = 30) -> None:
        """Return once ``condition`` (a query) answers a row; fail after ``bound`` seconds.

        For states only the server knows, which it announces nowhere: looked
        at again every 10 ms until they hold.
        """
        deadline = time.monotonic() + bound
        while not self.query(condition, params):
            if time.monotonic() > deadline:
                raise AssertionError(f"the server never answered a row to: {condition}")
            time.sleep(0.01)


@dataclass
class Pair:
    """A primary and a standby streaming from it, synchronously or not."""

    primary: Server
    standby: Server
    synchronous: bool
    run: Callable[..., None]

    def url(self, **options: str) -> str:
        """A multi-host URL: the primary first, then the standby; writes go to the writable one."""
        query = "&".join(
            f"{name}={value}"
            for name, value in {
                "target_session_attrs": "read-write",
                "connect_timeout": "2",
                "schema": _SCHEMA,
                **options,
            }.items()
        )
        return (
            f"postgresql://postgres@127.0.0.1:{self.primary.port},"
            f"127.0.0.1:{self.standby.port}/postgres?{query}"
        )

    def crash_primary(self) -> None:
        """Stop the primary the way a crash does: no checkpoint, no goodbye to clients."""
        self.run("pg_ctl", "stop", "-D", str(self.primary.data), "-m", "immediate", "-w")

    def promote(self) -> None:
        """Promote the standby, and return once it accepts writes."""
        self.run("pg_ctl", "promote", "-D", str(self.standby.data), "-w", "-t", "60")


class Servers:
    """Starts pairs in one temporary folder, and removes every trace of them."""

    def __init__(self, binaries: Path) -> None:
        self._binaries = binaries
        self._as_postgres = ["runuser", "-u", "postgres", "--"] if os.geteuid() == 0 else []
        self._folder = Path(tempfile.mkdtemp(prefix="psych-replication-"))
        if self._as_postgres:
            shutil.chown(self._folder, "postgres")
        self._started: list[Path] = []
        self._template: Path | None = None
        self._count = 0

    def run(self, program: str, *args: str) -> None:
        """Run a PostgreSQL program (or another, by its path), as ``postgres`` when root."""
        command = [*self._as_postgres, str(self._binaries / program), *args]
        done = subprocess.run(command, capture_output=True, text=True, check=False, timeout=120)
        if done.returncode != 0:
            raise RuntimeError(
                f"{program} {args[0] if args else ''} failed ({done.returncode}): "
                f"{done.stderr.strip()[-2000:]}{self._logs()}"
            )

    def _logs(self) -> str:
        tails = [
            f"\n--- {log.name}:\n{log.read_text(errors='replace')[-2000:]}"
            for log in sorted(self._folder.glob("*.log"))
        ]
        return "".join(tails)

    def _start(self, data: Path, port: int, *settings: str) -> Server:
        options = [
            "-c listen_addresses=127.0.0.1",
            f"-c port={port}",
            f"-c unix_socket_directories={self._folder}",
            "-c fsync=off",
            "-c max_connections=60",
            "-c shared_buffers=16MB",
            *settings,
        ]
        self._started.append(data)
        self.run(
            "pg_ctl", "start", "-w", "-t", "60", "-D", str(data),
            "-l", str(self._folder / f"{data.name}.log"), "-o", " ".join(options),
        )  # fmt: skip
        return Server(data, port)

    def pair(self, *, synchronous: bool) -> Pair:
        """A primary and a streaming standby, ready: the standby has caught up."""
        self._count += 1
        if self._template is None:
            template = self._folder / "template"
            self.run(
                "initdb", "-D", str(template), "-U", "postgres", "-A", "trust",
                "-E", "UTF8", "--locale=C", "--no-sync",
            )  # fmt: skip
            self._template = template
        primary_data = self._folder / f"primary{self._count}"
        # A copy of one initdb, in the files' owner's name: faster than initdb.
        self.run(shutil.which("cp") or "/bin/cp", "-a", str(self._template), str(primary_data))
        settings = ("-c synchronous_standby_names=*",) if synchronous else ()
        # Named on the primary's command line only, so the promoted standby
        # does not wait for a standby of its own (a failover manager clears
        # or moves the setting the same way).
        primary = self._start(primary_data, _free_port(), *settings)
        standby_data = self._folder / f"standby{self._count}"
        self.run(
            "pg_basebackup", "-h", "127.0.0.1", "-p", str(primary.port), "-U", "postgres",
            "-D", str(standby_data), "-R", "-X", "stream", "-c", "fast",
        )  # fmt: skip
        standby = self._start(standby_data, _free_port())
        primary.wait_for(
            "SELECT 1 FROM pg_stat_replication WHERE state = 'streaming' AND sync_state = %s",
            ("sync" if synchronous else "async",),
            bound=60,
        )
        return Pair(primary, standby, synchronous, self.run)

    def stop(self, *folders: Path) -> None:
        """Stop the servers of these data folders, however they are doing, and remove them."""
        for data in folders:
            try:
                self.run("pg_ctl", "stop", "-D", str(data), "-m", "immediate", "-w", "-t", "30")
            except (RuntimeError, OSError, subprocess.SubprocessError):
                _kill_postmaster(data)
            shutil.rmtree(data, ignore_errors=True)

    def close(self) -> None:
        """Stop every server started here and remove the whole folder."""
        self.stop(*self._started)
        shutil.rmtree(self._folder, ignore_errors=True)


def _kill_postmaster(data: Path) -> None:
    # pg_ctl could not stop it (or it is gone): the postmaster we started,
    # by the id in its lock file, and only if that process still serves
    # this very data folder.
    with suppress(OSError, ValueError, IndexError):
        pid = int((data / "postmaster.pid").read_text().split()[0])
        if str(data).encode() in Path(f"/proc/{pid}/cmdline").read_bytes():
            os.kill(pid, signal.SIGKILL)


@pytest.fixture(scope="module")
def servers(unavailable: Callable[[str], NoReturn]) -> Iterator[Servers]:
    """Starts pairs of servers for this module, and stops and removes them all at its end."""
    started = Servers(_binaries(unavailable))
    try:
        yield started
    finally:
        started.close()


@pytest.fixture
def new_pair(servers: Servers) -> Iterator[Callable[[bool], Pair]]:
    """Starts pairs for one test (which may crash them), and removes them after it."""
    made: list[Pair] = []

    def start(synchronous: bool) -> Pair:
        pair = servers.pair(synchronous=synchronous)
        made.append(pair)
        return pair

    yield start
    servers.stop(*(server.data for pair in made for server in (pair.primary, pair.standby)))


@pytest.fixture(scope="module")
def synchronous_pair(servers: Servers) -> Pair:
    """A pair with a synchronous standby, for the tests that fail nothing over."""
    return servers.pair(synchronous=True)


@pytest.fixture(scope="module")
def asynchronous_pair(servers: Servers) -> Pair:
    """A pair with an asynchronous standby, for the tests that fail nothing over."""
    return servers.pair(synchronous=False)


# -- stores on a multi-host URL -------------------------------------------------

# The store's own pool on asyncio (asynchronous), an application's
# synchronous pool on asyncio (worker threads), and the store's own pool on
# trio (synchronous, worker threads): each reconnects its own way.
_POOLS = pytest.mark.parametrize(
    ("anyio_backend", "pool_kind"),
    [("asyncio", "connect"), ("asyncio", "threads"), ("trio", "connect")],
)


@asynccontextmanager
async def _store(url: str, pool_kind: str) -> AsyncIterator[PostgresMemory]:
    if pool_kind == "connect":
        async with open_url(url) as store:
            yield store
        return
    options = parse_url(url)
    pool: ConnectionPool[Any] = ConnectionPool(
        options.conninfo,
        min_size=options.min_size,
        max_size=options.max_size,
        timeout=options.pool_timeout,
        kwargs={"autocommit": True},
        open=False,
    )
    await anyio.to_thread.run_sync(partial(pool.open, wait=True, timeout=options.pool_timeout))
    try:
        async with PostgresMemory(pool, schema=options.schema) as store:
            await store.setup()
            yield store
    finally:
        await anyio.to_thread.run_sync(pool.close)


# -- the failover ------------------------------------------------------------------

_WRITERS = 3
_ERASERS = 3
# Failed over once this many calls were acknowledged, an erase among them;
# done once every task was served this often by the promoted standby, and
# an erase was acknowledged there too. An eraser reaches its first erase
# only after a dozen calls, so counting calls alone could fail over, and
# finish, with no erase on either side.
_ACKS_BEFORE = 60
_SERVED_AFTER = 5


@dataclass
class _Ledger:
    """What the store acknowledged, and what became of each call, as the tasks saw it."""

    tasks: int
    kept: set[str] = field(default_factory=set)
    forgotten: set[str] = field(default_factory=set)
    erased_users: set[str] = field(default_factory=set)
    erased_after: int = 0
    acks: int = 0
    failures: int = 0
    uncertain: int = 0
    promoted_at: float | None = None
    first_served: dict[str, float] = field(default_factory=dict)
    served_after: dict[str, int] = field(default_factory=dict)
    enough_before: anyio.Event = field(default_factory=anyio.Event)
    enough_after: anyio.Event = field(default_factory=anyio.Event)

    def acknowledged(self, task: str) -> None:
        self.acks += 1
        if self.acks >= _ACKS_BEFORE and self.erased_users:
            self.enough_before.set()
        if self.promoted_at is not None:
            self.first_served.setdefault(task, time.monotonic() - self.promoted_at)
            self.served_after[task] = self.served_after.get(task, 0) + 1
            if (
                self.erased_after
                and len(self.served_after) == self.tasks
                and all(count >= _SERVED_AFTER for count in self.served_after.values())
            ):
                self.enough_after.set()

    def erased(self, task: str, user: str) -> None:
        self.erased_users.add(user)
        if self.promoted_at is not None:
            self.erased_after += 1
        self.acknowledged(task)

    def failed(self, error: StoreUnavailableError) -> None:
        self.failures += 1
        self.uncertain += error.may_have_taken_effect

    @property
    def done(self) -> bool:
        return self.enough_after.is_set()


async def _writer(store: PostgresMemory, name: str, ledger: _Ledger) -> None:
    index = 0
    while not ledger.done:
        index += 1
        try:
            fact = await store.remember("acme", name, f"{name}:{index}")
        except StoreUnavailableError as error:
            ledger.failed(error)
            continue
        ledger.kept.add(fact.id)
        ledger.acknowledged(name)


async def _eraser(store: PostgresMemory, name: str, ledger: _Ledger) -> None:
    # One end user after another: four facts, two forgotten, then every
    # other end user erased. A call that failed leaves its facts' fate open,
    # so they are taken out of what is checked.
    round_ = 0
    while not ledger.done:
        round_ += 1
        user = f"{name}:{round_}"
        ids: list[str] = []
        for index in range(4):
            try:
                fact = await store.remember("acme", user, f"{user}:{index}")
            except StoreUnavailableError as error:
                ledger.failed(error)
                continue
            ids.append(fact.id)
            ledger.kept.add(fact.id)
            ledger.acknowledged(name)
        for memory_id in ids[:2]:
            ledger.kept.discard(memory_id)
            try:
                if await store.forget("acme", user, memory_id):
                    ledger.forgotten.add(memory_id)
                    ledger.acknowledged(name)
            except StoreUnavailableError as error:
                ledger.failed(error)
        if round_ % 2 == 0:
            ledger.kept.difference_update(ids)
            try:
                await store.erase("acme", user)
            except StoreUnavailableError as error:
                ledger.failed(error)
            else:
                ledger.erased(name, user)


def _outcome(server: Server, ledger: _Ledger) -> dict[str, int]:
    """Acknowledged facts lost, and acknowledged deletions undone, on ``server``."""
    rows = server.query(
        sql.SQL("SELECT id, end_user_id FROM {}").format(sql.Identifier(_SCHEMA, "memories"))
    )
    present = {row[0] for row in rows}
    users = {row[1] for row in rows}
    return {
        "facts acknowledged": len(ledger.kept),
        "lost": len(ledger.kept - present),
        "forgets acknowledged": len(ledger.forgotten),
        "erases acknowledged": len(ledger.erased_users),
        "undone": len(ledger.forgotten & present) + len(ledger.erased_users & users),
    }


@pytest.mark.parametrize("replication", ["synchronous", "asynchronous"])
@_POOLS
async def test_a_failover_is_served_by_the_promoted_standby(
    new_pair: Callable[[bool], Pair], replication: str, pool_kind: str
) -> None:
    pair = await anyio.to_thread.run_sync(new_pair, replication == "synchronous")
    ledger = _Ledger(tasks=_WRITERS + _ERASERS)
    with anyio.fail_after(_BOUND):
        async with _store(pair.url(max_size="8", pool_timeout="30"), pool_kind) as store:
            async with anyio.create_task_group() as tasks:
                for number in range(_WRITERS):
                    tasks.start_soon(_writer, store, f"writer-{number}", ledger)
                for number in range(_ERASERS):
                    tasks.start_soon(_eraser, store, f"eraser-{number}", ledger)
                await ledger.enough_before.wait()
                crashed = time.monotonic()
                await anyio.to_thread.run_sync(pair.crash_primary)
                await anyio.to_thread.run_sync(pair.promote)
                ledger.promoted_at = promoted = time.monotonic()
                await ledger.enough_after.wait()
            # The same store, never reopened, serves every kind of call.
            fact = await store.remember("acme", "after", "after the failover")
            assert await store.recall("acme", "after") == (fact,)
            assert await store.deletion_durability() == "no_replication"
    outcome = await anyio.to_thread.run_sync(_outcome, pair.standby, ledger)
    # The figures the documentation quotes, printed for whoever measures.
    print(
        f"\nfailover {replication} {pool_kind}: promotion took "
        f"{promoted - crashed:.2f} s after the crash; first call served "
        f"{min(ledger.first_served.values()):.2f} s after promotion, every task by "
        f"{max(ledger.first_served.values()):.2f} s; {ledger.failures} calls failed "
        f"({ledger.uncertain} of them may have taken effect); {outcome}"
    )
    assert outcome["facts acknowledged"] > 0
    assert outcome["erases acknowledged"] > 0
    if replication == "synchronous":
        assert (outcome["lost"], outcome["undone"]) == (0, 0), outcome


# -- deletions and the standby ------------------------------------------------------


async def test_a_deletion_returns_once_the_synchronous_standby_applied_it(
    synchronous_pair: Pair,
) -> None:
    # Replay on the standby is paused: a deletion that returned now would
    # not have been applied there, and a query on the standby (or the
    # standby promoted) would still show the facts.
    pair = synchronous_pair
    user = f"paused-{uuid4().hex}"
    with anyio.fail_after(_BOUND):
        async with open_url(pair.url()) as store:
            for index in range(3):
                await store.remember("acme", user, f"fact {index}")
            count = sql.SQL("SELECT count(*) FROM {} WHERE end_user_id = %s").format(
                sql.Identifier(_SCHEMA, "memories")
            )
            # The facts are applied on the standby before its replay pauses
            # (a remember waits only for the standby's flush).
            await anyio.to_thread.run_sync(
                pair.primary.wait_for,
                "SELECT 1 FROM pg_stat_replication WHERE replay_lsn >= pg_current_wal_lsn()",
            )
            await anyio.to_thread.run_sync(pair.standby.query, "SELECT pg_wal_replay_pause()")
            erased: list[int] = []

            async def erase() -> None:
                erased.append(await store.erase("acme", user))

            try:
                await anyio.to_thread.run_sync(
                    pair.standby.wait_for,
                    "SELECT 1 WHERE pg_get_wal_replay_pause_state() = 'paused'",
                )
                assert await anyio.to_thread.run_sync(pair.standby.query, count, (user,)) == [(3,)]
                async with anyio.create_task_group() as tasks:
                    tasks.start_soon(erase)
                    # The standby has flushed the erase (as synchronous_commit
                    # = on waits for), and the erase still waits for it to be
                    # applied. With the rule broken it returned at the flush,
                    # and this fails after its bound.
                    await anyio.to_thread.run_sync(
                        pair.primary.wait_for,
                        "SELECT 1 FROM pg_stat_activity AS erase, pg_stat_replication AS standby"
                        " WHERE erase.wait_event = 'SyncRep'"
                        " AND standby.flush_lsn >= pg_current_wal_lsn()",
                    )
                    assert not erased, "the erase returned before the standby applied it"
                    assert await anyio.to_thread.run_sync(pair.standby.query, count, (user,)) == [
                        (3,)
                    ]
                    await anyio.to_thread.run_sync(
                        pair.standby.query, "SELECT pg_wal_replay_resume()"
                    )
            finally:
                # Whatever failed: the erase in flight finishes before the
                # test can end, and it needs the replay.
                with anyio.CancelScope(shield=True):
                    await anyio.to_thread.run_sync(
                        pair.standby.query, "SELECT pg_wal_replay_resume()"
                    )
            assert erased == [3]
            # Returned, so applied: the standby shows nothing at once.
            assert await anyio.to_thread.run_sync(pair.standby.query, count, (user,)) == [(0,)]


async def test_the_durability_of_a_deletion_is_read_from_the_server(
    synchronous_pair: Pair, asynchronous_pair: Pair, postgres_dsn: str
) -> None:
    with anyio.fail_after(_BOUND):
        async with open_url(synchronous_pair.url(setup="auto")) as store:
            assert await store.deletion_durability() == "synchronous_standbys"
        async with open_url(asynchronous_pair.url()) as store:
            assert await store.deletion_durability() == "primary_only"
        # The shared test server streams to no standby.
        async with PostgresMemory.connect(postgres_dsn) as store:
            assert await store.deletion_durability() == "no_replication"
            await store.aclose()
            with pytest.raises(StoreClosedError):
                await store.deletion_durability()


async def test_the_durability_a_role_without_statistics_privileges_reads_is_never_a_guess(
    new_pair: Callable[[bool], Pair],
) -> None:
    pair = await anyio.to_thread.run_sync(new_pair, False)
    primary = pair.primary
    await anyio.to_thread.run_sync(primary.query, "CREATE ROLE psych_reader LOGIN")
    reader = primary.dsn.replace("postgres@", "psych_reader@", 1)
    try:
        with anyio.fail_after(_BOUND):
            async with PostgresMemory.connect(reader) as store:
                # Without pg_read_all_stats the standby is listed, its state
                # hidden: it counts (a backup in progress would too).
                state = await anyio.to_thread.run_sync(
                    _query_as, reader, "SELECT state FROM pg_stat_replication"
                )
                assert state == [(None,)]
                assert await store.deletion_durability() == "primary_only"
                # Refused the view: the server's refusal, not a guess.
                await anyio.to_thread.run_sync(
                    primary.query,
                    "REVOKE SELECT ON pg_catalog.pg_stat_replication FROM PUBLIC",
                )
                with pytest.raises(PostgresMemoryError) as caught:
                    await store.deletion_durability()
                assert isinstance(caught.value.__cause__, psycopg.errors.InsufficientPrivilege)
                # A standby named synchronous needs no view to be known.
                for statement in (
                    "ALTER SYSTEM SET synchronous_standby_names = '*'",
                    "SELECT pg_reload_conf()",
                ):
                    await anyio.to_thread.run_sync(primary.query, statement)
                await anyio.to_thread.run_sync(
                    primary.wait_for,
                    "SELECT 1 FROM pg_stat_replication WHERE sync_state = 'sync'",
                )
                assert await store.deletion_durability() == "synchronous_standbys"
    finally:
        await anyio.to_thread.run_sync(primary.query, "DROP ROLE psych_reader")


# -- a primary that turned read-only ---------------------------------------------------


@_POOLS
async def test_a_call_refused_by_a_read_only_primary_is_replayed_on_the_new_one(
    new_pair: Callable[[bool], Pair], pool_kind: str
) -> None:
    pair = await anyio.to_thread.run_sync(new_pair, True)
    name = f"psych-fenced-{pool_kind}"
    # One pooled connection more than the three calls refused below can
    # drop (two each: refused on a pooled connection, a replay's own
    # connection finds no writable server, and the last attempt, through
    # the pool, is refused again), so one to the fenced primary is still
    # pooled after the promotion.
    url = pair.url(min_size="7", max_size="7", application_name=name)
    with anyio.fail_after(_BOUND):
        async with _store(url, pool_kind) as store:
            facts = [await store.remember("acme", "u1", f"fact {index}") for index in range(3)]
            # Fenced the way failover tools do it: every new transaction of
            # the old primary is read-only, on its open connections too.
            fence = (
                "ALTER SYSTEM SET default_transaction_read_only = on",
                "SELECT pg_reload_conf()",
            )
            for statement in fence:
                await anyio.to_thread.run_sync(pair.primary.query, statement)
            await anyio.to_thread.run_sync(
                pair.primary.wait_for,
                "SELECT 1 WHERE current_setting('transaction_read_only')::bool",
            )
            # No writable server: refused, and known to have changed nothing.
            for call in (
                partial(store.forget, "acme", "u1", facts[0].id),
                partial(store.erase, "acme", "u1"),
                partial(store.remember, "acme", "u1", "not stored"),
            ):
                with pytest.raises(StoreUnavailableError) as caught:
                    await call()
                assert caught.value.may_have_taken_effect is False
            # (Read on the server itself: the store reaches no server now,
            # since the URL asks for a writable one.)
            held = sql.SQL("SELECT count(*) FROM {}").format(sql.Identifier(_SCHEMA, "memories"))
            assert await anyio.to_thread.run_sync(pair.primary.query, held) == [(len(facts),)]
            await anyio.to_thread.run_sync(pair.promote)
            # The pool still holds a connection to the fenced primary: the
            # call that meets it is replayed on the promoted standby.
            reasons: list[object] = []
            token = store_events.set(
                lambda _name, attributes: reasons.append(attributes["psych_memory.reason"])
            )
            try:
                assert await store.forget("acme", "u1", facts[0].id)
            finally:
                store_events.reset(token)
            assert reasons == ["server read-only"]
            later = [await store.remember("acme", "u1", f"later {index}") for index in range(4)]
            assert await store.recall("acme", "u1") == (*facts[1:], *later)
            assert await store.erase("acme", "u1") == 2 + len(later)
            # The refusing connections were closed, not kept for the next
            # call: their backends on the old primary end (once they see it).
            await anyio.to_thread.run_sync(
                pair.primary.wait_for,
                "SELECT 1 WHERE NOT EXISTS"
                " (SELECT FROM pg_stat_activity WHERE application_name = %s)",
                (name,),
            )


# -- a promotion later than the pool's first reconnections -----------------------------

# Seconds from the crash to the promotion: past psycopg_pool's retries of a
# lost connection (1, 2, 4 and 8 s apart, each within 10 %: the fourth comes
# at most 16.5 s after the first), as Patroni's default timers give.
_OUTAGE = 18
_CALLERS = 4
# "Within about a second" of the promotion, with room for a machine that
# runs other tests at the same time.
_PROMPTLY = 3.0


@dataclass
class _Outage:
    """What the callers saw around one outage."""

    failures: list[StoreUnavailableError] = field(default_factory=list)
    served_before: set[int] = field(default_factory=set)
    all_running: anyio.Event = field(default_factory=anyio.Event)
    accepting_at: float | None = None
    served_after: dict[int, float] = field(default_factory=dict)
    all_served: anyio.Event = field(default_factory=anyio.Event)

    def served(self, caller: int) -> None:
        if self.accepting_at is None:
            self.served_before.add(caller)
            if len(self.served_before) == _CALLERS:
                self.all_running.set()
        elif caller not in self.served_after:
            self.served_after[caller] = time.monotonic()
            if len(self.served_after) == _CALLERS:
                self.all_served.set()


async def _caller(store: PostgresMemory, caller: int, outage: _Outage) -> None:
    index = 0
    while not outage.all_served.is_set():
        index += 1
        try:
            if index % 2:
                await store.remember("acme", f"caller-{caller}", f"fact {index}")
            else:
                await store.recall("acme", f"caller-{caller}")
        except StoreUnavailableError as error:
            outage.failures.append(error)
        else:
            outage.served(caller)


@contextmanager
def _reset(token: Token[Any]) -> Iterator[None]:
    """Give `store_events` back its value before ``token`` on exit."""
    try:
        yield
    finally:
        store_events.reset(token)


def _query_as(dsn: str, statement: str) -> list[Any]:
    with psycopg.connect(dsn, autocommit=True) as conn:
        return conn.execute(statement).fetchall()


def _accepting_writes(server: Server) -> float:
    """The moment ``server`` first answers as a primary, looked at every 10 ms while it promotes."""
    deadline = time.monotonic() + _BOUND
    while time.monotonic() < deadline:
        with suppress(psycopg.OperationalError):
            if server.query("SELECT NOT pg_is_in_recovery()") == [(True,)]:
                return time.monotonic()
        time.sleep(0.01)
    raise AssertionError("the standby never answered as a primary")


async def test_a_late_promotion_is_served_within_a_second_of_accepting_writes(
    new_pair: Callable[[bool], Pair],
) -> None:
    pair = await anyio.to_thread.run_sync(new_pair, False)
    outage = _Outage()
    replays: list[object] = []
    token = store_events.set(
        lambda _name, attributes: replays.append(attributes["psych_memory.reason"])
    )
    with anyio.fail_after(_BOUND), _reset(token):
        async with open_url(pair.url(max_size="4", pool_timeout="30", setup="auto")) as store:
            await store.remember("acme", "before", "before the crash")
            async with anyio.create_task_group() as tasks:
                # Calls in flight when the primary goes, and calls made
                # while no server is writable.
                for caller in range(_CALLERS):
                    tasks.start_soon(_caller, store, caller, outage)
                await outage.all_running.wait()
                await anyio.to_thread.run_sync(pair.crash_primary)
                # The outage itself, as long as a failover manager takes to
                # promote: nothing to wait for but time.
                await anyio.sleep(_OUTAGE)
                async with anyio.create_task_group() as promotion:
                    promotion.start_soon(anyio.to_thread.run_sync, pair.promote)
                    outage.accepting_at = accepting_at = await anyio.to_thread.run_sync(
                        _accepting_writes, pair.standby
                    )
                await outage.all_served.wait()
            assert await store.recall("acme", "before")
    served = max(outage.served_after.values()) - accepting_at
    print(
        f"\nlate promotion after {_OUTAGE} s: every caller served {served:.2f} s after the"
        f" promoted standby accepted writes; {len(outage.failures)} calls failed; replays:"
        f" {sorted(Counter(map(str, replays)).items())}"
    )
    # Every call waited for a connection through the outage (nothing was
    # sent, or its connection broke before a replay): none failed, with a
    # pool timeout or otherwise.
    assert [repr(error.__cause__) for error in outage.failures] == []
    assert served < _PROMPTLY


# -- a Patroni-managed pair ------------------------------------------------------------

# Patroni's shortest timers (it raises a ttl below 20 to 20): a switchover
# or a crash is handled within a loop or two, seconds rather than the
# default 30 s.
_PATRONI_DCS = {
    "ttl": 20,
    "loop_wait": 1,
    "retry_timeout": 3,
    "synchronous_mode": True,
    # A crashed primary is failed over at once, not restarted in place.
    "primary_start_timeout": 0,
    "postgresql": {
        "use_pg_rewind": True,
        "parameters": {
            "fsync": "off",
            "wal_log_hints": "on",
            "max_connections": 60,
            "shared_buffers": "16MB",
        },
    },
}
# Served again "within a few seconds" of the new primary accepting writes,
# with room for a machine that runs other tests at the same time.
_SERVED_WITHIN = 5.0


def _answers(url: str) -> bool:
    """Whether a GET of ``url`` answers 200 (Patroni's health checks answer 503 otherwise)."""
    try:
        # Only ever an http:// address on this machine, built here.
        with urllib.request.urlopen(url, timeout=2) as response:  # noqa: S310
            return bool(response.status == 200)
    except OSError:
        return False


@dataclass
class PatroniNode:
    """One member of the Patroni cluster: its PostgreSQL server and its REST API."""

    name: str
    server: Server
    rest: int

    def is_(self, role: str) -> bool:
        """Whether the node's REST API answers 200 to ``/primary``, ``/sync`` or another check."""
        return _answers(f"http://127.0.0.1:{self.rest}/{role}")

    def kill_postmaster(self) -> None:
        """Kill the node's postmaster with SIGKILL, as a crash would."""
        pid = int((self.server.data / "postmaster.pid").read_text().split()[0])
        os.kill(pid, signal.SIGKILL)


@dataclass
class PatroniPair:
    """Two Patroni nodes in synchronous mode, on one etcd."""

    nodes: tuple[PatroniNode, PatroniNode]
    ctl: list[str]

    def url(self, **options: str) -> str:
        """A multi-host URL naming both nodes; writes go to the one that accepts them."""
        ports = ",".join(f"127.0.0.1:{node.server.port}" for node in self.nodes)
        query = "&".join(
            f"{name}={value}"
            for name, value in {
                "target_session_attrs": "read-write",
                "connect_timeout": "2",
                **options,
            }.items()
        )
        return f"postgresql://postgres@{ports}/postgres?{query}"

    def roles(self, *, bound: float = 60) -> tuple[PatroniNode, PatroniNode]:
        """The primary and its synchronous standby, once Patroni reports both."""
        deadline = time.monotonic() + bound
        while time.monotonic() < deadline:
            for primary, standby in (self.nodes, self.nodes[::-1]):
                if primary.is_("primary") and standby.is_("sync"):
                    return primary, standby
            time.sleep(0.05)
        raise AssertionError("Patroni never reported a primary and a synchronous standby")

    def switchover(self, leader: PatroniNode, candidate: PatroniNode) -> None:
        """``patronictl switchover`` from ``leader`` to ``candidate``, without questions."""
        command = [
            *self.ctl, "switchover", "--leader", leader.name, "--candidate", candidate.name,
            "--force",
        ]  # fmt: skip
        done = subprocess.run(command, capture_output=True, text=True, check=False, timeout=_BOUND)
        if done.returncode != 0:
            raise RuntimeError(f"patronictl switchover failed: {done.stdout}{done.stderr}")


def _patroni_programs(unavailable: Callable[[str], NoReturn]) -> tuple[str, Path]:
    """The etcd program and the folder of the patroni and patronictl scripts, or `unavailable`."""
    etcd = shutil.which("etcd")
    if etcd is None:
        unavailable(
            "cannot start a Patroni pair: etcd is not installed"
            " (Debian: apt-get install etcd-server)"
        )
    scripts = Path(sys.executable).parent
    if importlib.util.find_spec("patroni") is None or not (scripts / "patronictl").is_file():
        unavailable("cannot start a Patroni pair: patroni is not installed in this environment")
    if os.geteuid() == 0 and shutil.which("setpriv") is None:
        unavailable(
            "cannot start a Patroni pair: running as root, and setpriv is missing"
            " to run Patroni as 'postgres'"
        )
    return etcd, scripts


def _as_postgres() -> list[str]:
    # As root, Patroni runs as postgres (initdb and postgres refuse root).
    # It keeps the right to read and search every folder: the interpreter
    # of this environment may live under root's home, which postgres cannot
    # enter otherwise.
    if os.geteuid() != 0:
        return []
    return [
        "setpriv", "--reuid=postgres", "--regid=postgres", "--init-groups",
        "--inh-caps=+dac_read_search", "--ambient-caps=+dac_read_search",
    ]  # fmt: skip


def _wait_until(condition: Callable[[], bool], what: str, process: subprocess.Popen[bytes]) -> None:
    deadline = time.monotonic() + 60
    while not condition():
        if process.poll() is not None or time.monotonic() > deadline:
            raise RuntimeError(f"{what} did not start")
        time.sleep(0.05)


def _stop(process: subprocess.Popen[bytes]) -> None:
    # Nothing of a test's cluster is kept: no graceful shutdown to wait for.
    process.kill()
    process.wait()


@contextmanager
def _patroni_pair(binaries: Path, etcd: str, scripts: Path) -> Iterator[PatroniPair]:
    folder = Path(tempfile.mkdtemp(prefix="psych-patroni-"))
    as_postgres = _as_postgres()
    if as_postgres:
        shutil.chown(folder, "postgres")
    processes: list[subprocess.Popen[bytes]] = []
    nodes: list[PatroniNode] = []
    try:
        client, peer = _free_port(), _free_port()
        command = [
            *as_postgres, etcd, "--name", "etcd", "--data-dir", str(folder / "etcd"),
            "--listen-client-urls", f"http://127.0.0.1:{client}",
            "--advertise-client-urls", f"http://127.0.0.1:{client}",
            "--listen-peer-urls", f"http://127.0.0.1:{peer}",
            "--initial-advertise-peer-urls", f"http://127.0.0.1:{peer}",
            "--initial-cluster", f"etcd=http://127.0.0.1:{peer}",
        ]  # fmt: skip
        with (folder / "etcd.log").open("wb") as log:
            processes.append(subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT))
        _wait_until(partial(_answers, f"http://127.0.0.1:{client}/health"), "etcd", processes[0])
        for name in ("node1", "node2"):
            port, rest = _free_port(), _free_port()
            config = {
                "scope": f"psych-{folder.name}",
                "name": name,
                "restapi": {"listen": f"127.0.0.1:{rest}", "connect_address": f"127.0.0.1:{rest}"},
                "etcd3": {"hosts": f"127.0.0.1:{client}"},
                "bootstrap": {
                    "dcs": _PATRONI_DCS,
                    "initdb": [{"encoding": "UTF8"}, {"locale": "C"}, {"auth": "trust"}, "no-sync"],
                },
                "postgresql": {
                    "listen": f"127.0.0.1:{port}",
                    "connect_address": f"127.0.0.1:{port}",
                    "data_dir": str(folder / name),
                    "bin_dir": str(binaries),
                    "pgpass": str(folder / f"{name}.pgpass"),
                    "basebackup": [{"checkpoint": "fast"}],
                    "authentication": {
                        "superuser": {"username": "postgres"},
                        "replication": {"username": "postgres"},
                        "rewind": {"username": "postgres"},
                    },
                    "pg_hba": [
                        "local all all trust",
                        "host all all 127.0.0.1/32 trust",
                        "host replication all 127.0.0.1/32 trust",
                    ],
                    "parameters": {"unix_socket_directories": str(folder)},
                },
            }
            path = folder / f"{name}.yml"
            # JSON is YAML.
            path.write_text(json.dumps(config))
            with (folder / f"{name}.log").open("wb") as log:
                command = [*as_postgres, sys.executable, "-m", "patroni", str(path)]
                processes.append(
                    subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, cwd=folder)
                )
            nodes.append(PatroniNode(name, Server(folder / name, port), rest))
        pair = PatroniPair(
            (nodes[0], nodes[1]), [str(scripts / "patronictl"), "-c", str(folder / "node1.yml")]
        )
        pair.roles()
        yield pair
    except Exception as error:
        logs = "".join(
            f"\n--- {log.name}:\n{log.read_text(errors='replace')[-3000:]}"
            for log in sorted(folder.glob("*.log"))
        )
        raise AssertionError(f"{error}{logs}") from error
    finally:
        for process in reversed(processes):
            _stop(process)
        for node in nodes:
            _kill_postmaster(node.server.data)
        # The killed postmasters' children end once they see it gone.
        for pid in _postgres_pids(folder):
            with suppress(OSError):
                os.kill(pid, signal.SIGKILL)
        shutil.rmtree(folder, ignore_errors=True)


def _postgres_pids(folder: Path) -> list[int]:
    """Processes whose command line names ``folder`` (the clusters' sockets and data are there)."""
    found = []
    for entry in Path("/proc").iterdir():
        with suppress(OSError):
            if entry.name.isdigit() and str(folder).encode() in (entry / "cmdline").read_bytes():
                found.append(int(entry.name))
    return found


@pytest.fixture
def patroni_pair(unavailable: Callable[[str], NoReturn]) -> Iterator[PatroniPair]:
    """Two Patroni nodes (etcd, synchronous mode, short timers), removed after the test."""
    binaries = _binaries(unavailable)
    etcd, scripts = _patroni_programs(unavailable)
    with _patroni_pair(binaries, etcd, scripts) as pair:
        yield pair


@pytest.mark.parametrize("anyio_backend", ["asyncio"])
@pytest.mark.parametrize("event", ["switchover", "failover"])
async def test_a_patroni_switchover_and_failover_lose_nothing_acknowledged(
    patroni_pair: PatroniPair, event: str
) -> None:
    pair = patroni_pair
    primary, standby = await anyio.to_thread.run_sync(pair.roles)
    ledger = _Ledger(tasks=_WRITERS + _ERASERS)
    with anyio.fail_after(_BOUND):
        async with PostgresMemory.connect(
            pair.url(), schema=_SCHEMA, max_size=8, pool_timeout=30
        ) as store:
            await store.setup()
            assert await store.deletion_durability() == "synchronous_standbys"
            async with anyio.create_task_group() as tasks:
                for number in range(_WRITERS):
                    tasks.start_soon(_writer, store, f"writer-{number}", ledger)
                for number in range(_ERASERS):
                    tasks.start_soon(_eraser, store, f"eraser-{number}", ledger)
                await ledger.enough_before.wait()
                started = time.monotonic()
                async with anyio.create_task_group() as change:
                    if event == "switchover":
                        change.start_soon(
                            anyio.to_thread.run_sync, pair.switchover, primary, standby
                        )
                    else:
                        primary.kill_postmaster()
                    ledger.promoted_at = promoted = await anyio.to_thread.run_sync(
                        _accepting_writes, standby.server
                    )
                await ledger.enough_after.wait()
            fact = await store.remember("acme", "after", f"after the {event}")
            assert await store.recall("acme", "after") == (fact,)
            # The old primary rejoins as the synchronous standby (rewound
            # after a crash), and a deletion is durable on both again.
            assert await anyio.to_thread.run_sync(pair.roles) == (standby, primary)
            assert await store.deletion_durability() == "synchronous_standbys"
    outcome = await anyio.to_thread.run_sync(_outcome, standby.server, ledger)
    print(
        f"\nPatroni {event}: new primary writable {promoted - started:.2f} s after it began;"
        f" first call served {min(ledger.first_served.values()):.2f} s after, every task by"
        f" {max(ledger.first_served.values()):.2f} s; {ledger.failures} calls failed"
        f" ({ledger.uncertain} of them may have taken effect); {outcome}"
    )
    assert outcome["facts acknowledged"] > 0
    assert outcome["erases acknowledged"] > 0
    assert (outcome["lost"], outcome["undone"]) == (0, 0), outcome
    # A call that failed was in flight when its server went: one that sent
    # nothing, or was refused, was replayed.
    assert ledger.failures == ledger.uncertain
    assert max(ledger.first_served.values()) < _SERVED_WITHIN
