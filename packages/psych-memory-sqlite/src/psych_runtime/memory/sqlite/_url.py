"""Opening a store from a ``sqlite:`` URL, as the ``psych_runtime.memory.stores`` entry point."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from typing import Final
from urllib.parse import parse_qsl, unquote, urlsplit

import anyio

from ._errors import DatabaseFileError
from ._file import BUSY_TIMEOUT_RULE, check_busy_timeout
from ._memory import Durability, SqliteMemory

__all__ = ["open_url"]

_FORMS: Final = "sqlite:///relative/path or sqlite:////absolute/path"
_OPTIONS: Final = ("busy_timeout", "durability")


def open_url(url: str, *, create: bool = True) -> AbstractAsyncContextManager[SqliteMemory]:
    """Open the store a ``sqlite:`` URL names; close it when the block exits.

    ``sqlite:///relative/path`` is taken from the working directory at the
    time of the call, ``sqlite:////absolute/path`` as it is. The path may be
    percent-encoded. Query options: ``busy_timeout`` (seconds) and
    ``durability`` (``full`` or ``normal``), as in `SqliteMemory`; for
    example ``sqlite:///memory.sqlite3?busy_timeout=2&durability=normal``.

    The whole URL is checked when this is called, before anything touches
    the disk. Opening then creates the file if it is missing and lays out or
    migrates its schema (see `SqliteMemory.open`). With ``create=False``, for
    tools that only read or delete, a missing file is refused instead of
    created: a mistyped path is then reported, not made into an empty store.

    Raises:
        TypeError: ``url`` is not a `str`, or ``create`` not a `bool`.
        ValueError: The URL breaks a rule: another scheme, a host, user or
            password part, no path, a path naming a directory, a fragment, a
            malformed query, an unknown or repeated option, or a bad option
            value. The message names ``url`` and the rule, never the URL.
            Nothing was created.
        DatabaseFileError: On entering, with ``create=False``: the URL names
            no file.
    """
    if not isinstance(create, bool):
        raise TypeError(f"create must be a bool, not {type(create).__qualname__}")
    store = _store_from(url)
    return _opened(store, create=create)


@asynccontextmanager
async def _opened(store: SqliteMemory, *, create: bool) -> AsyncIterator[SqliteMemory]:
    if not create and not await anyio.Path(store.path).exists():
        raise DatabaseFileError(
            f"open failed: {store.path} names a SQLite file that does not exist "
            "(create=False creates none)"
        )
    async with store:
        yield store


def _store_from(url: object) -> SqliteMemory:
    if not isinstance(url, str):
        raise TypeError(f"url must be a str, not {type(url).__qualname__}")
    try:
        parts = urlsplit(url)
    except ValueError:
        raise ValueError(f"url must be a URL of the form {_FORMS}") from None
    if parts.scheme != "sqlite":
        raise ValueError(f"url must use the scheme 'sqlite' ({_FORMS})")
    if "@" in parts.netloc or parts.password is not None:
        raise ValueError("url must not hold a user name or password: a SQLite file has none")
    if parts.netloc:
        raise ValueError(f"url must not name a host: SQLite files are local ({_FORMS})")
    if parts.fragment or url.endswith("#"):
        raise ValueError("url must not have a fragment ('#...')")
    if not parts.path.startswith("/"):
        raise ValueError(f"url must name a file: {_FORMS}")
    try:
        path = unquote(parts.path[1:], errors="strict")
    except UnicodeDecodeError:
        raise ValueError("url path must be percent-encoded UTF-8") from None
    if not path or path.endswith("/") or path in (".", ".."):
        raise ValueError(f"url must name a file, not a directory or nothing: {_FORMS}")
    if "\x00" in path:
        raise ValueError("url path must not contain a NUL character")
    busy_timeout, durability = _options(parts.query)
    try:
        return SqliteMemory(path, busy_timeout=busy_timeout, durability=durability)
    except ValueError as exc:
        # The path rules of SqliteMemory, worded for the URL.
        raise ValueError(f"url {exc}") from None


def _options(query: str) -> tuple[float, Durability]:
    if not query:
        return 5.0, "full"
    try:
        pairs = parse_qsl(query, keep_blank_values=True, strict_parsing=True, errors="strict")
    except (ValueError, UnicodeDecodeError):
        raise ValueError("url query must be name=value pairs joined by '&'") from None
    options: dict[str, str] = {}
    for name, value in pairs:
        if name not in _OPTIONS:
            raise ValueError(
                "url query has an unknown option; the options are " + ", ".join(_OPTIONS)
            )
        if name in options:
            raise ValueError(f"url query gives the option {name} more than once")
        options[name] = value
    busy_timeout = 5.0
    if "busy_timeout" in options:
        try:
            busy_timeout = check_busy_timeout(float(options["busy_timeout"]))
        except ValueError:
            raise ValueError(BUSY_TIMEOUT_RULE.format(name="url option busy_timeout")) from None
    durability: Durability = "full"
    if "durability" in options:
        level = options["durability"]
        if level == "normal":
            durability = "normal"
        elif level != "full":
            raise ValueError("url option durability must be full or normal")
    return busy_timeout, durability
