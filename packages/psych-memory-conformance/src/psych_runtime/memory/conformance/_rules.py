"""The six rules of the port, worded as failure messages quote them."""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType
from typing import Final

__all__ = ["RULES", "RuleViolationError"]

RULES: Final[Mapping[int, str]] = MappingProxyType(
    {
        1: (
            "remember always adds a new fact with a fresh id, even when the same content "
            "is already stored; it never merges, deduplicates or rewrites it"
        ),
        2: (
            "forget returns True when it deleted the fact, and False (never an exception) "
            "when the id is unknown, already gone, or belongs to another end user or "
            "tenant; then nothing is deleted"
        ),
        3: (
            "recall returns every fact of the key, oldest first, in insertion order; "
            "limit=None returns all, limit=n the n oldest, limit=0 returns ()"
        ),
        4: (
            "erase deletes every fact of the key at once and for good and returns how "
            "many it deleted; no soft delete, tombstone or retained copy"
        ),
        5: "every call touches only its own key's facts",
        6: (
            "input is validated before anything changes: invalid input raises a clear "
            "error and stores or deletes nothing"
        ),
    }
)
"""The rules of the port's contract, by number, in the words failures quote."""


class RuleViolationError(AssertionError):
    """A backend broke one of the port's rules.

    The message starts with ``rule N:`` and the rule's words, then says what
    the backend did instead, so a failing check names the broken rule.

    Attributes:
        rule: The number of the broken rule, a key of `RULES`.
        detail: What was observed, in words.
    """

    rule: int
    detail: str

    def __init__(self, rule: int, detail: str) -> None:
        super().__init__(f"rule {rule}: {RULES[rule]} -- {detail}")
        self.rule = rule
        self.detail = detail

    def __reduce__(self) -> tuple[type[RuleViolationError], tuple[int, str]]:
        return (type(self), (self.rule, self.detail))
