"""The exit codes of ``psych-memory``, and the one error its commands raise to stop."""

from __future__ import annotations

from enum import IntEnum

__all__ = ["CommandError", "ExitCode"]


class ExitCode(IntEnum):
    """What the process's exit status means; scripts may rely on these numbers."""

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


class CommandError(Exception):
    """Stop the command: print one line naming the argument and the rule, exit with ``code``.

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
