"""The exit codes of both commands, and the one error they raise to stop."""

from __future__ import annotations

from collections.abc import Iterable
from enum import IntEnum

__all__ = ["CommandError", "ExitCode", "exit_codes_help"]


class ExitCode(IntEnum):
    """What the exit status of ``psych-memory`` and ``psych-memory-mcp`` means.

    One table for both commands; scripts may rely on these numbers. The MCP
    server exits with `DONE`, `FAILED`, `USAGE`, `UNAVAILABLE` or `REFUSED`
    (a deletion ledger created with another key) only.
    """

    DONE = 0
    """The command did what was asked."""
    FAILED = 1
    """An unexpected failure: a bug, reported with its type only."""
    USAGE = 2
    """Bad usage: a missing or malformed argument, a bad URL or file. Nothing changed."""
    UNAVAILABLE = 3
    """The store failed or could not be reached; its message says whether anything changed."""
    NOT_FOUND = 4
    """The store holds no facts for the end user named. Nothing changed."""
    REFUSED = 5
    """A rule forbids it: conflicting facts, a store lacking a capability. Nothing changed."""
    CANCELLED = 6
    """The operator declined the confirmation or interrupted the command."""


_SUMMARIES = {
    ExitCode.DONE: "done",
    ExitCode.FAILED: "unexpected failure",
    ExitCode.USAGE: "bad usage",
    ExitCode.UNAVAILABLE: "store unavailable",
    ExitCode.NOT_FOUND: "no facts for that end user",
    ExitCode.REFUSED: "refused",
    ExitCode.CANCELLED: "cancelled",
}


def exit_codes_help(codes: Iterable[ExitCode] = tuple(ExitCode)) -> str:
    """One line for a command's help naming ``codes``: ``Exit codes: 0 done, 1 ...``."""
    return "Exit codes: " + ", ".join(f"{int(code)} {_SUMMARIES[code]}" for code in codes) + "."


class CommandError(Exception):
    """Stop a command: print one line naming the argument and the rule, exit with ``code``.

    `open_for_command` raises it, and every refusal of ``psych-memory``.

    Attributes:
        argument: The argument or option at fault, as the operator typed it
            (``"URL"``, ``"--user"``, ``"FILE"``), or the operation.
        rule: What is wrong, in words, never quoting a fact or a password.
        code: The exit code.
    """

    def __init__(self, argument: str, rule: str, code: ExitCode) -> None:
        super().__init__(f"{argument}: {rule}")
        self.argument = argument
        self.rule = rule
        self.code = code
