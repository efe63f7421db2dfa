"""`MemoryStoreContract`: every rule of the port, as checks pytest runs.

The checks live in one module per rule (or small group of rules), each a
class the contract inherits; this module joins them and adds what the author
defines and the guard that keeps every check in place.
"""

from __future__ import annotations

from collections.abc import Mapping
from contextlib import AbstractAsyncContextManager
from pathlib import Path
from typing import Any, ClassVar, Final

import pytest

from psych_runtime.memory.port import MemoryKey, MemoryStore

from ._cancellation import CancellationChecks
from ._capability import CapabilityChecks
from ._concurrent_writes import ConcurrentWriteChecks
from ._counting import CountingChecks
from ._erasing import EraseChecks
from ._expiring import ExpiringChecks
from ._failures import FailureChecks
from ._fixtures import KIT_FIXTURES, KitFixtures
from ._forgetting import ForgetChecks
from ._guard import KitGuard
from ._isolation import IsolationChecks
from ._lifecycle import LifecycleChecks
from ._limiting import LimitChecks
from ._paging import PagingChecks
from ._recalling import RecallChecks
from ._remembering import RememberChecks
from ._stateful import ModelChecks
from ._validation import ValidationChecks

__all__ = ["MemoryStoreContract"]

# What the author must define; the kit's own versions only say so.
_AUTHOR_DEFINES: Final = ("open_store", "count_stored")


# The groups in rule order: pytest collects inherited checks base by base.
class MemoryStoreContract(
    KitFixtures,
    RememberChecks,
    ConcurrentWriteChecks,
    ForgetChecks,
    RecallChecks,
    EraseChecks,
    IsolationChecks,
    ValidationChecks,
    ModelChecks,
    LifecycleChecks,
    FailureChecks,
    CancellationChecks,
    CapabilityChecks,
    CountingChecks,
    PagingChecks,
    ExpiringChecks,
    LimitChecks,
):
    """The port's contract as a test class: subclass it to check a backend.

    Name the subclass so pytest collects it (``TestMyStore``) and give it
    two methods: `open_store`, which yields a fresh, empty store, and
    `count_stored`, a backdoor that counts the rows a key holds in the
    backend itself. Every check then runs against the backend on asyncio and
    on trio (the kit supplies the ``anyio_backend`` fixture).

    Rules 1-6 are checked on every store, and so are 7-9 (lifecycle,
    failures, cancellation); the checks of rules 10-15 run when the store
    provides the port's `ListsEndUsers`, `RestoresFacts`, `CountsFacts`,
    `PagesFacts`, `ExpiresFacts` or `RemembersWithinLimit` capability (rule
    10, 11, 12, 13, 14 or 15), and are skipped as not applicable otherwise.

    A check can be marked expected-to-fail, with a reason, in
    `expected_failures`; it cannot be overridden, deleted or skipped: the
    class refuses to be defined, and `test_kit_is_intact` fails, if one is.

    Example:
        ```python
        class TestMyStore(MemoryStoreContract):
            max_examples = 25  # a database: fewer examples, every check

            @asynccontextmanager
            async def open_store(self) -> AsyncIterator[MemoryStore]:
                async with MyStore(self.fresh_path(".db")) as store:
                    yield store

            async def count_stored(self, store: MemoryStore, key: MemoryKey) -> int:
                return await count_rows_directly(store, key)
        ```

    Attributes:
        max_examples: Hypothesis examples per property check. Lower it for a
            backend whose `open_store` is slow; every check still runs.
        max_steps: The most operations in one example of the reference-model
            check.
        cancelled_calls: How many calls each cancellation check (rule 9)
            cuts short. Lower it for a slow backend; every check still runs.
        expected_failures: Check name to reason, for checks this backend is
            known to fail: ``"test_x"`` on both event loops, ``"test_x[trio]"``
            or ``"test_x[asyncio]"`` on one. They run, and are reported as
            expected failures; one that passes fails the run, so the entry is
            removed when the backend is fixed.
        tmp_path: The check's own temporary directory (pytest's
            ``tmp_path``), set before each check; `open_store` may put files
            there. It is shared by every example of a property check, so
            `open_store` must use a fresh name on each call (see
            `fresh_path`).
    """

    # Every check is a coroutine run by anyio's pytest plugin, on both loops.
    pytestmark: ClassVar[list[pytest.MarkDecorator]] = [pytest.mark.anyio]

    max_examples: ClassVar[int] = 100
    max_steps: ClassVar[int] = 30
    cancelled_calls: ClassVar[int] = 100
    expected_failures: ClassVar[Mapping[str, str]] = {}

    tmp_path: Path

    def open_store(self) -> AbstractAsyncContextManager[MemoryStore]:
        """Yield a fresh, empty, open store for one check or one Hypothesis example.

        Write it as an ``@asynccontextmanager`` method; clean up after the
        ``yield``. It is entered on the event loop the check runs on. The
        lifecycle checks close the store before the ``yield`` returns;
        closing it again on the way out is harmless (rule 7).

        Raises:
            NotImplementedError: The subclass did not provide it.
        """
        raise NotImplementedError(f"{type(self).__name__} must define open_store()")

    async def count_stored(self, store: MemoryStore, key: MemoryKey) -> int:
        """Count the facts ``key`` holds in the backend, looking directly.

        This is the backdoor the port cannot offer: it must see every row,
        record or copy kept for the key, including ones a soft delete would
        hide from `MemoryStore.recall`, so that the kit can tell a real delete
        from a hidden one. It must also work once the store is closed (the
        lifecycle checks count after `MemoryStore.aclose`): count through a
        connection of its own, not the store's.

        Raises:
            NotImplementedError: The subclass did not provide it.
        """
        raise NotImplementedError(f"{type(self).__name__} must define count_stored()")

    def fresh_path(self, suffix: str = "") -> Path:
        """A path inside `tmp_path` that no earlier call returned.

        Args:
            suffix: Appended to the file name, such as ``".db"``.

        Returns:
            A path that does not exist yet, for one store's files.
        """
        self._paths_handed_out += 1
        return self.tmp_path / f"store-{self._paths_handed_out}{suffix}"

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        problems = _GUARD.tampering(cls)
        if problems:
            raise TypeError(f"{cls.__qualname__}: " + "; ".join(problems))

    async def test_kit_is_intact(self) -> None:
        """Kit: no check of the contract is overridden, deleted or skipped."""
        # Checked again when run: a class can be changed after its definition.
        problems = _GUARD.tampering(type(self))
        problems += [
            f"{type(self).__qualname__} must define {name}()"
            for name in _GUARD.undefined(type(self), _AUTHOR_DEFINES)
        ]
        if problems:
            raise AssertionError("; ".join(problems))


_GUARD: Final = KitGuard(MemoryStoreContract, KIT_FIXTURES)
