"""`DeletionLedger`: the record of deletions, in a SQLite file of its own."""

from __future__ import annotations

import os
import threading
from contextlib import suppress
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from types import TracebackType
from typing import Final, Literal, Self
from urllib.parse import unquote, urlsplit

from psych_runtime.memory.port import InvalidInputError

from ._connection import FORMAT, Connection
from ._errors import LedgerError, LedgerKeyMismatchError, LedgerUnavailableError
from ._key import LedgerKey
from ._postgres import PostgresConnection, database_of, postgres_location
from ._sqlite import SqliteConnection

__all__ = ["DeletionLedger", "LedgerEntry", "Pruned", "open_ledger"]

Kind = Literal["erase", "forget", "expire"]


@dataclass(frozen=True, slots=True)
class LedgerEntry:
    """One recorded deletion.

    Attributes:
        seq: Its place in the ledger, increasing with each deletion.
        kind: ``"erase"`` (every fact of an end user), ``"forget"`` (one
            fact) or ``"expire"`` (every fact of the tenant created before
            ``cutoff``).
        tenant: The tenant, in the clear.
        end_user_hash: The end user, as `LedgerKey.end_user_hash` of the
            ledger's key, never the id itself; ``None`` for an ``"expire"``.
        fact_id: The fact's id for a ``"forget"``, otherwise ``None``.
        recorded_at: When the intent was recorded, before the store deleted
            anything; timezone-aware, in UTC.
        deleted: How many facts the store deleted, or ``None`` when that
            is not known: an intent whose outcome was never recorded (the
            process stopped after the intent, or its store failed saying it
            may have deleted), bounded or not.
        cutoff: For an ``"expire"``, the instant facts were deleted if
            created before (UTC); otherwise ``None``.
        done_at: The instant the deletion had ended by (UTC): when the store
            answered, or, for an intent its process bounded when it closed
            the ledger (see `DeletionLedger.close`), that closing;
            ``None`` for an intent still pending.
    """

    seq: int
    kind: Kind
    tenant: str
    end_user_hash: str | None
    fact_id: str | None
    recorded_at: datetime
    deleted: int | None
    cutoff: datetime | None = None
    done_at: datetime | None = None

    @property
    def last_at(self) -> datetime:
        """The latest instant the store's deletion may have committed that the ledger knows of.

        ``done_at`` when recorded, else ``recorded_at``: a backup taken
        before it may still hold what the entry deleted.
        """
        return self.recorded_at if self.done_at is None else self.done_at


@dataclass(frozen=True, slots=True)
class Pruned:
    """What `DeletionLedger.prune` did: its receipt.

    Attributes:
        before: The instant given (UTC): entries whose deletion was done
            before it were removed.
        entries_pruned: How many entries were removed.
        entries_kept: How many entries the ledger holds after.
        pruned_at: When the pruning was committed (UTC).
    """

    before: datetime
    entries_pruned: int
    entries_kept: int
    pruned_at: datetime


def _location(url: str) -> Path | tuple[str, str]:
    """The SQLite file, or the PostgreSQL connection string and schema, a URL names."""
    if not isinstance(url, str):
        raise TypeError(f"url must be a str, not {type(url).__qualname__}")
    parts = urlsplit(url)
    scheme = parts.scheme.lower()
    if scheme in {"postgresql", "postgres"}:
        if parts.fragment:
            raise InvalidInputError("ledger", "must not have a fragment ('#...')")
        # schema, prepare_threshold and libpq's parameters; any other refused.
        return postgres_location(url, parts.query)
    if scheme != "sqlite":
        raise InvalidInputError("ledger", "must be a sqlite:/// or postgresql:// URL")
    if parts.netloc or parts.query or parts.fragment or not parts.path.startswith("/"):
        raise InvalidInputError(
            "ledger", "must be sqlite:///relative/path or sqlite:////absolute/path"
        )
    path = unquote(parts.path[1:])
    if not path:
        raise InvalidInputError("ledger", "must name a file")
    return Path(path)


def open_ledger(
    url: str, key: LedgerKey, *, busy_timeout: float = 5.0, create: bool = True
) -> DeletionLedger:
    """Open the ledger at ``url``, creating it (and recording ``key``'s check value) if new.

    Args:
        url: ``sqlite:///relative/path``, ``sqlite:////absolute/path``, or
            ``postgresql://...?schema=NAME`` (a schema of its own, created
            if missing; the query may also hold ``prepare_threshold``, a
            whole number or ``none`` behind a pooler in transaction mode,
            and libpq's connection parameters).
        key: The operator's secret; a ledger keeps a check value of the key
            it was created with and refuses any other.
        busy_timeout: Seconds a write waits for another writer (SQLite) or
            for the connection (PostgreSQL) before it fails.
        create: Whether a ledger that does not exist yet is created. Pass
            ``False`` to read or prune an existing ledger: a mistyped URL
            then fails instead of answering from a new, empty ledger.

    Raises:
        TypeError: An argument has the wrong type.
        InvalidInputError: ``url`` is not a SQLite URL naming a file or a
            PostgreSQL URL naming a schema once, a PostgreSQL URL has an
            option that is neither the ledger's nor libpq's, its schema
            holds a psych-memory store (nothing is created there), or
            ``busy_timeout`` is negative.
        LedgerKeyMismatchError: The ledger was created with another key.
        LedgerNotFoundError: ``create`` is false and no ledger exists at
            ``url`` (nothing was created).
        LedgerError: The ledger cannot be opened or is not a ledger, or a
            PostgreSQL ledger is behind a pooler in statement mode, which
            cannot run its transactions.
    """
    location = _location(url)
    if not isinstance(key, LedgerKey):
        raise TypeError(f"key must be a LedgerKey, not {type(key).__qualname__}")
    if isinstance(busy_timeout, bool) or not isinstance(busy_timeout, int | float):
        raise TypeError(f"busy_timeout must be a number, not {type(busy_timeout).__qualname__}")
    if not busy_timeout >= 0:
        raise InvalidInputError("busy_timeout", "must be zero or more seconds")
    if not isinstance(create, bool):
        raise TypeError(f"create must be a bool, not {type(create).__qualname__}")
    conn: Connection = (
        SqliteConnection.open(location, busy_timeout, create=create)
        if isinstance(location, Path)
        else PostgresConnection.open(*location, busy_timeout)
    )
    try:
        found = conn.prepare(key, create=create)
    except BaseException:
        conn.close()
        raise
    if found and found.get("format") != str(FORMAT):
        conn.close()
        raise LedgerError(f"the ledger's format is not {FORMAT}")
    if found and found.get("key_check") != key.check_value():
        conn.close()
        raise LedgerKeyMismatchError("the key is not the one this ledger was created with")
    return DeletionLedger(conn, location, key)


_OUTCOME: Final = "UPDATE psych_ledger_deletion SET done_at = ?, deleted = ? WHERE seq = ?"
_WITHDRAW: Final = "DELETE FROM psych_ledger_deletion WHERE seq = ?"
_BOUND: Final = "UPDATE psych_ledger_deletion SET done_at = ? WHERE seq = ? AND done_at IS NULL"


def _id_bytes(fact_id: str | None) -> bytes | None:
    # Stored as bytes: any str is a fact id the port accepts, lone
    # surrogates included, and the id must come back exactly.
    return None if fact_id is None else fact_id.encode("utf-8", "surrogatepass")


def _text(instant: datetime) -> str:
    return instant.astimezone(UTC).isoformat(timespec="microseconds")


def _now() -> str:
    return _text(datetime.now(UTC))


def _checked_instant(value: object, argument: str) -> datetime:
    if not isinstance(value, datetime):
        raise TypeError(f"{argument} must be a datetime, not {type(value).__qualname__}")
    if value.tzinfo is None or value.utcoffset() is None:
        raise InvalidInputError(argument, "must be timezone-aware")
    return value.astimezone(UTC)


class DeletionLedger:
    """An open deletion ledger: a SQLite file outside the store it records.

    Made by `open_ledger`. Its writes are made from worker threads by the
    stores it is attached to (see `with_ledger`); closing it is its opener's
    business, after every store attached to it is done with it.
    """

    __slots__ = ("_closed", "_conn", "_key", "_location", "_lock", "_open", "_unwritten")

    def __init__(self, conn: Connection, location: Path | tuple[str, str], key: LedgerKey) -> None:
        self._conn = conn
        self._location = location
        self._key = key
        self._lock = threading.Lock()
        self._closed = False
        # Writes that settle an intent (its outcome, or its withdrawal) and
        # failed (the ledger locked or cut off at that moment): run before
        # anything else this ledger writes, and at close.
        self._unwritten: list[tuple[str, tuple[object, ...]]] = []
        # Intents this ledger recorded that nothing has settled yet: at
        # close, when every store attached is done, each is bounded.
        self._open: set[int] = set()

    def __repr__(self) -> str:
        if isinstance(self._location, Path):
            return f"DeletionLedger({os.fspath(self._location)!r})"
        return f"DeletionLedger(schema={self._location[1]!r})"

    @property
    def path(self) -> Path | None:
        """The ledger's SQLite file, as its URL named it; ``None`` for PostgreSQL."""
        return self._location if isinstance(self._location, Path) else None

    @property
    def postgres_place(self) -> tuple[str, str] | None:
        """The PostgreSQL connection string and schema of the ledger; ``None`` for SQLite."""
        return None if isinstance(self._location, Path) else self._location

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
        """Close the ledger; a deletion through an attached store is then refused. Idempotent.

        Close it after every store attached to it is done. First it writes
        what this process could not write before (an outcome, a withdrawn
        intent), then it bounds each intent this process recorded whose
        deletion ended without an outcome (the store failed, saying it may
        have deleted, or the call was cancelled): ``done_at`` becomes now,
        ``deleted`` stays ``None``, since no deletion of this process can
        commit after it. Such an entry can then be pruned like a done one.
        """
        with self._lock:
            if not self._closed:
                with suppress(*self._conn.errors):
                    self._write_outcomes()
                    bound = _now()
                    for seq in sorted(self._open):
                        self._conn.run(_BOUND, (bound, seq))
                        self._open.discard(seq)
                self._closed = True
                self._conn.close()

    def entries(self, *, since: datetime | None = None) -> tuple[LedgerEntry, ...]:
        """Every recorded deletion, oldest first; with ``since``, those a copy taken then may lack.

        An entry is kept when its `LedgerEntry.last_at` is at or after
        ``since``: a deletion done before ``since`` is in a copy taken at
        ``since`` already. An intent whose outcome was never recorded is
        always kept: its deletion may have committed at any instant after
        it was recorded, later than ``since`` included.

        Raises:
            TypeError: ``since`` is not ``None`` or a `datetime`.
            InvalidInputError: ``since`` has no timezone.
            LedgerError: The ledger is closed or cannot be read.
        """
        if since is not None:
            if not isinstance(since, datetime):
                raise TypeError(f"since must be None or a datetime, not {type(since).__qualname__}")
            since = _checked_instant(since, "since")
        with self._lock:
            if self._closed:
                raise LedgerError("the ledger is closed")
            try:
                rows = self._conn.rows()
            except self._conn.errors as exc:
                raise LedgerError(f"the ledger cannot be read ({type(exc).__name__})") from exc
        found = (
            LedgerEntry(
                seq,
                kind,
                tenant,
                hashed,
                None if fact_id is None else bytes(fact_id).decode("utf-8", "surrogatepass"),
                datetime.fromisoformat(at),
                None if deleted is None else int(deleted),
                None if cutoff is None else datetime.fromisoformat(cutoff),
                None if done is None else datetime.fromisoformat(done),
            )
            for seq, kind, tenant, hashed, fact_id, at, deleted, cutoff, done in rows
        )
        return tuple(
            entry
            for entry in found
            if since is None or entry.done_at is None or entry.last_at >= since
        )

    def prune(self, before: datetime) -> Pruned:
        """Remove the entries no copy kept any longer needs: those done before ``before``.

        ``before`` is when the oldest backup still kept was taken: a replay
        onto it reads only entries done at or after it (see `entries`), so
        the others are of no more use, and each keeps an end user's keyed
        hash. Intents whose outcome was never recorded are always kept
        (their deletion may have committed after ``before``; see
        `entries`). One transaction: all are removed or none.

        Raises:
            TypeError: ``before`` is not a `datetime`.
            InvalidInputError: ``before`` has no timezone, or is in the future.
            LedgerError: The ledger is closed or cannot be written.
        """
        before = _checked_instant(before, "before")
        if before > datetime.now(UTC):
            raise InvalidInputError("before", "must not be in the future")
        with self._lock:
            if self._closed:
                raise LedgerError("the ledger is closed")
            try:
                self._write_outcomes()
                removed, kept = self._conn.prune(_text(before))
            except self._conn.errors as exc:
                raise LedgerError(
                    f"the ledger cannot be written ({type(exc).__name__}); nothing was pruned"
                ) from exc
        return Pruned(before, removed, kept, datetime.now(UTC))

    def _holds_schema_of(self, conninfo: str, schema: str) -> bool:
        """Whether this ledger is in the PostgreSQL database and schema named."""
        if isinstance(self._location, Path) or schema != self._location[1]:
            return False
        return database_of(conninfo) == database_of(self._location[0])

    # The three writes of a deletion, each its own committed transaction.

    def _write_outcomes(self) -> None:
        # Called with the lock held. Each write is removed once made, so a
        # failure part way keeps exactly those still to make.
        while self._unwritten:
            statement, parameters = self._unwritten[0]
            self._conn.run(statement, parameters)
            del self._unwritten[0]

    def _write(self, operation: str, statement: str | None, parameters: tuple[object, ...]) -> int:
        # ``statement`` None: the insert of an intent, whose sequence number
        # each database returns in its own way.
        with self._lock:
            if self._closed:
                raise LedgerUnavailableError(
                    operation, "the deletion ledger is closed", may_have_taken_effect=False
                )
            try:
                self._write_outcomes()
                if statement is None:
                    return self._conn.insert(parameters)
                self._conn.run(statement, parameters)
            except self._conn.errors as exc:
                raise LedgerUnavailableError(
                    operation,
                    f"the deletion ledger cannot be written ({type(exc).__name__})",
                    may_have_taken_effect=False,
                ) from exc
            return 0

    def _intend(
        self,
        kind: Kind,
        tenant: str,
        end_user_id: str | None,
        fact_id: str | None,
        cutoff: datetime | None = None,
    ) -> int:
        seq = self._write(
            kind,
            None,
            (
                kind,
                tenant,
                None if end_user_id is None else self._key.end_user_hash(tenant, end_user_id),
                _id_bytes(fact_id),
                None if cutoff is None else _text(cutoff),
                _now(),
            ),
        )
        with self._lock:
            self._open.add(seq)
        return seq

    def _done(self, kind: Kind, seq: int, deleted: int) -> None:
        if kind == "forget" and not deleted:
            # Only a forget that deleted a fact is kept: one that matched
            # nothing tells nothing, and keeps an end user's hash for no use.
            self._drop(kind, seq)
            return
        # The instant the store answered: its deletion committed before it.
        self._settle(kind, seq, _OUTCOME, (_now(), deleted, seq))

    def _drop(self, kind: Kind, seq: int) -> None:
        self._settle(kind, seq, _WITHDRAW, (seq,))

    def _settle(self, kind: Kind, seq: int, statement: str, parameters: tuple[object, ...]) -> None:
        with self._lock:
            self._open.discard(seq)
        try:
            self._write(kind, statement, parameters)
        except LedgerUnavailableError:
            with self._lock:
                if not self._closed:
                    # Kept, and written by the next write of this ledger or
                    # at its close: an intent left pending is kept forever.
                    self._unwritten.append((statement, parameters))
            raise
