"""Opening a store from a ``sqlite:`` URL, as the ``psych_runtime.memory.stores`` entry point."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from typing import Final
from urllib.parse import parse_qsl, unquote, urlsplit

from ._memory import Durability, SqliteMemory

__all__ = ["open_url"]

_FORMS: Final = "sqlite:///relative/path or sqlite:////absolute/path"
_OPTIONS: Final = ("busy_timeout", "durability")


def open_url(url: str) -> AbstractAsyncContextManager[SqliteMemory]:
    """Open the store a ``sqlite:`` URL names; close it when the block exits.

    ``sqlite:///relative/path`` is taken from the working directory at the
    time of the call, ``sqlite:////absolute/path`` as it is. The path may be
    percent-encoded. Query options: ``busy_timeout`` (seconds) and
    ``durability`` (``full`` or ``normal``), as in `SqliteMemory`; for
    example ``sqlite:///memory.sqlite3?busy_timeout=2&durability=normal``.

    The whole URL is checked when this is called, before anything touches
    the disk. Opening then creates the file if it is missing and lays out or
    migrates its schema (see `SqliteMemory.open`).

    Raises:
        TypeError: ``url`` is not a `str`.
        ValueError: The URL breaks a rule: another scheme, a host, user or
            password part, no path, a path naming a directory, a fragment, a
            malformed query, an unknown or repeated option, or a bad option
            value. The message names ``url`` and the rule, never the URL.
            Nothing was created.
    """
    store = _store_from(url)
    return _opened(store)


@asynccontextmanager
async def _opened(store: SqliteMemory) -> AsyncIterator[SqliteMemory]:
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
            busy_timeout = float(options["busy_timeout"])
        except ValueError:
            busy_timeout = -1.0
        if not 0 <= busy_timeout < float("inf"):
            raise ValueError("url option busy_timeout must be a finite number of seconds >= 0")
    durability: Durability = "full"
    if "durability" in options:
        level = options["durability"]
        if level == "normal":
            durability = "normal"
        elif level != "full":
            raise ValueError("url option durability must be full or normal")
    return busy_timeout, durability
