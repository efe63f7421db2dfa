"""Errors raised by the port's validation, shared by every adapter.

The hierarchy is small on purpose, and sits on the standard library's bases
so callers can catch either the precise class or the familiar one::

    ValueError
     └── InvalidInputError          a value broke a rule of the port
          ├── InvalidKeyError        tenant / end_user_id
          ├── InvalidContentError    the text of a fact
          └── InvalidLimitError      the limit of recall

A value of the wrong type raises the built-in `TypeError`, as Python itself
does. Messages name the argument and the rule and never repeat the value:
keys and facts can hold personal data, and error messages end up in logs.
"""

from __future__ import annotations

__all__ = [
    "InvalidContentError",
    "InvalidInputError",
    "InvalidKeyError",
    "InvalidLimitError",
]


class InvalidInputError(ValueError):
    """A value given to the port broke one of its rules; nothing was changed.

    Attributes:
        argument: The name of the offending argument, as the caller wrote it
            (for example ``"end_user_id"`` or ``"scope.tenant"``).
        rule: The rule that was broken, in words, without the value.
    """

    argument: str
    rule: str

    def __init__(self, argument: str, rule: str) -> None:
        super().__init__(f"{argument} {rule}")
        self.argument = argument
        self.rule = rule

    def __reduce__(self) -> tuple[type[InvalidInputError], tuple[str, str]]:
        return (type(self), (self.argument, self.rule))


class InvalidKeyError(InvalidInputError):
    """A tenant or end-user id is empty, too long or holds forbidden characters."""


class InvalidContentError(InvalidInputError):
    """The content of a fact is empty, blank, too long or not storable text."""


class InvalidLimitError(InvalidInputError):
    """The ``limit`` of `recall` is negative."""
