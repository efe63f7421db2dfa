"""The database file: checking its path before opening, and knowing it is still there."""

from __future__ import annotations

import errno
import os
from pathlib import Path
from typing import Final, NamedTuple

from psych_runtime.memory.port import validate_seconds

__all__ = [
    "BUSY_TIMEOUT_RULE",
    "FileIdentity",
    "check_busy_timeout",
    "check_location",
    "check_path",
    "identify",
]

BUSY_TIMEOUT_RULE: Final = "{name} must be a finite number of seconds >= 0"
"""What a busy timeout may be, for the argument and for the URL's option."""

_NOT_UTF8: Final = "path must be valid UTF-8 (its name holds bytes that are not), as SQLite needs"


class FileIdentity(NamedTuple):
    """What tells one file from another at the same path: device and inode."""

    device: int
    inode: int


def identify(path: Path | str) -> FileIdentity | None:
    """Return the identity of the file at ``path``, or ``None`` if there is none.

    Raises:
        OSError: The path cannot be looked at (for example a permission was
            taken away from its directory).
    """
    try:
        # ``os.stat`` of a string: checked before every call, it should be cheap.
        status = os.stat(path)  # noqa: PTH116 - a str: cheaper than a Path, checked every call
    except (FileNotFoundError, NotADirectoryError):
        return None
    return FileIdentity(status.st_dev, status.st_ino)


def check_path(path: object) -> Path:
    """Check the ``path`` argument of `SqliteMemory` and return it made absolute.

    Raises:
        TypeError: ``path`` is not a `str` or an `os.PathLike` of `str`.
        ValueError: ``path`` is empty, holds a NUL character, or its name
            (including the working directory, for a relative path) is not
            valid UTF-8.
    """
    if isinstance(path, os.PathLike):
        path = os.fspath(path)
    if not isinstance(path, str):
        raise TypeError(
            f"path must be a str or an os.PathLike of str, not {type(path).__qualname__}"
        )
    if not path:
        raise ValueError("path must not be empty")
    if "\x00" in path:
        raise ValueError("path must not contain a NUL character")
    absolute = Path(path).absolute()
    try:
        os.fspath(absolute).encode("utf-8")
    except UnicodeEncodeError:
        # File names the system decoded with surrogate escapes: SQLite takes
        # its file name as UTF-8 and would otherwise fail with an encoding error.
        raise ValueError(_NOT_UTF8) from None
    return absolute


def check_busy_timeout(busy_timeout: object) -> float:
    """Check the ``busy_timeout`` argument and return it as a `float`.

    The port's seconds (see `validate_seconds`), or zero: SQLite then gives
    up at once when another connection holds the file.

    Raises:
        TypeError: It is not a number (a `bool` included).
        ValueError: It is negative or not finite.
    """
    if isinstance(busy_timeout, int | float) and busy_timeout == 0 and busy_timeout is not False:
        return 0.0
    try:
        return validate_seconds(busy_timeout, "busy_timeout")
    except ValueError:
        raise ValueError(BUSY_TIMEOUT_RULE.format(name="busy_timeout")) from None


def check_location(path: Path) -> None:
    """Check that ``path`` can be a database file, before SQLite tries.

    Raises:
        FileNotFoundError: The directory of ``path`` does not exist.
        NotADirectoryError: A parent of ``path`` is not a directory.
        IsADirectoryError: ``path`` is a directory.
        PermissionError: The file or its directory cannot be read and written.
    """
    # SQLite's own message for all of these is "unable to open database file";
    # saying which rule broke is worth a few system calls at open.
    parent = path.parent
    if not parent.exists():
        raise FileNotFoundError(
            errno.ENOENT, "the directory of path does not exist", os.fspath(parent)
        )
    if not parent.is_dir():
        raise NotADirectoryError(
            errno.ENOTDIR, "the parent of path is not a directory", os.fspath(parent)
        )
    if path.is_dir():
        raise IsADirectoryError(
            errno.EISDIR, "path is a directory, not a database file", os.fspath(path)
        )
    if path.exists() and not os.access(path, os.R_OK | os.W_OK):
        raise PermissionError(
            errno.EACCES, "the database file must be readable and writable", os.fspath(path)
        )
    # The write-ahead log and its index are files beside the database.
    if not os.access(parent, os.W_OK | os.X_OK):
        raise PermissionError(
            errno.EACCES,
            "the directory of path must be writable (SQLite keeps its log there)",
            os.fspath(parent),
        )
