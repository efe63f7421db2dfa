"""Calls on a closed store, as the lifecycle and failure checks make them."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any, Final, cast

from psych_runtime.memory.port import (
    InvalidInputError,
    MemoryStore,
    MemoryStoreError,
    StoreClosedError,
)

from ._cases import MAIN
from ._rules import RuleViolationError
from ._support import check

__all__ = ["OPERATIONS", "PORT_ERRORS", "closed_refusal", "valid_calls"]

OPERATIONS: Final = ("remember", "forget", "recall", "erase")
PORT_ERRORS: Final = (TypeError, InvalidInputError, MemoryStoreError)
"""Every exception the four methods may raise."""


def valid_calls(store: MemoryStore, memory_id: str) -> dict[str, Callable[[], Awaitable[object]]]:
    """One call of each method with valid input, on the main key.

    Args:
        store: The store to call.
        memory_id: The id ``forget`` asks for (a fact stored before closing).
    """
    loose = cast("Any", store)
    return {
        "remember": lambda: loose.remember(*MAIN, "remembered on a closed store"),
        "forget": lambda: loose.forget(*MAIN, memory_id),
        "recall": lambda: loose.recall(*MAIN),
        "erase": lambda: loose.erase(*MAIN),
    }


async def closed_refusal(operation: str, call: Callable[[], Awaitable[object]]) -> None:
    """Check that ``call`` of ``operation`` on a closed store raises `StoreClosedError`.

    Raises:
        RuleViolationError: Rule 8 when it raised an exception foreign to the
            port, rule 7 when it returned or raised another port error, or
            its `StoreClosedError` names another operation or state.
    """
    what = f"{operation} on a closed store"
    try:
        await call()
    except StoreClosedError as exc:
        error = exc
    except PORT_ERRORS as exc:
        raise RuleViolationError(
            7, f"{what} raised {type(exc).__name__}; it must raise StoreClosedError"
        ) from exc
    except Exception as exc:
        raise RuleViolationError(
            8,
            f"{what} raised {type(exc).__name__}, which is none of TypeError, "
            "InvalidInputError or MemoryStoreError",
        ) from exc
    else:
        raise RuleViolationError(7, f"{what} returned; it must raise StoreClosedError")
    check(
        error.operation == operation,
        7,
        f"{what} raised StoreClosedError naming the operation {error.operation!r}",
    )
    check(
        error.state == "closed",
        7,
        f"{what} raised StoreClosedError with state {error.state!r}, not 'closed'",
    )
