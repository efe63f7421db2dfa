"""Opening the deletion ledger for either command line, and attaching it to a store.

``psych-memory`` (``erase``, ``expire``,
``replay-deletions``, ``ledger prune``) and ``psych-memory-mcp``
name their ledger by ``--ledger`` or ``PSYCH_MEMORY_LEDGER`` and its key by
``--ledger-key-file`` or ``PSYCH_MEMORY_LEDGER_KEY``, and word every refusal
the same way. Nothing here imports click or anyio; the ledger's own
distribution is imported only when a ledger is named.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Final, cast
from urllib.parse import unquote, urlsplit

from psych_runtime.memory.port import InvalidInputError, MemoryStore

from ._commands import one_line
from ._exit import CommandError, ExitCode
from ._url import redact_url

__all__ = [
    "EMPTY_LEDGER_RULE",
    "LEDGER_KEY_VARIABLE",
    "LEDGER_VARIABLE",
    "ledger_for_command",
    "ledger_refusals",
    "opened_ledger",
]

LEDGER_VARIABLE: Final = "PSYCH_MEMORY_LEDGER"
"""The environment variable naming the deletion ledger when ``--ledger`` is not given."""

LEDGER_KEY_VARIABLE: Final = "PSYCH_MEMORY_LEDGER_KEY"
"""The environment variable holding the ledger's key when no key file is named."""

EMPTY_LEDGER_RULE: Final = (
    f"must name a ledger (sqlite:///path or postgresql://...?schema=NAME), not be empty"
    f" (from the option or ${LEDGER_VARIABLE}); for no ledger, give neither"
)
"""The refusal of a ledger named by an empty ``--ledger`` or ``PSYCH_MEMORY_LEDGER``."""


@contextmanager
def ledger_for_command(
    ledger_url: str, key_file: Path | None, *, store_url: str, create: bool = True
) -> Iterator[Callable[[MemoryStore], MemoryStore]]:
    """Open the ledger ``--ledger`` names; yield what attaches it to the store ``store_url`` opens.

    A SQLite ledger naming the store's own file is refused before anything
    is opened. The function yielded returns the store with the ledger
    attached (`psych_runtime.memory.ledger.with_ledger`). The ledger is
    closed on leaving.

    Args:
        ledger_url: The ledger's URL (``--ledger``).
        key_file: The key's file (``--ledger-key-file``); ``None`` reads
            ``PSYCH_MEMORY_LEDGER_KEY``.
        store_url: The store's URL, to refuse a ledger inside it.
        create: Whether a ledger that does not exist yet is created; a
            command that records nothing (a dry run) passes ``False``.

    Raises:
        CommandError: The ledger distribution is missing (usage), the key is
            missing or short (usage) or not the ledger's (refused), the URL
            is refused or names the store (usage), ``create`` is false and
            no ledger exists there (usage, nothing created), or the ledger
            cannot be opened or read (unavailable).
    """
    _refuse_ledger_in_store(store_url, ledger_url)
    with opened_ledger(ledger_url, key_file, create=create) as (opened, ledgers):

        def attach(store: MemoryStore) -> MemoryStore:
            try:
                return cast("MemoryStore", ledgers.with_ledger(store, opened))
            except InvalidInputError as exc:
                raise CommandError("--ledger", exc.rule, ExitCode.USAGE) from None

        yield attach


def _refuse_ledger_in_store(url: str, ledger_url: str) -> None:
    """Refuse, before either is opened, a SQLite ledger that is the store's own file.

    Opening the ledger first would write its tables into the store; the
    ledger's own check (`with_ledger`) covers PostgreSQL, where opening the
    ledger touches only its schema. The same file is found by its path
    (symbolic links resolved) and, when both exist, by the file itself: a
    hard link to the store is the store.

    Raises:
        CommandError: Both URLs name the same SQLite file (usage).
    """
    store_file, ledger_file = _sqlite_file(url), _sqlite_file(ledger_url)
    if store_file is None or ledger_file is None:
        return
    if store_file == ledger_file or _same_existing_file(store_file, ledger_file):
        raise CommandError("--ledger", "must live outside the store it records", ExitCode.USAGE)


def _same_existing_file(first: Path, second: Path) -> bool:
    try:
        return first.samefile(second)
    except OSError:
        return False  # either does not exist (yet), or cannot be looked at: the paths decide


def _sqlite_file(url: str) -> Path | None:
    parts = urlsplit(url)
    if parts.scheme.lower() != "sqlite" or not parts.path.startswith("/"):
        return None
    return Path(unquote(parts.path[1:])).resolve()


@contextmanager
def opened_ledger(
    ledger_url: str, key_file: Path | None, *, create: bool
) -> Iterator[tuple[Any, Any]]:
    """The deletion ledger ``--ledger`` names, open, and the ledger's module.

    ``create``: whether a ledger that does not exist yet is created. A
    command that only reads or prunes passes ``False``: a mistyped URL is
    then refused, and never answered from a new, empty ledger.

    Raises:
        CommandError: The ledger distribution is missing (usage), the key is
            missing or short (usage) or not the ledger's (refused), the URL
            is empty or refused (usage), ``create`` is false and no ledger exists
            there (usage, nothing created), or the ledger cannot be opened
            or read (unavailable).
    """
    if ledger_url == "":
        # An empty variable is a mistake, never a way to turn the ledger off.
        raise CommandError("--ledger", EMPTY_LEDGER_RULE, ExitCode.USAGE)
    try:
        from psych_runtime.memory import ledger as ledgers  # noqa: PLC0415
    except ImportError:
        raise CommandError(
            "--ledger",
            "needs psych-memory-ledger (pip install 'psych-memory-admin[ledger]')",
            ExitCode.USAGE,
        ) from None
    key_argument = "--ledger-key-file" if key_file is not None else LEDGER_KEY_VARIABLE
    try:
        key = ledgers.ledger_key(file=key_file)
    except InvalidInputError as exc:
        raise CommandError(key_argument, exc.rule, ExitCode.USAGE) from None
    try:
        opened = ledgers.open_ledger(ledger_url, key, create=create)
    except InvalidInputError as exc:
        raise CommandError("--ledger", exc.rule, ExitCode.USAGE) from None
    except ledgers.LedgerNotFoundError:
        raise CommandError(
            "--ledger",
            f"names no existing ledger ({redact_url(ledger_url)}): this command creates none;"
            " check the URL",
            ExitCode.USAGE,
        ) from None
    except ledgers.LedgerKeyMismatchError:
        raise CommandError(
            key_argument, "is not the key this ledger was created with", ExitCode.REFUSED
        ) from None
    except ledgers.LedgerError as exc:
        raise CommandError("--ledger", str(exc), ExitCode.UNAVAILABLE) from None
    with opened:
        try:
            yield opened, ledgers
        except ledgers.LedgerError as exc:
            raise CommandError("--ledger", str(exc), ExitCode.UNAVAILABLE) from None


@contextmanager
def ledger_refusals() -> Iterator[None]:
    """A deletion the ledger could not record first: named by ``--ledger``, nothing deleted.

    Raises:
        CommandError: The ledger refused the deletion (unavailable).
    """
    from psych_runtime.memory.ledger import LedgerUnavailableError  # noqa: PLC0415

    try:
        yield
    except LedgerUnavailableError as exc:
        raise CommandError(
            "--ledger", f"{one_line(exc.reason)}; nothing was deleted", ExitCode.UNAVAILABLE
        ) from None
