"""The ledger's own errors, under the port's hierarchy."""

from __future__ import annotations

from psych_runtime.memory.port import MemoryStoreError, StoreUnavailableError

__all__ = [
    "LedgerError",
    "LedgerKeyMismatchError",
    "LedgerNotFoundError",
    "LedgerUnavailableError",
]


class LedgerError(MemoryStoreError):
    """The deletion ledger could not be opened or read as asked."""


class LedgerKeyMismatchError(LedgerError):
    """The key given is not the key the ledger was created with.

    Every end user in the ledger is recorded as a keyed hash: with another
    key no recorded end user would ever match, and a re-application would
    wrongly report that nothing was left to delete.
    """


class LedgerNotFoundError(LedgerError):
    """No ledger exists where the URL points, and the caller asked not to create one.

    Raised by `open_ledger` with ``create=False`` (what every reading
    command uses): a mistyped URL must never be read as an empty ledger,
    which would report "nothing to re-apply" for a restore that needs it.
    """


class LedgerUnavailableError(StoreUnavailableError):
    """A deletion was refused because the ledger could not record it first.

    Raised by ``erase`` and ``forget`` of a store with a ledger attached when
    the ledger cannot be written: the store's delete is then never called,
    so ``may_have_taken_effect`` is always ``False`` and the call can be
    retried as it is once the ledger is writable again.
    """
