"""One erasure of a key at a time, among every store and process on the file.

A large erase commits batch after batch, letting other writers in between;
two erasures of one key would then each delete part of it and each count
their part. Each erasure first takes an exclusive lock on a small lock
file beside the database, one of `BUCKETS` chosen by the key, and keeps it
until it has ended: a second erasure of the key waits for the first and
then finds nothing left to delete. The operating system releases the lock
when its holder dies, so a killed erase never leaves a key blocked.
"""

from __future__ import annotations

import errno
import hashlib
import os
import sys
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from pathlib import Path
from typing import Final

from psych_runtime.memory.port import MemoryKey

from ._errors import StoreUnavailableError

__all__ = ["BUCKETS", "erasing", "lock_path"]

BUCKETS: Final = 256
"""Lock files a database may have at once: keys that share one wait for each other."""


def lock_path(path: Path, key: MemoryKey) -> Path:
    """The lock file an erasure of ``key`` in the database at ``path`` takes."""
    # A byte of a hash names the bucket: too little to tell an end user by.
    name = f"{key.tenant}\0{key.end_user_id}".encode()
    bucket = hashlib.blake2b(name, digest_size=1).hexdigest()
    return path.with_name(f"{path.name}-erase-{bucket}")


@contextmanager
def erasing(path: Path, key: MemoryKey) -> Iterator[None]:
    """Hold the erasure lock of ``key`` in the database at ``path``; wait for it first.

    The lock file is removed on release, so none remains beside the
    database unless its holder was killed (the next erasure takes it over).

    Raises:
        StoreUnavailableError: The lock file cannot be created or locked.
    """
    lock = lock_path(path, key)
    fd = _locked(lock)
    try:
        yield
    finally:
        # Removed while still held: an erasure waiting on this file sees it
        # gone once it gets the lock, and takes a new one.
        with suppress(OSError):
            lock.unlink()
        os.close(fd)


def _locked(lock: Path) -> int:
    while True:
        try:
            fd = os.open(lock, os.O_RDWR | os.O_CREAT | getattr(os, "O_CLOEXEC", 0), 0o666)
        except OSError as exc:
            raise _unavailable(lock, exc) from exc
        try:
            _lock(fd)
            held = os.fstat(fd)
            try:
                current = lock.stat()
            except FileNotFoundError:
                current = None
        except OSError as exc:
            os.close(fd)
            raise _unavailable(lock, exc) from exc
        if current is not None and (current.st_dev, current.st_ino) == (
            held.st_dev,
            held.st_ino,
        ):
            return fd
        # The holder before removed the file: the lock is on a file no
        # other erasure can find.
        os.close(fd)


if sys.platform == "win32":  # pragma: no cover - exercised on Windows only
    import msvcrt

    def _lock(fd: int) -> None:
        while True:
            try:
                # Tries for about ten seconds, then raises: try again.
                msvcrt.locking(fd, msvcrt.LK_LOCK, 1)
            except OSError as exc:
                if exc.errno != errno.EDEADLK:
                    raise
            else:
                return

else:
    import fcntl

    def _lock(fd: int) -> None:
        # flock, not fcntl's record locks: held by this open file alone, so
        # two stores of one process exclude each other, and closing another
        # descriptor of the file never drops it.
        fcntl.flock(fd, fcntl.LOCK_EX)


def _unavailable(lock: Path, exc: OSError) -> StoreUnavailableError:
    code = errno.errorcode.get(exc.errno or 0, type(exc).__name__)
    return StoreUnavailableError(
        "erase",
        f"the erasure lock file {lock} cannot be created or locked ({code})",
        may_have_taken_effect=False,
    )
