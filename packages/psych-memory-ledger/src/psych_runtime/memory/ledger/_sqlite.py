"""The ledger in a SQLite file of its own."""

from __future__ import annotations

import sqlite3
from pathlib import Path
from typing import Any, Final

from ._connection import COUNT, INSERT, PRUNE, ROWS, SCHEMA, Connection, first_meta, meta
from ._errors import LedgerError, LedgerNotFoundError
from ._key import LedgerKey

__all__ = ["SqliteConnection"]

# SQLite's primary result codes (the low byte of an extended one).
_BUSY: Final = 5
_LOCKED: Final = 6
_READONLY: Final = 8
_FULL: Final = 13


def _reason(error: sqlite3.Error, otherwise: str) -> str:
    """What ``error`` says of the ledger file, or ``otherwise``; never the file's path.

    A ledger that is locked, read-only or on a full disk is a good ledger
    that cannot be used now: only a file that really is not one (or is
    damaged) is reported as ``otherwise``, lest a good ledger be replaced.
    """
    code = getattr(error, "sqlite_errorcode", None)
    name = getattr(error, "sqlite_errorname", None) or type(error).__name__
    primary = code & 0xFF if isinstance(code, int) else None
    if primary in {_BUSY, _LOCKED}:
        return (
            f"the ledger is locked by another process ({name}); try again once it is done,"
            " and do not replace the ledger"
        )
    if primary == _READONLY:
        return f"the ledger file is read-only ({name}); it needs write access"
    if primary == _FULL:
        return f"the disk is full ({name}); free space for the ledger"
    return f"{otherwise} ({name})"


class SqliteConnection(Connection):
    errors = (sqlite3.Error,)

    def __init__(self, conn: sqlite3.Connection) -> None:
        self._conn = conn

    @classmethod
    def open(cls, path: Path, busy_timeout: float, *, create: bool) -> SqliteConnection:
        if not create and not path.exists():
            raise LedgerNotFoundError("no ledger file exists there")
        try:
            # Without ``create`` the file is opened as it is: a file deleted
            # meanwhile is an error, never a new empty ledger.
            conn = sqlite3.connect(
                f"{path.absolute().as_uri()}?mode={'rwc' if create else 'rw'}",
                timeout=busy_timeout,
                isolation_level=None,
                check_same_thread=False,
                uri=True,
            )
        except sqlite3.Error as exc:
            if not create:
                raise LedgerNotFoundError(
                    f"no ledger file can be opened there ({type(exc).__name__})"
                ) from exc
            raise LedgerError(_reason(exc, "the ledger file cannot be opened")) from exc
        return cls(conn)

    def insert(self, parameters: tuple[object, ...]) -> int:
        return self._conn.execute(INSERT, parameters).lastrowid or 0

    def run(self, statement: str, parameters: tuple[object, ...]) -> None:
        self._conn.execute(statement, parameters)

    def rows(self) -> list[tuple[Any, ...]]:
        return self._conn.execute(ROWS).fetchall()

    def prune(self, before: str) -> tuple[int, int]:
        conn = self._conn
        try:
            conn.execute("BEGIN IMMEDIATE")
            try:
                removed = conn.execute(PRUNE.format(collate=""), (before,)).rowcount
                (kept,) = conn.execute(COUNT).fetchone()
                conn.execute("COMMIT")
            except BaseException:
                if conn.in_transaction:  # SQLite rolls back itself on a full disk
                    conn.execute("ROLLBACK")
                raise
        except sqlite3.Error as exc:
            # Said as it is (locked, read-only, full) rather than by type only.
            raise LedgerError(
                f"{_reason(exc, 'the ledger cannot be written')}; nothing was pruned"
            ) from exc
        return removed, int(kept)

    def prepare(self, key: LedgerKey, *, create: bool) -> dict[str, str]:
        conn = self._conn
        if not create:
            return self._existing()
        try:
            # Every commit reaches the disk before the call returns: an intent
            # recorded is an intent kept, whatever happens to the process next.
            conn.execute("PRAGMA journal_mode=WAL")
            conn.execute("PRAGMA synchronous=FULL")
            conn.execute("BEGIN IMMEDIATE")
            try:
                for statement in SCHEMA:
                    conn.execute(statement)
                found = meta(conn.execute("SELECT name, value FROM psych_ledger_meta"))
                if found is None:
                    conn.executemany(
                        "INSERT INTO psych_ledger_meta (name, value) VALUES (?, ?)",
                        first_meta(key),
                    )
                conn.execute("COMMIT")
            except BaseException:
                if conn.in_transaction:  # SQLite rolls back itself on a full disk
                    conn.execute("ROLLBACK")
                raise
        except sqlite3.Error as exc:
            raise LedgerError(_reason(exc, "the file is not a usable ledger")) from exc
        return found or {}

    def _existing(self) -> dict[str, str]:
        try:
            (tables,) = self._conn.execute(
                "SELECT count(*) FROM sqlite_master"
                " WHERE type = 'table' AND name = 'psych_ledger_meta'"
            ).fetchone()
            found = (
                meta(self._conn.execute("SELECT name, value FROM psych_ledger_meta"))
                if tables
                else None
            )
        except sqlite3.Error as exc:
            raise LedgerError(_reason(exc, "the file is not a usable ledger")) from exc
        if found is None:
            raise LedgerNotFoundError("the file holds no ledger")
        return found

    def close(self) -> None:
        self._conn.close()
