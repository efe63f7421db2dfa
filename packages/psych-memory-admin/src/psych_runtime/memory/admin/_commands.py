"""What both command lines share: the options naming a key, and opening a store.

``psych-memory`` and ``psych-memory-mcp`` open their stores with
`open_for_command` and name the port's key arguments by `KEY_OPTIONS`, so
that one store and one bad option give one exit code (`ExitCode`) and one
wording from either. Neither needs the command's extra: nothing here
imports click or anyio.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Mapping
from contextlib import asynccontextmanager
from functools import partial
from pathlib import Path
from types import MappingProxyType
from typing import Final
from urllib.parse import unquote, urlsplit

from psych_runtime.memory.port import MemoryStore, MemoryStoreError, SchemaVersionError

from ._errors import StoreBackendError, StoreUrlError, UnknownSchemeError
from ._exit import CommandError, ExitCode
from ._open import BACKEND_DISTRIBUTIONS, opening
from ._url import url_scheme

__all__ = ["KEY_OPTIONS", "one_line", "open_for_command"]

KEY_OPTIONS: Final[Mapping[str, str]] = MappingProxyType(
    {"tenant": "--tenant", "scope": "--tenant", "scope.tenant": "--tenant", "end_user_id": "--user"}
)
"""The option of both commands naming each key argument of the port (its errors' ``argument``)."""


@asynccontextmanager
async def open_for_command(
    url: str, argument: str, *, must_exist: bool, own_failures_only: bool = False
) -> AsyncIterator[MemoryStore]:
    """Open the store ``url`` names for a command; its refusals and failures name ``argument``.

    What both command lines open their stores with (``psych-memory``'s
    ``URL``, ``psych-memory-mcp``'s ``--store``), so that one store gives one
    exit code from either: a URL refused, a ``sqlite:`` file that cannot be,
    or a file the system refuses is `ExitCode.USAGE`; a backend that cannot
    be loaded and a store that fails or cannot be reached (an unreachable
    server, a locked file, a file that is not a database, a schema version)
    is `ExitCode.UNAVAILABLE`, also when the store fails later, inside the
    block. Every message is one line, never holds a password, and the
    failures of other kinds pass through unchanged (`ExitCode.FAILED`).
    Messages speak the command line's words, not the library's: a scheme
    no installed backend registers names the distribution of this project
    that does, and a schema a command cannot use says which command or URL
    option creates or upgrades it (where the library says ``setup()``).

    With ``must_exist``, a ``sqlite:`` URL naming no file is refused instead
    of creating an empty store, and a backend whose opener takes ``create``
    (PostgreSQL) creates no schema or table: reading a store that is not
    there is a typo.
    A ``sqlite:`` URL naming a folder, or a file in a folder that does not
    exist, is refused too, once the backend has accepted the URL's form.
    With ``own_failures_only`` (the inner of two stores open at once), a
    store failure raised by another store passes through unchanged, to be
    named by that store's own `open_for_command`.

    Args:
        url: The store's URL, as `open_memory` takes it.
        argument: The argument or option naming it, as the operator typed it.
        must_exist: Refuse what would create a store (see above).
        own_failures_only: Name only this store's failures (the inner of
            two stores open at once).

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
                    raise CommandError(
                        argument, _store_words(exc, must_exist=must_exist), ExitCode.UNAVAILABLE
                    ) from exc
                others = exc
    except StoreUrlError as exc:
        raise CommandError(argument, _url_words(exc), ExitCode.USAGE) from None
    except OSError as exc:
        if entered:
            raise
        # The file system refused what the backend needed to open the store
        # (a read-only file or folder, say): it opened nothing.
        raise CommandError(
            argument, f"cannot be opened ({exc.strerror or type(exc).__name__})", ExitCode.USAGE
        ) from None
    except StoreBackendError as exc:
        raise CommandError(argument, one_line(str(exc)), ExitCode.UNAVAILABLE) from exc
    except MemoryStoreError as exc:
        raise CommandError(
            argument, _store_words(exc, must_exist=must_exist), ExitCode.UNAVAILABLE
        ) from exc
    if others is not None:
        raise others


def _url_words(error: StoreUrlError) -> str:
    # A scheme of this project's whose adapter is not installed: the
    # distribution to install, not only the schemes that are.
    rule = one_line(error.rule)
    if isinstance(error, UnknownSchemeError) and error.scheme in BACKEND_DISTRIBUTIONS:
        return f"{rule}: install {BACKEND_DISTRIBUTIONS[error.scheme]}, which registers it"
    return rule


# What creates or upgrades a store's schema, in the command line's words.
_WRITERS: Final = (
    "a command that writes to the store creates and upgrades it (psych-memory import or"
    " migrate into it, psych-memory-mcp --store), unless its URL says setup=never"
)
_NEVER: Final = (
    "nothing is created or upgraded with setup=never in the URL: remove it, or have the"
    " schema's owner open the store once without it"
)


def _store_words(error: MemoryStoreError, *, must_exist: bool) -> str:
    # The library's message, unless it tells a Python caller to call
    # setup(): a command line has no such call, only commands and options.
    if not isinstance(error, SchemaVersionError) or (
        error.found is not None and error.found > error.expected
    ):
        return one_line(str(error))
    if error.found is None:
        state = (
            "does not exist (check the URL's schema= option)"
            if getattr(error, "schema_exists", True) is False
            else "holds no memory tables yet"
        )
    else:
        state = f"is at schema version {error.found}, older than {error.expected}"
    advice = f"this command creates and upgrades nothing; {_WRITERS}" if must_exist else _NEVER
    return one_line(f"{error.where} {state}: {advice}")


def _refuse_bad_file(url: str, argument: str, *, must_exist: bool) -> None:
    # Called once the backend accepted the URL: its path is a file's. The
    # command checks the file itself, before SQLite's own refusal of a
    # missing file with create=False: that one is a store failure (exit 3)
    # whose message holds the path, where the operator's typo is bad usage
    # (exit 2) in a line that names no path.
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


def one_line(text: str) -> str:
    """``text`` with its runs of white space (line breaks included) as single spaces."""
    return " ".join(text.split())
