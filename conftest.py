"""Fixtures every test folder of the repository shares, defined once.

pytest reads this file for every test it collects here: the repository's
pyproject.toml makes this folder the rootdir, and conftest files are read
from the rootdir down to each test. The test folders of the distributions
keep only what is theirs.
"""

from __future__ import annotations

import importlib.metadata
import importlib.util
import os
import sys
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, NoReturn

import pytest
from hypothesis import settings

if TYPE_CHECKING:
    # Public as pytest.TerminalReporter only in the newer releases the
    # range allows.
    from _pytest.terminal import TerminalReporter

# Speed is measured by the benchmarks and never asserted by a test: a
# Hypothesis deadline would fail an example that a garbage collection or a
# busy machine happened to slow down, which says nothing about the rule the
# test names.
settings.register_profile("repository", deadline=None)
settings.load_profile("repository")

# Plugins can be named only in a conftest that pytest reads at start-up,
# which this one always is, whichever test folder is run.
pytest_plugins = ["pytester"]


@pytest.fixture(params=["asyncio", "trio"])
def anyio_backend(request: pytest.FixtureRequest) -> str:
    # Listed explicitly: anyio's default would silently skip a missing backend.
    backend: str = request.param
    return backend


POSTGRES_DSN_VARIABLE = "PSYCH_MEMORY_TEST_POSTGRES_DSN"
DEFAULT_POSTGRES_DSN = "postgresql://postgres@127.0.0.1:5432/test"
# The one place that names the default server. Set on import, since pytest
# reads this conftest before any other: modules that open stores outside
# fixtures (the conformance kit's open_store) read the variable itself, and
# subprocesses of the tests inherit it.
os.environ.setdefault(POSTGRES_DSN_VARIABLE, DEFAULT_POSTGRES_DSN)


def _unavailable(reason: str) -> NoReturn:
    # On a developer's machine a missing server or tool is a skip; under
    # CI=true it means a broken setup, and CI must never pass by testing nothing.
    if os.environ.get("CI") == "true":
        pytest.fail(f"{reason} (CI must run this test)")
    pytest.skip(reason)


@pytest.fixture(scope="session")
def unavailable() -> Callable[[str], NoReturn]:
    """Skip the test saying ``reason``; under ``CI=true``, fail it instead."""
    return _unavailable


@pytest.fixture(scope="session")
def postgres_dsn() -> str:
    """The address of a live PostgreSQL server, or `unavailable`.

    ``PSYCH_MEMORY_TEST_POSTGRES_DSN`` names it; the default is the local
    server's database ``test``.
    """
    import psycopg  # noqa: PLC0415 - only the PostgreSQL tests need the driver

    dsn = os.environ[POSTGRES_DSN_VARIABLE]
    try:
        with psycopg.connect(dsn, connect_timeout=5, autocommit=True) as conn:
            conn.execute("SELECT 1")
    except psycopg.OperationalError as exc:
        _unavailable(
            f"no PostgreSQL server answers at ${POSTGRES_DSN_VARIABLE} or its default ({exc})"
        )
    return dsn


@pytest.fixture
def postgres_schema(postgres_dsn: str) -> Iterator[str]:
    """A fresh schema name, dropped with everything in it after the test.

    Every test gets its own, so parallel workers and runs on several Pythons
    at once never see each other's tables.
    """
    import psycopg  # noqa: PLC0415
    from psycopg import sql  # noqa: PLC0415

    name = f"psych_test_{uuid.uuid4().hex}"
    yield name
    with psycopg.connect(postgres_dsn, autocommit=True) as conn:
        conn.execute(sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(sql.Identifier(name)))


@pytest.fixture
def site_without(tmp_path: Path) -> Callable[[str], Path]:
    """Make a site folder holding this environment's distributions but the one named.

    The distribution's metadata folder and its top-level files (an editable
    install's ``.pth``) are left out: a Python started without its own site
    folder (``-S``) and given this one (``site.addsitedir``) sees every other
    distribution, and that one as not installed. Nothing is copied: the
    folder holds links to the environment's own entries.
    """

    def make(distribution: str) -> Path:
        installed = importlib.metadata.distribution(distribution)
        site = Path(str(installed.locate_file("")))
        owned = {
            parts[0]
            for parts in (Path(str(name)).parts for name in installed.files or ())
            if len(parts) == 1 or parts[0].endswith(".dist-info")
        }
        shadow = tmp_path / f"site-packages-without-{distribution}"
        shadow.mkdir()
        for entry in site.iterdir():
            if entry.name not in owned:
                (shadow / entry.name).symlink_to(entry)
        return shadow

    return make


def pytest_terminal_summary(terminalreporter: TerminalReporter) -> None:
    """After a run that ran the docs' and READMEs' examples, say how many blocks they ran.

    The tests run each page's blocks on workers, whose output pytest does
    not show; the count is made here, from the same extractor, once the
    page tests have passed.
    """
    passed = [
        report.nodeid
        for report in terminalreporter.stats.get("passed", [])
        if report.when == "call" and "_examples.py::test_" in report.nodeid
    ]
    if not passed:
        return
    root = Path(__file__).resolve().parent
    spec = importlib.util.spec_from_file_location(
        "_psych_blocks", root / "tests-integration" / "_blocks.py"
    )
    if spec is None or spec.loader is None:  # pragma: no cover - the file is in the tree
        return
    blocks_module = importlib.util.module_from_spec(spec)
    # Registered first: its dataclasses look their module up by name.
    sys.modules[spec.name] = blocks_module
    spec.loader.exec_module(blocks_module)
    pages = [
        *sorted(root.glob("docs/*.md")),
        root / "README.md",
        *sorted(root.glob("packages/*/README.md")),
    ]
    blocks = [block for page in pages for block in blocks_module.extract(page)]
    marked = sum(1 for block in blocks if block.not_run is not None)
    terminalreporter.write_line(
        f"code blocks of the docs and READMEs: {len(blocks) - marked} run,"
        f" {marked} marked not to run ({len(passed)} example tests passed)"
    )
