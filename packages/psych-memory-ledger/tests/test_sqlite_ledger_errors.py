"""A SQLite ledger that is locked, read-only or on a full disk says so, never "not a ledger".

Only a file that really is not a ledger is reported as "not a usable
ledger": an operator told that of a good ledger might replace it.
"""

from __future__ import annotations

import os
import sqlite3
import stat
from collections.abc import Iterator
from contextlib import closing, contextmanager
from datetime import UTC, datetime
from pathlib import Path

import pytest

from psych_runtime.memory.ledger import LedgerError, LedgerKey, open_ledger
from psych_runtime.memory.ledger._sqlite import SqliteConnection

# Enough to find the lock taken, short enough to keep the test quick.
BUSY_TIMEOUT = 0.05


@contextmanager
def _locked(path: Path, how: str) -> Iterator[None]:
    """Another connection holds the ledger's write lock until the block ends."""
    with closing(sqlite3.connect(path, isolation_level=None)) as other:
        other.execute(f"BEGIN {how}")
        try:
            yield
        finally:
            other.execute("ROLLBACK")


@pytest.mark.parametrize("how", ["IMMEDIATE", "EXCLUSIVE"])
def test_a_ledger_locked_by_another_process_says_so(
    ledger_url: str, key: LedgerKey, tmp_path: Path, how: str
) -> None:
    open_ledger(ledger_url, key).close()
    path = tmp_path / "ledger.sqlite3"
    with _locked(path, how):
        with pytest.raises(LedgerError) as opening:
            open_ledger(ledger_url, key, busy_timeout=BUSY_TIMEOUT)
        with open_ledger(ledger_url, key, busy_timeout=BUSY_TIMEOUT, create=False) as ledger:
            # A write-ahead log: reading goes on while another writes.
            assert ledger.entries() == ()
            with pytest.raises(LedgerError) as pruning:
                ledger.prune(datetime.now(UTC))
    for refused in (opening.value, pruning.value):
        assert str(refused).startswith("the ledger is locked by another process (SQLITE_BUSY)")
        assert "not a usable ledger" not in str(refused)
    assert str(pruning.value).endswith("nothing was pruned")
    # Once the other process is done, the same ledger opens and prunes.
    with open_ledger(ledger_url, key, busy_timeout=BUSY_TIMEOUT) as ledger:
        assert ledger.prune(datetime.now(UTC)).entries_kept == 0


def _connection(path: Path, mode: str) -> sqlite3.Connection:
    return sqlite3.connect(
        f"{path.absolute().as_uri()}?mode={mode}", isolation_level=None, uri=True
    )


def test_a_ledger_opened_read_only_says_it_is_read_only(tmp_path: Path, key: LedgerKey) -> None:
    # Opened read-only by SQLite itself, which holds for every user, root included.
    path = tmp_path / "ledger.sqlite3"
    _connection(path, "rwc").close()
    conn = SqliteConnection(_connection(path, "ro"))
    try:
        with pytest.raises(LedgerError, match=r"^the ledger file is read-only \(SQLITE_READONLY"):
            conn.prepare(key, create=True)
    finally:
        conn.close()


@pytest.mark.skipif(
    hasattr(os, "geteuid") and os.geteuid() == 0,
    reason="root writes a file whatever its mode: the read-only open above covers this case",
)
def test_a_ledger_file_without_write_permission_says_it_is_read_only(
    ledger_url: str, key: LedgerKey, tmp_path: Path
) -> None:
    open_ledger(ledger_url, key).close()
    path = tmp_path / "ledger.sqlite3"
    path.chmod(stat.S_IRUSR)
    try:
        with (
            open_ledger(ledger_url, key, create=False) as ledger,
            pytest.raises(LedgerError) as pruning,
        ):
            ledger.prune(datetime.now(UTC))
        assert str(pruning.value).startswith("the ledger file is read-only (SQLITE_READONLY")
    finally:
        path.chmod(stat.S_IRUSR | stat.S_IWUSR)


def test_a_ledger_on_a_full_disk_says_the_disk_is_full(tmp_path: Path, key: LedgerKey) -> None:
    # SQLite's own limit on the file's size fails as a full disk does.
    raw = _connection(tmp_path / "ledger.sqlite3", "rwc")
    raw.execute("PRAGMA max_page_count = 1")
    conn = SqliteConnection(raw)
    try:
        with pytest.raises(LedgerError, match=r"^the disk is full \(SQLITE_FULL"):
            conn.prepare(key, create=True)
    finally:
        conn.close()


@pytest.mark.parametrize("create", [True, False])
def test_a_file_that_is_not_a_database_is_not_a_usable_ledger(
    ledger_url: str, key: LedgerKey, tmp_path: Path, create: bool
) -> None:
    (tmp_path / "ledger.sqlite3").write_bytes(b"not a ledger" * 100)
    with pytest.raises(LedgerError, match=r"^the file is not a usable ledger \(SQLITE_NOTADB\)"):
        open_ledger(ledger_url, key, create=create)
