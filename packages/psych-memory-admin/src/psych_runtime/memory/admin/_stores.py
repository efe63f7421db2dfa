"""Opening a store for a command, and turning its failures into the command's errors."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
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
from ._open import open_memory
from ._url import url_scheme

__all__ = [
    "Scrubs",
    "checked_key",
    "lister",
    "opened",
    "restorer",
    "same_fact",
]

_KEY_OPTIONS = {"tenant": "--tenant", "scope.tenant": "--tenant", "end_user_id": "--user"}


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
async def opened(url: str, argument: str, *, must_exist: bool) -> AsyncIterator[MemoryStore]:
    """Open the store ``url`` names; its refusals and failures name ``argument``.

    With ``must_exist``, a ``sqlite:`` URL naming no file is refused instead
    of creating an empty store: reading a store that is not there is a typo.

    Raises:
        CommandError: The URL is refused (usage), the backend is broken or
            the store fails (unavailable).
    """
    try:
        if must_exist:
            _refuse_missing_file(url, argument)
        async with open_memory(url) as store:
            try:
                yield store
            except MemoryStoreError as exc:
                raise CommandError(argument, _one_line(str(exc)), ExitCode.UNAVAILABLE) from exc
    except StoreUrlError as exc:
        raise CommandError(argument, _one_line(exc.rule), ExitCode.USAGE) from None
    except StoreBackendError as exc:
        raise CommandError(argument, _one_line(str(exc)), ExitCode.UNAVAILABLE) from exc
    except MemoryStoreError as exc:
        raise CommandError(argument, _one_line(str(exc)), ExitCode.UNAVAILABLE) from exc


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


def _refuse_missing_file(url: str, argument: str) -> None:
    if url_scheme(url) != "sqlite":
        return
    try:
        path = unquote(urlsplit(url).path[1:])
    except ValueError:
        return  # the backend words the refusal
    if path and not Path(path).exists():
        raise CommandError(argument, "names a SQLite file that does not exist", ExitCode.USAGE)


def _one_line(text: str) -> str:
    return " ".join(text.split())
