"""`Harness`: what every group of checks reaches the store through."""

from __future__ import annotations

import inspect
from collections.abc import AsyncIterator, Callable
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from typing import TYPE_CHECKING, Any, ClassVar, Final, cast

import anyio.from_thread
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from psych_runtime.memory.port import MemoryKey, MemoryStore

from ._cases import MAIN, key_of
from ._loops import on_its_loop
from ._rules import RuleViolationError
from ._support import BlockingStore, check, in_worker_thread

__all__ = ["Harness"]

# The kit's own modules: only their checks are the kit's to wrap.
_KIT: Final = __name__.rpartition(".")[0] + "."


class Harness:
    """The base of the kit's groups of checks; `MemoryStoreContract` fills it in.

    The checks of each rule live in a module of their own and reach the
    store only through these members. The contract class defines the
    author's two methods and the budget settings; the kit's fixtures set the
    per-check state before each check.

    Every check a class of the kit defines runs on the event loop its
    parametrisation names, whichever pytest plugin runs it (see `on_its_loop`).
    """

    max_examples: ClassVar[int]
    max_steps: ClassVar[int]
    cancelled_calls: ClassVar[int]

    # The event loop the check runs on, for checks that start loops of their own.
    _anyio_backend_name: str

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        if not cls.__module__.startswith(_KIT):
            return
        for name, member in list(vars(cls).items()):
            if name.startswith("test") and inspect.iscoroutinefunction(member):
                setattr(cls, name, on_its_loop(member))

    if TYPE_CHECKING:

        def open_store(self) -> AbstractAsyncContextManager[MemoryStore]: ...

        async def count_stored(self, store: MemoryStore, key: MemoryKey) -> int: ...

    @asynccontextmanager
    async def _open(self) -> AsyncIterator[MemoryStore]:
        """The author's `open_store`, refused unless it yields an empty `MemoryStore`.

        Raises:
            TypeError: `open_store` yielded something else.
            AssertionError: The store yielded already holds facts of the main key.
        """
        async with self.open_store() as store:
            if not isinstance(store, MemoryStore):
                raise TypeError(
                    f"open_store() must yield a MemoryStore, not {type(store).__qualname__}"
                )
            if await store.recall(*MAIN) or await self.count_stored(store, key_of(MAIN)):
                raise AssertionError("open_store() must yield an empty store; this one has facts")
            yield store

    async def _forget(self, store: MemoryStore, scope: object, user: str, memory_id: str) -> bool:
        """Forget, holding the answer to rule 2: a bool, never an exception.

        Raises:
            RuleViolationError: Rule 2, when forget raised or answered a non-bool.
        """
        try:
            result = await store.forget(cast("Any", scope), user, memory_id)
        except Exception as exc:
            raise RuleViolationError(
                2, f"forget raised {type(exc).__name__} instead of answering True or False"
            ) from exc
        check(type(result) is bool, 2, f"forget returned {type(result).__name__}, not a bool")
        return result

    def _hypothesis_settings(self, **changes: Any) -> settings:
        # No deadline: a database round trip is slow and its speed is no rule.
        return settings(
            max_examples=self.max_examples,
            deadline=None,
            suppress_health_check=[HealthCheck.too_slow],
            **changes,
        )

    async def _examples(self, example: Callable[[BlockingStore, st.DataObject], None]) -> None:
        """Run ``example`` as a property check, on a fresh store per Hypothesis example."""

        def body(portal: anyio.from_thread.BlockingPortal) -> None:
            @self._hypothesis_settings()
            @given(data=st.data())
            def run(data: st.DataObject) -> None:
                with portal.wrap_async_context_manager(self._open()) as store:
                    example(BlockingStore(portal, store, self.count_stored), data)

            # Tell Hypothesis's example database which check this is: every
            # property check shares this wrapper's source.
            run._hypothesis_internal_add_digest = (  # type: ignore[attr-defined]
                f"{type(self).__module__}.{type(self).__qualname__}.{example.__qualname__}"
            ).encode()
            run()

        await in_worker_thread(body)
