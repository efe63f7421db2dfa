"""The README check: each distribution's README describes that distribution alone.

Each test lays out a small repository with two distributions,
``demo-greetings`` and ``demo-farewells``, writes the greetings' README as
the test says, and runs the check as a program: inside the release check
(``.ci/release.py --ci``, as CI does) where the whole path matters, and on
its own (``.ci/_readme.py``) for the rules one by one, which builds nothing.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from dataclasses import dataclass
from pathlib import Path

import pytest

pytestmark = pytest.mark.release_checks

REPOSITORY = Path(__file__).resolve().parent.parent.parent
RELEASE = REPOSITORY / ".ci" / "release.py"
README_CHECK = REPOSITORY / ".ci" / "_readme.py"
NAME = "demo-greetings"
OTHER = "demo-farewells"
OWN_PATHS_ONLY = "a README names no other distribution's import path"
NO_OTHER_FRAMEWORK = "a README names no framework its distribution does not build on"
GOOD = f"""\
# {NAME}

Greetings, released on their own.

```console
$ pip install {NAME}
```

```python
from psych_runtime.demo.greetings import greet

print(greet("world"))
```
"""


def pyproject(name: str, leaf: str, requires: list[str], entry_points: str = "") -> str:
    return f"""\
[build-system]
requires = ["hatchling>=1.27"]
build-backend = "hatchling.build"

[project]
name = "{name}"
version = "0.1.0"
description = "A distribution that exists to be checked."
readme = "README.md"
requires-python = ">=3.11"
license = "MIT"
license-files = ["LICENSE"]
dependencies = {requires!r}

[project.urls]
Documentation = "https://example.org/docs/"
Source = "https://example.org/source/"
Changelog = "https://example.org/changelog/"
{entry_points}
[tool.hatch.build.targets.wheel]
only-include = ["src/{leaf}"]
sources = ["src"]

[tool.hatch.build.targets.sdist]
include = ["src/{leaf}", "README.md", "LICENSE"]
""".replace("'", '"')


@dataclass
class Repo:
    """A git repository holding ``demo-greetings`` and ``demo-farewells``."""

    root: Path

    def write(self, relative: str, text: str) -> None:
        path = self.root / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(textwrap.dedent(text), encoding="utf-8")

    def distribution(
        self, name: str, leaf: str, requires: list[str], entry_points: str = ""
    ) -> None:
        folder = f"packages/{name}"
        self.write(f"{folder}/pyproject.toml", pyproject(name, leaf, requires, entry_points))
        self.write(f"{folder}/LICENSE", "MIT License\n\nCopyright (c) the maintainers\n")
        self.write(f"{folder}/src/{leaf}/__init__.py", '"""A leaf."""\n\ndef greet(name): ...\n')
        self.write(f"{folder}/src/{leaf}/py.typed", "")

    def readme(self, text: str) -> None:
        self.write(f"packages/{NAME}/README.md", text)

    def git(self, *arguments: str) -> None:
        subprocess.run(
            ["git", *arguments], cwd=self.root, check=True, capture_output=True, text=True
        )


def run(script: Path, repo: Repo, *arguments: str) -> subprocess.CompletedProcess[str]:
    env = {
        name: value
        for name, value in os.environ.items()
        if name not in ("COVERAGE_PROCESS_START", "COVERAGE_PROCESS_CONFIG")
    }
    return subprocess.run(
        [sys.executable, str(script), "--root", str(repo.root), *arguments],
        capture_output=True,
        text=True,
        check=False,
        timeout=120,
        env=env,
    )


@pytest.fixture
def repo(tmp_path: Path) -> Repo:
    made = Repo(tmp_path / "repository")
    made.root.mkdir()
    made.distribution(NAME, "psych_runtime/demo/greetings", [])
    made.distribution(OTHER, "psych_runtime/demo/farewells", [])
    made.readme(GOOD)
    made.write(f"packages/{OTHER}/README.md", f"# {OTHER}\n\n$ pip install {OTHER}\n")
    made.write(
        "CHANGELOG.md",
        "# Changelog\n\n"
        + "".join(
            f"## {name}\n\n### [0.1.0] - Unreleased\n\n#### Added\n\n- All.\n\n"
            for name in (NAME, OTHER)
        ),
    )
    made.git("init", "-q", "-b", "main")
    made.git("config", "user.email", "maintainer@example.org")
    made.git("config", "user.name", "Maintainer")
    made.git("config", "commit.gpgsign", "false")
    made.git("add", "-A")
    made.git("commit", "-q", "-m", "first")
    return made


def test_a_readme_naming_another_distributions_import_path_fails_the_release_check(
    repo: Repo,
) -> None:
    repo.readme(GOOD.replace("demo.greetings import greet", "demo.farewells import greet"))
    result = run(RELEASE, repo, "--ci", NAME)
    assert result.returncode == 1, result.stdout + result.stderr
    assert (
        f"FAIL packages/{NAME}/README.md:10: names 'psych_runtime.demo.farewells', the import"
        f" path of {OTHER}, which {NAME} does not require (rule: {OWN_PATHS_ONLY})"
    ) in result.stdout
    assert f"not ready: {NAME}" in result.stdout


def test_a_correct_readme_passes_the_release_check(repo: Repo) -> None:
    result = run(RELEASE, repo, "--ci", NAME)
    assert result.returncode == 0, result.stdout + result.stderr
    assert f"readme: packages/{NAME}/README.md describes {NAME} alone" in result.stdout


@pytest.mark.parametrize(
    ("text", "framework"),
    [
        ("from pydantic_ai import Agent", "pydantic-ai"),
        ("a [pydantic-ai](https://ai.pydantic.dev) toolset", "pydantic-ai"),
        ("MemoryToolset[Deps](store)", "pydantic-ai"),
        ("pip install openai-agents", "openai-agents"),
        ("from agents import Agent, Runner", "openai-agents"),
        ("AgentMemory[Context](store)", "openai-agents"),
        ("LangChain 1.x agents", "langchain"),
        ("MemoryMiddleware(store)", "langchain"),
        ("from google.adk.agents import LlmAgent", "google-adk"),
        ("pip install google-adk", "google-adk"),
        ("StoreMemoryService(store)", "google-adk"),
    ],
)
def test_a_readme_naming_a_framework_it_does_not_build_on_fails(
    repo: Repo, text: str, framework: str
) -> None:
    repo.readme(GOOD + f"\nWorks with {text}.\n")
    result = run(README_CHECK, repo, NAME)
    assert result.returncode == 1, result.stdout + result.stderr
    (failure,) = [line for line in result.stdout.splitlines() if line.startswith("FAIL")]
    assert failure.startswith(f"FAIL packages/{NAME}/README.md:15: names '")
    assert f", of the framework {framework}, which {NAME} does not build on" in failure
    assert f"(rule: {NO_OTHER_FRAMEWORK})" in failure
    offending = failure.split("names '", 1)[1].split("'", 1)[0]
    assert offending.lower() in text.lower()


def test_a_framework_package_names_its_own_framework(repo: Repo) -> None:
    repo.distribution(NAME, "psych_runtime/demo/greetings", ["pydantic-ai-slim>=2"])
    repo.readme(GOOD + "\nA [pydantic-ai](https://ai.pydantic.dev) toolset: `MemoryToolset`.\n")
    result = run(README_CHECK, repo, NAME)
    assert result.returncode == 0, result.stdout + result.stderr


def test_a_readme_names_what_its_distribution_requires_and_any_store(repo: Repo) -> None:
    repo.readme(GOOD + "\nSee `psych_runtime.demo.farewells` and `psych_runtime.demo.stores`.\n")
    assert run(README_CHECK, repo, NAME).returncode == 1

    repo.distribution(NAME, "psych_runtime/demo/greetings", [f"{OTHER}>=0.1"])
    assert run(README_CHECK, repo, NAME).returncode == 0

    repo.distribution(NAME, "psych_runtime/demo/greetings", [])
    store = '[project.entry-points."psych_runtime.memory.stores"]\nfare = "x:open_url"\n'
    repo.distribution(OTHER, "psych_runtime/demo/farewells", [], store)
    result = run(README_CHECK, repo, NAME)
    assert result.returncode == 0, result.stdout + result.stderr


def test_the_title_is_the_name_and_the_install_line_names_it(repo: Repo) -> None:
    repo.readme(GOOD.replace(f"# {NAME}", f"# {OTHER}").replace(f"install {NAME}", "install x"))
    result = run(README_CHECK, repo, NAME)
    assert result.returncode == 1
    assert f"FAIL packages/{NAME}/README.md:1: the title is '# {OTHER}', not '# {NAME}'" in (
        result.stdout
    )
    assert f"FAIL packages/{NAME}/README.md: no 'pip install {NAME}' line" in result.stdout

    repo.readme(GOOD.replace(f"$ pip install {NAME}", f'$ pip install "{NAME}[extra]"'))
    result = run(README_CHECK, repo, NAME)
    assert result.returncode == 0, result.stdout + result.stderr


def test_every_readme_of_this_repository_passes() -> None:
    result = subprocess.run(
        [sys.executable, str(README_CHECK), "--root", str(REPOSITORY)],
        capture_output=True,
        text=True,
        check=False,
        timeout=120,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    passed = [line for line in result.stdout.splitlines() if line.endswith(" alone")]
    assert len(passed) == len(list(REPOSITORY.glob("packages/*/pyproject.toml")))
