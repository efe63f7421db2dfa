"""``psych-memory replay-deletions`` and ``ledger prune``: the deletion ledger's two commands."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any, Final

import click

from psych_runtime.memory.port import ExpiresFacts, InvalidInputError, ListsEndUsers

from ._commands import open_for_command
from ._exit import CommandError, ExitCode
from ._format import utc_text
from ._ledger_open import _refuse_ledger_in_store, opened_ledger
from ._receipts import receipt as receipt_of
from ._receipts import receipt_json
from ._url import redact_url

__all__ = ["checked_instant", "prune_ledger", "replay_deletions"]

_INSTANT_RULE: Final = (
    "must be an instant in ISO 8601 with its offset, such as 2026-01-31T12:00:00Z"
)
_EARLIEST: Final = datetime.min.replace(tzinfo=UTC)


def checked_instant(value: str, argument: str, *, now: datetime | None = None) -> datetime:
    """The instant ``value`` names, in UTC, or a usage error naming ``argument``.

    The one reading of an instant for every command (``expire --before``,
    ``replay-deletions --since``, ``ledger prune --before``). Any instant
    that parses is answered: one earlier than 0001-01-01T00:00:00Z (year 1
    with a positive offset) is read as that instant, the earliest there is,
    which selects exactly the same facts and ledger entries; one later than
    9999-12-31T23:59:59.999999Z is in the future, and refused as such.

    Args:
        value: The instant as the operator typed it.
        argument: The option it was given to, named by a refusal.
        now: The present, which the instant must not be later than; the
            clock's when ``None``.

    Raises:
        CommandError: ``value`` is not ISO 8601 with an offset, or is in the
            future (usage).
    """
    try:
        found = datetime.fromisoformat(value.replace("Z", "+00:00").replace("z", "+00:00"))
    except ValueError:
        raise CommandError(argument, _INSTANT_RULE, ExitCode.USAGE) from None
    offset = found.utcoffset()
    if offset is None:
        raise CommandError(argument, _INSTANT_RULE, ExitCode.USAGE)
    present = datetime.now(UTC) if now is None else now
    try:
        instant = found.astimezone(UTC)
    except OverflowError:
        # Outside the years 1 to 9999 once in UTC: before the earliest
        # instant (a positive offset) or after the latest (a negative one).
        if offset > timedelta(0):
            return _EARLIEST
        raise CommandError(argument, "must not be in the future", ExitCode.USAGE) from None
    if instant > present:
        raise CommandError(argument, "must not be in the future", ExitCode.USAGE)
    return instant


async def replay_deletions(  # noqa: PLR0913 - one parameter per option of the command
    url: str,
    ledger_url: str,
    key_file: Path | None,
    since: datetime,
    *,
    dry_run: bool,
    as_json: bool,
) -> int:
    """Open the ledger and the store, re-apply (or count), print the receipt; the command's body.

    Raises:
        CommandError: The ledger distribution is missing, the key or the
            ledger is refused, no ledger exists at ``ledger_url`` (usage,
            nothing created), or the store cannot list its end users, or
            cannot expire facts by age while the ledger records an expiry.
    """
    _refuse_ledger_in_store(url, ledger_url)
    with opened_ledger(ledger_url, key_file, create=False) as (opened, ledgers):
        async with open_for_command(url, "URL", must_exist=True) as store:
            if not isinstance(store, ListsEndUsers):
                raise CommandError(
                    "URL",
                    "this store cannot list its end users (its backend does not provide"
                    " ListsEndUsers), and the ledger holds only keyed hashes of end users",
                    ExitCode.REFUSED,
                )
            expiries = [e for e in opened.entries(since=since) if e.kind == "expire"]
            if expiries and not isinstance(store, ExpiresFacts):
                raise CommandError(
                    "URL",
                    "the ledger records expiries by age and this store cannot expire facts"
                    " (its backend does not provide ExpiresFacts); nothing was deleted",
                    ExitCode.REFUSED,
                )
            done = await ledgers.reapply(store, opened, since=since, dry_run=dry_run)
    receipt: dict[str, Any] = receipt_of(
        "replay-deletions",
        {
            "store": redact_url(url),
            "since": utc_text(since),
            "dry_run": done.dry_run,
            "entries": done.entries,
            "erased_end_users": done.erased_end_users,
            "expiries": done.expiries,
            "facts_deleted": done.facts_deleted,
            "replayed_at": utc_text(datetime.now(UTC)),
        },
    )
    click.echo(receipt_json(receipt) if as_json else _replay_text(receipt))
    return ExitCode.DONE


def _replay_text(receipt: dict[str, Any]) -> str:
    dry = receipt["dry_run"]
    return "\n".join(
        [
            "Deletions counted, none made (dry run)" if dry else "Deletions made again",
            f"  store:                   {receipt['store']}",
            f"  recorded since:          {receipt['since']}",
            f"  ledger entries read:     {receipt['entries']}",
            f"  end users erased again:  {receipt['erased_end_users']}",
            f"  expiries run again:      {receipt['expiries']}",
            f"  facts deleted again:     {receipt['facts_deleted']}",
            f"  {'counted at:  ' if dry else 'replayed at: '}            {receipt['replayed_at']}",
        ]
    )


def prune_ledger(ledger_url: str, key_file: Path | None, before: datetime, *, as_json: bool) -> int:
    """Open the ledger, prune the entries done before ``before``, print the receipt.

    Raises:
        CommandError: The ledger distribution is missing, the key or the
            ledger is refused, no ledger exists at ``ledger_url`` (usage,
            nothing created), ``before`` is in the future (usage), or the
            ledger cannot be written (unavailable, nothing pruned).
    """
    with opened_ledger(ledger_url, key_file, create=False) as (opened, _):
        try:
            done = opened.prune(before)
        except InvalidInputError as exc:
            raise CommandError("--before", exc.rule, ExitCode.USAGE) from None
    receipt: dict[str, Any] = receipt_of(
        "ledger-prune",
        {
            "before": utc_text(done.before),
            "entries_pruned": done.entries_pruned,
            "entries_kept": done.entries_kept,
            "pruned_at": utc_text(done.pruned_at),
        },
    )
    if as_json:
        click.echo(receipt_json(receipt))
    else:
        click.echo(
            "\n".join(
                [
                    "Deletion ledger pruned",
                    f"  entries done before:  {receipt['before']}",
                    f"  entries pruned:       {receipt['entries_pruned']}",
                    f"  entries kept:         {receipt['entries_kept']}",
                    f"  pruned at:            {receipt['pruned_at']}",
                ]
            )
        )
    return ExitCode.DONE
