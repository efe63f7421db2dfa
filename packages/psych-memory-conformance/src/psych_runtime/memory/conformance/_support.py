"""Helpers the checks share: rule assertions, refusals, skips, a store called from a thread."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from functools import partial
from typing import Any, Final, NoReturn, TypeAlias, TypeVar

import anyio.from_thread
import anyio.to_thread
import pytest

from psych_runtime.memory.port import InvalidKeyError, Memory, MemoryKey, MemoryStore

from ._cases import MARKER
from ._rules import RuleViolationError

__all__ = [
    "BlockingStore",
    "CountStored",
    "Refusal",
    "check",
    "in_worker_thread",
    "not_applicable",
    "refuses_invalid_scopes",
]

_R = TypeVar("_R")

CountStored: TypeAlias = Callable[[MemoryStore, MemoryKey], Awaitable[int]]
"""The backdoor: how many rows a key holds in the backend, counted directly."""


def check(condition: bool, rule: int, detail: str) -> None:  # noqa: FBT001
    """Fail with the words of ``rule`` and ``detail`` unless ``condition`` holds.

    Raises:
        RuleViolationError: ``condition`` is false.
    """
    if not condition:
        raise RuleViolationError(rule, detail)


def not_applicable(capability: str) -> NoReturn:
    """Skip the running check: the store lacks ``capability``, so its rule does not apply.

    Raises:
        pytest.skip.Exception: Always; pytest reports the check as skipped.
    """
    pytest.skip(f"not applicable: the store does not provide {capability}, an optional capability")


_INVALID_SCOPES: Final[tuple[tuple[str, object, type[Exception]], ...]] = (
    ("an empty tenant", "", InvalidKeyError),
    ("a tenant with a NUL character", "acme\x00", InvalidKeyError),
    ("None", None, TypeError),
    ("a scope object without tenant", object(), TypeError),
)


async def refuses_invalid_scopes(
    method: Callable[[Any], Awaitable[object]], name: str, rule: int
) -> None:
    """Check that ``method`` (a capability's, taking a scope) refuses every invalid scope.

    Raises:
        RuleViolationError: It answered, or raised another exception.
    """
    for label, scope, expected in _INVALID_SCOPES:
        try:
            await method(scope)
        except expected:
            continue
        except Exception as exc:
            raise RuleViolationError(
                rule,
                f"{name} of {label} raised {type(exc).__name__}; it must raise {expected.__name__}",
            ) from exc
        raise RuleViolationError(
            rule, f"{name} of {label} answered; it must raise {expected.__name__}"
        )


async def in_worker_thread(body: Callable[[anyio.from_thread.BlockingPortal], object]) -> None:
    """Run the synchronous ``body`` in a worker thread, with a portal back to this loop.

    Hypothesis drives examples synchronously, so they run in a worker thread
    and send every store call back to the loop the store lives on.

    Raises:
        Exception: Whatever ``body`` raised, itself rather than wrapped.
    """
    failure: Exception | None = None
    async with anyio.from_thread.BlockingPortal() as portal:
        try:
            await anyio.to_thread.run_sync(body, portal)
        except Exception as exc:  # noqa: BLE001 - raised again below, unwrapped.
            failure = exc
    # Raised out here, so that the report shows the broken rule itself
    # rather than an exception group of the portal's task group.
    if failure is not None:
        raise failure


class Refusal:
    """What a call with invalid input must do: raise this type, change nothing.

    A failure blames ``rule``: rule 6 for the four methods, a capability's
    own rule for its methods.
    """

    def __init__(
        self, expected: type[Exception], argument: str, value: object, *, rule: int = 6
    ) -> None:
        self.expected = expected
        self.argument = argument
        self.value = value
        self.rule = rule

    def verify(self, what: str, error: BaseException | None) -> None:
        """Check what the call ``what`` raised (``None``: nothing) against the rule.

        Raises:
            RuleViolationError: Nothing was raised, the wrong type was, or the
                message omits the argument's name or repeats the value.
        """
        if error is None:
            raise RuleViolationError(
                self.rule, f"{what} was accepted; it must raise {self.expected.__name__}"
            )
        if not isinstance(error, self.expected):
            raise RuleViolationError(
                self.rule,
                f"{what} raised {type(error).__name__}; it must raise {self.expected.__name__}",
            ) from error
        message = str(error)
        check(
            self.argument in message,
            self.rule,
            f"the error of {what} does not name the argument {self.argument!r}",
        )
        if isinstance(self.value, str) and MARKER in self.value:
            check(
                MARKER not in message,
                self.rule,
                f"the error of {what} repeats the value it refused (values can be personal data)",
            )


class BlockingStore:
    """The store, called from a worker thread and run on the test's event loop.

    Hypothesis drives its examples synchronously, so its examples run in a
    worker thread and send every call back to the loop the store lives on.
    """

    def __init__(
        self,
        portal: anyio.from_thread.BlockingPortal,
        store: MemoryStore,
        count_stored: CountStored,
    ) -> None:
        self._portal = portal
        self._store = store
        self._count_stored = count_stored

    # Checks pass deliberately wrong types, so the calls are typed loosely.

    def remember(self, scope: object, end_user_id: object, content: object) -> Memory:
        call: Callable[..., Awaitable[Memory]] = self._store.remember
        return self._portal.call(call, scope, end_user_id, content)

    def forget(self, scope: object, end_user_id: object, memory_id: object) -> bool:
        """Forget, holding the answer to rule 2: a bool, never an exception."""
        call: Callable[..., Awaitable[object]] = self._store.forget
        try:
            answer = self._portal.call(call, scope, end_user_id, memory_id)
        except Exception as exc:
            raise RuleViolationError(
                2, f"forget raised {type(exc).__name__} instead of answering True or False"
            ) from exc
        check(type(answer) is bool, 2, f"forget returned {type(answer).__name__}, not a bool")
        return answer is True

    def recall(
        self, scope: object, end_user_id: object, limit: object = None
    ) -> tuple[Memory, ...]:
        call: Callable[..., Awaitable[tuple[Memory, ...]]] = self._store.recall
        return self._portal.call(partial(call, scope, end_user_id, limit=limit))

    def erase(self, scope: object, end_user_id: object) -> int:
        call: Callable[..., Awaitable[int]] = self._store.erase
        return self._portal.call(call, scope, end_user_id)

    def count_stored(self, key: MemoryKey) -> int:
        return self._portal.call(self._count_stored, self._store, key)

    @property
    def store(self) -> MemoryStore:
        """The store itself, for a capability's calls through `run`."""
        return self._store

    def run(self, call: Callable[..., Awaitable[_R]], /, *args: object, **kwargs: object) -> _R:
        """Await ``call(*args, **kwargs)`` on the store's loop and return its result."""
        return self._portal.call(partial(call, *args, **kwargs))
