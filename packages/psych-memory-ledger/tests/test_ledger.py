"""Opening a ledger: its URL, its key check, its refusals; reading its entries."""

from __future__ import annotations

import sqlite3
from contextlib import closing
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from psych_runtime.memory.ledger import (
    DeletionLedger,
    LedgerError,
    LedgerKey,
    LedgerKeyMismatchError,
    open_ledger,
)
from psych_runtime.memory.port import InvalidInputError


def _file(ledger: DeletionLedger) -> Path:
    assert ledger.path is not None
    return ledger.path


def test_a_new_ledger_is_created_and_reopened_with_its_key(tmp_path: Path, key: LedgerKey) -> None:
    url = f"sqlite:///{tmp_path / 'new.sqlite3'}"
    with open_ledger(url, key) as ledger:
        assert ledger.entries() == ()
        assert _file(ledger) == tmp_path / "new.sqlite3"
        assert repr(ledger) == f"DeletionLedger({str(tmp_path / 'new.sqlite3')!r})"
    with open_ledger(url, key) as again:
        assert again.key is key


def test_another_key_is_refused(ledger_url: str, key: LedgerKey) -> None:
    open_ledger(ledger_url, key).close()
    with pytest.raises(LedgerKeyMismatchError, match="not the one this ledger was created with"):
        open_ledger(ledger_url, LedgerKey(b"o" * 32))


@pytest.mark.parametrize(
    "url",
    [
        "mysql://localhost/db",
        "sqlite://host/path",
        "sqlite:///",
        "sqlite:///path?mode=ro",
        "sqlite:relative",
    ],
)
def test_a_url_that_names_no_sqlite_file_is_refused(url: str, key: LedgerKey) -> None:
    with pytest.raises(InvalidInputError, match=r"^ledger must"):
        open_ledger(url, key)


def test_wrong_arguments_are_refused(ledger_url: str, key: LedgerKey) -> None:
    with pytest.raises(TypeError, match="url must be a str, not bytes"):
        open_ledger(b"sqlite:///x", key)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="key must be a LedgerKey, not bytes"):
        open_ledger(ledger_url, b"k" * 32)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="busy_timeout must be a number, not bool"):
        open_ledger(ledger_url, key, busy_timeout=True)
    with pytest.raises(InvalidInputError, match="busy_timeout must be zero or more"):
        open_ledger(ledger_url, key, busy_timeout=-1)


def test_a_file_that_is_not_a_ledger_is_refused(tmp_path: Path, key: LedgerKey) -> None:
    garbage = tmp_path / "garbage"
    garbage.write_bytes(b"not a database at all" * 100)
    with pytest.raises(LedgerError, match="not a usable ledger"):
        open_ledger(f"sqlite:///{garbage}", key)
    with pytest.raises(LedgerError, match="cannot be opened"):
        open_ledger(f"sqlite:///{tmp_path / 'no-such-folder' / 'ledger'}", key)


def test_a_ledger_of_another_format_is_refused(ledger_url: str, key: LedgerKey) -> None:
    with open_ledger(ledger_url, key) as ledger:
        path = _file(ledger)
    with closing(sqlite3.connect(path)) as raw, raw:
        raw.execute("UPDATE psych_ledger_meta SET value = '2' WHERE name = 'format'")
    with pytest.raises(LedgerError, match="format is not 1"):
        open_ledger(ledger_url, key)


def test_entries_since_an_instant(ledger: DeletionLedger) -> None:
    ledger._intend("erase", "acme", "user-1", None)
    ledger._intend("forget", "acme", "user-1", "\ud800id")
    (erase, forget) = ledger.entries()
    assert (erase.kind, erase.fact_id, erase.deleted) == ("erase", None, None)
    assert forget.fact_id == "\ud800id"
    assert forget.recorded_at.tzinfo is not None
    assert ledger.entries(since=erase.recorded_at) == (erase, forget)
    # An intent's deletion may commit at any later instant: it is read
    # whatever ``since`` is; a deletion recorded as done, only from then on.
    later = datetime.now(UTC) + timedelta(hours=1)
    assert ledger.entries(since=later) == (erase, forget)
    ledger._done("erase", erase.seq, 3)
    (done, _) = ledger.entries()
    assert done.done_at is not None
    assert ledger.entries(since=done.done_at) == (done, forget)
    assert ledger.entries(since=later) == (forget,)
    with pytest.raises(TypeError, match="since must be None or a datetime, not str"):
        ledger.entries(since="2026-01-01")  # type: ignore[arg-type]
    with pytest.raises(InvalidInputError, match="since must be timezone-aware"):
        ledger.entries(since=datetime(2026, 1, 1))


def test_a_closed_ledger_is_neither_read_nor_written(ledger: DeletionLedger) -> None:
    ledger.close()
    ledger.close()
    with pytest.raises(LedgerError, match="closed"):
        ledger.entries()
