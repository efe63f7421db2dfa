"""An empty PSYCH_MEMORY_LEDGER stops the server as an empty --ledger does: never "no ledger"."""

from __future__ import annotations

from pathlib import Path

import pytest

from psych_runtime.memory.admin import ExitCode
from psych_runtime.tools.mcp._cli import main

KEY_TEXT = "a ledger key of at least 32 bytes, for the MCP tests"


@pytest.mark.parametrize("named_by", ["option", "environment"])
def test_an_empty_ledger_stops_the_server_before_it_serves(
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
    named_by: str,
) -> None:
    monkeypatch.setenv("PSYCH_MEMORY_LEDGER_KEY", KEY_TEXT)
    store = tmp_path / "facts.sqlite3"
    launch = ["--store", f"sqlite:///{store}", "--tenant", "acme", "--user", "alice"]
    if named_by == "option":
        monkeypatch.delenv("PSYCH_MEMORY_LEDGER", raising=False)
        launch += ["--ledger", ""]
    else:
        monkeypatch.setenv("PSYCH_MEMORY_LEDGER", "")
    assert main(launch) == ExitCode.USAGE
    err = capsys.readouterr().err
    assert "psych-memory-mcp: error: --ledger: must name a ledger" in err
    assert "not be empty" in err
    # Stopped before the store was opened: it was never created.
    assert not store.exists()
