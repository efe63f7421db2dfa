"""The registration check: a distribution cannot be half-registered.

Each test lays out a small repository with one distribution, ``demo-lib``,
and registers it everywhere but where the test says, then runs the check as
CI does.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

pytestmark = pytest.mark.release_checks

REPOSITORY = Path(__file__).resolve().parent.parent.parent
CHECK = REPOSITORY / ".ci" / "registration.py"
FOLDER = "packages/demo-lib"
MODULE = "psych_runtime.memory.demo"

REGISTERED = {
    "pyproject.toml": f"""
        [tool.mypy]
        mypy_path = ["{FOLDER}/src"]
        files = ["{FOLDER}/src", "{FOLDER}/benchmarks"]

        [[tool.importlinter.contracts]]
        name = "The demo stands alone"
        type = "forbidden"
        source_modules = ["{MODULE}"]
        forbidden_modules = ["psych_runtime.tools"]
        """,
    "hatch.toml": f"""
        [envs.lint.scripts]
        types = ["mypy", "mypy {FOLDER}/tests"]
        """,
    "mkdocs.yml": f"""
        plugins:
          - search
          - mkdocstrings:
              handlers:
                python:
                  paths:
                    - {FOLDER}/src
        """,
    "README.md": "| distribution | what |\n| --- | --- |\n| `demo-lib` | a demo |\n",
    "docs/index.md": "| distribution | what |\n| --- | --- |\n| `demo-lib` | a demo |\n",
    "docs/concepts.md": "## How the code is split\n\n`demo-lib` does it all.\n\n## Next\n",
    "CHANGELOG.md": (
        "# Changelog\n\n## demo-lib\n\n### [0.1.0] - Unreleased\n\n#### Added\n\n- All.\n"
    ),
}

LEFT_OUT = {
    "mypy_path": (
        "pyproject.toml",
        f'mypy_path = ["{FOLDER}/src"]',
        "mypy_path = []",
        f"pyproject.toml [tool.mypy] mypy_path: {FOLDER}/src",
    ),
    "mypy files": (
        "pyproject.toml",
        f'"{FOLDER}/src", "{FOLDER}/benchmarks"',
        f'"{FOLDER}/src"',
        f"pyproject.toml [tool.mypy] files: {FOLDER}/benchmarks",
    ),
    "type-check command": (
        "hatch.toml",
        f', "mypy {FOLDER}/tests"',
        "",
        f"hatch.toml [envs.lint.scripts] types: mypy {FOLDER}/tests",
    ),
    "mkdocstrings path": (
        "mkdocs.yml",
        f"- {FOLDER}/src",
        "- elsewhere/src",
        f"mkdocs.yml mkdocstrings python paths: {FOLDER}/src",
    ),
    "import contract": (
        "pyproject.toml",
        f'source_modules = ["{MODULE}"]',
        'source_modules = ["psych_runtime.memory.other"]',
        f"a contract naming {MODULE}",
    ),
    "README table": (
        "README.md",
        "| `demo-lib` |",
        "| demo-lib |",
        "README.md: a row of the distributions table for `demo-lib`",
    ),
    "docs index table": (
        "docs/index.md",
        "| `demo-lib` |",
        "| `other-lib` |",
        "docs/index.md: a row of the distributions table for `demo-lib`",
    ),
    "concepts": (
        "docs/concepts.md",
        "`demo-lib` does it all.\n\n## Next\n",
        "Nothing here.\n\n## Next\n\n`demo-lib`\n",
        "docs/concepts.md 'How the code is split': `demo-lib`",
    ),
    "changelog section": (
        "CHANGELOG.md",
        "## demo-lib",
        "## demo-other",
        "CHANGELOG.md: a section '## demo-lib'",
    ),
}


def lay_out(root: Path) -> None:
    for relative, text in REGISTERED.items():
        path = root / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(textwrap.dedent(text).lstrip(), encoding="utf-8")
    package = root / FOLDER
    (package / "src/psych_runtime/memory/demo").mkdir(parents=True)
    (package / "tests").mkdir()
    (package / "benchmarks").mkdir()
    (package / "pyproject.toml").write_text(
        textwrap.dedent(
            """
            [project]
            name = "demo-lib"
            version = "0.1.0"

            [tool.hatch.build.targets.wheel]
            only-include = ["src/psych_runtime/memory/demo"]
            sources = ["src"]
            """
        ),
        encoding="utf-8",
    )


def check(root: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, str(CHECK), "--root", str(root)],
        capture_output=True,
        text=True,
        check=False,
        timeout=60,
    )


def test_a_distribution_registered_everywhere_passes(tmp_path: Path) -> None:
    lay_out(tmp_path)
    result = check(tmp_path)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "demo-lib: registered everywhere" in result.stdout


@pytest.mark.parametrize("place", sorted(LEFT_OUT))
def test_each_list_left_out_is_named(tmp_path: Path, place: str) -> None:
    lay_out(tmp_path)
    relative, registered, unregistered, message = LEFT_OUT[place]
    path = tmp_path / relative
    text = path.read_text("utf-8")
    assert registered in text
    path.write_text(text.replace(registered, unregistered), encoding="utf-8")
    result = check(tmp_path)
    assert result.returncode == 1, result.stdout + result.stderr
    assert "demo-lib: NOT registered in" in result.stdout
    assert message in result.stdout


def test_a_changelog_heading_out_of_the_format_fails(tmp_path: Path) -> None:
    lay_out(tmp_path)
    changelog = tmp_path / "CHANGELOG.md"
    changelog.write_text(
        changelog.read_text("utf-8").replace("### [0.1.0] - Unreleased", "### 0.1.0 (unreleased)"),
        encoding="utf-8",
    )
    result = check(tmp_path)
    assert result.returncode == 1
    assert "CHANGELOG.md: departs from its layout" in result.stdout
    assert "line 5: a version heading reads" in result.stdout
