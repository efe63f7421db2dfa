"""The keys, values and sizes the checks use, chosen to expose typical bugs."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Final, TypeAlias

from hypothesis import strategies as st

from psych_runtime.memory.port import (
    MAX_CONTENT_LENGTH,
    MAX_KEY_LENGTH,
    InvalidContentError,
    InvalidKeyError,
    InvalidLimitError,
    Memory,
    MemoryKey,
)

__all__ = [
    "BAD_CONTENTS",
    "BAD_KEY_PARTS",
    "BAD_LIMITS",
    "BAD_MEMORY_IDS",
    "BARRIER_TIMEOUT",
    "CASE",
    "CONTENTS",
    "CONTENT_ALPHABET",
    "EXACT_CONTENTS",
    "FACTS_PER_TASK",
    "FACTS_PER_THREAD",
    "ISOLATION_KEYS",
    "JOINED_LEFT",
    "JOINED_RIGHT",
    "KEY_ALPHABET",
    "KEY_PARTS",
    "LISTED_KEYS",
    "MAIN",
    "MARKER",
    "NEAR_MISS_KEYS",
    "NORMALISED_NFC",
    "NORMALISED_NFD",
    "NO_FACTS_TENANT",
    "SAME_END_USER",
    "SAME_TENANT",
    "SWAPPED",
    "TASKS",
    "THREADS",
    "UNKNOWN_IDS",
    "BadScope",
    "NoTenant",
    "Pair",
    "ScopeObject",
    "ids_of",
    "key_of",
    "positions",
]

Pair: TypeAlias = tuple[str, str]
"""A key as the two call-site arguments: ``(scope, end_user_id)``."""

# How much concurrency the concurrency checks create. Large enough to make an
# unguarded read-modify-write lose facts, small enough for a real database.
TASKS: Final = 48
FACTS_PER_TASK: Final = 4
THREADS: Final = 6
FACTS_PER_THREAD: Final = 12
# A thread that never reaches the barrier means a worker died before it: fail
# instead of hanging the run.
BARRIER_TIMEOUT: Final = 60.0


@dataclass(frozen=True)
class ScopeObject:
    """A stand-in for the runtime's scope object: a tenant plus other fields."""

    tenant: str
    # The runtime's scope carries more than the tenant; none of it is the key.
    thread: str = "conversation-1"


class NoTenant:
    """A scope-like object without a ``tenant`` attribute."""


@dataclass(frozen=True)
class BadScope:
    """A scope object whose ``tenant`` is not a valid tenant."""

    tenant: object


# Keys the checks use. Each pair below differs from the main key in exactly
# the way a wrong key construction would hide.
MAIN = ("acme", "user-1")
SAME_TENANT = ("acme", "user-2")
SAME_END_USER = ("globex", "user-1")
SWAPPED = ("user-1", "acme")
JOINED_LEFT = ("acme:user", "1")
JOINED_RIGHT = ("acme", "user:1")
CASE = ("acme", "USER-1")
_NFC = "caf\u00e9"
_NFD = "cafe\u0301"
NORMALISED_NFC = ("acme", _NFC)
NORMALISED_NFD = ("acme", _NFD)
ISOLATION_KEYS: Final = (
    MAIN,
    SAME_TENANT,
    SAME_END_USER,
    SWAPPED,
    JOINED_LEFT,
    JOINED_RIGHT,
    CASE,
    NORMALISED_NFC,
    NORMALISED_NFD,
)

# Keys whose code-point order differs from a case-insensitive, a normalising,
# a natural or a UTF-16 order: only a plain code-point sort lists them right.
# The capability checks (rules 10 and 12) fill a store with them.
LISTED_KEYS: Final[tuple[Pair, ...]] = (
    ("acme", "user-1"),
    ("acme", "USER-1"),
    ("acme", "user-10"),
    ("acme", "user-2"),
    ("acme", "caf\u00e9"),
    ("acme", "cafe\u0301"),
    ("acme", "\uff21 wide"),
    ("acme", "\U0001f600 face"),
    ("acme", "Zed"),
    ("Acme", "user-1"),
    ("globex", "user-1"),
    ("\U0001f600 co", "user-1"),
    ("\uff21 co", "user-1"),
)
# A tenant that never holds a fact: listing or counting it gives nothing.
NO_FACTS_TENANT: Final = "tenant-without-facts"

# Values that must be refused as a tenant or an end-user id. Each holds a
# marker the error message must not repeat (values can be personal data).
MARKER: Final = "Private-Marker"
BAD_KEY_PARTS: Final[tuple[tuple[str, object, type[Exception]], ...]] = (
    ("an empty string", "", InvalidKeyError),
    ("a string too long", "u" * (MAX_KEY_LENGTH + 1), InvalidKeyError),
    ("leading whitespace", f" {MARKER}", InvalidKeyError),
    ("trailing whitespace", f"{MARKER} ", InvalidKeyError),
    ("a trailing newline", f"{MARKER}\n", InvalidKeyError),
    ("a NUL character", f"{MARKER}\x00", InvalidKeyError),
    ("an escape character", f"{MARKER}\x1b", InvalidKeyError),
    ("a DEL character", f"{MARKER}\x7f", InvalidKeyError),
    ("a C1 control character", f"{MARKER}\x85", InvalidKeyError),
    ("a lone surrogate", f"{MARKER}\ud800", InvalidKeyError),
    ("None", None, TypeError),
    ("an int", 42, TypeError),
    ("bytes", MARKER.encode(), TypeError),
)
# Where a backend that stripped, truncated or normalised a bad key would put
# the fact instead of refusing it.
NEAR_MISS_KEYS: Final = (
    ("acme", MARKER),
    (MARKER, "user-1"),
    ("acme", "u" * MAX_KEY_LENGTH),
    ("u" * MAX_KEY_LENGTH, "user-1"),
    ("acme", "user-1"),
)
BAD_CONTENTS: Final[tuple[tuple[str, object, type[Exception]], ...]] = (
    ("an empty string", "", InvalidContentError),
    ("only spaces", "   ", InvalidContentError),
    ("only newlines and tabs", "\n\t\n", InvalidContentError),
    ("a string too long", "x" * (MAX_CONTENT_LENGTH + 1), InvalidContentError),
    ("a NUL character", f"{MARKER}\x00", InvalidContentError),
    ("a carriage return", f"{MARKER}\r", InvalidContentError),
    ("an escape character", f"{MARKER}\x1b", InvalidContentError),
    ("a DEL character", f"{MARKER}\x7f", InvalidContentError),
    ("a C1 control character", f"{MARKER}\x85", InvalidContentError),
    ("a lone surrogate", f"{MARKER}\udfff", InvalidContentError),
    ("None", None, TypeError),
    ("an int", 42, TypeError),
    ("bytes", MARKER.encode(), TypeError),
)
BAD_LIMITS: Final[tuple[tuple[str, object, type[Exception]], ...]] = (
    ("-1", -1, InvalidLimitError),
    ("a large negative int", -(2**63), InvalidLimitError),
    ("True", True, TypeError),
    ("False", False, TypeError),
    ("a float", 1.0, TypeError),
    ("a str", "2", TypeError),
)
BAD_MEMORY_IDS: Final[tuple[tuple[str, object], ...]] = (
    ("None", None),
    ("an int", 1),
    ("bytes", b"1"),
)
# Strings that are no fact's id in any sane backend: forget must answer False.
UNKNOWN_IDS: Final = (
    "",
    " ",
    "0",
    "1",
    "-1",
    "unknown",
    "%",
    "*",
    "' OR '1'='1",
    "x" * 10_000,
    "\x00",
    "\ud800",
    "00000000-0000-0000-0000-000000000000",
)
# Contents that must come back character for character.
EXACT_CONTENTS: Final = (
    "prefers the Berlin warehouse",
    "  leading and trailing spaces  ",
    "line one\nline two\n",
    "\ttab first",
    "caf\u00e9 and cafe\u0301 differ",
    "emoji \U0001f600 and CJK \u6f22\u5b57",
    "quotes ' \" ` and backslash \\ and percent % and underscore _",
    "'); DROP TABLE memories; --",
    '{"looks": "like json"}',
    "x" * MAX_CONTENT_LENGTH,
    "\U0001f600" * MAX_CONTENT_LENGTH,
)

KEY_ALPHABET: Final = st.characters(codec="utf-8", exclude_categories=("Cc", "Cs"))
CONTENT_ALPHABET: Final = st.one_of(KEY_ALPHABET, st.sampled_from("\n\t"))
KEY_PARTS: Final = st.text(KEY_ALPHABET, min_size=1, max_size=40).filter(
    lambda part: not part[0].isspace() and not part[-1].isspace()
)
CONTENTS: Final = st.text(CONTENT_ALPHABET, min_size=1, max_size=200).filter(
    lambda content: not content.isspace()
)


def key_of(pair: tuple[str, str]) -> MemoryKey:
    return MemoryKey(pair[0], pair[1])


def ids_of(memories: Iterable[Memory]) -> list[str]:
    return [memory.id for memory in memories]


def positions(remembered: list[Memory], recalled: Iterable[Memory]) -> list[int]:
    # Where each recalled fact was in insertion order (-1: never remembered).
    order = {memory.id: index for index, memory in enumerate(remembered)}
    return [order.get(memory.id, -1) for memory in recalled]
