"""What every ledger database offers the ledger: one connection's operations, and the shared SQL."""

from __future__ import annotations

from typing import Any, Final

from ._key import LedgerKey

__all__ = [
    "COUNT",
    "FORMAT",
    "INSERT",
    "PRUNE",
    "ROWS",
    "SCHEMA",
    "Connection",
    "first_meta",
    "meta",
]

FORMAT: Final = 1

SCHEMA: Final = (
    """
CREATE TABLE IF NOT EXISTS psych_ledger_meta (
    name TEXT PRIMARY KEY,
    value TEXT NOT NULL
)""",
    """
CREATE TABLE IF NOT EXISTS psych_ledger_deletion (
    seq INTEGER PRIMARY KEY AUTOINCREMENT,
    kind TEXT NOT NULL,
    tenant TEXT NOT NULL,
    end_user_hash TEXT,
    fact_id BLOB,
    cutoff TEXT,
    recorded_at TEXT NOT NULL,
    done_at TEXT,
    deleted INTEGER
)""",
)


class Connection:
    """One connection to the ledger's database, used by one thread at a time."""

    errors: tuple[type[Exception], ...]

    def insert(self, parameters: tuple[object, ...]) -> int:
        raise NotImplementedError

    def run(self, statement: str, parameters: tuple[object, ...]) -> None:
        raise NotImplementedError

    def rows(self) -> list[tuple[Any, ...]]:
        raise NotImplementedError

    def prune(self, before: str) -> tuple[int, int]:
        """Delete the entries done before ``before``, in one transaction: (removed, kept)."""
        raise NotImplementedError

    def prepare(self, key: LedgerKey, *, create: bool) -> dict[str, str]:
        """Make the ledger's tables unless they exist, then read its meta rows.

        With ``create`` false nothing is made: a ledger whose tables are
        missing raises `LedgerNotFoundError`.
        """
        raise NotImplementedError

    def close(self) -> None:
        raise NotImplementedError


INSERT: Final = (
    "INSERT INTO psych_ledger_deletion"
    " (kind, tenant, end_user_hash, fact_id, cutoff, recorded_at) VALUES (?, ?, ?, ?, ?, ?)"
)
ROWS: Final = (
    "SELECT seq, kind, tenant, end_user_hash, fact_id, recorded_at, deleted, cutoff, done_at"
    " FROM psych_ledger_deletion ORDER BY seq"
)
# Every instant is written by `_text`, one fixed width in UTC, so that text
# order is time order; PostgreSQL compares it byte by byte whatever the
# database's collation.
PRUNE: Final = (
    "DELETE FROM psych_ledger_deletion WHERE done_at IS NOT NULL AND done_at {collate}< ?"
)
COUNT: Final = "SELECT count(*) FROM psych_ledger_deletion"


def meta(cursor: Any) -> dict[str, str] | None:
    found = {str(name): str(value) for name, value in cursor.fetchall()}
    return found or None


def first_meta(key: LedgerKey) -> list[tuple[str, str]]:
    return [("format", str(FORMAT)), ("key_check", key.check_value())]
