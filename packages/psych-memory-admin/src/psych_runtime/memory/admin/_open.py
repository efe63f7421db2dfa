"""Opening a store by URL, whatever backend registered the URL's scheme."""

from __future__ import annotations

import inspect
import logging
from collections.abc import AsyncIterator, Callable, Mapping
from contextlib import AbstractAsyncContextManager, AsyncExitStack, asynccontextmanager
from importlib.metadata import EntryPoint, entry_points
from types import MappingProxyType
from typing import Final

from psych_runtime.memory.port import MemoryStore

from ._errors import StoreBackendError, StoreUrlError, UnknownSchemeError
from ._url import REDACTED, redact_url, secrets_in, url_scheme

__all__ = ["BACKEND_DISTRIBUTIONS", "ENTRY_POINT_GROUP", "open_memory", "store_schemes"]

ENTRY_POINT_GROUP: Final = "psych_runtime.memory.stores"
"""The entry-point group in which a backend registers its URL scheme(s).

Each entry point is named after a scheme, in lower case, and refers to the
backend's ``open_url(url: str) -> AbstractAsyncContextManager[MemoryStore]``.
The opener may also take a keyword-only ``create: bool`` (default ``True``):
the operator's commands that only read or delete pass ``create=False``, and
the backend then creates nothing (no schema, no table) where the URL names
none.
"""

BACKEND_DISTRIBUTIONS: Final[Mapping[str, str]] = MappingProxyType(
    {
        "memory": "psych-memory-inproc",
        "sqlite": "psych-memory-sqlite",
        "postgresql": "psych-memory-postgres",
        "postgres": "psych-memory-postgres",
    }
)
"""The distribution of this project that registers each of its schemes: what to install.

The one table both command lines name a missing backend's distribution
from; a third-party scheme is not in it.
"""

_log = logging.getLogger("psych_runtime.memory.admin")

# Called with the URL, and ``create=False`` when the opener takes it.
Opener = Callable[..., AbstractAsyncContextManager[MemoryStore]]


def store_schemes() -> tuple[str, ...]:
    """Return the URL schemes the installed backends register, sorted.

    Read from the installed distributions' metadata on each call, so a
    backend installed while the program runs is seen.
    """
    return tuple(sorted(_registered()))


@asynccontextmanager
async def open_memory(url: str) -> AsyncIterator[MemoryStore]:
    """Open the store a URL names, yield it ready for use, and close it on exit.

    The URL's scheme picks the backend: ``memory:`` (in-process),
    ``sqlite:///relative/path`` or ``sqlite:////absolute/path``,
    ``postgresql://...`` or ``postgres://...``, and any scheme a third-party
    backend registers in the entry-point group `ENTRY_POINT_GROUP`. Schemes
    ignore case. Each backend's page says which options its URL takes and
    whether opening creates or upgrades a schema.

    The backend validates the whole URL before it touches anything: a URL it
    refuses creates no file and no table. No error and no log line holds
    the URL's password; use `redact_url` to show a URL.

    Raises:
        TypeError: ``url`` is not a `str`.
        StoreUrlError: The URL has no scheme, or its backend refuses it (the
            backend's reason is in the message, with any password hidden).
        UnknownSchemeError: No installed backend registers the scheme; the
            message lists the schemes that are installed.
        StoreBackendError: The backend registered for the scheme cannot be
            loaded, is registered twice, or does not yield a `MemoryStore`.
        MemoryStoreError: The backend could not open its store (for example
            `StoreUnavailableError` or `SchemaVersionError`).
    """
    async with opening(url, None) as store:
        yield store


@asynccontextmanager
async def opening(
    url: str, check: Callable[[], None] | None, *, create: bool = True
) -> AsyncIterator[MemoryStore]:
    """`open_memory`, calling ``check()`` once the backend accepted the URL, before it opens.

    What the command needs to refuse, say, a SQLite file that does not
    exist without reporting a malformed URL as a missing file. With
    ``create=False`` (a command that only reads or deletes), an opener that
    takes the keyword ``create`` is asked to create nothing, such as a
    PostgreSQL schema named by a mistyped URL.
    """
    scheme = url_scheme(url)
    opener = _opener(scheme)
    async with AsyncExitStack() as stack:
        refusal: str | None = None
        try:
            if create or not _takes_create(opener):
                context = opener(url)
            else:
                context = opener(url, create=False)
            if not hasattr(type(context), "__aenter__"):
                raise StoreBackendError(
                    scheme,
                    f"its opener returned a {type(context).__qualname__}, "
                    "not an async context manager",
                )
            if check is not None:
                check()
            store = await stack.enter_async_context(context)
        except ValueError as exc:
            refusal = _scrubbed(str(exc), url)
        if refusal is not None:
            # Raised outside the handler, so the backend's error (which might
            # quote the URL) is not kept as the context of this one.
            raise StoreUrlError(f"is refused by the {scheme!r} backend: {refusal}", scheme)
        if not isinstance(store, MemoryStore):
            raise StoreBackendError(
                scheme, f"its opener yielded a {type(store).__qualname__}, not a MemoryStore"
            )
        _log.debug("opened the store %s", redact_url(url))
        yield _observed(store)


# Installed observers, such as psych-memory-otel's, may wrap each store
# opened; one that is switched off hands the store back unchanged.
_OBSERVERS: Final = "psych_runtime.memory.observers"


def _observed(store: MemoryStore) -> MemoryStore:
    for entry_point in entry_points(group=_OBSERVERS):
        store = entry_point.load()(store)
    return store


def _registered() -> dict[str, list[EntryPoint]]:
    found: dict[str, list[EntryPoint]] = {}
    for entry_point in entry_points(group=ENTRY_POINT_GROUP):
        found.setdefault(entry_point.name.lower(), []).append(entry_point)
    return found


def _opener(scheme: str) -> Opener:
    registered = _registered()
    candidates = registered.get(scheme)
    if not candidates:
        raise UnknownSchemeError(scheme, tuple(sorted(registered)))
    if len(candidates) > 1:
        owners = sorted(_owner(entry_point) for entry_point in candidates)
        raise StoreBackendError(
            scheme,
            f"it is registered by more than one distribution ({', '.join(owners)}); "
            "uninstall all but one",
        )
    (entry_point,) = candidates
    try:
        opener = entry_point.load()
    except Exception as exc:
        raise StoreBackendError(
            scheme,
            f"its opener {entry_point.value!r} from {_owner(entry_point)} cannot be loaded "
            f"({type(exc).__qualname__})",
        ) from exc
    if not callable(opener):
        raise StoreBackendError(
            scheme, f"its opener {entry_point.value!r} from {_owner(entry_point)} is not callable"
        )
    loaded: Opener = opener
    return loaded


def _takes_create(opener: Opener) -> bool:
    # The keyword is optional for a backend: a third-party opener without it
    # is called as before.
    try:
        parameters = inspect.signature(opener).parameters
    except (TypeError, ValueError):
        return False
    parameter = parameters.get("create")
    return parameter is not None and parameter.kind is inspect.Parameter.KEYWORD_ONLY


def _owner(entry_point: EntryPoint) -> str:
    distribution = entry_point.dist
    return "an unknown distribution" if distribution is None else distribution.name


def _scrubbed(message: str, url: str) -> str:
    # Backends must never echo a password; this keeps one that does honest.
    for secret in secrets_in(url):
        message = message.replace(secret, REDACTED)
    return message
