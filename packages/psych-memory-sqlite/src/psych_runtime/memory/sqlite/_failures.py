"""Turning a ``sqlite3`` exception into the store failure the caller is told about."""

from __future__ import annotations

import sqlite3
from pathlib import Path
from typing import Final

from ._errors import DatabaseFileError, SqliteMemoryError, StoreUnavailableError

__all__ = ["is_busy", "store_failure"]

# Primary result codes (the low byte of an extended code).
_BUSY: Final = 5
_LOCKED: Final = 6
_CORRUPT: Final = 11
_NOTADB: Final = 26


def is_busy(error: sqlite3.Error) -> bool:
    """Whether ``error`` means another connection held the file past the busy timeout."""
    return _primary(error) in (_BUSY, _LOCKED)


def _primary(error: sqlite3.Error) -> int | None:
    code = getattr(error, "sqlite_errorcode", None)
    return None if code is None else int(code) & 0xFF


def store_failure(
    operation: str,
    path: Path,
    busy_timeout: float,
    error: sqlite3.Error,
    *,
    may_have_taken_effect: bool,
) -> SqliteMemoryError:
    """Return the error to raise, ``from error``, for a failed ``operation``.

    SQLite's message is never repeated: only its result-code name, which
    holds no value, is.
    """
    name = getattr(error, "sqlite_errorname", None) or type(error).__name__
    if is_busy(error):
        return StoreUnavailableError(
            operation,
            f"another connection kept {path} locked for longer than the busy timeout "
            f"of {busy_timeout:g} s",
            may_have_taken_effect=may_have_taken_effect,
        )
    if _primary(error) in (_CORRUPT, _NOTADB):
        return DatabaseFileError(
            f"{operation} failed: {path} is not a SQLite database, or is corrupt ({name})"
        )
    return StoreUnavailableError(
        operation,
        f"SQLite could not use {path} ({name})",
        may_have_taken_effect=may_have_taken_effect,
    )
