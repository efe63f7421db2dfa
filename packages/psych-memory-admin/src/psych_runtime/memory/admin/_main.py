"""The entry point of ``psych-memory``, importable without the command's extra."""

from __future__ import annotations

import sys
from collections.abc import Sequence
from typing import NoReturn

from ._exit import ExitCode
from ._interrupts import INTERRUPTS

__all__ = ["main", "run"]

_EXTRA_NEEDS = ("anyio", "click")


def main(argv: Sequence[str] | None = None) -> int:
    """Run ``psych-memory`` with ``argv`` (default: the process's) and return the exit code.

    What the console script runs, callable in-process. Output goes to the
    process's standard output and error; nothing is raised: every failure
    becomes one line on standard error and an `ExitCode`. The command needs
    the extra ``psych-memory-admin[cli]``; without it this says so and
    returns `ExitCode.USAGE`.

    Returns:
        The exit code, an `ExitCode` (``0`` when the command did what was asked).
    """
    return _command(argv, process=False)


def _command(argv: Sequence[str] | None, *, process: bool) -> int:
    # ``process``: the command is the whole process (see the command's main).
    try:
        from ._cli import main as command  # noqa: PLC0415 - the extra is optional
    except ModuleNotFoundError as exc:
        if exc.name not in _EXTRA_NEEDS:
            raise
        print(
            f"psych-memory: error: the command needs {exc.name}: "
            "pip install 'psych-memory-admin[cli]'",
            file=sys.stderr,
        )
        return ExitCode.USAGE
    return command(argv, process=process)


def run() -> NoReturn:
    """The console script's entry point."""
    # First, before the command's own imports: from here no Ctrl-C is lost.
    INTERRUPTS.watch()
    sys.exit(_command(None, process=True))
