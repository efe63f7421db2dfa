"""A private cluster recovered to an instant between deletions, then replayed.

A cluster of our own (``initdb`` on a free local port, from the installed
binaries, ``pg_config --bindir``) archives its WAL to a folder; a base
backup is taken first; deletions are made through a ledgered store, a named
restore point (``pg_create_restore_point``) is set between them, and the
base backup is recovered to that point (``restore_command``,
``recovery_target_name``, ``recovery.signal``, then promoted). The ledger is
a SQLite file, outside the cluster, as it must be: a ledger in the cluster
would be rolled back with it.

The binaries refuse to run as root, so as root they run as the ``postgres``
user, in a folder of their own. Without them the test is skipped, except
under ``CI=true``, where that fails the run. The server runs with ``fsync =
off``: only the server is stopped here, never the machine.
"""

from __future__ import annotations

import os
import re
import shutil
import socket
import subprocess
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any, NoReturn

import psycopg
import pytest

from psych_runtime.memory.ledger import DeletionLedger, Reapplied, reapply, with_ledger
from psych_runtime.memory.port import ExpiresFacts, Memory
from psych_runtime.memory.postgres import PostgresMemory

pytestmark = [pytest.mark.anyio, pytest.mark.clusters, pytest.mark.xdist_group("clusters")]

Facts = dict[tuple[str, str], tuple[Memory, ...]]

_SCHEMA = "psych_pitr"
_TARGET = "between_deletions"
# What the recovered server logs when it stops at the target: the name and
# the instant the restore point was made, the restore point an operator
# passes to the replay.
_STOPPED = re.compile(
    r'recovery stopping at restore point "' + _TARGET + r'", time (?P<time>[0-9:. +-]+)$',
    re.MULTILINE,
)
# A bug must end the test rather than hang the run; the waits are on servers.
_BOUND = 60


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


@dataclass
class _Server:
    data: Path
    port: int

    @property
    def dsn(self) -> str:
        return f"postgresql://postgres@127.0.0.1:{self.port}/postgres"

    def query(self, statement: str, params: tuple[Any, ...] = ()) -> list[Any]:
        """Run one statement on a fresh autocommit connection; return its rows."""
        with psycopg.connect(self.dsn, autocommit=True, connect_timeout=5) as conn:
            return conn.execute(statement, params).fetchall()

    def wait_for(self, condition: str, params: tuple[Any, ...] = ()) -> None:
        """Return once ``condition`` (a query) answers ``true``; fail after a bound.

        For states the server announces nowhere (an archived segment, the end
        of a promotion): looked at again every 10 ms until they hold.
        """
        deadline = time.monotonic() + _BOUND
        while not self.query(condition, params)[0][0]:
            if time.monotonic() > deadline:
                raise AssertionError(f"the server never answered true to: {condition}")
            time.sleep(0.01)


class _Cluster:
    """One private cluster, its archive and its base backups, in a folder of their own."""

    def __init__(self, binaries: Path) -> None:
        self._binaries = binaries
        self._as_postgres = ["runuser", "-u", "postgres", "--"] if os.geteuid() == 0 else []
        # Not pytest's tmp_path: its parents are closed to the postgres user.
        self.folder = Path(tempfile.mkdtemp(prefix="psych-pitr-"))
        self.archive = self.folder / "archive"
        self.archive.mkdir()
        if self._as_postgres:
            for place in (self.folder, self.archive):
                shutil.chown(place, "postgres")
        self._started: list[Path] = []

    def run(self, program: str, *args: str) -> None:
        """Run a PostgreSQL program, as ``postgres`` when root; fail with its logs."""
        command = [*self._as_postgres, str(self._binaries / program), *args]
        done = subprocess.run(command, capture_output=True, text=True, check=False, timeout=120)
        if done.returncode != 0:
            raise RuntimeError(
                f"{program} failed ({done.returncode}): {done.stderr.strip()[-2000:]}"
                + "".join(
                    f"\n--- {log.name}:\n{log.read_text(errors='replace')[-2000:]}"
                    for log in sorted(self.folder.glob("*.log"))
                )
            )

    def log(self, data: Path) -> str:
        return (self.folder / f"{data.name}.log").read_text(errors="replace")

    def initdb(self, data: Path) -> None:
        self.run(
            "initdb", "-D", str(data), "-U", "postgres", "-A", "trust",
            "-E", "UTF8", "--locale=C", "--no-sync",
        )  # fmt: skip

    def start(self, data: Path, *settings: str) -> _Server:
        """Start a server on ``data`` and return once it accepts connections."""
        port = _free_port()
        options = [
            "-c listen_addresses=127.0.0.1",
            f"-c port={port}",
            f"-c unix_socket_directories={self.folder}",
            "-c fsync=off",
            "-c shared_buffers=16MB",
            "-c max_connections=20",
            "-c timezone=UTC",
            "-c log_timezone=UTC",
            *settings,
        ]
        self._started.append(data)
        self.run(
            "pg_ctl", "start", "-w", "-t", str(_BOUND), "-D", str(data),
            "-l", str(self.folder / f"{data.name}.log"), "-o", " ".join(options),
        )  # fmt: skip
        return _Server(data, port)

    def stop(self, server: _Server) -> None:
        self.run("pg_ctl", "stop", "-D", str(server.data), "-m", "fast", "-w", "-t", str(_BOUND))

    def recover(self, backup: Path, data: Path, target: str) -> _Server:
        """Recover a copy of ``backup`` into ``data`` up to the restore point ``target``.

        Returns once the server has reached it and been promoted.
        """
        self.run(shutil.which("cp") or "/bin/cp", "-a", str(backup), str(data))
        with (data / "postgresql.auto.conf").open("a") as conf:
            conf.write(
                f"restore_command = 'cp {self.archive}/%f %p'\n"
                f"recovery_target_name = '{target}'\n"
                "recovery_target_action = 'promote'\n"
            )
        (data / "recovery.signal").touch()
        if self._as_postgres:
            shutil.chown(data / "recovery.signal", "postgres")
        server = self.start(data)
        # pg_ctl returns once the server takes read-only connections, before
        # it has reached the target; promotion ends the recovery.
        server.wait_for("SELECT NOT pg_is_in_recovery()")
        return server

    def close(self) -> None:
        """Stop every server started here and remove the whole folder."""
        for data in self._started:
            if (data / "postmaster.pid").exists():
                subprocess.run(
                    [*self._as_postgres, str(self._binaries / "pg_ctl"), "stop", "-D", str(data),
                     "-m", "immediate", "-w", "-t", str(_BOUND)],
                    capture_output=True, check=False, timeout=120,
                )  # fmt: skip
        shutil.rmtree(self.folder, ignore_errors=True)


@pytest.fixture
def cluster(unavailable: Callable[[str], NoReturn]) -> Iterator[_Cluster]:
    """A folder for a private cluster, stopped and removed after the test."""
    pg_config = shutil.which("pg_config")
    if pg_config is None:
        unavailable("cannot start a private cluster: pg_config is not on PATH")
    found = subprocess.run(
        [pg_config, "--bindir"], capture_output=True, text=True, check=False, timeout=30
    )
    binaries = Path(found.stdout.strip())
    needed = ("initdb", "pg_ctl", "pg_basebackup")
    missing = [name for name in needed if not (binaries / name).is_file()]
    if found.returncode != 0 or missing:
        unavailable(f"cannot start a private cluster: {', '.join(missing)} not in {binaries}")
    if os.geteuid() == 0 and shutil.which("runuser") is None:
        unavailable("cannot start a private cluster as root without runuser")
    made = _Cluster(binaries)
    try:
        yield made
    finally:
        made.close()


async def _everything(store: PostgresMemory) -> Facts:
    return {
        (tenant, user): await store.recall(tenant, user)
        for tenant in await store.tenants()
        for user in await store.end_users(tenant)
    }


async def test_a_cluster_recovered_to_an_instant_between_deletions_loses_again_what_came_after(
    cluster: _Cluster, ledger: DeletionLedger
) -> None:
    """Recovered to a restore point, then replayed with ``since`` that point.

    The instant to replay from is the recovery target, not the start of the
    base backup: the recovered cluster holds everything committed up to the
    target, the deletions before it included, so the deletions it lacks are
    exactly those done at or after it. From the start of the base backup, an
    erasure between that start and the target would be applied again, and
    would delete what that end user stored after it (counted below).
    """
    primary_data = cluster.folder / "primary"
    cluster.initdb(primary_data)
    primary = cluster.start(
        primary_data,
        "-c archive_mode=on",
        f"-c archive_command='test ! -f {cluster.archive}/%f && cp %p {cluster.archive}/%f'",
    )
    base = cluster.folder / "base"
    backup_started = primary.query("SELECT now()")[0][0]
    # Neither synced to disk nor with a manifest: the machine does not stop
    # here, and nothing verifies the backup but its recovery.
    cluster.run(
        "pg_basebackup", "-h", "127.0.0.1", "-p", str(primary.port), "-U", "postgres",
        "-D", str(base), "-c", "fast", "--no-sync", "--no-manifest",
    )  # fmt: skip

    async with PostgresMemory.connect(primary.dsn, schema=_SCHEMA) as live:
        await live.setup()
        store = with_ledger(live, ledger)
        assert isinstance(store, ExpiresFacts)
        for user in ("u1", "u2", "u3", "u4"):
            for n in range(3):
                await store.remember("acme", user, f"{user} fact {n}")
        await store.remember("other", "u1", "same id, another tenant")
        await store.remember("retained", "u1", "past its retention")
        young = await store.remember("retained", "u2", "within its retention")
        # Before the target: the recovered cluster has these deletions, and
        # what u3 stored after its erase.
        assert await store.erase("acme", "u3") == 3
        await store.remember("acme", "u3", "u3 after its erase")
        forgotten_first = (await live.recall("acme", "u2"))[0]
        assert await store.forget("acme", "u2", forgotten_first.id) is True
        at_target = await _everything(live)
        primary.query("SELECT pg_create_restore_point(%s)", (_TARGET,))
        # After it: lost by the recovery, to be applied again.
        assert await store.erase("acme", "u1") == 3
        forgotten_after = (await live.recall("acme", "u4"))[1]
        assert await store.forget("acme", "u4", forgotten_after.id) is True
        assert await store.expire("retained", before=young.created_at) == 1
        await store.remember("acme", "u1", "u1 after its erase, after the target")
        live_after = await _everything(live)
    # The restore point lies in the segment being written: switch to a new
    # one, and stop once the archive holds it.
    segment = primary.query("SELECT pg_walfile_name(pg_switch_wal())")[0][0]
    primary.wait_for("SELECT last_archived_wal >= %s FROM pg_stat_archiver", (segment,))
    cluster.stop(primary)

    restored = cluster.recover(base, cluster.folder / "restored", _TARGET)
    stopped = _STOPPED.search(cluster.log(restored.data))
    assert stopped is not None, cluster.log(restored.data)
    target = datetime.fromisoformat(stopped["time"])
    async with PostgresMemory.connect(restored.dsn, schema=_SCHEMA) as copy:
        assert await _everything(copy) == at_target
        from_backup_start = await reapply(copy, ledger, since=backup_started, dry_run=True)
        counted = await reapply(copy, ledger, since=target, dry_run=True)
        first = await reapply(copy, ledger, since=target)
        second = await reapply(copy, ledger, since=target)
        after = await _everything(copy)

    assert first == Reapplied(entries=3, erased_end_users=1, facts_deleted=5, expiries=1)
    assert counted == Reapplied(3, 1, 5, expiries=1, dry_run=True)
    assert second.facts_deleted == 0
    # From the backup's start, u3's erase runs again and takes nothing: the
    # fact u3 stored after it is not the erasure's to delete.
    assert (from_backup_start.entries > first.entries, from_backup_start.facts_deleted) == (
        True,
        first.facts_deleted,
    )
    # The live cluster as it was, less what was made after the target: ids,
    # order, created_at, and the fact u3 stored after its erase.
    kept = {m.id for facts in at_target.values() for m in facts}
    assert after == {
        place: facts
        for place, all_facts in live_after.items()
        if (facts := tuple(m for m in all_facts if m.id in kept))
    }
    assert after[("acme", "u3")] == at_target[("acme", "u3")]
    assert [m.content for m in after[("acme", "u3")]] == ["u3 after its erase"]
    assert ("acme", "u1") not in after
