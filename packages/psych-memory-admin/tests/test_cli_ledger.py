"""``psych-memory ledger reapply``: a ledger's deletions made again on a restored SQLite file."""

from __future__ import annotations

import json
import shutil
import sqlite3
from collections.abc import Callable
from contextlib import closing
from datetime import UTC, datetime, timedelta
from pathlib import Path

import anyio
import pytest

from psych_runtime.memory.admin import ExitCode, main, open_memory
from psych_runtime.memory.ledger import LedgerKey, open_ledger, with_ledger
from psych_runtime.memory.port import Memory

KEY_TEXT = "a ledger key of at least 32 bytes, for the tests"


@pytest.fixture(autouse=True)
def _here(
    require_schemes: Callable[..., None], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    require_schemes("sqlite")
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("PSYCH_MEMORY_LEDGER_KEY", KEY_TEXT)
    monkeypatch.delenv("PSYCH_MEMORY_LEDGER", raising=False)


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
        with open_ledger("sqlite:///ledger.sqlite3", LedgerKey(KEY_TEXT.encode())) as ledger:
            async with open_memory("sqlite:///live.sqlite3") as bare:
                assert await with_ledger(bare, ledger).erase("acme", "u1") == 1
        shutil.copyfile("copy.sqlite3", "live.sqlite3")
        return taken if taken_before else datetime.now(UTC) + timedelta(seconds=1)

    return anyio.run(run)


def test_reapply_erases_again_and_prints_a_receipt(capsys: pytest.CaptureFixture[str]) -> None:
    taken = _restored_after_erasing(taken_before=True)
    assert len(_facts("sqlite:///live.sqlite3", "u1")) == 1
    since = taken.isoformat().replace("+00:00", "Z")
    args = ["ledger", "reapply", "sqlite:///live.sqlite3", "--ledger", "sqlite:///ledger.sqlite3"]
    assert main([*args, "--since", since, "--json"]) == ExitCode.DONE
    receipt = json.loads(capsys.readouterr().out)
    assert receipt["format"] == "psych-memory-reapply-receipt"
    assert (receipt["entries"], receipt["erased_end_users"], receipt["facts_deleted"]) == (1, 1, 1)
    assert _facts("sqlite:///live.sqlite3", "u1") == ()
    assert len(_facts("sqlite:///live.sqlite3", "u2")) == 1
    # Again: nothing left to delete.
    assert main(args) == ExitCode.DONE
    out = capsys.readouterr().out
    assert "facts deleted again:     0" in out
    assert "the ledger's first entry" in out
    assert KEY_TEXT not in out


def test_the_ledger_comes_from_the_environment_and_since_filters(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    later = _restored_after_erasing(taken_before=False)
    monkeypatch.setenv("PSYCH_MEMORY_LEDGER", "sqlite:///ledger.sqlite3")
    args = ["ledger", "reapply", "sqlite:///live.sqlite3", "--since", later.isoformat()]
    assert main(args) == ExitCode.DONE
    assert "ledger entries read:     0" in capsys.readouterr().out
    assert len(_facts("sqlite:///live.sqlite3", "u1")) == 1


def test_a_wrong_or_missing_key_is_refused(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    _restored_after_erasing(taken_before=True)
    args = ["ledger", "reapply", "sqlite:///live.sqlite3", "--ledger", "sqlite:///ledger.sqlite3"]
    other = tmp_path / "other.key"
    other.write_text("another key of at least thirty-two bytes\n")
    assert main([*args, "--ledger-key-file", str(other)]) == ExitCode.REFUSED
    err = capsys.readouterr().err
    assert "--ledger-key-file: is not the key this ledger was created with" in err
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
        (["--ledger", "mysql://x/y"], "--ledger: must be a sqlite:/// or postgresql:// URL"),
        (["--ledger", "postgresql://x/y"], "--ledger: must name its schema once"),
        (["--ledger", "sqlite:///ledger.sqlite3", "--since", "yesterday"], "--since: must be"),
        (["--ledger", "sqlite:///ledger.sqlite3", "--since", "2026-01-01T00:00"], "--since:"),
        ([], "Missing option '--ledger'"),
    ],
)
def test_bad_arguments_are_usage_errors(
    capsys: pytest.CaptureFixture[str], extra: list[str], named: str
) -> None:
    assert main(["ledger", "reapply", "sqlite:///live.sqlite3", *extra]) == ExitCode.USAGE
    assert named in capsys.readouterr().err


def test_a_file_that_is_not_a_ledger_is_unavailable(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    (tmp_path / "garbage").write_bytes(b"not a ledger" * 100)
    args = ["ledger", "reapply", "sqlite:///live.sqlite3", "--ledger", "sqlite:///garbage"]
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
    key = LedgerKey(KEY_TEXT.encode())
    with open_ledger("sqlite:///ledger.sqlite3", key) as ledger:
        (entry,) = ledger.entries()
    assert (entry.kind, entry.end_user_hash, entry.deleted) == (
        "erase",
        key.end_user_hash("acme", "u1"),
        1,
    )
    shutil.copyfile("copy.sqlite3", "live.sqlite3")
    assert main(["ledger", "reapply", "sqlite:///live.sqlite3"]) == ExitCode.DONE
    assert "facts deleted again:     1" in capsys.readouterr().out
    assert _facts("sqlite:///live.sqlite3", "u1") == ()
    assert len(_facts("sqlite:///live.sqlite3", "u2")) == 1


def test_erase_is_refused_when_the_ledger_cannot_record_it(
    capsys: pytest.CaptureFixture[str],
) -> None:
    _seed("sqlite:///live.sqlite3")
    with open_ledger("sqlite:///ledger.sqlite3", LedgerKey(KEY_TEXT.encode())) as ledger:
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
    reapply = ["ledger", "reapply", "sqlite:///live.sqlite3", "--ledger", "sqlite:///live.sqlite3"]
    assert main(reapply) == ExitCode.USAGE
    assert "--ledger: must live outside" in capsys.readouterr().err
    assert len(_facts("sqlite:///live.sqlite3", "u1")) == 1
    # Refused before either was opened: no ledger table in the store's file.
    with closing(sqlite3.connect("live.sqlite3")) as raw:
        tables = {name for (name,) in raw.execute("SELECT name FROM sqlite_master")}
    assert not any(name.startswith("psych_ledger") for name in tables)
