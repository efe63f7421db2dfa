"""``replay-deletions``, ``ledger prune``, and ``erase`` and ``expire`` with a ledger."""

from __future__ import annotations

import json
import os
import shutil
import sqlite3
from contextlib import closing
from datetime import UTC, datetime, timedelta
from pathlib import Path

import anyio
import pytest

from psych_runtime.memory.admin import ExitCode, main, open_memory
from psych_runtime.memory.ledger import ledger_key, open_ledger, with_ledger
from psych_runtime.memory.port import Memory

EPOCH = "2026-01-01T00:00:00Z"
REPLAY = ["replay-deletions", "sqlite:///live.sqlite3", "--ledger", "sqlite:///ledger.sqlite3"]


@pytest.fixture(autouse=True)
def _here(ledger_folder: Path) -> None:
    """Every test here starts in a fresh ledger folder."""


def _facts(url: str, end_user: str) -> tuple[Memory, ...]:
    async def read() -> tuple[Memory, ...]:
        async with open_memory(url) as store:
            return await store.recall("acme", end_user)

    return anyio.run(read)


def _restored_after_erasing(taken_before: bool) -> datetime:
    """Fill live.sqlite3, copy it to copy.sqlite3, erase u1 through the ledger, restore the copy."""

    async def run() -> datetime:
        async with open_memory("sqlite:///live.sqlite3") as store:
            for user in ("u1", "u2"):
                await store.remember("acme", user, f"fact of {user}")
        taken = datetime.now(UTC)
        shutil.copyfile("live.sqlite3", "copy.sqlite3")
        with open_ledger("sqlite:///ledger.sqlite3", ledger_key()) as ledger:
            async with open_memory("sqlite:///live.sqlite3") as bare:
                assert await with_ledger(bare, ledger).erase("acme", "u1") == 1
        shutil.copyfile("copy.sqlite3", "live.sqlite3")
        # After the erasure was done, and not in the future (a usage error).
        return taken if taken_before else datetime.now(UTC)

    return anyio.run(run)


def test_reapply_erases_again_and_prints_a_receipt(capsys: pytest.CaptureFixture[str]) -> None:
    taken = _restored_after_erasing(taken_before=True)
    assert len(_facts("sqlite:///live.sqlite3", "u1")) == 1
    since = taken.isoformat().replace("+00:00", "Z")
    args = [*REPLAY, "--since", since]
    assert main([*args, "--dry-run", "--json"]) == ExitCode.DONE
    counted = json.loads(capsys.readouterr().out)
    assert (counted["dry_run"], counted["facts_deleted"], counted["erased_end_users"]) == (
        True,
        1,
        1,
    )
    assert len(_facts("sqlite:///live.sqlite3", "u1")) == 1
    assert main([*args, "--json"]) == ExitCode.DONE
    receipt = json.loads(capsys.readouterr().out)
    assert receipt["receipt"] == "psych-memory-replay-deletions-receipt"
    assert receipt["since"] == taken.isoformat(timespec="microseconds").replace("+00:00", "Z")
    assert (receipt["entries"], receipt["erased_end_users"], receipt["facts_deleted"]) == (1, 1, 1)
    assert receipt["dry_run"] is False
    assert _facts("sqlite:///live.sqlite3", "u1") == ()
    assert len(_facts("sqlite:///live.sqlite3", "u2")) == 1
    # Again: nothing left to delete.
    assert main(args) == ExitCode.DONE
    out = capsys.readouterr().out
    assert "facts deleted again:     0" in out
    assert "ledger entries read:     1" in out
    assert os.environ["PSYCH_MEMORY_LEDGER_KEY"] not in out
    assert main([*args, "--dry-run"]) == ExitCode.DONE
    assert "Deletions counted, none made (dry run)" in capsys.readouterr().out


def test_the_ledger_comes_from_the_environment_and_since_filters(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    later = _restored_after_erasing(taken_before=False)
    monkeypatch.setenv("PSYCH_MEMORY_LEDGER", "sqlite:///ledger.sqlite3")
    args = ["replay-deletions", "sqlite:///live.sqlite3", "--since", later.isoformat()]
    assert main(args) == ExitCode.DONE
    assert "ledger entries read:     0" in capsys.readouterr().out
    assert len(_facts("sqlite:///live.sqlite3", "u1")) == 1


def test_a_wrong_or_missing_key_is_refused(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    taken = _restored_after_erasing(taken_before=True)
    args = [*REPLAY, "--since", taken.isoformat()]
    other = tmp_path / "other.key"
    other.write_text("another key of at least thirty-two bytes\n")
    assert main([*args, "--ledger-key-file", str(other)]) == ExitCode.REFUSED
    err = capsys.readouterr().err
    assert "--ledger-key-file: is not the key this ledger was created with" in err
    # Never taken for "nothing to replay": no receipt at all.
    assert capsys.readouterr().out == ""
    monkeypatch.setenv("PSYCH_MEMORY_LEDGER_KEY", "another key of at least thirty-two bytes")
    assert main([*args, "--dry-run"]) == ExitCode.REFUSED
    captured = capsys.readouterr()
    assert "PSYCH_MEMORY_LEDGER_KEY: is not the key this ledger was created with" in captured.err
    assert captured.out == ""
    monkeypatch.delenv("PSYCH_MEMORY_LEDGER_KEY")
    assert main(args) == ExitCode.USAGE
    assert "PSYCH_MEMORY_LEDGER_KEY: must be given" in capsys.readouterr().err
    monkeypatch.setenv("PSYCH_MEMORY_LEDGER_KEY", "short")
    assert main(args) == ExitCode.USAGE
    err = capsys.readouterr().err
    assert "at least 32 bytes" in err
    assert "short" not in err.replace("at least", "")
    # Nothing was deleted by the refused runs.
    assert len(_facts("sqlite:///live.sqlite3", "u1")) == 1


@pytest.mark.parametrize(
    ("extra", "named"),
    [
        (["--ledger", "mysql://x/y", "--since", EPOCH], "--ledger: must be a sqlite:///"),
        (["--ledger", "postgresql://x/y", "--since", EPOCH], "--ledger: must name"),
        (["--ledger", "sqlite:///ledger.sqlite3", "--since", "yesterday"], "--since: must be"),
        (["--ledger", "sqlite:///ledger.sqlite3", "--since", "2026-01-01T00:00"], "--since:"),
        (["--since", "2026-01-01T00:00:00Z"], "Missing option '--ledger'"),
        (["--ledger", "sqlite:///ledger.sqlite3"], "Missing option '--since'"),
    ],
)
def test_bad_arguments_are_usage_errors(
    capsys: pytest.CaptureFixture[str], extra: list[str], named: str
) -> None:
    assert main(["replay-deletions", "sqlite:///live.sqlite3", *extra]) == ExitCode.USAGE
    err = capsys.readouterr().err
    assert named in err
    assert len(err.strip().splitlines()) <= 3


def test_a_file_that_is_not_a_ledger_is_unavailable(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    (tmp_path / "garbage").write_bytes(b"not a ledger" * 100)
    args = [*REPLAY[:3], "sqlite:///garbage", "--since", "2026-01-01T00:00:00Z"]
    assert main(args) == ExitCode.UNAVAILABLE
    assert "--ledger: the file is not a usable ledger" in capsys.readouterr().err


def _seed(url: str) -> None:
    async def write() -> None:
        async with open_memory(url) as store:
            for user in ("u1", "u2"):
                await store.remember("acme", user, f"fact of {user}")

    anyio.run(write)


def test_erase_with_a_ledger_records_it_and_a_restore_loses_it_again(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    _seed("sqlite:///live.sqlite3")
    shutil.copyfile("live.sqlite3", "copy.sqlite3")
    monkeypatch.setenv("PSYCH_MEMORY_LEDGER", "sqlite:///ledger.sqlite3")
    erase = ["erase", "sqlite:///live.sqlite3", "--tenant", "acme", "--user", "u1", "--yes"]
    assert main([*erase, "--json"]) == ExitCode.DONE
    assert json.loads(capsys.readouterr().out)["facts_deleted"] == 1
    key = ledger_key()
    with open_ledger("sqlite:///ledger.sqlite3", key) as ledger:
        (entry,) = ledger.entries()
    assert (entry.kind, entry.end_user_hash, entry.deleted) == (
        "erase",
        key.end_user_hash("acme", "u1"),
        1,
    )
    shutil.copyfile("copy.sqlite3", "live.sqlite3")
    assert main([*REPLAY[:2], "--since", "2026-01-01T00:00:00Z"]) == ExitCode.DONE
    assert "facts deleted again:     1" in capsys.readouterr().out
    assert _facts("sqlite:///live.sqlite3", "u1") == ()
    assert len(_facts("sqlite:///live.sqlite3", "u2")) == 1


def test_erase_is_refused_when_the_ledger_cannot_record_it(
    capsys: pytest.CaptureFixture[str],
) -> None:
    _seed("sqlite:///live.sqlite3")
    with open_ledger("sqlite:///ledger.sqlite3", ledger_key()) as ledger:
        path = ledger.path
    assert path is not None
    with closing(sqlite3.connect(path)) as raw, raw:
        raw.execute(
            "CREATE TRIGGER refuse BEFORE INSERT ON psych_ledger_deletion"
            " BEGIN SELECT RAISE(ABORT, 'refused'); END"
        )
    erase = ["erase", "sqlite:///live.sqlite3", "--tenant", "acme", "--user", "u1", "--yes"]
    assert main([*erase, "--ledger", "sqlite:///ledger.sqlite3"]) == ExitCode.UNAVAILABLE
    err = capsys.readouterr().err
    assert "--ledger: the deletion ledger cannot be written" in err
    assert "nothing was deleted" in err
    assert len(_facts("sqlite:///live.sqlite3", "u1")) == 1


def test_erase_refuses_a_ledger_inside_the_store(capsys: pytest.CaptureFixture[str]) -> None:
    _seed("sqlite:///live.sqlite3")
    erase = ["erase", "sqlite:///live.sqlite3", "--tenant", "acme", "--user", "u1", "--yes"]
    for same in ("sqlite:///live.sqlite3", "sqlite:///./live.sqlite3"):
        assert main([*erase, "--ledger", same]) == ExitCode.USAGE
        assert "--ledger: must live outside the store it records" in capsys.readouterr().err
    reapply = [*REPLAY[:3], "sqlite:///live.sqlite3", "--since", "2026-01-01T00:00:00Z"]
    assert main(reapply) == ExitCode.USAGE
    assert "--ledger: must live outside" in capsys.readouterr().err
    assert len(_facts("sqlite:///live.sqlite3", "u1")) == 1
    # Refused before either was opened: no ledger table in the store's file.
    with closing(sqlite3.connect("live.sqlite3")) as raw:
        tables = {name for (name,) in raw.execute("SELECT name FROM sqlite_master")}
    assert not any(name.startswith("psych_ledger") for name in tables)


def test_expire_with_a_ledger_is_recorded_and_replayed_with_its_cutoff(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    _seed("sqlite:///live.sqlite3")
    taken = datetime.now(UTC)
    shutil.copyfile("live.sqlite3", "copy.sqlite3")
    _seed("sqlite:///live.sqlite3")
    cutoff = datetime.now(UTC)
    monkeypatch.setenv("PSYCH_MEMORY_LEDGER", "sqlite:///ledger.sqlite3")
    expire = ["expire", "sqlite:///live.sqlite3", "--tenant", "acme"]
    expire += ["--before", cutoff.isoformat()]
    # A dry run records nothing, so it creates no ledger either.
    assert main([*expire, "--dry-run"]) == ExitCode.USAGE
    assert "--ledger: names no existing ledger" in capsys.readouterr().err
    assert not Path("ledger.sqlite3").exists()
    assert main(expire) == ExitCode.DONE
    capsys.readouterr()
    assert main([*expire, "--dry-run"]) == ExitCode.DONE
    capsys.readouterr()
    with open_ledger("sqlite:///ledger.sqlite3", ledger_key()) as ledger:
        (entry,) = ledger.entries()
    assert (entry.kind, entry.tenant, entry.end_user_hash, entry.deleted) == (
        "expire",
        "acme",
        None,
        4,
    )
    assert entry.cutoff == cutoff
    shutil.copyfile("copy.sqlite3", "live.sqlite3")
    # Added after the restore, with the store serving again: younger than the cutoff.
    _seed("sqlite:///live.sqlite3")
    assert main(["replay-deletions", "sqlite:///live.sqlite3", "--since", taken.isoformat()]) == 0
    out = capsys.readouterr().out
    assert "expiries run again:      1" in out
    assert "facts deleted again:     2" in out
    assert len(_facts("sqlite:///live.sqlite3", "u1")) == 1
    assert _facts("sqlite:///live.sqlite3", "u1")[0].created_at > cutoff


def test_expire_is_refused_when_the_ledger_cannot_record_it(
    capsys: pytest.CaptureFixture[str],
) -> None:
    _seed("sqlite:///live.sqlite3")
    with open_ledger("sqlite:///ledger.sqlite3", ledger_key()) as ledger:
        path = ledger.path
    assert path is not None
    with closing(sqlite3.connect(path)) as raw, raw:
        raw.execute(
            "CREATE TRIGGER refuse BEFORE INSERT ON psych_ledger_deletion"
            " BEGIN SELECT RAISE(ABORT, 'refused'); END"
        )
    now = datetime.now(UTC).isoformat()
    expire = ["expire", "sqlite:///live.sqlite3", "--all-tenants", "--before", now]
    assert main([*expire, "--ledger", "sqlite:///ledger.sqlite3"]) == ExitCode.UNAVAILABLE
    assert "nothing was deleted" in capsys.readouterr().err
    assert len(_facts("sqlite:///live.sqlite3", "u1")) == 1


def test_prune_removes_the_entries_done_before_an_instant_with_a_receipt(
    capsys: pytest.CaptureFixture[str],
) -> None:
    _restored_after_erasing(taken_before=True)
    middle = datetime.now(UTC)
    with open_ledger("sqlite:///ledger.sqlite3", ledger_key()) as ledger:

        async def erase_again() -> None:
            async with open_memory("sqlite:///live.sqlite3") as bare:
                await with_ledger(bare, ledger).erase("acme", "u2")

        anyio.run(erase_again)
        (old, kept) = ledger.entries()
    prune = ["ledger", "prune", "--ledger", "sqlite:///ledger.sqlite3"]
    assert main([*prune, "--before", middle.isoformat(), "--json"]) == ExitCode.DONE
    receipt = json.loads(capsys.readouterr().out)
    assert receipt["receipt"] == "psych-memory-ledger-prune-receipt"
    assert (receipt["entries_pruned"], receipt["entries_kept"]) == (1, 1)
    with open_ledger("sqlite:///ledger.sqlite3", ledger_key()) as ledger:
        assert ledger.entries() == (kept,)
    assert old.last_at < middle <= kept.last_at
    # Again: nothing more to remove.
    assert main([*prune, "--before", middle.isoformat()]) == ExitCode.DONE
    assert "entries pruned:       0" in capsys.readouterr().out
    future = (datetime.now(UTC) + timedelta(days=1)).isoformat()
    assert main([*prune, "--before", future]) == ExitCode.USAGE
    assert "--before: must not be in the future" in capsys.readouterr().err
    assert main([*prune, "--before", "last week"]) == ExitCode.USAGE
    assert "--before: must be an instant in ISO 8601" in capsys.readouterr().err
