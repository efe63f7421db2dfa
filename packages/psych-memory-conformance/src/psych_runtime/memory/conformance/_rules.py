"""The rules of the port, worded as failure messages quote them.

Rules 1-6 are the four methods' contract, 7-9 the lifecycle, the failures
and cancellation every store shares, and 10-15 the optional capabilities,
checked only on a store that provides them.
"""

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
        7: (
            "a store works as 'async with store:', closing it twice is harmless, and after "
            "closing every call raises StoreClosedError naming the call and changes nothing; "
            "a closed store stays closed"
        ),
        8: (
            "the four methods raise only TypeError, InvalidInputError or MemoryStoreError (a "
            "driver's exception only as the __cause__), and every error pickles and unpickles "
            "with its attributes"
        ),
        9: (
            "a cancelled call's effect is decided before the cancellation reaches the caller "
            "(done or not done); no effect appears after a later call returned"
        ),
        10: (
            "a store that lists keys (ListsEndUsers) lists exactly the tenants and end users "
            "holding at least one fact, each once, sorted by code point"
        ),
        11: (
            "a store that restores facts (RestoresFacts) stores each as given (id, key, "
            "content, created_at) after the key's facts, answers False and changes nothing "
            "for the same fact again, and refuses a different fact with a taken id with "
            "InvalidInputError; restore_many does the same for a batch, in its order, "
            "all or none"
        ),
        12: (
            "a store that counts facts (CountsFacts) reports for a tenant exactly the end "
            "users holding at least one fact, each with as many facts as recall returns, "
            "in code-point order and in a mapping of the caller's own, and no end user of "
            "another tenant"
        ),
        13: (
            "a store that pages facts (PagesFacts) gives, page after page, exactly the facts "
            "recall returns, in its order: up to size facts after the fact 'after' names, a "
            "page shorter than size is the last, an 'after' the key does not hold raises "
            "StalePageError, and an invalid size or after is refused, changing nothing"
        ),
        14: (
            "a store that expires facts (ExpiresFacts) deletes for good exactly the facts of "
            "the tenant, of every end user, created before the cutoff (strictly, to the "
            "microsecond), returns how many it deleted and counts them beforehand with "
            "count_expired; facts of other tenants and facts created at or after the cutoff "
            "are untouched, calls made meanwhile keep working, and a naive or future cutoff "
            "is refused, changing nothing"
        ),
        15: (
            "a store that remembers within a limit (RemembersWithinLimit) adds a fact as "
            "remember does while the key holds fewer than max_facts facts (those remember "
            "added count too) and otherwise returns None and stores nothing, never taking the "
            "key past max_facts however many calls run at once; an invalid key, content or "
            "max_facts is refused, changing nothing"
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
