"""`hatch run examples:agent` without its provider's API key: one line, before any prompt.

Each test runs the example as `hatch run examples:agent PROVIDER` does, with
every credential variable of the three SDKs removed from its environment,
and a line waiting on its standard input that it must never read.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

REPOSITORY = Path(__file__).resolve().parent.parent
EXAMPLE = REPOSITORY / "docs" / "examples" / "agent_loop.py"
CREDENTIALS = (
    "ANTHROPIC_API_KEY",
    "ANTHROPIC_AUTH_TOKEN",
    "OPENAI_API_KEY",
    "GEMINI_API_KEY",
    "GOOGLE_API_KEY",
    "GOOGLE_GENAI_USE_VERTEXAI",
)


def run_example(workdir: Path, *args: str, **variables: str) -> subprocess.CompletedProcess[str]:
    environment = {
        name: value for name, value in os.environ.items() if name not in CREDENTIALS
    } | variables
    return subprocess.run(
        [sys.executable, str(EXAMPLE), *args],
        cwd=workdir,
        input="remember that I ship to Berlin\n/quit\n",
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
        env=environment,
    )


@pytest.mark.parametrize(
    ("provider", "variables"),
    [
        ("anthropic", "ANTHROPIC_API_KEY or ANTHROPIC_AUTH_TOKEN"),
        ("openai", "OPENAI_API_KEY"),
        ("gemini", "GEMINI_API_KEY or GOOGLE_API_KEY"),
    ],
)
def test_without_its_key_the_example_says_which_variable_before_prompting(
    provider: str, variables: str, tmp_path: Path
) -> None:
    done = run_example(tmp_path, provider, "--model", "any-model")
    assert done.returncode == 2, done.stderr
    # No banner and no prompt: nothing was asked of the user.
    assert done.stdout == ""
    assert done.stderr == (
        f"agent_loop.py: error: {provider} needs its API key: set {variables} "
        "(or run `hatch run demo`, which needs no key and no network)\n"
    )


def test_an_empty_key_is_no_key(tmp_path: Path) -> None:
    done = run_example(tmp_path, "openai", "--model", "any-model", OPENAI_API_KEY="")
    assert done.returncode == 2
    assert "set OPENAI_API_KEY" in done.stderr
    assert done.stdout == ""


@pytest.mark.parametrize(
    ("provider", "variable"),
    [
        ("anthropic", "ANTHROPIC_API_KEY"),
        ("anthropic", "ANTHROPIC_AUTH_TOKEN"),
        ("openai", "OPENAI_API_KEY"),
        ("gemini", "GEMINI_API_KEY"),
        ("gemini", "GOOGLE_API_KEY"),
    ],
)
def test_with_its_key_the_example_prompts(provider: str, variable: str, tmp_path: Path) -> None:
    # Only /quit is read after the first line, so no request leaves the machine.
    done = subprocess.run(
        [sys.executable, str(EXAMPLE), provider, "--model", "any-model"],
        cwd=tmp_path,
        input="/quit\n",
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
        env={name: v for name, v in os.environ.items() if name not in CREDENTIALS}
        | {variable: "not-a-real-key"},
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith(f"{provider} / any-model, tenant 'demo-tenant'")
    assert "you> " in done.stdout
