"""The console script's command line: what it refuses at launch, before touching the store."""

from __future__ import annotations

import inspect
from pathlib import Path

import pytest

from psych_runtime.memory.admin import store_schemes
from psych_runtime.tools.builtins import memory_tools
from psych_runtime.tools.mcp._cli import main

TOOLS_HAVE_LIMITS = "max_facts" in inspect.signature(memory_tools).parameters
HTTP = ["--http", "--issuer", "https://i", "--audience", "a"]
JWKS = [*HTTP, "--tenant", "acme", "--jwks-url", "https://i/jwks"]


@pytest.mark.parametrize(
    ("argv", "says"),
    [
        (["--tenant", "acme"], "--tenant and --user are required over stdio"),
        (["--user", "alice"], "--tenant and --user are required over stdio"),
        (["--tenant", "acme", "--user", ""], "--user must not be empty"),
        (["--tenant", "", "--user", "alice"], "--tenant must not be empty"),
        (["--tenant", "acme", "--user", "a" * 300], "--user must be at most 256 characters"),
        (["--tenant", "acme", "--user", "alice", "--audience", "x"], "--audience is for --http"),
        (["--http", "--tenant", "acme", "--user", "alice"], "--user is for stdio only"),
        (["--http", "--issuer", "https://i", "--audience", "a"], "exactly one of --tenant"),
        (["--http", "--tenant", "acme", "--audience", "a"], "--issuer and --audience"),
        (
            ["--http", "--tenant", "acme", "--issuer", "https://i", "--audience", "a"],
            "exactly one of --jwks-url and --jwt-key-file",
        ),
        (
            ["--tenant", "acme", "--user", "alice", "--max-facts", "many"],
            "--max-facts: must be a whole number or 'none'",
        ),
        (
            [*HTTP, "--tenant", " acme", "--jwks-url", "https://i/jwks"],
            "--tenant must not start or end with whitespace",
        ),
        (
            [*HTTP, "--tenant", "acme", "--jwt-key-file", "/no/such/key.pem"],
            "--jwt-key-file cannot be read (FileNotFoundError)",
        ),
        (
            ["--http", "--tenant", "acme", "--issuer", "https://i#x", "--audience", "a"],
            "--issuer must not contain '#'",
        ),
        ([*HTTP, "--tenant", "acme", "--algorithm", "HS256"], "--algorithm: invalid choice"),
        ([*HTTP, "--tenant", "acme", "--max-sessions", "0"], "--max-sessions: must be at least 1"),
        (
            [*JWKS, "--max-sessions", "2", "--max-sessions-per-user", "3"],
            "--max-sessions-per-user must not exceed --max-sessions",
        ),
        (
            [*HTTP, "--tenant", "acme", "--session-idle-timeout", "nan"],
            "--session-idle-timeout: must be a positive, finite number of seconds",
        ),
        ([*HTTP, "--tenant", "acme", "--jwks-timeout", "0"], "--jwks-timeout: must be a positive"),
        (
            [*HTTP, "--tenant", "acme", "--jwt-key-file", "k.pem", "--jwks-timeout", "3"],
            "--jwks-timeout is for --jwks-url only",
        ),
        (
            [*JWKS, "--max-sessions", "x"],
            "--max-sessions: must be a whole number",
        ),
        (
            ["--tenant", "acme", "--user", "alice", "--allowed-host", "h"],
            "--allowed-host is for --http only",
        ),
        (
            ["--tenant", "acme", "--user", "alice", "--max-sessions", "5"],
            "--max-sessions is for --http only",
        ),
    ],
)
def test_bad_command_lines_are_refused_in_one_line(
    argv: list[str], says: str, db_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exited:
        main(["--store", f"sqlite:///{db_path}", *argv])
    assert exited.value.code == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1, err
    assert says in err
    assert not db_path.exists()


@pytest.mark.skipif(not TOOLS_HAVE_LIMITS, reason="these tools take no limits")
@pytest.mark.parametrize("limit", ["--max-facts", "--max-fact-length", "--max-prompt-chars"])
def test_an_out_of_range_limit_is_refused_before_the_store_is_opened(
    limit: str, db_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    store = f"sqlite:///{db_path}"
    with pytest.raises(SystemExit) as exited:
        main(["--store", store, "--tenant", "acme", "--user", "alice", limit, "0"])
    assert exited.value.code == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1
    assert err.startswith("psych-memory-mcp: error: a limit is refused: ")
    assert not db_path.exists()


def test_a_store_url_it_cannot_open_is_refused_without_echoing_it(
    capsys: pytest.CaptureFixture[str],
) -> None:
    with pytest.raises(SystemExit) as exited:
        main(["--store", "mysql://root:hunter2@db/x", "--tenant", "acme", "--user", "alice"])
    assert exited.value.code == 2
    err = capsys.readouterr().err
    assert err.startswith("psych-memory-mcp: error: --store: ")
    assert "hunter2" not in err


@pytest.mark.skipif(
    "sqlite" not in store_schemes(), reason="no installed backend registers sqlite: URLs"
)
def test_a_store_that_fails_to_open_exits_1(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    missing = tmp_path / "no-such-directory" / "memory.db"
    status = main(["--store", f"sqlite:///{missing}", "--tenant", "acme", "--user", "alice"])
    assert status == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1
    assert "the store cannot be opened" in err
    assert not missing.parent.exists()
