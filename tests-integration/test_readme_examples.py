"""Every Python block of every distribution's README runs as written.

A README is its distribution's page on the package index: a reader pastes
its example into a file and runs it. Each ```` ```python ```` block of
``packages/*/README.md`` runs here in a fresh working directory, as a script
of its own, with the interpreter of the test environment, no provider's API
key and nothing else set up. The framework examples drive each framework's
offline test model (or a few lines of its model interface, where it has
none). A block that cannot run so (it needs a server, or stands for the
reader's own code) is preceded by ``<!-- not run: <reason> -->``, visibly in
the file; only those are left out, and `test_the_blocks_are_counted` prints
how many ran and which were left out, with their reasons.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

REPOSITORY = Path(__file__).resolve().parent.parent
READMES = sorted(REPOSITORY.glob("packages/*/README.md"))
_BLOCK = re.compile(
    r"(?:<!--\s*not run:\s*(?P<reason>.*?)\s*-->\s*\n)?^```python[ \t]*\n(?P<code>.*?)^```[ \t]*$",
    re.MULTILINE | re.DOTALL,
)
# No example may reach a provider: without a key, none can.
_KEYS = ("OPENAI_API_KEY", "ANTHROPIC_API_KEY", "GEMINI_API_KEY", "GOOGLE_API_KEY")


@dataclass(frozen=True)
class Block:
    """One Python block of a README."""

    readme: Path
    line: int
    code: str
    not_run: str | None

    @property
    def name(self) -> str:
        return f"{self.readme.parent.name}:{self.line}"


def blocks() -> list[Block]:
    found = []
    for readme in READMES:
        text = readme.read_text("utf-8")
        for match in _BLOCK.finditer(text):
            line = text.count("\n", 0, match.start("code"))
            found.append(Block(readme, line, match.group("code"), match.group("reason")))
    return found


BLOCKS = blocks()
TO_RUN = [block for block in BLOCKS if block.not_run is None]


def test_the_blocks_are_counted() -> None:
    left_out = [block for block in BLOCKS if block.not_run is not None]
    print(f"{len(TO_RUN)} README blocks run, {len(left_out)} not run:")
    for block in left_out:
        print(f"  {block.name}: {block.not_run}")
    assert all(block.not_run for block in left_out), "a 'not run' comment gives its reason"
    without = [
        readme.parent.name for readme in READMES if not any(b.readme == readme for b in BLOCKS)
    ]
    assert without == [], "every README has a Python example"
    assert len(TO_RUN) >= len(READMES) - len(left_out)


@pytest.mark.parametrize("block", TO_RUN, ids=[block.name for block in TO_RUN])
def test_the_block_runs_as_written(block: Block, tmp_path: Path) -> None:
    script = tmp_path / "example.py"
    script.write_text(block.code, encoding="utf-8")
    env = {name: value for name, value in os.environ.items() if name not in _KEYS}
    completed = subprocess.run(
        [sys.executable, str(script)],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=180,
        check=False,
        env=env,
    )
    assert completed.returncode == 0, (
        f"{block.readme.relative_to(REPOSITORY)}, the block at line {block.line}:\n"
        f"{completed.stdout}{completed.stderr}"
    )
