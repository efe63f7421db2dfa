"""psych-memory-mcp speaks the command line's words: the distribution to install, the option.

A store URL whose adapter is not installed names the distribution that
registers its scheme; a refused limit names its option and 'none'; a
store without its schema names the URL option, never a Python call.
"""

from __future__ import annotations

import inspect
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from psych_runtime.memory.admin import ExitCode, store_schemes
from psych_runtime.tools.builtins import memory_tools
from psych_runtime.tools.mcp._cli import main

TOOLS_HAVE_LIMITS = "max_facts" in inspect.signature(memory_tools).parameters

# The server's main, on the site folder given first: see the fixture `site_without`.
_ON_SITE = (
    "import site, sys; site.addsitedir(sys.argv[1]); "
    "from psych_runtime.tools.mcp._cli import main; sys.exit(main(sys.argv[2:]))"
)


@pytest.mark.parametrize(
    ("url", "distribution"),
    [
        ("sqlite:///facts.db", "psych-memory-sqlite"),
        ("postgresql://db/x", "psych-memory-postgres"),
        ("postgres://db/x", "psych-memory-postgres"),
    ],
)
def test_a_scheme_whose_adapter_is_missing_names_the_distribution(
    url: str, distribution: str, tmp_path: Path, site_without: Callable[[str], Path]
) -> None:
    site = site_without(distribution)
    argv = ["--store", url, "--tenant", "acme", "--user", "alice"]
    served = subprocess.run(
        [sys.executable, "-S", "-c", _ON_SITE, str(site), *argv],
        cwd=tmp_path,
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert served.returncode == ExitCode.USAGE, served.stderr
    scheme = url.partition(":")[0]
    assert served.stderr.startswith(
        f"psych-memory-mcp: error: --store: has the scheme '{scheme}', which no installed "
        "backend registers (installed schemes: "
    )
    assert served.stderr.endswith(f"): install {distribution}, which registers it\n")
    assert served.stderr.count("\n") == 1
    assert not (tmp_path / "facts.db").exists()


@pytest.mark.skipif(not TOOLS_HAVE_LIMITS, reason="these tools take no limits")
@pytest.mark.parametrize(
    ("limit", "value", "says"),
    [
        ("--max-facts", "0", "--max-facts must be 'none' or at least 1 (got 0)"),
        ("--max-fact-length", "99999", "--max-fact-length must be 'none' or at most 4096"),
        ("--max-prompt-chars", "1", "--max-prompt-chars must be at least"),
    ],
)
def test_a_refused_limit_names_its_option_and_none(
    limit: str, value: str, says: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    store = f"sqlite:///{tmp_path / 'facts.db'}"
    with pytest.raises(SystemExit) as exited:
        main(["--store", store, "--tenant", "acme", "--user", "alice", limit, value])
    assert exited.value.code == ExitCode.USAGE
    err = capsys.readouterr().err
    assert err.startswith(f"psych-memory-mcp: error: a limit is refused: {says}")
    assert err.count("\n") == 1
    for python in ("max_facts", "max_fact_length", "max_prompt_chars", "None"):
        assert python not in err


def test_a_schema_it_may_not_create_names_the_url_option(
    postgres_dsn: str,
    postgres_schema: str,
    unavailable: Callable[[str], None],
    capsys: pytest.CaptureFixture[str],
) -> None:
    if "postgresql" not in store_schemes():
        unavailable("no installed backend registers postgresql: URLs")
    separator = "&" if "?" in postgres_dsn else "?"
    url = f"{postgres_dsn}{separator}schema={postgres_schema}&setup=never"
    served = main(["--store", url, "--tenant", "acme", "--user", "alice"])
    assert served == ExitCode.UNAVAILABLE
    err = capsys.readouterr().err
    assert err.count("\n") == 1
    assert "setup()" not in err
    assert f"--store: PostgreSQL schema '{postgres_schema}' does not exist" in err
    assert "nothing is created or upgraded with setup=never in the URL" in err
