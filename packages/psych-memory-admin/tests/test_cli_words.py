"""psych-memory's errors speak the command line's words, not the Python API's.

The library's messages are right for a Python caller ("call setup()"); the
command has no such call, only commands, options and distributions to
install, and says so.
"""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from psych_runtime.memory.admin import ExitCode, main

# psych-memory's main, on the site folder given first: see the fixture `site_without`.
_ON_SITE = (
    "import site, sys; site.addsitedir(sys.argv[1]); "
    "from psych_runtime.memory.admin import main; sys.exit(main(sys.argv[2:]))"
)


@pytest.mark.parametrize(
    ("url", "distribution"),
    [("sqlite:///facts.db", "psych-memory-sqlite"), ("postgresql://db/x", "psych-memory-postgres")],
)
def test_a_scheme_whose_adapter_is_missing_names_the_distribution(
    url: str, distribution: str, tmp_path: Path, site_without: Callable[[str], Path]
) -> None:
    site = site_without(distribution)
    done = subprocess.run(
        [sys.executable, "-S", "-c", _ON_SITE, str(site), "count", url],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == ExitCode.USAGE, done.stderr
    scheme = url.partition(":")[0]
    assert done.stderr.startswith(
        f"psych-memory: error: URL: has the scheme '{scheme}', which no installed backend "
        "registers (installed schemes: "
    )
    assert done.stderr.endswith(f"): install {distribution}, which registers it\n")
    assert done.stdout == ""


def test_an_unknown_scheme_of_no_distribution_lists_the_installed_ones(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert main(["count", "mysql://db/x"]) == ExitCode.USAGE
    err = capsys.readouterr().err
    assert "has the scheme 'mysql', which no installed backend registers" in err
    assert "install" not in err.partition("(installed schemes:")[2].partition(")")[2]


def _postgres_url(dsn: str, schema: str) -> str:
    separator = "&" if "?" in dsn else "?"
    return f"{dsn}{separator}schema={schema}"


def _create_schema(dsn: str, schema: str) -> None:
    import psycopg  # noqa: PLC0415 - only the PostgreSQL tests need the driver
    from psycopg import sql  # noqa: PLC0415

    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(sql.SQL("CREATE SCHEMA {}").format(sql.Identifier(schema)))


@pytest.mark.parametrize("exists", [False, True], ids=["no-schema", "no-tables"])
def test_a_store_without_its_schema_says_which_command_creates_it(
    exists: bool,
    postgres_dsn: str,
    postgres_schema: str,
    require_schemes: Callable[..., None],
    capsys: pytest.CaptureFixture[str],
) -> None:
    require_schemes("postgresql")
    if exists:
        _create_schema(postgres_dsn, postgres_schema)
    url = _postgres_url(postgres_dsn, postgres_schema)
    assert main(["count", url]) == ExitCode.UNAVAILABLE
    err = capsys.readouterr().err
    assert err.count("\n") == 1
    assert "setup()" not in err
    state = "holds no memory tables yet" if exists else "does not exist"
    assert f"URL: PostgreSQL schema '{postgres_schema}' {state}" in err
    assert "this command creates and upgrades nothing" in err
    assert "psych-memory import or migrate into it" in err
