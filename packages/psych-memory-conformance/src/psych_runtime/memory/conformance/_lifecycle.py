"""Rule 7: one lifecycle for every store."""

from __future__ import annotations

from psych_runtime.memory.port import MemoryStore, StoreClosedError

from ._cases import MAIN, ids_of, key_of
from ._closing import PORT_ERRORS, closed_refusal, valid_calls
from ._harness import Harness
from ._rules import RuleViolationError
from ._support import check

__all__ = ["LifecycleChecks"]


class _LeftByAnError(Exception):
    """Raised inside ``async with store:`` to leave it by an error."""


class LifecycleChecks(Harness):
    """Checks of rule 7, on the open store `open_store` yields.

    Each check closes that store itself; `open_store` may close it again on
    its way out, which the rule makes harmless.
    """

    async def test_rule7_async_with_returns_the_store_and_closes_it(self) -> None:
        """Rule 7: 'async with store' on the open store gives the store, and closes it on exit."""
        async with self._open() as store:
            # The protocol's two halves are called one by one, so that a
            # failure says which half broke.
            try:
                entered = await store.__aenter__()
            except Exception as exc:
                raise RuleViolationError(
                    7, f"entering 'async with' on an open store raised {type(exc).__name__}"
                ) from exc
            check(entered is store, 7, "'async with store as s' gave s other than the store")
            fact = await store.remember(*MAIN, "remembered inside async with")
            check(
                ids_of(await store.recall(*MAIN)) == [fact.id],
                7,
                "inside 'async with' the store does not recall the fact it just stored",
            )
            try:
                await store.__aexit__(None, None, None)
            except Exception as exc:
                raise RuleViolationError(
                    7, f"leaving 'async with' raised {type(exc).__name__}"
                ) from exc
            for operation, call in valid_calls(store, fact.id).items():
                await closed_refusal(operation, call)

    async def test_rule7_leaving_async_with_by_an_error_closes_the_store(self) -> None:
        """Rule 7: an error inside 'async with store' comes out unchanged; the store is closed."""
        async with self._open() as store:
            fact = await store.remember(*MAIN, "remembered before the error")
            raised = _LeftByAnError()
            came_out = await _leave_by(store, raised)
            check(came_out is not None, 7, "leaving 'async with' swallowed the error raised in it")
            if came_out is not raised:
                raise RuleViolationError(
                    7,
                    f"leaving 'async with' by an error raised {type(came_out).__name__} "
                    "instead of letting the error through",
                ) from came_out
            for operation, call in valid_calls(store, fact.id).items():
                await closed_refusal(operation, call)

    async def test_rule7_closing_twice_is_harmless(self) -> None:
        """Rule 7: aclose() twice, and leaving 'async with' on a closed store, raise nothing."""
        async with self._open() as store:
            fact = await store.remember(*MAIN, "remembered before closing")
            for attempt in ("the first aclose()", "a second aclose()"):
                try:
                    await store.aclose()
                except Exception as exc:
                    raise RuleViolationError(7, f"{attempt} raised {type(exc).__name__}") from exc
            try:
                await store.__aexit__(None, None, None)
            except Exception as exc:
                raise RuleViolationError(
                    7, f"leaving 'async with' on a closed store raised {type(exc).__name__}"
                ) from exc
            for operation, call in valid_calls(store, fact.id).items():
                await closed_refusal(operation, call)

    async def test_rule7_every_call_after_close_raises_and_changes_nothing(self) -> None:
        """Rule 7: after aclose() each method raises StoreClosedError, changing nothing."""
        async with self._open() as store:
            fact = await store.remember(*MAIN, "remembered before closing")
            await store.aclose()
            before = await self.count_stored(store, key_of(MAIN))
            for operation, call in valid_calls(store, fact.id).items():
                await closed_refusal(operation, call)
                after = await self.count_stored(store, key_of(MAIN))
                check(
                    after == before,
                    7,
                    f"{operation} on a closed store changed the rows stored for the key "
                    f"({before} before, {after} after)",
                )

    async def test_rule7_a_closed_store_stays_closed(self) -> None:
        """Rule 7: entering 'async with' again, or calling again, never reopens a closed store."""
        async with self._open() as store:
            fact = await store.remember(*MAIN, "remembered before closing")
            await store.aclose()
            await _enter_again(store, fact.id)
            for _ in range(2):
                for operation, call in valid_calls(store, fact.id).items():
                    await closed_refusal(operation, call)


async def _leave_by(store: MemoryStore, error: Exception) -> Exception | None:
    # What comes out of 'async with store' left by raising ``error`` in it.
    entered = False
    came_out: Exception | None = None
    try:
        async with store:
            entered = True
            raise error  # noqa: TRY301 - leaving by an error is what is checked.
    except Exception as exc:
        if not entered:
            raise RuleViolationError(
                7, f"entering 'async with' on an open store raised {type(exc).__name__}"
            ) from exc
        came_out = exc
    return came_out


async def _enter_again(store: MemoryStore, memory_id: str) -> None:
    # Refusing to enter is as good as staying closed once entered.
    try:
        entered = await store.__aenter__()
    except StoreClosedError:
        return
    except PORT_ERRORS as exc:
        raise RuleViolationError(
            7,
            f"entering 'async with' on a closed store raised {type(exc).__name__}; it must "
            "raise StoreClosedError or leave the store closed",
        ) from exc
    except Exception as exc:
        raise RuleViolationError(
            8,
            f"entering 'async with' on a closed store raised {type(exc).__name__}, which is "
            "no MemoryStoreError",
        ) from exc
    try:
        for operation, call in valid_calls(entered, memory_id).items():
            await closed_refusal(operation, call)
    finally:
        await store.__aexit__(None, None, None)
