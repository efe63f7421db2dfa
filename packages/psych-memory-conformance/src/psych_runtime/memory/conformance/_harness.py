"""What the checks of the later rules need from `MemoryStoreContract`."""

from __future__ import annotations

from contextlib import AbstractAsyncContextManager
from typing import TYPE_CHECKING, ClassVar

from psych_runtime.memory.port import MemoryKey, MemoryStore

__all__ = ["Harness"]


class Harness:
    """The base of the kit's groups of checks; `MemoryStoreContract` fills it in.

    The checks of each group live in a module of their own and reach the
    store only through these members, which the contract class defines.
    """

    cancelled_calls: ClassVar[int]

    if TYPE_CHECKING:

        def _open(self) -> AbstractAsyncContextManager[MemoryStore]: ...

        async def count_stored(self, store: MemoryStore, key: MemoryKey) -> int: ...
