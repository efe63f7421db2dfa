"""Opening the stores a command names, and naming what fails by the command's arguments."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable, Iterator, Mapping
from contextlib import asynccontextmanager, contextmanager
from functools import partial
from pathlib import Path
from urllib.parse import unquote, urlsplit

from psych_runtime.memory.port import (
    InvalidInputError,
    MemoryKey,
    MemoryStore,
    MemoryStoreError,
    validate_scope,
)

from ._errors import (
    FactsForgottenError,
    MissingCapabilityError,
    OperationRefusedError,
    StoreBackendError,
    StoreUrlError,
)
from ._exit import CommandError, ExitCode
from ._open import opening
from ._url import url_scheme

__all__ = ["checked_key", "checked_tenant", "one_line", "opened", "refusals_naming"]

_KEY_OPTIONS = {"tenant": "--tenant", "scope.tenant": "--tenant", "end_user_id": "--user"}


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
                    raise CommandError(argument, one_line(str(exc)), ExitCode.UNAVAILABLE) from exc
                others = exc
    except StoreUrlError as exc:
        raise CommandError(argument, one_line(exc.rule), ExitCode.USAGE) from None
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
        raise CommandError(argument, one_line(str(exc)), ExitCode.UNAVAILABLE) from exc
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
    try:
        return validate_scope(tenant)
    except InvalidInputError as exc:
        raise CommandError("--tenant", exc.rule, ExitCode.USAGE) from None


@contextmanager
def refusals_naming(
    arguments: Mapping[str, str],
    rule: Callable[[OperationRefusedError], str | None] = lambda _: None,
) -> Iterator[None]:
    """Turn an operation's refusal into the command's, naming the argument of the store at fault.

    ``arguments`` maps each store's role (``"store"``, ``"source"``,
    ``"target"``) to the argument that names it; ``rule`` words the
    command's own refusals, ``None`` leaving those every command shares.

    Raises:
        CommandError: The operation was refused (`ExitCode.REFUSED`).
    """
    try:
        yield
    except OperationRefusedError as exc:
        words = rule(exc) or _shared_rule(exc)
        raise CommandError(arguments[exc.role], words, ExitCode.REFUSED) from None


def _shared_rule(error: OperationRefusedError) -> str:
    if isinstance(error, MissingCapabilityError):
        return (
            f"this store cannot {error.ability} (its backend does not provide {error.capability})"
        )
    if isinstance(error, FactsForgottenError) and error.retried:
        return (
            "facts of this end user were forgotten or erased while they were being "
            f"{error.doing} (is the store being written to?); run the command again"
        )
    return one_line(str(error))


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
