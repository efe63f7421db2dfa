"""Every deletion receipt says whether a deletion ledger recorded the deletion, and which."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path

import anyio
import pytest

from psych_runtime.memory.admin import ExitCode, main, open_memory
from psych_runtime.memory.ledger import ledger_key, open_ledger

STORE = "sqlite:///live.sqlite3"
LEDGER = "sqlite:///ledger.sqlite3"
ERASE = ["erase", STORE, "--tenant", "acme", "--user", "u1", "--yes"]
EXPIRE = ["expire", STORE, "--all-tenants", "--before"]
# Every key each receipt had before it named its ledger: none is lost.
ERASURE_KEYS = {
    "receipt",
    "version",
    "tenant",
    "end_user_id",
    "facts_deleted",
    "erased_at",
    "store",
    "scrub",
    "deletion_durability",
    "outcome",
}
EXPIRY_KEYS = {
    "receipt",
    "version",
    "dry_run",
    "cutoff",
    "older_than",
    "tenants",
    "expired_at",
    "store",
    "scrub",
    "deletion_durability",
}


@pytest.fixture(autouse=True)
def _here(ledger_folder: Path) -> None:

    async def write() -> None:
        async with open_memory(STORE) as store:
            for user in ("u1", "u2"):
                await store.remember("acme", user, f"fact of {user}")

    anyio.run(write)


def _now() -> str:
    return datetime.now(UTC).isoformat()


def _recorded() -> int:
    with open_ledger(LEDGER, ledger_key(), create=False) as ledger:
        return len(ledger.entries())


@pytest.mark.parametrize("named_by", ["option", "environment"])
def test_an_erasure_receipt_names_the_ledger_that_recorded_it(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, named_by: str
) -> None:
    if named_by == "option":
        ledger = ["--ledger", LEDGER]
    else:
        ledger = []
        monkeypatch.setenv("PSYCH_MEMORY_LEDGER", LEDGER)
    assert main([*ERASE, "--json", *ledger]) == ExitCode.DONE
    receipt = json.loads(capsys.readouterr().out)
    assert set(receipt) == {*ERASURE_KEYS, "ledger"}
    assert receipt["ledger"] == LEDGER
    assert _recorded() == 1
    erase_u2 = [*ERASE[:-2], "u2", "--yes"]
    assert main([*erase_u2, *ledger]) == ExitCode.DONE
    lines = capsys.readouterr().out.splitlines()
    assert lines[6] == (
        f"ledger:         {LEDGER} (recorded the erasure before the store deleted anything)"
    )
    assert _recorded() == 2


def test_an_erasure_receipt_says_when_no_ledger_recorded_it(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert main([*ERASE, "--json"]) == ExitCode.DONE
    receipt = json.loads(capsys.readouterr().out)
    assert set(receipt) == {*ERASURE_KEYS, "ledger"}
    assert receipt["ledger"] is None
    assert main([*ERASE[:-2], "u2", "--yes"]) == ExitCode.DONE
    out = capsys.readouterr().out
    assert "ledger:         none (the erasure is recorded in no deletion ledger)" in out
    assert not Path("ledger.sqlite3").exists()


def test_an_expiry_receipt_names_its_ledger_or_none(capsys: pytest.CaptureFixture[str]) -> None:
    before = _now()
    assert main([*EXPIRE, before, "--dry-run", "--json"]) == ExitCode.DONE
    receipt = json.loads(capsys.readouterr().out)
    assert set(receipt) == {*EXPIRY_KEYS, "facts_to_delete", "ledger"}
    assert receipt["ledger"] is None
    assert main([*EXPIRE, before, "--json", "--ledger", LEDGER]) == ExitCode.DONE
    receipt = json.loads(capsys.readouterr().out)
    assert set(receipt) == {*EXPIRY_KEYS, "facts_deleted", "ledger"}
    assert (receipt["ledger"], receipt["facts_deleted"]) == (LEDGER, 2)
    assert _recorded() == 1
    assert main([*EXPIRE, before, "--ledger", LEDGER]) == ExitCode.DONE
    assert (
        f"ledger:         {LEDGER} (recorded each tenant's expiry before the store deleted"
        in capsys.readouterr().out
    )
    assert main([*EXPIRE, before, "--dry-run", "--json", "--ledger", LEDGER]) == ExitCode.DONE
    receipt = json.loads(capsys.readouterr().out)
    assert set(receipt) == {*EXPIRY_KEYS, "facts_to_delete", "ledger"}
    assert receipt["ledger"] == LEDGER
    assert main([*EXPIRE, before, "--dry-run", "--ledger", LEDGER]) == ExitCode.DONE
    assert "would record each tenant's expiry first; nothing recorded" in capsys.readouterr().out
    assert _recorded() == 1
    assert main([*EXPIRE, before, "--json"]) == ExitCode.DONE
    assert json.loads(capsys.readouterr().out)["ledger"] is None
    assert main([*EXPIRE, before]) == ExitCode.DONE
    assert (
        "ledger:         none (each tenant's expiry is recorded in no deletion ledger)"
        in capsys.readouterr().out
    )


def test_a_receipt_shows_the_ledger_url_without_its_password(
    capsys: pytest.CaptureFixture[str], postgres_dsn: str, postgres_schema: str
) -> None:
    secret = "hunter2"  # noqa: S105 - a password no receipt may show
    separator = "&" if "?" in postgres_dsn else "?"
    # A password the server's trust of local connections ignores.
    url = f"{postgres_dsn}{separator}schema={postgres_schema}&password={secret}"
    assert main([*ERASE, "--json", "--ledger", url]) == ExitCode.DONE
    out = capsys.readouterr().out
    assert secret not in out
    assert json.loads(out)["ledger"] == url.replace(secret, "***")
