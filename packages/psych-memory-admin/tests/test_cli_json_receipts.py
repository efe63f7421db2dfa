"""``--json`` on every command that reports, and one receipt shape for all of them.

Each command runs in-process through `main` on SQLite files; with
``--json`` it prints one JSON object, and nothing else, whose first keys
are ``"receipt"`` (``psych-memory-<kind>-receipt``) and ``"version"``.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import anyio
import click
import pytest

from psych_runtime.memory.admin import ExitCode, main, open_memory
from psych_runtime.memory.admin._cli import cli

STORE = "sqlite:///a.db"
LEDGER = "sqlite:///ledger.sqlite3"
FACTS = [
    ("acme", "u1", "ships to Berlin"),
    ("acme", "u1", "prefers email"),
    ("acme", "u2", "pays by invoice"),
    ("globex", "u9", "another tenant's fact"),
]


@pytest.fixture(autouse=True)
def _here(ledger_folder: Path) -> None:
    _seed(STORE)


def _seed(url: str) -> None:
    async def write() -> None:
        async with open_memory(url) as store:
            for tenant, end_user, content in FACTS:
                await store.remember(tenant, end_user, content)

    anyio.run(write)


def _commands(group: click.Group, prefix: str = "") -> Iterator[tuple[str, click.Command]]:
    for name, command in group.commands.items():
        if isinstance(command, click.Group):
            yield from _commands(command, f"{prefix}{name} ")
        else:
            yield f"{prefix}{name}", command


def test_every_command_takes_json() -> None:
    # Every command of psych-memory reports (a receipt, a count, a list, a
    # summary): each one takes --json.
    commands = dict(_commands(cli))
    assert set(commands) == {
        "count",
        "erase",
        "expire",
        "export",
        "import",
        "ledger prune",
        "migrate",
        "replay-deletions",
        "users",
    }
    without = [
        name
        for name, command in commands.items()
        if not any("--json" in parameter.opts for parameter in command.params)
    ]
    assert without == []


def _receipt(capsys: pytest.CaptureFixture[str], argv: list[str], kind: str) -> dict[str, Any]:
    assert main(argv) == ExitCode.DONE, capsys.readouterr().err
    captured = capsys.readouterr()
    assert captured.err == ""
    document: dict[str, Any] = json.loads(captured.out)
    assert list(document)[:2] == ["receipt", "version"]
    assert document["receipt"] == f"psych-memory-{kind}-receipt"
    assert document["version"] == 1
    return document


def _instant(moment: datetime) -> str:
    return moment.isoformat(timespec="microseconds").replace("+00:00", "Z")


def test_count_as_json(capsys: pytest.CaptureFixture[str]) -> None:
    everything = _receipt(capsys, ["count", STORE, "--json"], "count")
    assert (everything["store"], everything["tenant"], everything["end_user_id"]) == (
        STORE,
        None,
        None,
    )
    assert everything["facts"] == 4
    assert everything["counted_at"].endswith("Z")
    one = _receipt(capsys, ["count", STORE, "--tenant", "acme", "--user", "u1", "--json"], "count")
    assert (one["tenant"], one["end_user_id"], one["facts"]) == ("acme", "u1", 2)
    tenant = _receipt(capsys, ["count", STORE, "--tenant", "acme", "--json"], "count")
    assert tenant["facts"] == 3


def test_users_as_json(capsys: pytest.CaptureFixture[str]) -> None:
    listed = _receipt(capsys, ["users", STORE, "--tenant", "acme", "--json"], "users")
    assert (listed["store"], listed["tenant"], listed["end_users"]) == (STORE, "acme", ["u1", "u2"])
    empty = _receipt(capsys, ["users", STORE, "--tenant", "initech", "--json"], "users")
    assert empty["end_users"] == []


def test_migrate_as_json_first_and_again(capsys: pytest.CaptureFixture[str]) -> None:
    argv = ["migrate", STORE, "sqlite:///b.db", "--json"]
    first = _receipt(capsys, argv, "migration")
    assert (first["source"], first["target"], first["tenant"]) == (STORE, "sqlite:///b.db", None)
    assert (first["facts_copied"], first["facts"], first["end_users"]) == (4, 4, 3)
    assert (first["end_users_erased"], first["counts_checked"]) == (0, True)
    again = _receipt(capsys, argv, "migration")
    assert (again["facts_copied"], again["facts"]) == (0, 4)


def test_export_and_import_as_json(capsys: pytest.CaptureFixture[str]) -> None:
    argv = ["export", STORE, "--tenant", "acme", "--user", "u1", "-o", "u1.json", "--json"]
    exported = _receipt(capsys, argv, "export")
    assert (exported["tenant"], exported["end_user_id"]) == ("acme", "u1")
    assert (exported["facts_exported"], exported["export_format"]) == (2, "json")
    # The receipt's instant is the export's own.
    assert exported["exported_at"] == json.loads(Path("u1.json").read_text())["exported_at"]

    imported = _receipt(capsys, ["import", "sqlite:///c.db", "u1.json", "--json"], "import")
    assert (imported["store"], imported["tenant"], imported["end_user_id"]) == (
        "sqlite:///c.db",
        "acme",
        "u1",
    )
    assert (imported["facts_in_file"], imported["facts_written"]) == (2, 2)
    assert (imported["facts_already_stored"], imported["batches"]) == (0, 1)
    assert imported["batch_size"] == 2000
    again = _receipt(capsys, ["import", "sqlite:///c.db", "u1.json", "--json"], "import")
    assert (again["facts_written"], again["facts_already_stored"]) == (0, 2)


def test_export_to_standard_output_refuses_json(capsys: pytest.CaptureFixture[str]) -> None:
    # Standard output is the export itself: a receipt there would break it.
    argv = ["export", STORE, "--tenant", "acme", "--user", "u1", "--json"]
    assert main(argv) == ExitCode.USAGE
    captured = capsys.readouterr()
    assert captured.out == ""
    assert captured.err.startswith("psych-memory: error: --json: needs --output")
    assert captured.err.count("\n") == 1


def test_the_deletion_receipts_share_the_shape(capsys: pytest.CaptureFixture[str]) -> None:
    started = datetime.now(UTC) - timedelta(seconds=1)
    erase = ["erase", STORE, "--tenant", "acme", "--user", "u1", "--yes", "--ledger", LEDGER]
    erased = _receipt(capsys, [*erase, "--json"], "erasure")
    assert (erased["facts_deleted"], erased["ledger"]) == (2, LEDGER)

    cutoff = _instant(datetime.now(UTC))
    expire = ["expire", STORE, "--tenant", "globex", "--before", cutoff, "--json"]
    expired = _receipt(capsys, expire, "expiry")
    assert expired["facts_deleted"] == 1

    replay = ["replay-deletions", STORE, "--ledger", LEDGER, "--since", _instant(started)]
    replayed = _receipt(capsys, [*replay, "--json"], "replay-deletions")
    assert (replayed["entries"], replayed["facts_deleted"]) == (1, 0)

    prune = ["ledger", "prune", "--ledger", LEDGER, "--before", _instant(started)]
    pruned = _receipt(capsys, [*prune, "--json"], "ledger-prune")
    assert (pruned["entries_pruned"], pruned["entries_kept"]) == (0, 1)
