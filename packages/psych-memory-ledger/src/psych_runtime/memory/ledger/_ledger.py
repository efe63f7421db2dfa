"""`DeletionLedger`: the record of deletions, in a SQLite file of its own."""

from __future__ import annotations

import os
import sqlite3
import threading
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from types import TracebackType
from typing import Final, Literal, Self
from urllib.parse import unquote, urlsplit

from psych_runtime.memory.port import InvalidInputError

from ._errors import LedgerError, LedgerKeyMismatchError, LedgerUnavailableError
from ._key import LedgerKey

__all__ = ["DeletionLedger", "LedgerEntry", "open_ledger"]

FORMAT: Final = 1

_SCHEMA: Final = (
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
    end_user_hash TEXT NOT NULL,
    fact_id BLOB,
    recorded_at TEXT NOT NULL,
    done_at TEXT,
    deleted INTEGER
)""",
)

Kind = Literal["erase", "forget"]


@dataclass(frozen=True, slots=True)
class LedgerEntry:
    """One recorded deletion.

    Attributes:
        seq: Its place in the ledger, increasing with each deletion.
        kind: ``"erase"`` (every fact of an end user) or ``"forget"`` (one fact).
        tenant: The tenant, in the clear.
        end_user_hash: The end user, as `LedgerKey.end_user_hash` of the
            ledger's key; never the id itself.
        fact_id: The fact's id for a ``"forget"``, ``None`` for an ``"erase"``.
        recorded_at: When the intent was recorded, before the store deleted
            anything; timezone-aware, in UTC.
        deleted: How many facts the store deleted, or ``None`` while the
            entry is an intent whose outcome was never recorded (the process
            stopped, or the ledger could not be written, after the intent).
    """

    seq: int
    kind: Kind
    tenant: str
    end_user_hash: str
    fact_id: str | None
    recorded_at: datetime
    deleted: int | None


def _path_of(url: str) -> Path:
    if not isinstance(url, str):
        raise TypeError(f"url must be a str, not {type(url).__qualname__}")
    parts = urlsplit(url)
    if parts.scheme.lower() != "sqlite":
        raise InvalidInputError("ledger", "must be a sqlite:/// URL")
    if parts.netloc or parts.query or parts.fragment or not parts.path.startswith("/"):
        raise InvalidInputError(
            "ledger", "must be sqlite:///relative/path or sqlite:////absolute/path"
        )
    path = unquote(parts.path[1:])
    if not path:
        raise InvalidInputError("ledger", "must name a file")
    return Path(path)


def open_ledger(url: str, key: LedgerKey, *, busy_timeout: float = 5.0) -> DeletionLedger:
    """Open the ledger at ``url``, creating it (and recording ``key``'s check value) if new.

    Args:
        url: ``sqlite:///relative/path`` or ``sqlite:////absolute/path``.
        key: The operator's secret; a ledger keeps a check value of the key
            it was created with and refuses any other.
        busy_timeout: Seconds a write waits for another writer of the same
            file before it fails.

    Raises:
        TypeError: An argument has the wrong type.
        InvalidInputError: ``url`` is not a SQLite URL naming a file, or
            ``busy_timeout`` is negative.
        LedgerKeyMismatchError: The ledger was created with another key.
        LedgerError: The file cannot be opened or is not a ledger.
    """
    path = _path_of(url)
    if not isinstance(key, LedgerKey):
        raise TypeError(f"key must be a LedgerKey, not {type(key).__qualname__}")
    if isinstance(busy_timeout, bool) or not isinstance(busy_timeout, int | float):
        raise TypeError(f"busy_timeout must be a number, not {type(busy_timeout).__qualname__}")
    if not busy_timeout >= 0:
        raise InvalidInputError("busy_timeout", "must be zero or more seconds")
    try:
        conn = sqlite3.connect(
            os.fspath(path), timeout=busy_timeout, isolation_level=None, check_same_thread=False
        )
    except sqlite3.Error as exc:
        raise LedgerError(f"the ledger file cannot be opened ({type(exc).__name__})") from exc
    try:
        _prepare(conn, key)
    except BaseException:
        conn.close()
        raise
    return DeletionLedger(conn, path, key)


def _prepare(conn: sqlite3.Connection, key: LedgerKey) -> None:
    try:
        # Every commit reaches the disk before the call returns: an intent
        # recorded is an intent kept, whatever happens to the process next.
        conn.execute("PRAGMA journal_mode=WAL")
        conn.execute("PRAGMA synchronous=FULL")
        conn.execute("BEGIN IMMEDIATE")
        try:
            for statement in _SCHEMA:
                conn.execute(statement)
            found = dict(conn.execute("SELECT name, value FROM psych_ledger_meta").fetchall())
            if not found:
                conn.executemany(
                    "INSERT INTO psych_ledger_meta (name, value) VALUES (?, ?)",
                    [("format", str(FORMAT)), ("key_check", key.check_value())],
                )
            conn.execute("COMMIT")
        except BaseException:
            conn.execute("ROLLBACK")
            raise
    except sqlite3.Error as exc:
        raise LedgerError(f"the file is not a usable ledger ({type(exc).__name__})") from exc
    if found and found.get("format") != str(FORMAT):
        raise LedgerError(f"the ledger's format is not {FORMAT}")
    if found and found.get("key_check") != key.check_value():
        raise LedgerKeyMismatchError("the key is not the one this ledger was created with")


def _id_bytes(fact_id: str | None) -> bytes | None:
    # Stored as bytes: any str is a fact id the port accepts, lone
    # surrogates included, and the id must come back exactly.
    return None if fact_id is None else fact_id.encode("utf-8", "surrogatepass")


def _now() -> str:
    return datetime.now(UTC).isoformat()


class DeletionLedger:
    """An open deletion ledger: a SQLite file outside the store it records.

    Made by `open_ledger`. Its writes are made from worker threads by the
    stores it is attached to (see `with_ledger`); closing it is its opener's
    business, after every store attached to it is done with it.
    """

    __slots__ = ("_closed", "_conn", "_key", "_lock", "_path")

    def __init__(self, conn: sqlite3.Connection, path: Path, key: LedgerKey) -> None:
        self._conn = conn
        self._path = path
        self._key = key
        self._lock = threading.Lock()
        self._closed = False

    def __repr__(self) -> str:
        return f"DeletionLedger({os.fspath(self._path)!r})"

    @property
    def path(self) -> Path:
        """The ledger's file, as its URL named it."""
        return self._path

    @property
    def key(self) -> LedgerKey:
        """The key the ledger's end-user hashes are made with."""
        return self._key

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    def close(self) -> None:
        """Close the file; a deletion through an attached store is then refused. Idempotent."""
        with self._lock:
            if not self._closed:
                self._closed = True
                self._conn.close()

    def entries(self, *, since: datetime | None = None) -> tuple[LedgerEntry, ...]:
        """Every recorded deletion, oldest first; only those recorded at or after ``since``.

        Raises:
            TypeError: ``since`` is not ``None`` or a `datetime`.
            InvalidInputError: ``since`` has no timezone.
            LedgerError: The ledger is closed or cannot be read.
        """
        if since is not None:
            if not isinstance(since, datetime):
                raise TypeError(f"since must be None or a datetime, not {type(since).__qualname__}")
            if since.tzinfo is None or since.utcoffset() is None:
                raise InvalidInputError("since", "must be timezone-aware")
        with self._lock:
            if self._closed:
                raise LedgerError("the ledger is closed")
            try:
                rows = self._conn.execute(
                    "SELECT seq, kind, tenant, end_user_hash, fact_id, recorded_at, deleted"
                    " FROM psych_ledger_deletion ORDER BY seq"
                ).fetchall()
            except sqlite3.Error as exc:
                raise LedgerError(f"the ledger cannot be read ({type(exc).__name__})") from exc
        found = (
            LedgerEntry(
                seq,
                kind,
                tenant,
                hashed,
                None if fact_id is None else bytes(fact_id).decode("utf-8", "surrogatepass"),
                datetime.fromisoformat(at),
                deleted,
            )
            for seq, kind, tenant, hashed, fact_id, at, deleted in rows
        )
        return tuple(entry for entry in found if since is None or entry.recorded_at >= since)

    # The three writes of a deletion, each its own committed transaction.

    def _write(self, operation: str, statement: str, parameters: tuple[object, ...]) -> int:
        with self._lock:
            if self._closed:
                raise LedgerUnavailableError(
                    operation, "the deletion ledger is closed", may_have_taken_effect=False
                )
            try:
                cursor = self._conn.execute(statement, parameters)
            except sqlite3.Error as exc:
                raise LedgerUnavailableError(
                    operation,
                    f"the deletion ledger cannot be written ({type(exc).__name__})",
                    may_have_taken_effect=False,
                ) from exc
            return cursor.lastrowid or 0

    def _intend(self, kind: Kind, tenant: str, end_user_id: str, fact_id: str | None) -> int:
        return self._write(
            kind,
            "INSERT INTO psych_ledger_deletion (kind, tenant, end_user_hash, fact_id, recorded_at)"
            " VALUES (?, ?, ?, ?, ?)",
            (
                kind,
                tenant,
                self._key.end_user_hash(tenant, end_user_id),
                _id_bytes(fact_id),
                _now(),
            ),
        )

    def _done(self, kind: Kind, seq: int, deleted: int) -> None:
        if kind == "forget" and not deleted:
            # Only a forget that deleted a fact is kept: one that matched
            # nothing tells nothing, and keeps an end user's hash for no use.
            self._drop(kind, seq)
            return
        self._write(
            kind,
            "UPDATE psych_ledger_deletion SET done_at = ?, deleted = ? WHERE seq = ?",
            (_now(), deleted, seq),
        )

    def _drop(self, kind: Kind, seq: int) -> None:
        self._write(kind, "DELETE FROM psych_ledger_deletion WHERE seq = ?", (seq,))
