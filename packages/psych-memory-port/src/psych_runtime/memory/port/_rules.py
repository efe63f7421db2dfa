"""Rules every adapter applies the same way, written once.

The ``validate_*`` functions check what a caller passes; these are the
decisions an adapter takes after that: which tenant a scope names, what id a
new fact gets, how a limit fits a SQL integer, what a number of seconds may
be, and which restored facts to store.
"""

from __future__ import annotations

import math
import os
from collections.abc import Iterable, Mapping
from typing import Final, final

from ._errors import InvalidInputError
from ._key import Scope, _tenant_of
from ._memory import Memory
from ._validation import _type_name

__all__ = ["RestorePlan", "bounded_limit", "new_memory_id", "validate_scope", "validate_seconds"]

_MAX_SQL_INTEGER: Final = 2**63 - 1
_IDS_PER_READ: Final = 256

# Ids read ahead from the operating system: one system call per id cost
# more than the rest of a fast store's call. A list's pop and extend are
# atomic, so threads may share it without a lock; a forked child empties it,
# or it would hand out its parent's next ids.
_READ_AHEAD: Final[list[str]] = []
if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_READ_AHEAD.clear)


def validate_scope(scope: Scope) -> str:
    """The tenant ``scope`` names, checked as `memory_key` checks it.

    For the calls that take a tenant without an end user (`ListsEndUsers`,
    `CountsFacts`).

    Raises:
        TypeError: ``scope`` is neither a `str` nor an object with a `str`
            attribute ``tenant``.
        InvalidKeyError: The tenant breaks a key rule; the error names
            ``scope`` or ``scope.tenant``.
    """
    return _tenant_of(scope)


def new_memory_id() -> str:
    """A fresh fact id: 32 lowercase hexadecimal digits, 128 random bits.

    The bits come from the operating system (`os.urandom`), so ids are
    unguessable across tenants and never repeat in practice. Safe to call
    from any thread.
    """
    try:
        return _READ_AHEAD.pop()
    except IndexError:
        digits = os.urandom(16 * _IDS_PER_READ).hex()
        # This call keeps one of the ids it read: other threads may empty
        # the list again between its extend and a pop of its own.
        mine, *rest = [digits[at : at + 32] for at in range(0, len(digits), 32)]
        _READ_AHEAD.extend(rest)
        return mine


def bounded_limit(limit: int | None) -> int:
    """A limit checked by `validate_limit`, as a bound a signed 64-bit SQL integer holds.

    ``None`` (no limit) and any limit above ``2**63 - 1`` become ``2**63 - 1``:
    no store holds more facts than that, so the answer is the same.
    """
    if limit is None or limit > _MAX_SQL_INTEGER:
        return _MAX_SQL_INTEGER
    return limit


def validate_seconds(value: object, argument: str) -> float:
    """Check a duration in seconds, such as a timeout, and return it as a `float`.

    Args:
        value: The candidate: an `int` or a `float`, not a `bool`.
        argument: Its name in error messages.

    Raises:
        TypeError: ``value`` is not a number, or is a `bool`.
        ValueError: ``value`` is zero, negative, not a number (NaN) or
            infinite.
    """
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise TypeError(f"{argument} must be a number of seconds, not {_type_name(value)}")
    try:
        seconds = float(value)
    except OverflowError:
        seconds = math.inf
    if not (seconds > 0 and math.isfinite(seconds)):
        raise ValueError(f"{argument} must be a positive, finite number of seconds")
    return seconds


@final
class RestorePlan:
    """Which facts of a restore to store: the rule of `RestoresFacts`, once.

    A fact given twice is stored once; an id the store already gives to
    this very fact is skipped; an id given to a different fact, earlier in
    the call or in the store, refuses the whole call before anything is
    stored. The refusal is an `InvalidInputError` naming ``memories[i].id``
    (``i`` the index of the fact in the call) for `RestoresFacts.restore_many`
    and ``memory.id`` for `RestoresFacts.restore`.

    Args:
        memories: The facts of the call, as `validate_restored` or
            `validate_restored_many` returned them.
        batch: Whether they came to `RestoresFacts.restore_many`.

    Attributes:
        facts: The distinct facts, in the order given (a repeat dropped).

    Raises:
        InvalidInputError: An id is given twice, to different facts.
    """

    __slots__ = ("_batch", "_given", "facts")

    facts: tuple[Memory, ...]

    def __init__(self, memories: tuple[Memory, ...], *, batch: bool) -> None:
        self._given = memories
        self._batch = batch
        distinct = {memory.id: memory for memory in memories}
        if len(distinct) < len(memories):
            # Some id is repeated: judged fact by fact, so that a refusal
            # names the first repeat that differs from its id's first fact.
            distinct = {}
            for index, memory in enumerate(memories):
                first = distinct.setdefault(memory.id, memory)
                if first is not memory and first != memory:
                    raise self._taken(index)
        self.facts = tuple(distinct.values())

    def to_store(
        self, held: Mapping[str, Memory], among: Iterable[Memory] | None = None
    ) -> tuple[Memory, ...]:
        """The facts to store, given the facts the store holds under their ids.

        Args:
            held: The facts the store holds, by id: at least those whose ids
                are among the facts judged.
            among: The facts to judge, some of `facts` in their order (a
                chunk of a large call, say); all of `facts` by default.

        Returns:
            Those of the facts judged whose id ``held`` lacks, in order; a
            fact ``held`` maps to itself is skipped.

        Raises:
            InvalidInputError: ``held`` maps the id of a fact judged to a
                different fact; the first such fact is named by its index
                in the call.
        """
        fresh: list[Memory] = []
        keep = fresh.append
        get = held.get
        for memory in self.facts if among is None else among:
            found = get(memory.id)
            if found is None:
                keep(memory)
            elif found != memory:
                # Its first place in the call, looked up only now: a call of
                # valid facts builds no names.
                raise self._taken(self._given.index(memory))
        return tuple(fresh)

    def _taken(self, index: int) -> InvalidInputError:
        argument = f"memories[{index}].id" if self._batch else "memory.id"
        return InvalidInputError(argument, "is already the id of a different fact in this store")
