"""`StoreBackedMemory`: the in-process adapter, built from the runtime's store."""

from __future__ import annotations

from psych_runtime.memory.inproc import InProcessMemory

__all__ = ["StoreBackedMemory"]


class StoreBackedMemory(InProcessMemory):
    """The in-process adapter, constructed the way the runtime documents it.

    It takes the runtime's ``store`` so that code written as
    ``memory=StoreBackedMemory(store)`` runs unchanged, and then never reads
    or writes it. The store's log is append-only and its records immutable,
    with no delete anywhere, so facts that `forget` and `erase` must really
    delete cannot live there. They live in this process's table instead, as
    with `InProcessMemory`, and do not survive a restart.
    """

    __slots__ = ()

    def __init__(self, store: object) -> None:
        del store  # Accepted for the runtime's spelling; deliberately unused.
        super().__init__()
