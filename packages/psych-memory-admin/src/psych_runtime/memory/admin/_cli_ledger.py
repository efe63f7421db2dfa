"""``psych-memory ledger reapply``: a ledger's deletions made again on a restored store."""

from __future__ import annotations

import json
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Final, cast
from urllib.parse import unquote, urlsplit

import click

from psych_runtime.memory.port import InvalidInputError, ListsEndUsers, MemoryStore

from ._commands import one_line, open_for_command
from ._exit import CommandError, ExitCode
from ._format import utc_text
from ._url import redact_url

__all__ = [
    "LEDGER_KEY_VARIABLE",
    "LEDGER_VARIABLE",
    "checked_since",
    "ledger_for_command",
    "ledger_refusals",
    "ledgered",
    "reapply_from_ledger",
    "refuse_ledger_in_store",
]

LEDGER_VARIABLE: Final = "PSYCH_MEMORY_LEDGER"
LEDGER_KEY_VARIABLE: Final = "PSYCH_MEMORY_LEDGER_KEY"
RECEIPT_NAME: Final = "psych-memory-reapply-receipt"
RECEIPT_VERSION: Final = 1

_INSTANT_RULE: Final = (
    "must be an instant in ISO 8601 with its offset, such as 2026-01-31T12:00:00Z"
)


def checked_since(since: str | None) -> datetime | None:
    """The instant ``--since`` names, or a usage error naming it."""
    if since is None:
        return None
    try:
        found = datetime.fromisoformat(since.replace("Z", "+00:00").replace("z", "+00:00"))
    except ValueError:
        raise CommandError("--since", _INSTANT_RULE, ExitCode.USAGE) from None
    if found.tzinfo is None or found.utcoffset() is None:
        raise CommandError("--since", _INSTANT_RULE, ExitCode.USAGE)
    return found.astimezone(UTC)


def refuse_ledger_in_store(url: str, ledger_url: str) -> None:
    """Refuse, before either is opened, a SQLite ledger that is the store's own file.

    Opening the ledger first would write its tables into the store; the
    ledger's own check (`with_ledger`) covers PostgreSQL, where opening the
    ledger touches only its schema.

    Raises:
        CommandError: Both URLs name the same SQLite file (usage).
    """
    store_file, ledger_file = _sqlite_file(url), _sqlite_file(ledger_url)
    if store_file is not None and store_file == ledger_file:
        raise CommandError("--ledger", "must live outside the store it records", ExitCode.USAGE)


def _sqlite_file(url: str) -> Path | None:
    parts = urlsplit(url)
    if parts.scheme.lower() != "sqlite" or not parts.path.startswith("/"):
        return None
    return Path(unquote(parts.path[1:])).resolve()


@contextmanager
def ledger_for_command(ledger_url: str, key_file: Path | None) -> Iterator[tuple[Any, Any]]:
    """The deletion ledger ``--ledger`` names, open, and its module; refusals name the options.

    Raises:
        CommandError: The ledger distribution is missing (usage), the key is
            missing or short (usage) or not the ledger's (refused), the URL
            is refused (usage), or the ledger cannot be opened or read
            (unavailable).
    """
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
        opened = ledgers.open_ledger(ledger_url, key)
    except InvalidInputError as exc:
        raise CommandError("--ledger", exc.rule, ExitCode.USAGE) from None
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


def ledgered(store: MemoryStore, opened: Any, ledgers: Any) -> MemoryStore:
    """``store`` with the open ledger attached, or a usage error naming ``--ledger``.

    Raises:
        CommandError: The ledger is inside the store (usage).
    """
    try:
        return cast("MemoryStore", ledgers.with_ledger(store, opened))
    except InvalidInputError as exc:
        raise CommandError("--ledger", exc.rule, ExitCode.USAGE) from None


@contextmanager
def ledger_refusals(ledgers: Any) -> Iterator[None]:
    """A deletion the ledger could not record first: named by ``--ledger``, nothing deleted.

    Raises:
        CommandError: The ledger refused the deletion (unavailable).
    """
    try:
        yield
    except ledgers.LedgerUnavailableError as exc:
        raise CommandError(
            "--ledger", f"{one_line(exc.reason)}; nothing was deleted", ExitCode.UNAVAILABLE
        ) from None


async def reapply_from_ledger(
    url: str,
    ledger_url: str,
    key_file: Path | None,
    since: datetime | None,
    *,
    as_json: bool,
) -> int:
    """Open the ledger and the store, re-apply, print the receipt; the command's body.

    Raises:
        CommandError: The ledger distribution is missing, the key or the
            ledger is refused, or the store cannot list its end users.
    """
    refuse_ledger_in_store(url, ledger_url)
    with ledger_for_command(ledger_url, key_file) as (opened, ledgers):
        async with open_for_command(url, "URL", must_exist=True) as store:
            if not isinstance(store, ListsEndUsers):
                raise CommandError(
                    "URL",
                    "this store cannot list its end users (its backend does not provide"
                    " ListsEndUsers), and the ledger holds only keyed hashes of end users",
                    ExitCode.REFUSED,
                )
            done = await ledgers.reapply(store, opened, since=since)
    receipt: dict[str, Any] = {
        "format": RECEIPT_NAME,
        "version": RECEIPT_VERSION,
        "store": redact_url(url),
        "since": None if since is None else utc_text(since),
        "entries": done.entries,
        "erased_end_users": done.erased_end_users,
        "facts_deleted": done.facts_deleted,
        "reapplied_at": utc_text(datetime.now(UTC)),
    }
    click.echo(
        json.dumps(receipt, ensure_ascii=False, indent=2) if as_json else _receipt_text(receipt)
    )
    return ExitCode.DONE


def _receipt_text(receipt: dict[str, Any]) -> str:
    since = receipt["since"] or "the ledger's first entry"
    return "\n".join(
        [
            "Deletions re-applied from the ledger",
            f"  store:                   {receipt['store']}",
            f"  recorded since:          {since}",
            f"  ledger entries read:     {receipt['entries']}",
            f"  end users erased again:  {receipt['erased_end_users']}",
            f"  facts deleted again:     {receipt['facts_deleted']}",
            f"  re-applied at:           {receipt['reapplied_at']}",
        ]
    )
