"""The release check and the API-break gate, run on a small repository of their own.

Each test lays out a one-distribution repository in a temporary folder, with
real git history and tags, and runs the scripts exactly as CI and a release
maker do: as programs, reading the repository they are pointed at.
"""

from __future__ import annotations

import datetime
import os
import subprocess
import sys
import textwrap
from dataclasses import dataclass
from pathlib import Path

import pytest

pytestmark = pytest.mark.release_checks

REPOSITORY = Path(__file__).resolve().parent.parent.parent
GATE = REPOSITORY / ".ci" / "api_gate.py"
RELEASE = REPOSITORY / ".ci" / "release.py"
NAME = "demo-greetings"
LEAF = "src/psych_runtime/demo/greetings"

PYPROJECT = f"""\
[build-system]
requires = ["hatchling>=1.27"]
build-backend = "hatchling.build"

[project]
name = "{NAME}"
dynamic = ["version"]
description = "A distribution that exists to be released."
readme = "README.md"
requires-python = ">=3.11"
license = "MIT"
license-files = ["LICENSE"]

[project.urls]
Documentation = "https://example.org/docs/"
Source = "https://example.org/source/"
Changelog = "https://example.org/changelog/"

[tool.hatch.version]
path = "{LEAF}/_version.py"

[tool.hatch.build.targets.wheel]
only-include = ["{LEAF}"]
sources = ["src"]

[tool.hatch.build.targets.sdist]
include = ["{LEAF}", "README.md", "LICENSE"]
"""

API = '''\
"""Greetings."""

import abc

__all__ = ["Greeter", "greet", "shout"]


class Greeter(abc.ABC):
    """Something that greets."""

    @abc.abstractmethod
    def hello(self) -> str:
        """Say hello."""


def greet(name: str) -> str:
    """Greet someone."""
    return f"hello {name}"


def shout(name: str) -> str:
    """Greet someone loudly."""
    return greet(name).upper()
'''


@dataclass
class Repo:
    """A git repository holding one distribution, ``demo-greetings``."""

    root: Path

    @property
    def folder(self) -> Path:
        return self.root / "packages" / NAME

    def git(self, *arguments: str) -> None:
        subprocess.run(
            ["git", *arguments], cwd=self.root, check=True, capture_output=True, text=True
        )

    def write(self, relative: str, text: str) -> None:
        path = self.folder / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(textwrap.dedent(text), encoding="utf-8")

    def set_version(self, version: str) -> None:
        self.write(f"{LEAF}/_version.py", f'__version__ = "{version}"\n')

    def changelog(self, *sections: str) -> None:
        body = "\n".join(f"### {title}\n\n#### Added\n\n- A change.\n" for title in sections)
        (self.root / "CHANGELOG.md").write_text(
            f"# Changelog\n\n## {NAME}\n\n{body}", encoding="utf-8"
        )

    def remove_shout(self) -> None:
        self.write(f"{LEAF}/__init__.py", API.replace(', "shout"', "").split("\n\n\ndef shout")[0])

    def commit(self, message: str = "change") -> None:
        self.git("add", "-A")
        self.git("commit", "-q", "--allow-empty", "-m", message)


def run(script: Path, repo: Repo, *arguments: str) -> subprocess.CompletedProcess[str]:
    # Under a coverage run, every Python started below would write its data
    # file into the repository under test, which then has uncommitted files.
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
    made.git("init", "-q", "-b", "main")
    made.git("config", "user.email", "maintainer@example.org")
    made.git("config", "user.name", "Maintainer")
    made.git("config", "commit.gpgsign", "false")
    made.git("config", "tag.gpgsign", "false")
    made.write("pyproject.toml", PYPROJECT)
    made.write(
        "README.md",
        "# demo-greetings\n\nGreetings, released on their own.\n\n"
        "```console\n$ pip install demo-greetings\n```\n",
    )
    made.write("LICENSE", "MIT License\n\nCopyright (c) the maintainers\n")
    made.write(f"{LEAF}/__init__.py", API)
    made.write(f"{LEAF}/py.typed", "")
    made.set_version("0.1.0")
    made.changelog("[0.1.0] - 2026-01-15")
    made.commit("first")
    return made


def released(repo: Repo, version: str) -> None:
    repo.set_version(version)
    repo.commit(f"release {version}")
    repo.git("tag", f"{NAME}-v{version}")


def test_the_gate_passes_a_distribution_never_released(repo: Repo) -> None:
    repo.remove_shout()
    result = run(GATE, repo)
    assert result.returncode == 0, result.stdout + result.stderr
    assert f"{NAME}: no release yet" in result.stdout


@pytest.mark.parametrize(
    ("baseline", "bumped", "passes"),
    [
        ("0.1.0", "0.1.0", False),
        ("0.1.0", "0.1.1", False),
        ("0.1.0", "0.2.0", True),
        ("0.1.0", "1.0.0", True),
        ("1.2.0", "1.3.0", False),
        ("1.2.0", "2.0.0", True),
    ],
)
def test_removing_a_public_function_needs_the_semver_bump(
    repo: Repo, baseline: str, bumped: str, *, passes: bool
) -> None:
    released(repo, baseline)
    repo.remove_shout()
    repo.set_version(bumped)
    result = run(GATE, repo)
    assert result.returncode == (0 if passes else 1), result.stdout + result.stderr
    assert f"{bumped} against {NAME}-v{baseline}" in result.stdout
    assert "shout" in result.stdout
    if not passes:
        rule = "a new major version" if baseline.startswith("1.") else "a new minor version"
        assert f"breaking changes need {rule}" in result.stdout


def test_adding_to_the_api_needs_no_bump(repo: Repo) -> None:
    released(repo, "0.1.0")
    repo.write(f"{LEAF}/_extra.py", "def wave() -> str:\n    return 'o/'\n")
    repo.write(
        f"{LEAF}/__init__.py",
        API.replace('"shout"]', '"shout", "wave"]') + "\n\nfrom ._extra import wave\n",
    )
    result = run(GATE, repo)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "no breaking change" in result.stdout


def test_a_new_abstract_method_breaks_every_implementer(repo: Repo) -> None:
    released(repo, "0.1.0")
    repo.set_version("0.1.1")
    hello = '''        """Say hello."""\n'''
    wave = '''\n    @abc.abstractmethod\n    def wave(self) -> str:\n        """Wave."""\n'''
    repo.write(f"{LEAF}/__init__.py", API.replace(hello, hello + wave))
    result = run(GATE, repo)
    assert result.returncode == 1, result.stdout + result.stderr
    assert "Greeter.wave: new abstract method" in result.stdout


def test_dropping_a_name_from_all_is_a_break(repo: Repo) -> None:
    released(repo, "0.1.0")
    repo.write(f"{LEAF}/__init__.py", API.replace(', "shout"', ""))
    result = run(GATE, repo)
    assert result.returncode == 1, result.stdout + result.stderr
    assert "shout: no longer in __all__" in result.stdout


def test_a_tag_outside_the_history_of_head_is_no_baseline(repo: Repo) -> None:
    repo.git("switch", "-q", "-c", "experiment")
    released(repo, "0.1.0")
    repo.git("switch", "-q", "main")
    repo.remove_shout()
    result = run(GATE, repo)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "no release yet" in result.stdout


def test_ci_mode_accepts_an_unreleased_next_version_and_names_the_tag(repo: Repo) -> None:
    released(repo, "0.1.0")
    repo.set_version("0.2.0")
    repo.changelog("[0.2.0] - Unreleased", "[0.1.0] - 2026-01-15")
    repo.commit()
    result = run(RELEASE, repo, "--ci", NAME)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "twine check --strict passed" in result.stdout
    assert f"tag: {NAME}-v0.2.0" in result.stdout


def test_a_release_needs_a_dated_section_a_bump_and_a_clean_tree(repo: Repo) -> None:
    released(repo, "0.1.0")
    result = run(RELEASE, repo, NAME)
    assert result.returncode == 1
    assert "0.1.0 is released already; bump it first" in result.stdout
    assert f"the tag {NAME}-v0.1.0 exists already" in result.stdout

    repo.set_version("0.2.0")
    repo.changelog("[0.2.0] - Unreleased", "[0.1.0] - 2026-01-15")
    result = run(RELEASE, repo, NAME)
    assert result.returncode == 1
    assert "0.2.0 still says Unreleased" in result.stdout
    assert "uncommitted changes" in result.stdout

    today = datetime.datetime.now(tz=datetime.UTC).date().isoformat()
    repo.changelog(f"[0.2.0] - {today}", "[0.1.0] - 2026-01-15")
    repo.commit()
    result = run(RELEASE, repo, NAME)
    assert result.returncode == 0, result.stdout + result.stderr
    assert f"git tag -a {NAME}-v0.2.0" in result.stdout
    out = repo.root / "dist" / f"{NAME}-v0.2.0"
    assert sorted(path.name for path in out.iterdir()) == [
        "demo_greetings-0.2.0-py3-none-any.whl",
        "demo_greetings-0.2.0.tar.gz",
    ]


def test_a_changelog_without_the_version_fails_in_ci(repo: Repo) -> None:
    repo.set_version("0.2.0")
    repo.commit()
    result = run(RELEASE, repo, "--ci", NAME)
    assert result.returncode == 1
    assert f"no '### [0.2.0] - ...' under '## {NAME}'" in result.stdout


def test_every_defect_of_a_distribution_is_reported(repo: Repo) -> None:
    # One run for four defects: each build costs seconds.
    pyproject = PYPROJECT.replace('Changelog = "https://example.org/changelog/"\n', "")
    pyproject = pyproject.replace('"README.md"', '"README.rst"')
    repo.write(
        "pyproject.toml",
        pyproject
        + "[tool.hatch.build.targets.wheel.force-include]\n"
        + '"stray.py" = "psych_runtime/demo/stray.py"\n',
    )
    repo.write("stray.py", "")
    repo.write("README.rst", "Title\n=====\n\n.. unknown-directive::\n\n   text\n")
    repo.commit()
    repo.write(f"{LEAF}/scratch.py", "")
    result = run(RELEASE, repo, "--ci", NAME)
    assert result.returncode == 1
    assert "[project.urls] has no Changelog" in result.stdout
    assert "wheel: Project-URL lacks Changelog" in result.stdout
    assert "wheel: psych_runtime/demo/stray.py sits at a namespace level" in result.stdout
    assert "ships psych_runtime/demo/greetings/scratch.py, which git does not track" in (
        result.stdout
    )
    assert "twine check --strict: failed" in result.stdout
