"""The ``psych-memory`` command: the operator's access, erasure and migration requests.

Click parses the command line and draws the progress bar; anyio runs each
command's async body on asyncio. Every failure ends in one line on standard
error naming the argument and the rule, and an exit code from `ExitCode`.
Only ``export`` prints the content of facts.
"""

from __future__ import annotations

import errno
import logging
import os
import re
import select
import shutil
import signal
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable, Iterator, Sequence
from contextlib import ExitStack, contextmanager, suppress
from datetime import UTC, datetime, timedelta
from functools import partial
from pathlib import Path
from typing import IO, Any, Final

import anyio
import click

from psych_runtime.memory.port import InvalidInputError, MemoryKey, MemoryStore, validate_cutoff

from ._cli_ledger import checked_instant, prune_ledger, replay_deletions
from ._cli_stores import checked_key, checked_tenant, refusals_naming
from ._commands import one_line, open_for_command
from ._errors import (
    CopyMismatchError,
    FactRefusedError,
    FactsForgottenError,
    HeldFactsConflictError,
    ImportStoppedError,
    MissingCapabilityError,
    OperationRefusedError,
)
from ._exit import CommandError, ExitCode, exit_codes_help
from ._format import ExportFormatError, ExportReader, Layout, export_head, export_tail, utc_text
from ._interrupts import INTERRUPTS
from ._ledger_open import (
    EMPTY_LEDGER_RULE,
    LEDGER_KEY_VARIABLE,
    LEDGER_VARIABLE,
    ledger_for_command,
    ledger_refusals,
)
from ._migrate import Migration, Progress, migrate
from ._operations import (
    IMPORT_BATCH,
    ErasureReceipt,
    ExpiryReceipt,
    count_stored,
    erase_end_user,
    expire_tenants,
    export_facts,
    import_facts,
)
from ._pages import count_facts
from ._receipts import receipt as receipt_of
from ._receipts import receipt_json
from ._stores import lister
from ._url import redact_url
from ._version import __version__

__all__ = ["main"]

PROG: Final = "psych-memory"
DEFAULT_JOBS: Final = 8

_URL_HELP: Final = "URL is a store URL: memory:, sqlite:///path, postgresql://..."

# The argument naming each store of an operation, by the store's role in it.
_ONE_STORE: Final = {"store": "URL"}
_TWO_STORES: Final = {"source": "FROM_URL", "target": "TO_URL"}


def main(argv: Sequence[str] | None = None, *, process: bool = False) -> int:
    """Run the command; see `psych_runtime.memory.admin.main`.

    ``process``: the command is the whole process, which ends when this
    returns; a Ctrl-C held once an export is written then stays held to
    the end, so it cannot turn a written export into a failure.
    """
    INTERRUPTS.process = process
    try:
        return _main(argv)
    finally:
        if not process:
            INTERRUPTS.release()


def _main(argv: Sequence[str] | None) -> int:
    # Drivers log their retries; the command reports the outcome in its one line instead.
    logging.getLogger().addHandler(logging.NullHandler())
    args = list(argv) if argv is not None else sys.argv[1:]
    if not args:
        # The short usage, not the whole help squeezed into one error line.
        click.echo(f"Usage: {PROG} [OPTIONS] COMMAND [ARGS]...", err=True)
        click.echo(f"Try '{PROG} --help' for help.", err=True)
        _fail(f"a command is needed: {', '.join(cli.list_commands(click.Context(cli)))}")
        return ExitCode.USAGE
    try:
        result = cli.main(args=args, prog_name=PROG, standalone_mode=False)
    except CommandError as exc:
        _fail(f"{exc.argument}: {exc.rule}")
        return exc.code
    except click.exceptions.Abort:
        _fail("cancelled: nothing more was done")
        return ExitCode.CANCELLED
    except click.ClickException as exc:
        _fail(" ".join(exc.format_message().split()))
        return ExitCode.USAGE
    except Exception as exc:  # noqa: BLE001 - the last line of defence, type only
        _fail(f"unexpected failure ({type(exc).__qualname__}); the outcome is unknown")
        return ExitCode.FAILED
    return result if isinstance(result, int) else ExitCode.DONE


def _fail(message: str) -> None:
    click.echo(f"{PROG}: error: {message}", err=True)


def _run(body: Callable[..., Awaitable[int]], *args: Any) -> int:
    _unless_interrupted()
    return anyio.run(partial(body, *args), backend="asyncio")


def _unless_interrupted() -> None:
    # A Ctrl-C that Python discarded (see `INTERRUPTS`) stops the command
    # before its next step, as one it raised would have.
    if INTERRUPTS.lost:
        raise click.exceptions.Abort


@click.group(
    context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 100},
    epilog=exit_codes_help(),
)
@click.version_option(__version__, prog_name=PROG)
def cli() -> None:
    """Answer operators' requests about Psych memory stores.

    Access and portability (export), erasure with a receipt (erase), retention
    (expire), listing and counting (users, count), moving facts between stores
    (migrate, import), deletions made again after a restore (replay-deletions)
    and the deletion ledger's upkeep (ledger prune). Each takes --json, and
    then prints its receipt as one JSON object.
    """


_url = click.argument("url", metavar="URL")
_tenant = click.option("--tenant", required=True, help="The tenant, exactly as stored.")
_user = click.option("--user", "end_user", required=True, help="The end user, exactly as stored.")
_json = click.option(
    "--json", "as_json", is_flag=True, help="Print the receipt as JSON (one object)."
)
_ledger_key_file = click.option(
    "--ledger-key-file",
    type=click.Path(dir_okay=False, path_type=Path),
    help=f"A file holding the ledger's key; default: ${LEDGER_KEY_VARIABLE}.",
)


class _LedgerOption(click.Option):
    """``--ledger``: set to the empty string, the variable is refused, never taken as unset."""

    def value_is_missing(self, value: Any) -> bool:
        # Click reads an empty variable as none at all; a required --ledger
        # would then say "Missing option" where the rule below says why.
        missing = super().value_is_missing(value)
        return missing and os.environ.get(LEDGER_VARIABLE) != ""


def _ledger(help_text: str, *, required: bool = False) -> Callable[[Any], Any]:
    return click.option(
        "--ledger",
        "ledger_url",
        cls=_LedgerOption,
        envvar=LEDGER_VARIABLE,
        required=required,
        metavar="LEDGER_URL",
        callback=_ledger_named,
        help=f"{help_text}; default: ${LEDGER_VARIABLE}.",
    )


def _ledger_named(_context: click.Context, _parameter: click.Parameter, value: Any) -> Any:
    # Click reads an empty variable as no variable at all: a ledger named
    # empty, by the option or the variable, is refused before anything runs,
    # never taken for "no ledger".
    if value == "" or (value is None and os.environ.get(LEDGER_VARIABLE) == ""):
        raise CommandError("--ledger", EMPTY_LEDGER_RULE, ExitCode.USAGE)
    return value


@cli.command(epilog=_URL_HELP)
@_url
@_tenant
@_user
@click.option(
    "-o",
    "--output",
    type=click.Path(dir_okay=False, path_type=Path),
    help="Write to this new file (readable by its owner only) instead of standard output.",
)
@click.option(
    "--format",
    "layout",
    type=click.Choice(["json", "jsonl"]),
    default="json",
    show_default=True,
    help="One JSON document, or JSON Lines (a header line, then one fact per line).",
)
@click.option(
    "--json",
    "as_json",
    is_flag=True,
    help="With --output: print the receipt as JSON (one object) instead of the line on stderr.",
)
def export(  # noqa: PLR0913, PLR0917 - click passes each option by name
    url: str,
    tenant: str,
    end_user: str,
    output: Path | None,
    layout: Layout,
    as_json: bool,  # noqa: FBT001
) -> int:
    """Print every fact of one end user, oldest first, in the documented export format.

    The facts are read a page at a time and written to a temporary file
    first (in the folder of --output, else the system's temporary folder),
    so memory stays small whatever the end user's size. With --output the
    export is then written to a second temporary file in that folder, synced
    to disk and given its name in one step: the file appears only once it is
    complete, and a line on standard error says it was written (with
    --json, a receipt on standard output instead).
    """
    key = checked_key(tenant, end_user)
    if as_json and output is None:
        raise CommandError(
            "--json",
            "needs --output: without it, standard output is the export itself (already JSON)",
            ExitCode.USAGE,
        )
    if output is not None and output.exists():
        raise CommandError(
            "--output", "names a file that exists already; name a new one", ExitCode.USAGE
        )

    async def read(spool: IO[str]) -> int:
        with refusals_naming(_ONE_STORE):
            async with open_for_command(url, "URL", must_exist=True) as store:
                count = await export_facts(store, key, layout, spool)
        if not count:
            raise CommandError(
                "--user",
                "the store holds no facts for this end user of this tenant",
                ExitCode.NOT_FOUND,
            )
        return count

    with _spool(output) as spool:
        count = _run(read, spool)
        exported_at = datetime.now(UTC)
        head = export_head(key, exported_at, layout, count)
        spool.seek(0)
        if output is None:
            _copy_out(sys.stdout, head, spool, export_tail(layout, count), "standard output")
        else:
            _write_new(output, head, spool, export_tail(layout, count))
            if as_json:
                exported = receipt_of(
                    "export",
                    {
                        "store": redact_url(url),
                        "tenant": key.tenant,
                        "end_user_id": key.end_user_id,
                        "facts_exported": count,
                        "export_format": layout,
                        "exported_at": utc_text(exported_at),
                    },
                )
                click.echo(receipt_json(exported))
            else:
                click.echo(f"{PROG}: wrote {count} fact(s) to the --output file", err=True)
    return ExitCode.DONE


@contextmanager
def _spool(output: Path | None) -> Iterator[IO[str]]:
    try:
        # Not a with: only its creation's failure is the temporary file's.
        spool = tempfile.TemporaryFile("w+", encoding="utf-8", dir=_folder_of(output))  # noqa: SIM115
    except OSError as exc:
        raise CommandError(
            "--output" if output is not None else "export",
            f"cannot create its temporary file ({_reason(exc)})",
            ExitCode.USAGE,
        ) from None
    with spool:
        yield spool


def _folder_of(output: Path | None) -> Path | None:
    return None if output is None else (output.parent if str(output.parent) else Path())


@cli.command("import", epilog=_URL_HELP)
@_url
@click.argument("file", metavar="FILE", type=click.Path(dir_okay=False, allow_dash=True))
@_json
def import_(url: str, file: str, as_json: bool) -> int:  # noqa: FBT001
    """Restore an export into a store, with the facts' ids and times as they were.

    FILE ('-' for standard input) is read in chunks and checked whole before
    anything is written. The end user's facts already in the store must be
    the first facts of the export (an earlier import), else nothing is
    written. The facts are then written in batches of 2,000, each one whole
    or not at all: an import that stops part way leaves the first batches,
    and running it again finishes it, skipping what is stored. Running it
    twice writes nothing the second time.
    """
    with _readable(file) as open_file:
        reader = ExportReader(open_file)
        try:
            key = reader.check()
        except UnicodeDecodeError:
            raise CommandError("FILE", "is not UTF-8 text", ExitCode.USAGE) from None
        except ExportFormatError as exc:
            raise CommandError("FILE", str(exc), ExitCode.USAGE) from None
        except OSError as exc:
            raise CommandError("FILE", f"cannot be read ({_reason(exc)})", ExitCode.USAGE) from None

        async def body() -> int:
            with refusals_naming(_ONE_STORE, _import_rule):
                try:
                    async with open_for_command(url, "URL", must_exist=False) as store:
                        done = await import_facts(store, key, reader)
                except ImportStoppedError as exc:
                    raise _import_stopped(exc) from _cause_kept(exc)
            if as_json:
                imported = receipt_of(
                    "import",
                    {
                        "store": redact_url(url),
                        "tenant": key.tenant,
                        "end_user_id": key.end_user_id,
                        "facts_in_file": reader.count,
                        "facts_written": done.written,
                        "facts_already_stored": reader.count - done.written,
                        "batches": done.batches,
                        "batch_size": IMPORT_BATCH,
                        "imported_at": utc_text(datetime.now(UTC)),
                    },
                )
                click.echo(receipt_json(imported))
                return ExitCode.DONE
            click.echo(
                f"imported {done.written} fact(s) in {done.batches} batch(es) of up to "
                f"{IMPORT_BATCH:,}, each whole or not at all; {reader.count - done.written} of "
                f"the {reader.count} were there already"
            )
            return ExitCode.DONE

        return _run(body)


def _import_rule(error: OperationRefusedError) -> str | None:
    if isinstance(error, HeldFactsConflictError):
        return (
            "this end user's facts in the store are not the first facts of the export "
            "(other ids, contents, times or order); nothing was written"
        )
    return None


def _import_stopped(error: ImportStoppedError) -> CommandError:
    stored = (
        f"the first {error.stored} fact(s) of the file are stored (whole batches only); "
        "run the same import again to finish"
    )
    if isinstance(error.reason, InvalidInputError):
        return CommandError(
            "FILE", f"a fact was refused: {error.reason}; {stored}", ExitCode.REFUSED
        )
    return CommandError("URL", f"{one_line(str(error.reason))}; {stored}", ExitCode.UNAVAILABLE)


def _cause_kept(error: ImportStoppedError) -> BaseException | None:
    # A store's failure stays the cause, as a driver's error is; a refused
    # fact is the operator's to fix and says all in its line.
    return None if isinstance(error.reason, InvalidInputError) else error.reason


@contextmanager
def _readable(file: str) -> Iterator[Callable[[], IO[bytes]]]:
    # An opener of FILE for each reading; standard input is kept in a
    # temporary file first, as it can be read only once.
    if file != "-":

        def opened_file() -> IO[bytes]:
            return Path(file).open("rb")

        yield opened_file
        return
    stdin = sys.stdin
    if stdin is None or stdin.closed:
        raise CommandError("FILE", "is '-' but standard input is closed", ExitCode.USAGE)
    with tempfile.TemporaryFile() as kept:
        try:
            shutil.copyfileobj(stdin.buffer, kept)
            kept.flush()
        except OSError as exc:
            raise CommandError(
                "FILE", f"cannot be read from standard input ({_reason(exc)})", ExitCode.USAGE
            ) from None

        def reopened() -> IO[bytes]:
            stream = os.fdopen(os.dup(kept.fileno()), "rb")
            stream.seek(0)
            return stream

        yield reopened


@cli.command(epilog=_URL_HELP)
@_url
@_tenant
@_user
@click.option("--yes", is_flag=True, help="Do not ask for confirmation (required off a terminal).")
@_json
@_ledger("Record the erasure in this deletion ledger first")
@_ledger_key_file
def erase(  # noqa: PLR0913, PLR0917 - click passes each option by name
    url: str,
    tenant: str,
    end_user: str,
    yes: bool,  # noqa: FBT001
    as_json: bool,  # noqa: FBT001
    ledger_url: str | None,
    ledger_key_file: Path | None,
) -> int:
    """Delete every fact of one end user, for good, and print a receipt.

    The receipt names the tenant, the end user, how many facts were deleted,
    when (UTC) and in which store (without its password). For a store that
    wipes deleted bytes (SQLite), it says whether the wipe is done. The
    question goes to standard error, never into the receipt. With a deletion
    ledger, the erasure is recorded there before the store deletes anything,
    and refused when it cannot be.
    """
    key = checked_key(tenant, end_user)
    stdin = sys.stdin
    if not yes and (stdin is None or stdin.closed or not stdin.isatty()):
        raise CommandError(
            "--yes", "is required when standard input is not a terminal", ExitCode.USAGE
        )
    counted: int | None = None
    if not yes:
        counted = _run(partial(_counted_for_erase, url, key))
        question = (
            f"Erase all {counted} fact(s) of this end user from {redact_url(url)}? "
            "This cannot be undone."
        )
        if not _confirmed(question):
            raise click.exceptions.Abort

    async def body() -> int:
        with ExitStack() as ledger_open:
            attach = (
                None
                if ledger_url is None
                else ledger_open.enter_context(
                    ledger_for_command(ledger_url, ledger_key_file, store_url=url)
                )
            )
            async with open_for_command(url, "URL", must_exist=True) as bare:
                # Without the question, whether the end user held facts is seen
                # here: deleting none of them then means another erasure did.
                found = bool(counted) or bool(
                    await bare.recall(key.tenant, key.end_user_id, limit=1)
                )
                if attach is None:
                    receipt = await erase_end_user(bare, key, redact_url(url))
                else:
                    with ledger_refusals():
                        receipt = await erase_end_user(attach(bare), key, redact_url(url))
                if not receipt.facts_deleted and not found:
                    raise _nothing_to_erase()
        ledger = None if ledger_url is None else redact_url(ledger_url)
        click.echo(
            receipt_json(_receipt_json(receipt, ledger))
            if as_json
            else _receipt_text(receipt, ledger)
        )
        return ExitCode.DONE if receipt.facts_deleted else ExitCode.NOT_FOUND

    return _run(body)


_DURABILITY_TEXT: Final = {
    "synchronous_standbys": "confirmed by the synchronous standbys (it survives their promotion)",
    "primary_only": (
        "on the primary only (its standbys replicate asynchronously: a failover before they "
        "replay it could bring the facts back)"
    ),
    "no_replication": "on a server with no replication",
    "unknown": "unknown (the server could not be asked)",
}


def _confirmed(question: str) -> bool:
    # Asked on standard error (never into the receipt), outside the event
    # loop, and answered by a line of standard input.
    click.echo(f"{question} [y/N]: ", nl=False, err=True)
    try:
        answer = _line_unless_interrupted()
    except KeyboardInterrupt:
        raise click.exceptions.Abort from None
    return answer.strip().lower() in {"y", "yes"}


def _line_unless_interrupted() -> str:
    # A plain read would miss a Ctrl-C arriving just before it blocks (the
    # signal's Python handler runs only between two steps of Python) and
    # wait for a line. A signal also wakes this wait, through the wakeup
    # descriptor, however early it came; its handler then raises.
    if sys.platform == "win32":  # pragma: no cover - no select on a console there
        return sys.stdin.readline()
    try:
        sys.stdin.fileno()
    except OSError:
        return sys.stdin.readline()  # not a file (a program running the command in-process)
    woken, waker = os.pipe()
    os.set_blocking(waker, False)
    previous = signal.set_wakeup_fd(waker)
    try:
        select.select([sys.stdin, woken], [], [])
        return sys.stdin.readline()
    finally:
        signal.set_wakeup_fd(previous)
        os.close(woken)
        os.close(waker)


async def _counted_for_erase(url: str, key: MemoryKey) -> int:
    with refusals_naming(_ONE_STORE):
        async with open_for_command(url, "URL", must_exist=True) as store:
            held = await count_facts(store, key)
    if not held:
        raise _nothing_to_erase()
    return held


def _nothing_to_erase() -> CommandError:
    return CommandError(
        "--user",
        "the store holds no facts for this end user of this tenant; nothing was erased",
        ExitCode.NOT_FOUND,
    )


def _receipt_json(done: ErasureReceipt, ledger: str | None) -> dict[str, object]:
    return receipt_of(
        "erasure",
        {
            "tenant": done.key.tenant,
            "end_user_id": done.key.end_user_id,
            "facts_deleted": done.facts_deleted,
            "erased_at": utc_text(done.erased_at),
            "store": done.store,
            "scrub": done.scrub,
            "deletion_durability": done.deletion_durability,
            "outcome": done.outcome,
            "ledger": ledger,
        },
    )


def _receipt_text(receipt: ErasureReceipt, ledger: str | None) -> str:
    lines = [
        "Erasure receipt",
        f"tenant:         {receipt.key.tenant}",
        f"end user:       {receipt.key.end_user_id}",
        f"facts deleted:  {receipt.facts_deleted}",
        f"erased at:      {utc_text(receipt.erased_at)} (UTC)",
        f"store:          {receipt.store}",
        _ledger_line(ledger, "the erasure"),
    ]
    if receipt.outcome == "already_erased":
        lines.append(
            "outcome:        already erased: another erasure deleted this end user's facts "
            "after they were counted; this command deleted none"
        )
    durability = receipt.deletion_durability
    if durability is not None:
        lines.append(f"durability:     {_DURABILITY_TEXT.get(durability, durability)}")
    lines += _scrub_lines(receipt.scrub)
    return "\n".join(lines)


def _ledger_line(ledger: str | None, deletion: str, *, dry_run: bool = False) -> str:
    # Whether a deletion ledger recorded the deletion, and which (its URL
    # without its password): none, and a restore brings the facts back.
    if ledger is None:
        return f"ledger:         none ({deletion} is recorded in no deletion ledger)"
    if dry_run:
        return f"ledger:         {ledger} (would record {deletion} first; nothing recorded)"
    return f"ledger:         {ledger} (recorded {deletion} before the store deleted anything)"


_AGE: Final = re.compile(r"([0-9]{1,9})([dh])")
_AGE_UNITS: Final = {"d": timedelta(days=1), "h": timedelta(hours=1)}
_AGE_RULE: Final = "must be a whole number of days or hours from 1, such as 400d or 36h"


def _cutoff(older_than: str | None, before: str | None, now: datetime) -> datetime:
    # The instant the facts to expire were created before, from exactly one
    # of the two options, checked by the port's rule before any store opens.
    if (older_than is None) == (before is None):
        raise CommandError(
            "--older-than", "or --before is needed, and only one of them", ExitCode.USAGE
        )
    if older_than is not None:
        argument = "--older-than"
        matched = _AGE.fullmatch(older_than)
        if matched is None or not int(matched[1]):
            raise CommandError(argument, _AGE_RULE, ExitCode.USAGE)
        try:
            cutoff = now - int(matched[1]) * _AGE_UNITS[matched[2]]
        except OverflowError:
            raise CommandError(
                argument, "reaches back before the year 1; name a shorter age", ExitCode.USAGE
            ) from None
    else:
        argument = "--before"
        cutoff = checked_instant(str(before), argument, now=now)
    try:
        return validate_cutoff(cutoff, now=now)
    except InvalidInputError as exc:
        raise CommandError(argument, exc.rule, ExitCode.USAGE) from None


@cli.command(epilog=_URL_HELP)
@_url
@click.option("--tenant", help="Expire this tenant's facts, exactly as stored.")
@click.option(
    "--all-tenants", is_flag=True, help="Expire the facts of every tenant the store holds."
)
@click.option(
    "--older-than",
    metavar="AGE",
    help="Expire facts created more than AGE ago: a whole number of days (400d) or hours (36h).",
)
@click.option(
    "--before",
    metavar="INSTANT",
    help="Expire facts created before this ISO 8601 instant with its time zone.",
)
@click.option("--dry-run", is_flag=True, help="Count the facts that would go; delete nothing.")
@_json
@_ledger("Record each tenant's expiry in this deletion ledger first")
@_ledger_key_file
def expire(  # noqa: PLR0913, PLR0917 - one parameter per option, as click passes them
    url: str,
    tenant: str | None,
    all_tenants: bool,  # noqa: FBT001
    older_than: str | None,
    before: str | None,
    dry_run: bool,  # noqa: FBT001
    as_json: bool,  # noqa: FBT001
    ledger_url: str | None,
    ledger_key_file: Path | None,
) -> int:
    """Delete every fact older than an age, of one tenant or all, and print a receipt.

    A fact's age is that of its creation time as stored (a fact moved with
    import or migrate keeps its own); reading a fact does not make it younger.
    Deleted facts are gone as with erase: for a store that wipes deleted bytes
    (SQLite) the receipt says whether the wipe is done, for PostgreSQL where
    the deletion is durable. Meant to run on a schedule: running it twice, or
    two runs at once, deletes each fact once; a run that stops part way is
    finished by the next. It asks no question. With a deletion ledger, each
    tenant's expiry (its cutoff) is recorded there before the store deletes,
    and refused when it cannot be.
    """
    if tenant is not None and all_tenants:
        raise CommandError("--tenant", "and --all-tenants cannot be given together", ExitCode.USAGE)
    if tenant is None and not all_tenants:
        raise CommandError("--tenant", "or --all-tenants is needed", ExitCode.USAGE)
    names = None if tenant is None else (checked_tenant(tenant),)
    cutoff = _cutoff(older_than, before, datetime.now(UTC))

    async def body() -> int:
        with ExitStack() as ledger_open:
            attach = (
                None
                if ledger_url is None
                else ledger_open.enter_context(
                    # A dry run records nothing, so it creates no ledger either.
                    ledger_for_command(
                        ledger_url, ledger_key_file, store_url=url, create=not dry_run
                    )
                )
            )
            async with open_for_command(url, "URL", must_exist=True) as bare:
                receipt = await _expired(bare, attach)
        ledger = None if ledger_url is None else redact_url(ledger_url)
        click.echo(
            receipt_json(_expiry_json(receipt, older_than, ledger))
            if as_json
            else _expiry_text(receipt, older_than, ledger)
        )
        return ExitCode.DONE

    async def _expired(
        bare: MemoryStore, attach: Callable[[MemoryStore], MemoryStore] | None
    ) -> ExpiryReceipt:
        store = bare if attach is None else attach(bare)
        with ExitStack() as refusals:
            if attach is not None:
                refusals.enter_context(ledger_refusals())
            try:
                return await expire_tenants(store, names, cutoff, redact_url(url), dry_run=dry_run)
            except MissingCapabilityError as exc:
                raise CommandError(
                    "URL",
                    f"this store cannot {exc.ability} (its backend does not provide "
                    f"{exc.capability}); nothing was deleted",
                    ExitCode.USAGE,
                ) from None

    return _run(body)


def _expiry_json(
    done: ExpiryReceipt, older_than: str | None, ledger: str | None
) -> dict[str, object]:
    counted = "facts_to_delete" if done.dry_run else "facts_deleted"
    return receipt_of(
        "expiry",
        {
            "dry_run": done.dry_run,
            "cutoff": utc_text(done.cutoff),
            "older_than": older_than,
            "tenants": [{"tenant": tenant, counted: count} for tenant, count in done.facts],
            counted: done.total,
            "expired_at": utc_text(done.expired_at),
            "store": done.store,
            "scrub": done.scrub,
            "deletion_durability": done.deletion_durability,
            "ledger": ledger,
        },
    )


def _expiry_text(receipt: ExpiryReceipt, older_than: str | None, ledger: str | None) -> str:
    done = "to delete" if receipt.dry_run else "deleted"
    age = f" (older than {older_than})" if older_than is not None else ""
    lines = [
        "Expiry dry run: nothing was deleted" if receipt.dry_run else "Expiry receipt",
        f"cutoff:         facts created before {utc_text(receipt.cutoff)} (UTC){age}",
        f"store:          {receipt.store}",
        _ledger_line(ledger, "each tenant's expiry", dry_run=receipt.dry_run),
    ]
    lines += [
        f"tenant:         {tenant}: {count} fact(s) {done}" for tenant, count in receipt.facts
    ]
    if not receipt.facts:
        lines.append("tenants:        none: the store holds no facts")
    lines += [
        f"{f'facts {done}:':<16}{receipt.total}",
        (
            f"{'counted' if receipt.dry_run else 'expired'} at:     "
            f"{utc_text(receipt.expired_at)} (UTC)"
        ),
    ]
    durability = receipt.deletion_durability
    if durability is not None:
        lines.append(f"durability:     {_DURABILITY_TEXT.get(durability, durability)}")
    lines += _scrub_lines(receipt.scrub)
    return "\n".join(lines)


def _scrub_lines(scrub: str | None) -> list[str]:
    if scrub == "scrubbed":
        return ["deleted bytes:  scrubbed (none remain in the database file or its log)"]
    if scrub == "pending":
        return [
            (
                "deleted bytes:  pending (another connection is using the file; the store wipes "
                "them when it can)"
            )
        ]
    return []


@cli.command(epilog=_URL_HELP)
@_url
@_tenant
@_json
def users(url: str, tenant: str, as_json: bool) -> int:  # noqa: FBT001
    """List the end users of a tenant that have facts, one per line, sorted."""
    name = checked_tenant(tenant)

    async def body() -> int:
        with refusals_naming(_ONE_STORE):
            async with open_for_command(url, "URL", must_exist=True) as store:
                found = await lister(store).end_users(name)
        if as_json:
            listed = receipt_of(
                "users",
                {
                    "store": redact_url(url),
                    "tenant": name,
                    "end_users": list(found),
                    "listed_at": utc_text(datetime.now(UTC)),
                },
            )
            click.echo(receipt_json(listed))
            return ExitCode.DONE
        for end_user in found:
            click.echo(end_user)
        return ExitCode.DONE

    return _run(body)


@cli.command(epilog=_URL_HELP)
@_url
@click.option("--tenant", help="Count this tenant's facts only.")
@click.option("--user", "end_user", help="Count this end user's facts only (needs --tenant).")
@_json
def count(url: str, tenant: str | None, end_user: str | None, as_json: bool) -> int:  # noqa: FBT001
    """Print how many facts the store holds: in all, for a tenant, or for one end user."""
    if end_user is not None and tenant is None:
        raise CommandError(
            "--user", "needs --tenant: end users are counted within a tenant", ExitCode.USAGE
        )
    name = checked_tenant(tenant) if tenant is not None else None
    key = checked_key(name, end_user) if name is not None and end_user is not None else None

    async def body() -> int:
        with refusals_naming(_ONE_STORE):
            async with open_for_command(url, "URL", must_exist=True) as store:
                if key is not None:
                    total = await count_facts(store, key)
                else:
                    total = await count_stored(store, name)
        if as_json:
            counted = receipt_of(
                "count",
                {
                    "store": redact_url(url),
                    "tenant": name,
                    "end_user_id": end_user,
                    "facts": total,
                    "counted_at": utc_text(datetime.now(UTC)),
                },
            )
            click.echo(receipt_json(counted))
        else:
            click.echo(str(total))
        return ExitCode.DONE

    return _run(body)


@cli.command("migrate", epilog=_URL_HELP)
@click.argument("from_url", metavar="FROM_URL")
@click.argument("to_url", metavar="TO_URL")
@click.option("--tenant", help="Copy this tenant's end users only.")
@click.option(
    "--jobs",
    type=click.IntRange(1, 64),
    default=DEFAULT_JOBS,
    show_default=True,
    help="End users copied at once (each one's facts strictly in order).",
)
@click.option(
    "--verbose", is_flag=True, help="Print a line on standard error for each end user copied."
)
@_json
def migrate_(  # noqa: PLR0913, PLR0917 - click passes each option by name
    from_url: str,
    to_url: str,
    tenant: str | None,
    jobs: int,
    verbose: bool,  # noqa: FBT001
    as_json: bool,  # noqa: FBT001
) -> int:
    """Copy every fact of every end user from FROM_URL to TO_URL, keeping ids, times and order.

    Safe to run again: facts already copied are left alone, so an interrupted
    run resumes where it stopped and a finished one copies nothing. An end user
    whose facts in TO_URL are not the first facts of the same end user in
    FROM_URL is refused before anything is copied. Counts are checked at the end.
    """
    name = checked_tenant(tenant) if tenant is not None else None

    async def body() -> int:
        with refusals_naming(_TWO_STORES, _migration_rule):
            async with (
                open_for_command(from_url, "FROM_URL", must_exist=True) as source,
                open_for_command(
                    to_url, "TO_URL", must_exist=False, own_failures_only=True
                ) as destination,
            ):
                with _progress(verbose=verbose) as display:
                    done: Migration = await migrate(
                        source, destination, name, jobs=jobs, progress=display
                    )
        if as_json:
            click.echo(receipt_json(_migration_json(done, from_url, to_url, name)))
            return ExitCode.DONE
        if done.copied:
            click.echo(
                f"copied {done.copied} fact(s); {done.facts} fact(s) of {done.end_users} "
                "end user(s) are now in both stores, counts checked"
            )
        else:
            click.echo(
                f"copied nothing: the destination already held all {done.facts} fact(s) of "
                f"{done.end_users} end user(s), counts checked"
            )
        if done.erased:
            click.echo(
                f"erased {done.erased} end user(s) in TO_URL too: FROM_URL erased them while "
                "they were being copied"
            )
        return ExitCode.DONE

    return _run(body)


def _migration_json(
    done: Migration, from_url: str, to_url: str, tenant: str | None
) -> dict[str, object]:
    return receipt_of(
        "migration",
        {
            "source": redact_url(from_url),
            "target": redact_url(to_url),
            "tenant": tenant,
            "facts_copied": done.copied,
            "facts": done.facts,
            "end_users": done.end_users,
            "end_users_erased": done.erased,
            "counts_checked": True,
            "migrated_at": utc_text(datetime.now(UTC)),
        },
    )


def _migration_rule(error: OperationRefusedError) -> str | None:
    if isinstance(error, HeldFactsConflictError):
        return (
            f"{error.end_users} end user(s) there hold facts that are not the first facts of "
            "the same end user in FROM_URL (other ids, contents, times or order); nothing "
            "was copied"
        )
    if isinstance(error, FactsForgottenError) and not error.retried:
        return (
            "a fact of an end user was forgotten there while its facts were being copied "
            "(stop the writers first); the facts copied so far stay in TO_URL"
        )
    if isinstance(error, FactRefusedError):
        return f"refused a fact: {error.reason}"
    if isinstance(error, CopyMismatchError):
        return (
            f"after copying, {error.end_users} end user(s) hold other facts than in FROM_URL "
            "(was either store written to meanwhile?); run migrate again to finish"
        )
    return None


class _ProgressDisplay(Progress):
    """A click progress bar with facts per second on a terminal; lines with --verbose."""

    def __init__(self, *, bar: bool, verbose: bool) -> None:
        self._bar_wanted = bar
        self._verbose = verbose
        self._bar: Any = None
        self._started = time.monotonic()
        self._done = 0
        self._keys = 0

    def planned(self, facts: int) -> None:
        self._started = time.monotonic()
        if self._bar_wanted and facts:
            self._bar = click.progressbar(
                length=facts,
                label="copying",
                file=sys.stderr,
                show_pos=True,
                item_show_func=lambda rate: rate,
            )
            self._bar.__enter__()

    def copied(self, facts: int) -> None:
        self._done += facts
        if self._bar is not None:
            elapsed = max(time.monotonic() - self._started, 1e-9)
            self._bar.update(facts, f"{self._done / elapsed:,.0f} facts/s")

    def finished_key(self) -> None:
        self._keys += 1
        if self._verbose:
            click.echo(f"end users done: {self._keys}; facts copied: {self._done}", err=True)

    def __enter__(self) -> _ProgressDisplay:
        return self

    def __exit__(self, *_: object) -> None:
        if self._bar is not None:
            self._bar.__exit__(None, None, None)


def _progress(*, verbose: bool) -> _ProgressDisplay:
    return _ProgressDisplay(bar=sys.stderr.isatty(), verbose=verbose)


def _write_new(path: Path, head: str, body: IO[str], tail: str) -> None:
    # The export is written to a file of its folder that has no name yet
    # (where the system allows; else a hidden temporary name), synced, and
    # then linked to its name, which fails if that name was taken meanwhile:
    # the name never shows a partial export, nor replaces another file.
    # From here on a Ctrl-C is held, not raised: before the link it cancels
    # (the temporary file goes), from the link on the export is written,
    # and the command says so, whenever the Ctrl-C came.
    INTERRUPTS.hold()
    _unless_interrupted()
    folder = _folder_of(path) or Path()
    unnamed = _unnamed_file(folder)
    if unnamed is not None:
        with os.fdopen(unnamed, "w", encoding="utf-8") as stream:
            _written_and_synced(stream, head, body, tail)
            _link_unnamed(stream.fileno(), folder, path)
    else:
        try:
            descriptor, temporary = tempfile.mkstemp(
                prefix=f".{path.name}.", suffix=".partial", dir=folder
            )
        except OSError as exc:
            raise CommandError(
                "--output", f"cannot be created ({_reason(exc)})", ExitCode.USAGE
            ) from None
        try:
            with os.fdopen(descriptor, "w", encoding="utf-8") as stream:
                _written_and_synced(stream, head, body, tail)
            _link(temporary, path, renamable=True)
        finally:
            with suppress(OSError):
                Path(temporary).unlink()
    INTERRUPTS.written()
    with suppress(OSError):
        # The name itself on disk; the export is written whatever this says.
        _synced_folder(folder)


def _unnamed_file(folder: Path) -> int | None:
    # Linux's O_TMPFILE: a process killed before the link leaves nothing.
    unnamed = getattr(os, "O_TMPFILE", 0)
    if not unnamed or not Path("/proc/self/fd").is_dir():
        return None
    try:
        return os.open(folder, unnamed | os.O_WRONLY | os.O_CLOEXEC, 0o600)
    except OSError:
        return None  # not on this file system: a named temporary file says why, if it fails


def _written_and_synced(stream: IO[str], head: str, body: IO[str], tail: str) -> None:
    _copy_out(stream, head, body, tail, "--output")
    _synced(stream.fileno())
    if INTERRUPTS.received:
        raise click.exceptions.Abort


def _synced(descriptor: int) -> None:
    try:
        os.fsync(descriptor)
    except OSError as exc:
        raise CommandError(
            "--output", f"cannot be written ({_reason(exc)})", ExitCode.USAGE
        ) from None


def _synced_folder(folder: Path | None) -> None:
    descriptor = os.open(folder or Path(), os.O_RDONLY)
    try:
        os.fsync(descriptor)
    finally:
        os.close(descriptor)


def _link_unnamed(descriptor: int, folder: Path, path: Path) -> None:
    # Through /proc, following its link to the open file: what linkat does
    # with AT_SYMLINK_FOLLOW, which os.link asks for only given a folder.
    try:
        in_folder = os.open(folder, os.O_RDONLY | os.O_CLOEXEC)
    except OSError as exc:
        raise CommandError(
            "--output", f"cannot be created ({_reason(exc)})", ExitCode.USAGE
        ) from None
    try:
        _link(f"/proc/self/fd/{descriptor}", path, renamable=False, folder=in_folder)
    finally:
        os.close(in_folder)


def _link(source: str, path: Path, *, renamable: bool, folder: int | None = None) -> None:
    try:
        if folder is None:
            os.link(source, path)
        else:
            os.link(source, path.name, dst_dir_fd=folder, follow_symlinks=True)
    except FileExistsError:
        raise CommandError(
            "--output", "names a file that exists already; name a new one", ExitCode.USAGE
        ) from None
    except OSError as exc:
        if not renamable or exc.errno not in _NO_LINKS:
            raise CommandError(
                "--output", f"cannot be created ({_reason(exc)})", ExitCode.USAGE
            ) from None
        # A file system without hard links: renamed, after a last look
        # that the name is still free.
        if path.exists():
            raise CommandError(
                "--output", "names a file that exists already; name a new one", ExitCode.USAGE
            ) from None
        try:
            Path(source).rename(path)
        except OSError as again:
            raise CommandError(
                "--output", f"cannot be created ({_reason(again)})", ExitCode.USAGE
            ) from None


# The errors of a file system that has no hard links.
_NO_LINKS: Final = frozenset(
    {errno.EPERM, errno.ENOTSUP, errno.EOPNOTSUPP, errno.ENOSYS, errno.EMLINK}
)


def _copy_out(stream: IO[str], head: str, body: IO[str], tail: str, argument: str) -> None:
    try:
        stream.write(head)
        shutil.copyfileobj(body, stream)
        stream.write(tail)
        stream.flush()
    except OSError as exc:
        raise CommandError(
            argument, f"cannot be written ({_reason(exc)})", ExitCode.USAGE
        ) from None


def _reason(error: OSError) -> str:
    # The system's words for it, never the path (it may name a person).
    return error.strerror or type(error).__name__


@cli.command("replay-deletions", epilog=_URL_HELP)
@_url
@click.option(
    "--since",
    metavar="INSTANT",
    required=True,
    help=(
        "When the restored copy was taken, ISO 8601 in UTC as receipts print instants"
        " (2026-01-31T12:00:00Z): the deletions a copy taken then may lack are made again."
    ),
)
@_ledger("The deletion ledger (sqlite:///path or postgresql://...?schema=NAME)", required=True)
@_ledger_key_file
@click.option("--dry-run", is_flag=True, help="Count what would be deleted again; delete nothing.")
@_json
def replay_deletions_command(  # noqa: PLR0913, PLR0917 - click passes each option by name
    url: str,
    since: str,
    ledger_url: str,
    ledger_key_file: Path | None,
    dry_run: bool,  # noqa: FBT001
    as_json: bool,  # noqa: FBT001
) -> int:
    """Make again, on a restored store, every deletion the ledger records since INSTANT.

    Erases again the end users whose keyed hash matches, forgets the recorded
    fact ids, re-runs the recorded expiries with their cutoffs, and prints a
    receipt. Run it on the restored store with traffic kept off, then serve.
    The store must list its end users (the ledger holds only keyed hashes).
    A key other than the ledger's is refused. Idempotent: a second run
    deletes nothing; a run that stops part way is finished by the next.
    """
    instant = checked_instant(since, "--since")
    return _run(
        partial(
            replay_deletions,
            url,
            ledger_url,
            ledger_key_file,
            instant,
            dry_run=dry_run,
            as_json=as_json,
        )
    )


@cli.group("ledger")
def ledger_group() -> None:
    """The deletion ledger's upkeep."""


@ledger_group.command("prune")
@_ledger("The deletion ledger (sqlite:///path or postgresql://...?schema=NAME)", required=True)
@_ledger_key_file
@click.option(
    "--before",
    metavar="INSTANT",
    required=True,
    help=(
        "When the oldest backup still kept was taken, ISO 8601 with its offset:"
        " entries done before it are removed."
    ),
)
@_json
def ledger_prune(
    ledger_url: str,
    ledger_key_file: Path | None,
    before: str,
    as_json: bool,  # noqa: FBT001
) -> int:
    """Remove the ledger entries no kept backup needs any more, and print a receipt.

    An entry whose deletion was done before INSTANT is in every backup taken
    since, so a replay onto them never reads it; it is removed, in one
    transaction. Each removed entry held an end user's keyed hash.
    """
    instant = checked_instant(before, "--before")
    return prune_ledger(ledger_url, ledger_key_file, instant, as_json=as_json)
