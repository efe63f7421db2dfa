"""Opening a store for a command, and turning its failures into the command's errors."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from functools import partial
from pathlib import Path
from typing import Protocol, runtime_checkable
from urllib.parse import unquote, urlsplit

from psych_runtime.memory.port import (
    InvalidInputError,
    ListsEndUsers,
    Memory,
    MemoryKey,
    MemoryStore,
    MemoryStoreError,
    RestoresFacts,
)

from ._errors import StoreBackendError, StoreUrlError
from ._exit import CommandError, ExitCode
from ._open import opening
from ._url import url_scheme

__all__ = [
    "ReportsDurability",
    "Scrubs",
    "checked_key",
    "lister",
    "opened",
    "restorer",
    "same_fact",
]

_KEY_OPTIONS = {"tenant": "--tenant", "scope.tenant": "--tenant", "end_user_id": "--user"}


@runtime_checkable
class ReportsDurability(Protocol):
    """A store that says, read from its server, where an acknowledged deletion is durable.

    PostgreSQL's answer is ``"synchronous_standbys"``, ``"primary_only"`` or
    ``"no_replication"``. Checked by shape, so the command never imports an
    adapter.
    """

    async def deletion_durability(self) -> str:
        """Where a deletion acknowledged now is durable."""
        ...


@runtime_checkable
class Scrubs(Protocol):
    """A store that wipes deleted bytes after the deletion (SQLite's write-ahead log).

    Checked by shape, so the command never imports an adapter.
    """

    @property
    def scrub_pending(self) -> bool:
        """Whether bytes of a deleted fact may remain."""
        ...

    async def scrub(self) -> bool:
        """Wipe them now; ``True`` when none remain."""
        ...


@asynccontextmanager
async def opened(
    url: str, argument: str, *, must_exist: bool, own_failures_only: bool = False
) -> AsyncIterator[MemoryStore]:
    """Open the store ``url`` names; its refusals and failures name ``argument``.

    With ``must_exist``, a ``sqlite:`` URL naming no file is refused instead
    of creating an empty store, and a backend whose opener takes ``create``
    (PostgreSQL) creates no schema or table: reading a store that is not
    there is a typo.
    A ``sqlite:`` URL naming a folder, or a file in a folder that does not
    exist, is refused too, once the backend has accepted the URL's form.
    With ``own_failures_only`` (the inner of two stores open at once), a
    store failure raised by another store passes through unchanged, to be
    named by that store's own ``opened``.

    Raises:
        CommandError: The URL is refused (usage), the backend is broken or
            the store fails (unavailable).
    """
    check = partial(_refuse_bad_file, url, argument, must_exist=must_exist)
    entered = False
    others: MemoryStoreError | None = None
    try:
        async with opening(url, check, create=not must_exist) as store:
            entered = True
            try:
                yield store
            except MemoryStoreError as exc:
                if not own_failures_only or _raised_by(exc, store):
                    raise CommandError(argument, _one_line(str(exc)), ExitCode.UNAVAILABLE) from exc
                others = exc
    except StoreUrlError as exc:
        raise CommandError(argument, _one_line(exc.rule), ExitCode.USAGE) from None
    except OSError as exc:
        if entered:
            raise
        # The file system refused what the backend needed to open the store
        # (a read-only file or folder, say): it opened nothing.
        raise CommandError(
            argument, f"cannot be opened ({exc.strerror or type(exc).__name__})", ExitCode.USAGE
        ) from None
    except StoreBackendError as exc:
        raise CommandError(argument, _one_line(str(exc)), ExitCode.UNAVAILABLE) from exc
    except MemoryStoreError as exc:
        raise CommandError(argument, _one_line(str(exc)), ExitCode.UNAVAILABLE) from exc
    if others is not None:
        raise others


def checked_key(tenant: str, end_user_id: str) -> MemoryKey:
    """The key the options name, or a usage error naming the option at fault."""
    try:
        return MemoryKey(tenant, end_user_id)
    except InvalidInputError as exc:
        option = _KEY_OPTIONS.get(exc.argument, exc.argument)
        raise CommandError(option, exc.rule, ExitCode.USAGE) from None


def checked_tenant(tenant: str) -> str:
    """The tenant the option names, or a usage error naming ``--tenant``."""
    # Any valid end-user id serves to check the tenant by the port's one rule.
    return checked_key(tenant, "-").tenant


def lister(store: MemoryStore, argument: str) -> ListsEndUsers:
    """``store`` as a store that lists its keys, or a refusal naming ``argument``."""
    if not isinstance(store, ListsEndUsers):
        raise CommandError(
            argument,
            "this store cannot list its users (its backend does not provide ListsEndUsers)",
            ExitCode.REFUSED,
        )
    return store


def restorer(store: MemoryStore, argument: str) -> RestoresFacts:
    """``store`` as a store that writes facts as they were, or a refusal naming ``argument``."""
    if not isinstance(store, RestoresFacts):
        raise CommandError(
            argument,
            "this store cannot restore facts as they were (its backend does not provide "
            "RestoresFacts)",
            ExitCode.REFUSED,
        )
    return store


def same_fact(one: Memory, other: Memory) -> bool:
    """Whether two facts are the same fact: id, key, content and time."""
    return (one.id, one.key, one.content, one.created_at) == (
        other.id,
        other.key,
        other.content,
        other.created_at,
    )


def _refuse_bad_file(url: str, argument: str, *, must_exist: bool) -> None:
    # Called once the backend accepted the URL: its path is a file's.
    if url_scheme(url) != "sqlite":
        return
    path = Path(unquote(urlsplit(url).path[1:]))
    if path.is_dir():
        raise CommandError(argument, "names a folder, not a SQLite file", ExitCode.USAGE)
    if must_exist and not path.exists():
        raise CommandError(argument, "names a SQLite file that does not exist", ExitCode.USAGE)
    if not path.parent.is_dir():
        raise CommandError(
            argument, "names a SQLite file in a folder that does not exist", ExitCode.USAGE
        )


def _raised_by(error: BaseException, store: MemoryStore) -> bool:
    # Whether one of ``store``'s methods is among the calls ``error`` left.
    trace = error.__traceback__
    while trace is not None:
        if trace.tb_frame.f_locals.get("self") is store:
            return True
        trace = trace.tb_next
    return False


def _one_line(text: str) -> str:
    return " ".join(text.split())
