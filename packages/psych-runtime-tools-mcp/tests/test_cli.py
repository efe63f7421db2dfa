"""The console script's command line: what it refuses at launch, before touching the store."""

from __future__ import annotations

import inspect
import sys
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.hazmat.primitives.serialization import Encoding, PublicFormat

from psych_runtime.memory.admin import ExitCode, store_schemes
from psych_runtime.memory.admin import main as admin_main
from psych_runtime.tools.builtins import memory_tools
from psych_runtime.tools.mcp._cli import main

TOOLS_HAVE_LIMITS = "max_facts" in inspect.signature(memory_tools).parameters
HTTP = ["--http", "--issuer", "https://i", "--audience", "a"]
JWKS = [*HTTP, "--tenant", "acme", "--jwks-url", "https://i/jwks"]
SECRET = "hunter2"  # noqa: S105 - a password no message may show
PUBLIC_PEM = (
    ec.generate_private_key(ec.SECP256R1())
    .public_key()
    .public_bytes(Encoding.PEM, PublicFormat.SubjectPublicKeyInfo)
)


@pytest.mark.parametrize(
    ("argv", "says"),
    [
        (["--tenant", "acme"], "--tenant and --user are required over stdio"),
        (["--user", "alice"], "--tenant and --user are required over stdio"),
        (["--tenant", "acme", "--user", ""], "--user: must not be empty"),
        (["--tenant", "", "--user", "alice"], "--tenant: must not be empty"),
        (["--tenant", "acme", "--user", "a" * 300], "--user: must be at most 256 characters"),
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
            "--tenant: must not start or end with whitespace",
        ),
        (
            [*HTTP, "--tenant", "acme", "--jwt-key-file", "/no/such/key.pem"],
            "--jwt-key-file: cannot be read (no such file or directory)",
        ),
        (
            [*HTTP, "--tenant", "acme", "--jwt-key-file", "."],
            "--jwt-key-file: cannot be read (is a directory)",
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


def test_a_key_file_that_is_not_text_is_refused_in_one_line(
    tmp_path: Path, db_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    binary = tmp_path / "key.der"
    binary.write_bytes(b"\xff\xfe\x00secret")
    with pytest.raises(SystemExit) as exited:
        main([
            "--store", f"sqlite:///{db_path}", *HTTP, "--tenant", "acme",
            "--jwt-key-file", str(binary),
        ])  # fmt: skip
    assert exited.value.code == 2
    err = capsys.readouterr().err
    assert "--jwt-key-file: cannot be read (not text: a PEM key is text)" in err
    assert "secret" not in err
    assert "Traceback" not in err


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
    status = main(["--store", "mysql://root:hunter2@db/x", "--tenant", "acme", "--user", "alice"])
    assert status == ExitCode.USAGE
    err = capsys.readouterr().err
    assert err.count("\n") == 1
    assert err.startswith("psych-memory-mcp: error: --store: ")
    assert "hunter2" not in err


def test_the_help_lists_the_exit_codes_of_the_shared_table(
    capsys: pytest.CaptureFixture[str],
) -> None:
    with pytest.raises(SystemExit) as exited:
        main(["--help"])
    assert exited.value.code == 0
    shown = " ".join(capsys.readouterr().out.split())
    assert (
        "Exit codes: 0 done, 1 unexpected failure, 2 bad usage, 3 store unavailable, 5 refused."
        in shown
    )


def _not_a_database(folder: Path) -> str:
    path = folder / "not-a-database.db"
    path.write_bytes(b"this is not a database file, but it is long enough" * 200)
    return f"sqlite:///{path}"


def _unreachable(_: Path) -> str:
    return f"postgresql://postgres:{SECRET}@127.0.0.1:1/none?pool_timeout=1"


def _folder(folder: Path) -> str:
    return f"sqlite:///{folder}"


def _unknown_scheme(_: Path) -> str:
    return f"mysql://root:{SECRET}@db/x"


# Each store, and the exit code both commands end with for it.
STORES: list[tuple[str, Callable[[Path], str], ExitCode]] = [
    ("unreachable server", _unreachable, ExitCode.UNAVAILABLE),
    ("not a database", _not_a_database, ExitCode.UNAVAILABLE),
    ("a folder", _folder, ExitCode.USAGE),
    ("unknown scheme", _unknown_scheme, ExitCode.USAGE),
]


@pytest.mark.parametrize(("label", "store", "code"), STORES, ids=[row[0] for row in STORES])
@pytest.mark.parametrize("transport", ["stdio", "http"])
def test_a_store_gives_one_exit_code_from_both_commands(  # noqa: PLR0917 - parametrized
    label: str,
    store: Callable[[Path], str],
    code: ExitCode,
    transport: str,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    unavailable: Callable[[str], None],
) -> None:
    url = store(tmp_path)
    scheme = url.partition(":")[0]
    if scheme != "mysql" and scheme not in store_schemes():
        unavailable(f"no installed backend registers {scheme}: URLs")
    before = sorted(tmp_path.iterdir())
    assert admin_main(["count", url]) == code, label
    operator = capsys.readouterr().err
    if transport == "stdio":
        served = main(["--store", url, "--tenant", "acme", "--user", "alice"])
    else:
        key = tmp_path / "public.pem"
        key.write_bytes(PUBLIC_PEM)
        served = main(["--store", url, *HTTP, "--tenant", "acme", "--jwt-key-file", str(key)])
        key.unlink()
    assert served == code, label
    mcp = capsys.readouterr().err
    assert mcp.count("\n") == 1
    assert SECRET not in mcp
    # One wording of the store's failure, under each command's name for its URL.
    assert mcp.removeprefix("psych-memory-mcp: error: --store: ") == operator.removeprefix(
        "psych-memory: error: URL: "
    )
    assert sorted(tmp_path.iterdir()) == before


BROKEN_BACKEND = f"""
from contextlib import asynccontextmanager

@asynccontextmanager
async def broken(url):
    raise RuntimeError("the driver quotes the password {SECRET}")
    yield
"""


@pytest.fixture
def broken_scheme(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    """Install a backend for ``broken:`` whose opener fails with an error of no known kind."""
    folder = tmp_path / "site-packages"
    folder.mkdir()
    monkeypatch.syspath_prepend(str(folder))
    name = f"backend_{uuid.uuid4().hex}"
    (folder / f"{name}.py").write_text(BROKEN_BACKEND, "utf-8")
    info = folder / "broken_test_backend-1.0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(
        "Metadata-Version: 2.1\nName: broken-test-backend\nVersion: 1.0\n", "utf-8"
    )
    (info / "entry_points.txt").write_text(
        f"[psych_runtime.memory.stores]\nbroken = {name}:broken\n", "utf-8"
    )
    yield "broken:"
    sys.modules.pop(name, None)


def test_an_unexpected_failure_to_open_is_1_from_both_commands_naming_its_type_only(
    broken_scheme: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert admin_main(["count", broken_scheme]) == ExitCode.FAILED
    capsys.readouterr()
    served = main(["--store", broken_scheme, "--tenant", "acme", "--user", "alice"])
    assert served == ExitCode.FAILED
    err = capsys.readouterr().err
    expected = "--store: cannot be opened (RuntimeError); unexpected failure"
    assert err == f"psych-memory-mcp: error: {expected}\n"
