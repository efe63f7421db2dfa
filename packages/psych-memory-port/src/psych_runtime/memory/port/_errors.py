"""Every error a memory store may raise, shared by all adapters.

Two small hierarchies, on the standard library's bases, so callers can catch
either the precise class or the familiar one. The caller's mistakes:

    ValueError
     └── InvalidInputError          a value broke a rule of the port
          ├── InvalidKeyError        tenant / end_user_id
          ├── InvalidContentError    the text of a fact
          ├── InvalidLimitError      the limit of recall
          └── StalePageError         a page read after a fact no longer held

and the store's failures, which are not the caller's fault:

    Exception
     └── MemoryStoreError           the store could not do what was asked
          ├── StoreUnavailableError  unreachable, or busy past its time bound
          ├── StoreClosedError       used before it was opened or after it closed
          └── SchemaVersionError     the stored layout is not the one this code knows

A value of the wrong type raises the built-in `TypeError`, as Python itself
does. The four methods of `MemoryStore` raise nothing else: a driver's own
exception reaches the caller only as the ``__cause__`` of a
`MemoryStoreError`. Adapters subclass these classes for errors of their own.

Messages name the argument or the operation and the rule, and never repeat a
value, a stored fact or a password: keys and facts can hold personal data,
and error messages end up in logs. Every error pickles with its attributes,
so it can cross a process boundary intact.
"""

from __future__ import annotations

from typing import Any

__all__ = [
    "InvalidContentError",
    "InvalidInputError",
    "InvalidKeyError",
    "InvalidLimitError",
    "MemoryStoreError",
    "SchemaVersionError",
    "StalePageError",
    "StoreClosedError",
    "StoreUnavailableError",
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


class StalePageError(InvalidInputError):
    """The ``after`` of a page read is not the id of a fact the key holds.

    The fact was forgotten or erased after the previous page was read (or
    never belonged to this key). Nothing was read: start again from
    ``after=None``.
    """

    def __init__(
        self,
        argument: str = "after",
        rule: str = (
            "is not the id of a fact this end user holds (forgotten or erased since "
            "it was read): read again from after=None"
        ),
    ) -> None:
        super().__init__(argument, rule)


class MemoryStoreError(Exception):
    """The store could not do what was asked, through no fault of the caller.

    The base of every store failure. Catch it around a call to tell "the
    memory is down" from a bug in the call (`TypeError`, `InvalidInputError`).
    A driver's exception, when there was one, is the ``__cause__``.
    """


class StoreUnavailableError(MemoryStoreError):
    """The store could not be reached, or stayed busy past its time bound.

    Attributes:
        operation: The method that failed, such as ``"remember"``.
        reason: What went wrong, in words, without any value.
        may_have_taken_effect: ``False`` when the store guarantees that the
            call changed nothing, so it can be retried as it is. ``True``
            when the outcome is unknown: the change may have been made (a
            ``recall`` tells), and a retried ``forget`` or ``erase`` may
            answer ``False`` or ``0`` for a deletion the first attempt made.
    """

    operation: str
    reason: str
    may_have_taken_effect: bool

    def __init__(self, operation: str, reason: str, *, may_have_taken_effect: bool) -> None:
        outcome = (
            "it may have taken effect (the outcome is unknown)"
            if may_have_taken_effect
            else "it changed nothing"
        )
        super().__init__(f"{operation} failed: {reason}; {outcome}")
        self.operation = operation
        self.reason = reason
        self.may_have_taken_effect = may_have_taken_effect

    def __reduce__(self) -> tuple[Any, ...]:
        return (
            _rebuild,
            (
                type(self),
                (self.operation, self.reason),
                {"may_have_taken_effect": self.may_have_taken_effect},
            ),
        )


class StoreClosedError(MemoryStoreError):
    """The store was used before it was opened, or after it was closed.

    Nothing was changed. A closed store stays closed: open a new one.

    Attributes:
        operation: The method that was called, such as ``"recall"``.
        state: ``"not open"`` or ``"closed"``.
    """

    operation: str
    state: str

    def __init__(self, operation: str, state: str = "closed") -> None:
        advice = (
            "open it first ('async with store:')"
            if state == "not open"
            else "a closed store cannot be used again"
        )
        super().__init__(f"{operation} on a store that is {state}: {advice}")
        self.operation = operation
        self.state = state

    def __reduce__(self) -> tuple[Any, ...]:
        return (type(self), (self.operation, self.state))


class SchemaVersionError(MemoryStoreError):
    """The stored layout is missing, older or newer than the one this code knows.

    Nothing was changed: code must never guess at a layout it does not know.

    Attributes:
        where: What holds the layout, such as a file or a database schema,
            named without any password.
        found: The version recorded there, ``None`` when there is none yet.
        expected: The version this code reads and writes.
    """

    where: str
    found: int | None
    expected: int

    def __init__(self, where: str, found: int | None, expected: int) -> None:
        if found is None:
            advice = "holds no memory layout yet: create it first"
        elif found > expected:
            advice = (
                f"is at schema version {found}, newer than the {expected} this code "
                "knows: upgrade the adapter"
            )
        else:
            advice = f"is at schema version {found}, older than {expected}: upgrade it first"
        super().__init__(f"{where} {advice}")
        self.where = where
        self.found = found
        self.expected = expected

    def __reduce__(self) -> tuple[Any, ...]:
        return (type(self), (self.where, self.found, self.expected))


def _rebuild(
    cls: type[BaseException], args: tuple[object, ...], kwargs: dict[str, object]
) -> BaseException:
    # Pickle calls this to rebuild an error whose constructor takes keywords.
    return cls(*args, **kwargs)
