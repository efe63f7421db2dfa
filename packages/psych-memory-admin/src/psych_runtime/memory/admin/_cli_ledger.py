"""``psych-memory ledger reapply``: a ledger's deletions made again on a restored store."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Final

import click

from psych_runtime.memory.port import ListsEndUsers

from ._commands import open_for_command
from ._exit import CommandError, ExitCode
from ._format import utc_text
from ._ledger_open import _refuse_ledger_in_store, opened_ledger
from ._url import redact_url

__all__ = ["checked_since", "reapply_from_ledger"]

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
    _refuse_ledger_in_store(url, ledger_url)
    with opened_ledger(ledger_url, key_file) as (opened, ledgers):
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
