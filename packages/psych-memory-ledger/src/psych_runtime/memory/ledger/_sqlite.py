"""The ledger in a SQLite file of its own."""

from __future__ import annotations

import sqlite3
from pathlib import Path
from typing import Any

from ._connection import COUNT, INSERT, PRUNE, ROWS, SCHEMA, Connection, first_meta, meta
from ._errors import LedgerError, LedgerNotFoundError
from ._key import LedgerKey

__all__ = ["SqliteConnection"]


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
            raise LedgerError(f"the ledger file cannot be opened ({type(exc).__name__})") from exc
        return cls(conn)

    def insert(self, parameters: tuple[object, ...]) -> int:
        return self._conn.execute(INSERT, parameters).lastrowid or 0

    def run(self, statement: str, parameters: tuple[object, ...]) -> None:
        self._conn.execute(statement, parameters)

    def rows(self) -> list[tuple[Any, ...]]:
        return self._conn.execute(ROWS).fetchall()

    def prune(self, before: str) -> tuple[int, int]:
        conn = self._conn
        conn.execute("BEGIN IMMEDIATE")
        try:
            removed = conn.execute(PRUNE.format(collate=""), (before,)).rowcount
            (kept,) = conn.execute(COUNT).fetchone()
            conn.execute("COMMIT")
        except BaseException:
            conn.execute("ROLLBACK")
            raise
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
                conn.execute("ROLLBACK")
                raise
        except sqlite3.Error as exc:
            raise LedgerError(f"the file is not a usable ledger ({type(exc).__name__})") from exc
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
            raise LedgerError(
                f"the file cannot be read as a ledger ({type(exc).__name__})"
            ) from exc
        if found is None:
            raise LedgerNotFoundError("the file holds no ledger")
        return found

    def close(self) -> None:
        self._conn.close()
