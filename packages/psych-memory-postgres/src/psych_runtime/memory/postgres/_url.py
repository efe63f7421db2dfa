"""Opening a store from a ``postgresql://`` URL.

The URL is libpq's own, with this adapter's options added to its query
string. They are taken out before libpq sees the rest, which passes through
unchanged (host lists, ``sslmode``, ``application_name``, ...).
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass
from functools import cache
from typing import Final
from urllib.parse import unquote, urlsplit

from psycopg.pq import Conninfo

from psych_runtime.memory.port import validate_seconds

from ._schema import DEFAULT_SCHEMA, validate_schema_name
from ._store import (
    DEFAULT_LOCK_TIMEOUT,
    DEFAULT_POOL_TIMEOUT,
    DEFAULT_PREPARE_THRESHOLD,
    DEFAULT_STATEMENT_TIMEOUT,
    PostgresMemory,
)

__all__ = ["SCHEMES", "UrlOptions", "open_url", "parse_url"]

SCHEMES: Final = ("postgresql", "postgres")
"""The URL schemes this adapter opens (libpq reads both)."""

_SETUP_MODES: Final = ("auto", "never")


@dataclass(frozen=True, slots=True)
class UrlOptions:
    """A URL taken apart: libpq's connection string and this adapter's options."""

    conninfo: str
    schema: str = DEFAULT_SCHEMA
    min_size: int = 1
    max_size: int = 10
    pool_timeout: float = DEFAULT_POOL_TIMEOUT
    statement_timeout: float | None = DEFAULT_STATEMENT_TIMEOUT
    lock_timeout: float | None = DEFAULT_LOCK_TIMEOUT
    setup: str = "auto"
    prepare_threshold: int | None = DEFAULT_PREPARE_THRESHOLD

    def __repr__(self) -> str:
        # The connection string may hold a password: never shown.
        return (
            f"UrlOptions(schema={self.schema!r}, min_size={self.min_size}, "
            f"max_size={self.max_size}, setup={self.setup!r}, "
            f"prepare_threshold={self.prepare_threshold!r})"
        )


def parse_url(url: object) -> UrlOptions:
    """Check a whole ``postgresql://`` URL and take it apart, touching nothing.

    Raises:
        TypeError: ``url`` is not a `str`.
        ValueError: The URL breaks a rule; the message names ``url`` and the
            rule or option, never the URL itself or its password.
    """
    if not isinstance(url, str):
        raise TypeError(f"url must be a str, not {type(url).__qualname__}")
    try:
        parts = urlsplit(url)
    except ValueError:
        raise ValueError("url is not a well-formed URL") from None
    if parts.scheme.lower() not in SCHEMES:
        raise ValueError("url must start with postgresql:// or postgres://")
    if parts.fragment:
        raise ValueError("url must not have a fragment ('#...')")
    options, query = _options(parts.query)
    # Rebuilt from the URL as written, not by urlunsplit, which drops the
    # "//" of an empty host ("postgresql:///db?host=h1,h2&port=5432,5433",
    # or libpq's default host) and turns the URL into one libpq refuses.
    conninfo = url.partition("?")[0] + (f"?{query}" if query else "")
    try:
        Conninfo.parse(conninfo.encode("utf-8"))
    except Exception:  # noqa: BLE001 - libpq's message may quote the password
        raise ValueError("url is not a connection URL libpq accepts") from None
    result = UrlOptions(conninfo, **options)  # type: ignore[arg-type]
    if result.min_size > result.max_size:
        raise ValueError("url option 'min_size' must not exceed 'max_size'")
    return result


def _options(query: str) -> tuple[dict[str, object], str]:
    # This adapter's options, read, and the query string of the items left
    # for libpq.
    ours: dict[str, str] = {}
    passed: list[str] = []
    known = _libpq_keywords()
    # Split by hand: libpq decodes percent escapes only (a "+" stays a
    # "+"), so the items libpq reads are passed on exactly as written.
    for item in query.split("&") if query else ():
        raw_name, equals, raw_value = item.partition("=")
        if not equals or not raw_name:
            raise ValueError("url has a malformed query string (each option needs name=value)")
        name = unquote(raw_name)
        if name in _READERS:
            if name in ours:
                raise ValueError(f"url gives the option {name!r} more than once")
            ours[name] = unquote(raw_value)
        elif name in known:
            passed.append(item)
        else:
            raise ValueError(f"url has an unknown option {_shown(name)}")
    return {name: _READERS[name](name, value) for name, value in ours.items()}, "&".join(passed)


@asynccontextmanager
async def open_url(url: str, *, create: bool = True) -> AsyncIterator[PostgresMemory]:
    """Open a store from a ``postgresql://`` (or ``postgres://``) URL; close it on exit.

    The URL is libpq's, plus these options in its query string (taken out
    before libpq sees it): ``schema`` (default ``psych_memory``),
    ``min_size`` (1), ``max_size`` (10), ``pool_timeout`` (seconds, 30),
    ``statement_timeout`` (seconds, 5), ``lock_timeout`` (seconds, 2; either
    bound ``none`` to leave the server's setting, such as the role's) and
    ``setup``: ``auto`` (the default) creates the tables if missing and
    upgrades them if older, and writes nothing when they are current;
    ``never`` only checks the version, for databases where only a DBA may
    change the schema; ``prepare_threshold``: a whole number (psycopg's
    default, 5) or ``none``, which a pooler in transaction mode needs
    (PgBouncer's, or a managed service's pooled endpoint). Examples:
    ``postgresql://app@db/app?sslmode=require&schema=memory&setup=never``,
    ``postgresql://app@pgbouncer:6432/app?prepare_threshold=none``.

    ``create=False`` works as ``setup=never`` whatever the URL says: for
    tools that only read or delete, which must never create a schema (a
    mistyped ``schema=`` is then reported, not created).

    The whole URL is checked before anything is opened. The store is the
    one `PostgresMemory.connect` opens (its own pool, closed on exit).

    Yields:
        An open store, its schema at this code's version.

    Raises:
        TypeError: ``url`` is not a `str`, or ``create`` not a `bool`.
        ValueError: The URL breaks a rule (message names the option, never
            the password).
        StoreUnavailableError: The server could not be reached in time.
        SchemaVersionError: The schema is newer than this code, or (with
            ``setup=never`` or ``create=False``) missing or older; its
            ``schema_exists`` is ``False`` when the PostgreSQL schema itself
            does not exist.
        ConnectionRefusedByServerError: The server refused the connection
            (the message says why, without the password).
        PostgresMemoryError: The server refused the setup.
    """
    options = parse_url(url)
    if not isinstance(create, bool):
        raise TypeError(f"create must be a bool, not {type(create).__qualname__}")
    async with PostgresMemory.connect(
        options.conninfo,
        schema=options.schema,
        min_size=options.min_size,
        max_size=options.max_size,
        pool_timeout=options.pool_timeout,
        statement_timeout=options.statement_timeout,
        lock_timeout=options.lock_timeout,
        prepare_threshold=options.prepare_threshold,
    ) as store:
        if options.setup == "auto" and create:
            await store.setup()
        else:
            await store.verify()
        yield store


@cache
def _libpq_keywords() -> frozenset[str]:
    return frozenset(option.keyword.decode("ascii") for option in Conninfo.get_defaults())


def _shown(name: str) -> str:
    # An option's name is not a secret, but it is the caller's text: shown
    # short, so a pasted value cannot spill into a log through it.
    return repr(name if len(name) <= 40 else name[:40] + "...")


def _size(minimum: int) -> Callable[[str, str], int]:
    def read(name: str, value: str) -> int:
        if not value.isascii() or not value.isdigit() or int(value) < minimum:
            raise ValueError(f"url option {name!r} must be a whole number >= {minimum}")
        return int(value)

    return read


def _seconds(name: str, value: str) -> float:
    try:
        return validate_seconds(float(value), name)
    except ValueError:
        raise ValueError(f"url option {name!r} must be a positive number of seconds") from None


def _bound(name: str, value: str) -> float | None:
    if value.lower() == "none":
        return None
    try:
        return validate_seconds(float(value), name)
    except ValueError:
        raise ValueError(
            f"url option {name!r} must be a positive number of seconds or 'none'"
        ) from None


def _schema(name: str, value: str) -> str:
    try:
        return validate_schema_name(value)
    except ValueError as exc:
        raise ValueError(f"url option {name!r}: {exc}") from None


def _setup(name: str, value: str) -> str:
    if value not in _SETUP_MODES:
        raise ValueError(f"url option {name!r} must be one of: {', '.join(_SETUP_MODES)}")
    return value


def _threshold(name: str, value: str) -> int | None:
    if value.lower() == "none":
        return None
    if not value.isascii() or not value.isdigit():
        raise ValueError(f"url option {name!r} must be a whole number >= 0 or 'none'")
    return int(value)


_READERS: Final[dict[str, Callable[[str, str], object]]] = {
    "schema": _schema,
    "min_size": _size(0),
    "max_size": _size(1),
    "pool_timeout": _seconds,
    "statement_timeout": _bound,
    "lock_timeout": _bound,
    "setup": _setup,
    "prepare_threshold": _threshold,
}
