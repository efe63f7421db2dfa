"""Every Python block of every distribution's README runs as written.

A README is its distribution's page on the package index: a reader pastes
its example into a file and runs it. Each ```` ```python ```` block of
``packages/*/README.md`` runs here as a script of its own (no top-level
``await``), in a fresh working directory, with the interpreter of the test
environment, offline and without any provider's API key (the runner of
``_blocks.py``, shared with the documentation's tests). The framework
examples drive each framework's offline test model, or a few lines of its
model interface where it has none. A block that cannot run so (it needs a
server, or stands for the reader's own code) is preceded by
``<!-- not run: <reason> -->``, visibly in the file; only those are left
out, and `test_the_blocks_are_counted` prints how many ran and which were
left out, with their reasons (shown with ``-rP``).
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

# The extractor and runner beside this file; the tests are imported by path
# (--import-mode=importlib), which puts no folder on sys.path.
HERE = Path(__file__).resolve().parent
if str(HERE) not in sys.path:
    sys.path.insert(0, str(HERE))

from _blocks import Block, extract, run_page  # noqa: E402

REPOSITORY = HERE.parent
READMES = sorted(REPOSITORY.glob("packages/*/README.md"))
BLOCKS = [block for readme in READMES for block in extract(readme)]
TO_RUN = [block for block in BLOCKS if block.not_run is None]


def _id(block: Block) -> str:
    return f"{block.path.parent.name}:{block.line}"


def test_the_blocks_are_counted() -> None:
    left_out = [block for block in BLOCKS if block.not_run is not None]
    print(f"{len(TO_RUN)} README blocks run, {len(left_out)} marked not to run:")
    for block in left_out:
        print(f"  {block.where(REPOSITORY)} not run: {block.not_run}")
    assert all(block.not_run for block in left_out), "a marker gives no reason"
    without = [readme for readme in READMES if not any(b.path == readme for b in BLOCKS)]
    assert without == [], "every README has a Python example"


@pytest.mark.parametrize("block", TO_RUN, ids=_id)
def test_the_block_runs_as_written(block: Block, tmp_path: Path) -> None:
    env = {
        key: value
        for key, value in os.environ.items()
        # No provider's key and no interpreter setting reaches the example.
        if not key.endswith("_API_KEY") and not key.startswith("PYTHON")
    }
    finished = run_page(
        [block], workdir=tmp_path, root=REPOSITORY, env=env, top_level_await=False, timeout=180
    )
    assert finished.returncode == 0, (
        f"{block.where(REPOSITORY)}: the block failed (exit {finished.returncode})\n"
        f"{finished.stdout}\n{finished.stderr}"
    )
