"""What the ledger's command line refuses: a missing ledger, an empty one, bad instants.

A reading command (``replay-deletions``, ``ledger prune``, ``expire
--dry-run``) never creates a ledger; an empty ``PSYCH_MEMORY_LEDGER`` is
refused as an empty ``--ledger`` is; every command reads its instant the
same way; a hard link to the store is the store.
"""

from __future__ import annotations

import os
import sqlite3
from contextlib import closing
from datetime import UTC, datetime, timedelta
from pathlib import Path

import anyio
import pytest

from psych_runtime.memory.admin import ExitCode, main, open_memory
from psych_runtime.memory.ledger import ledger_key, open_ledger
from psych_runtime.memory.port import Memory

SECRET = "hunter2"  # noqa: S105 - a password no message may show
STORE = "sqlite:///live.sqlite3"
MISSING = "sqlite:///no-such-ledger.sqlite3"
EPOCH = "2026-01-01T00:00:00Z"
ERASE = ["erase", STORE, "--tenant", "acme", "--user", "u1", "--yes"]


@pytest.fixture(autouse=True)
def _here(ledger_folder: Path) -> None:
    """Every test here starts in a fresh ledger folder."""


def _seed() -> None:
    async def write() -> None:
        async with open_memory(STORE) as store:
            for user in ("u1", "u2"):
                await store.remember("acme", user, f"fact of {user}")

    anyio.run(write)


def _facts(end_user: str) -> tuple[Memory, ...]:
    async def read() -> tuple[Memory, ...]:
        async with open_memory(STORE) as store:
            return await store.recall("acme", end_user)

    return anyio.run(read)


def _ledger_tables(path: str) -> set[str]:
    with closing(sqlite3.connect(path)) as raw:
        names = {name for (name,) in raw.execute("SELECT name FROM sqlite_master")}
    return {name for name in names if name.startswith("psych_ledger")}


@pytest.mark.parametrize(
    "command",
    [
        ["replay-deletions", STORE, "--since", EPOCH],
        ["replay-deletions", STORE, "--since", EPOCH, "--dry-run"],
        ["ledger", "prune", "--before", EPOCH],
        ["expire", STORE, "--tenant", "acme", "--older-than", "1d", "--dry-run"],
    ],
    ids=["replay", "replay-dry-run", "prune", "expire-dry-run"],
)
@pytest.mark.parametrize("named_by", ["option", "environment"])
def test_a_reading_command_never_creates_a_missing_sqlite_ledger(
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
    command: list[str],
    named_by: str,
) -> None:
    _seed()
    if named_by == "option":
        command = [*command, "--ledger", MISSING]
    else:
        monkeypatch.setenv("PSYCH_MEMORY_LEDGER", MISSING)
    assert main(command) == ExitCode.USAGE
    captured = capsys.readouterr()
    assert captured.out == ""
    assert (
        "--ledger: names no existing ledger (sqlite:///no-such-ledger.sqlite3): "
        "this command creates none"
    ) in captured.err
    assert len(captured.err.strip().splitlines()) == 1
    assert not (tmp_path / "no-such-ledger.sqlite3").exists()
    assert sorted(path.name for path in tmp_path.iterdir()) == ["live.sqlite3"]
    assert len(_facts("u1")) == 1


def test_a_reading_command_still_reads_a_ledger_that_exists(
    capsys: pytest.CaptureFixture[str],
) -> None:
    _seed()
    open_ledger("sqlite:///ledger.sqlite3", ledger_key()).close()
    ledger = ["--ledger", "sqlite:///ledger.sqlite3"]
    assert main(["replay-deletions", STORE, "--since", EPOCH, "--dry-run", *ledger]) == 0
    assert "ledger entries read:     0" in capsys.readouterr().out
    assert main(["ledger", "prune", "--before", EPOCH, *ledger]) == ExitCode.DONE
    assert "entries pruned:       0" in capsys.readouterr().out
    dry_run = ["expire", STORE, "--tenant", "acme", "--older-than", "1d", "--dry-run"]
    assert main([*dry_run, *ledger]) == ExitCode.DONE
    assert "nothing recorded" in capsys.readouterr().out


def _schema_exists(dsn: str, schema: str) -> bool:
    import psycopg  # noqa: PLC0415 - only the PostgreSQL test needs the driver

    with psycopg.connect(dsn, autocommit=True) as conn:
        row = conn.execute(
            "SELECT count(*) FROM information_schema.schemata WHERE schema_name = %s", (schema,)
        ).fetchone()
    assert row is not None
    return bool(row[0])


@pytest.mark.parametrize(
    "command",
    [
        ["replay-deletions", STORE, "--since", EPOCH],
        ["replay-deletions", STORE, "--since", EPOCH, "--dry-run"],
        ["ledger", "prune", "--before", EPOCH],
    ],
    ids=["replay", "replay-dry-run", "prune"],
)
def test_a_reading_command_never_creates_a_missing_postgres_ledger(
    capsys: pytest.CaptureFixture[str],
    postgres_dsn: str,
    postgres_schema: str,
    command: list[str],
) -> None:
    _seed()
    separator = "&" if "?" in postgres_dsn else "?"
    # A password the server's trust of local connections ignores, and no message may show.
    url = f"{postgres_dsn}{separator}schema={postgres_schema}&password={SECRET}"
    assert main([*command, "--ledger", url]) == ExitCode.USAGE
    err = capsys.readouterr().err
    assert "--ledger: names no existing ledger (" in err
    assert "password=***" in err
    assert SECRET not in err
    assert not _schema_exists(postgres_dsn, postgres_schema)


@pytest.mark.parametrize(
    "command",
    [
        ERASE,
        ["expire", STORE, "--tenant", "acme", "--older-than", "1d"],
        ["expire", STORE, "--all-tenants", "--older-than", "1d", "--dry-run"],
        ["replay-deletions", STORE, "--since", EPOCH],
        ["ledger", "prune", "--before", EPOCH],
    ],
    ids=["erase", "expire", "expire-dry-run", "replay", "prune"],
)
@pytest.mark.parametrize("named_by", ["option", "environment"])
def test_an_empty_ledger_is_a_usage_error_wherever_it_is_named(
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    command: list[str],
    named_by: str,
) -> None:
    _seed()
    if named_by == "option":
        command = [*command, "--ledger", ""]
    else:
        monkeypatch.setenv("PSYCH_MEMORY_LEDGER", "")
    assert main(command) == ExitCode.USAGE
    captured = capsys.readouterr()
    assert captured.out == ""
    assert "--ledger: must name a ledger" in captured.err
    assert "not be empty" in captured.err
    # Refused before anything was deleted, never taken for "no ledger".
    assert len(_facts("u1")) == 1


def _future(delta: timedelta) -> str:
    return (datetime.now(UTC) + delta).isoformat()


@pytest.mark.parametrize(
    ("command", "option"),
    [
        (["replay-deletions", STORE, "--ledger", "sqlite:///ledger.sqlite3", "--since"], "--since"),
        (["ledger", "prune", "--ledger", "sqlite:///ledger.sqlite3", "--before"], "--before"),
        (["expire", STORE, "--tenant", "acme", "--before"], "--before"),
    ],
    ids=["replay", "prune", "expire"],
)
@pytest.mark.parametrize(
    "instant",
    [
        pytest.param(_future(timedelta(days=1)), id="tomorrow"),
        pytest.param("9999-12-31T23:00:00-05:00", id="after-year-9999-in-utc"),
        pytest.param("9999-12-31T23:59:59.999999-00:01", id="a-minute-after-the-last"),
    ],
)
def test_every_command_refuses_an_instant_in_the_future(
    capsys: pytest.CaptureFixture[str], command: list[str], option: str, instant: str
) -> None:
    _seed()
    open_ledger("sqlite:///ledger.sqlite3", ledger_key()).close()
    assert main([*command, instant]) == ExitCode.USAGE
    captured = capsys.readouterr()
    assert captured.out == ""
    assert captured.err.strip() == f"psych-memory: error: {option}: must not be in the future"
    assert len(_facts("u1")) == 1


@pytest.mark.parametrize(
    ("command", "option"),
    [
        (["replay-deletions", STORE, "--ledger", "sqlite:///ledger.sqlite3", "--since"], "--since"),
        (["ledger", "prune", "--ledger", "sqlite:///ledger.sqlite3", "--before"], "--before"),
        (["expire", STORE, "--tenant", "acme", "--before"], "--before"),
    ],
    ids=["replay", "prune", "expire"],
)
@pytest.mark.parametrize("instant", ["last week", "2026-01-01T00:00:00", "2026-13-01T00:00Z"])
def test_every_command_words_a_malformed_instant_the_same(
    capsys: pytest.CaptureFixture[str], command: list[str], option: str, instant: str
) -> None:
    assert main([*command, instant]) == ExitCode.USAGE
    assert capsys.readouterr().err.strip() == (
        f"psych-memory: error: {option}: must be an instant in ISO 8601 with its offset,"
        " such as 2026-01-31T12:00:00Z"
    )


@pytest.mark.parametrize("instant", ["0001-01-01T00:00:00+01:00", "0001-01-01T00:59:59+23:59"])
def test_an_instant_before_the_first_in_utc_is_read_as_the_first(
    capsys: pytest.CaptureFixture[str], instant: str
) -> None:
    _seed()
    open_ledger("sqlite:///ledger.sqlite3", ledger_key()).close()
    ledger = ["--ledger", "sqlite:///ledger.sqlite3"]
    first = "0001-01-01T00:00:00.000000Z"
    assert main(["replay-deletions", STORE, "--since", instant, *ledger]) == ExitCode.DONE
    assert f"recorded since:          {first}" in capsys.readouterr().out
    assert main(["ledger", "prune", "--before", instant, *ledger]) == ExitCode.DONE
    assert f"entries done before:  {first}" in capsys.readouterr().out
    expire = ["expire", STORE, "--tenant", "acme", "--before", instant]
    assert main(expire) == ExitCode.DONE
    out = capsys.readouterr().out
    assert f"facts created before {first}" in out
    assert "facts deleted:  0" in out
    assert len(_facts("u1")) == 1


def test_a_hard_link_to_the_store_is_refused_as_the_store(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    _seed()
    os.link(tmp_path / "live.sqlite3", tmp_path / "linked.sqlite3")
    linked = "sqlite:///linked.sqlite3"
    commands = [
        [*ERASE, "--ledger", linked],
        ["expire", STORE, "--all-tenants", "--older-than", "1h", "--ledger", linked],
        ["replay-deletions", STORE, "--since", EPOCH, "--ledger", linked],
    ]
    for command in commands:
        assert main(command) == ExitCode.USAGE
        assert "--ledger: must live outside the store it records" in capsys.readouterr().err
    # Refused before the ledger was opened: its tables never landed in the store.
    assert _ledger_tables("live.sqlite3") == set()
    assert len(_facts("u1")) == 1
