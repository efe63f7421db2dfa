"""A deletion ledger named by --ledger or PSYCH_MEMORY_LEDGER records what the model forgets."""

from __future__ import annotations

import json
import os
import shutil
import sys
from pathlib import Path

import pytest
from mcp import Client, StdioServerParameters
from mcp.types import TextContent

from psych_runtime.memory.ledger import LedgerKey, open_ledger
from psych_runtime.tools.mcp._cli import main

pytestmark = pytest.mark.anyio

KEY_TEXT = "a ledger key of at least 32 bytes, for the MCP tests"
TENANT = "acme"
USER = "alice"


def _script() -> str:
    found = shutil.which("psych-memory-mcp", path=str(Path(sys.executable).parent))
    assert found is not None, "the console script is not installed"
    return found


def _launch(store: str, environment: dict[str, str], *options: str) -> Client:
    return Client(
        StdioServerParameters(
            command=_script(),
            args=["--store", store, "--tenant", TENANT, "--user", USER, *options],
            env={
                **{name: value for name, value in os.environ.items() if name.startswith("COV")},
                "PSYCH_MEMORY_LEDGER_KEY": KEY_TEXT,
                **environment,
            },
        )
    )


@pytest.mark.parametrize("named_by", ["option", "environment"])
async def test_a_forget_by_the_model_is_recorded_in_the_ledger(
    tmp_path: Path, anyio_backend: str, named_by: str
) -> None:
    ledger_url = f"sqlite:///{tmp_path / 'ledger.sqlite3'}"
    store = f"sqlite:///{tmp_path / 'facts.sqlite3'}"
    options = ("--ledger", ledger_url) if named_by == "option" else ()
    environment = {"PSYCH_MEMORY_LEDGER": ledger_url} if named_by == "environment" else {}
    async with _launch(store, environment, *options) as session:
        saved = await session.call_tool("remember", {"content": "likes tea"})
        (block,) = saved.content
        assert isinstance(block, TextContent)
        memory_id = json.loads(block.text)["id"]
        forgotten = await session.call_tool("forget", {"memory_id": memory_id})
        assert not forgotten.is_error
        await session.call_tool("forget", {"memory_id": "no-such-id"})
    key = LedgerKey(KEY_TEXT.encode())
    with open_ledger(ledger_url, key) as ledger:
        (entry,) = ledger.entries()
    assert (entry.kind, entry.tenant, entry.fact_id, entry.deleted) == (
        "forget",
        TENANT,
        memory_id,
        1,
    )
    assert entry.end_user_hash == key.end_user_hash(TENANT, USER)


def test_a_ledger_that_is_not_usable_stops_the_server_before_it_serves(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    ledger_url = f"sqlite:///{tmp_path / 'ledger.sqlite3'}"
    open_ledger(ledger_url, LedgerKey(b"o" * 32)).close()
    monkeypatch.setenv("PSYCH_MEMORY_LEDGER_KEY", KEY_TEXT)
    launch = ["--store", "memory:", "--tenant", TENANT, "--user", USER]
    assert main([*launch, "--ledger", ledger_url]) == 5
    assert "PSYCH_MEMORY_LEDGER_KEY: is not the key this ledger was created with" in (
        capsys.readouterr().err
    )
    monkeypatch.delenv("PSYCH_MEMORY_LEDGER_KEY")
    assert main([*launch, "--ledger", ledger_url]) == 2
    assert "PSYCH_MEMORY_LEDGER_KEY: must be given" in capsys.readouterr().err
    store = f"sqlite:///{tmp_path / 'facts.sqlite3'}"
    key_file = tmp_path / "key"
    key_file.write_text(KEY_TEXT)
    same = ["--store", store, "--tenant", TENANT, "--user", USER, "--ledger", store]
    assert main([*same, "--ledger-key-file", str(key_file)]) == 2
    assert "--ledger: must live outside the store it records" in capsys.readouterr().err
    assert not (tmp_path / "facts.sqlite3").exists()
