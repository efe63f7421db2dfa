"""The limits of the memory tools: one immutable value, checked when it is made."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final

from psych_runtime.memory.port import MAX_CONTENT_LENGTH

from ._render import check_budget

__all__ = [
    "DEFAULT_MAX_FACTS",
    "DEFAULT_MAX_FACT_LENGTH",
    "DEFAULT_MAX_PROMPT_CHARS",
    "ToolLimits",
]

DEFAULT_MAX_FACTS: Final = 50
"""How many facts one end user may hold through the tools, unless bound otherwise."""

DEFAULT_MAX_FACT_LENGTH: Final = 300
"""How many characters one fact may have through the tools, unless bound otherwise."""

DEFAULT_MAX_PROMPT_CHARS: Final = 20_000
"""How many characters `MemoryTools.prompt` may return, unless bound otherwise."""


@dataclass(frozen=True, slots=True)
class ToolLimits:
    """The limits of one set of memory tools, checked once, when this is made.

    The same limits `memory_tools` takes as keywords, with the same defaults,
    checks and errors; a `ToolLimits` is valid for as long as it exists, so
    whoever holds one (`MemoryTools`, a server binding tools per request)
    never checks it again.

    Attributes:
        max_facts: The most facts the end user may hold: ``remember``
            refuses, storing and evicting nothing, when they already hold
            this many. An int >= 1, or ``None`` for no cap.
        max_fact_length: The most characters of one fact through the tools,
            1 to the port's `MAX_CONTENT_LENGTH`, or ``None`` for the port's
            limit alone.
        max_prompt_chars: The budget of `MemoryTools.prompt` in characters,
            at least `MIN_PROMPT_CHARS`, or ``None`` for no budget.

    Raises:
        TypeError: A limit is neither ``None`` nor an `int` (a `bool` is no
            limit).
        ValueError: A limit is out of range: ``max_facts`` or
            ``max_fact_length`` below 1, ``max_fact_length`` above
            `MAX_CONTENT_LENGTH`, ``max_prompt_chars`` below
            `MIN_PROMPT_CHARS`.
    """

    max_facts: int | None = DEFAULT_MAX_FACTS
    max_fact_length: int | None = DEFAULT_MAX_FACT_LENGTH
    max_prompt_chars: int | None = DEFAULT_MAX_PROMPT_CHARS

    def __post_init__(self) -> None:
        # Stored as plain ints (an int subclass is accepted, and normalised).
        checked = (
            ("max_facts", _count_limit(self.max_facts, "max_facts", None)),
            (
                "max_fact_length",
                _count_limit(self.max_fact_length, "max_fact_length", MAX_CONTENT_LENGTH),
            ),
            ("max_prompt_chars", check_budget(self.max_prompt_chars, "max_prompt_chars")),
        )
        for name, value in checked:
            object.__setattr__(self, name, value)

    @property
    def fact_length(self) -> int:
        """The most characters of one fact, the port's `MAX_CONTENT_LENGTH` when unbounded here."""
        return MAX_CONTENT_LENGTH if self.max_fact_length is None else self.max_fact_length


def _count_limit(value: object, argument: str, most: int | None) -> int | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"{argument} must be None or an int, not {type(value).__qualname__}")
    if value < 1:
        raise ValueError(f"{argument} must be None or at least 1 (got {value})")
    if most is not None and value > most:
        raise ValueError(f"{argument} must be None or at most {most} (got {value})")
    return int(value)
