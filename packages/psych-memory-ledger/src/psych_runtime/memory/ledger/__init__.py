"""A deletion ledger outside the store, so that erasure survives a restore.

`with_ledger` wraps any store so that each ``erase``, each ``forget``
that deletes a fact and each ``expire`` is recorded in a `DeletionLedger` (a SQLite file of its
own, opened with `open_ledger`) before the store deletes anything. After a
backup of the store is restored, `reapply` deletes again everything the
ledger records, and `DeletionLedger.prune` drops what no kept backup
needs any more. The ledger holds no fact content and no end-user id: end
users are recorded as keyed hashes made with the operator's `LedgerKey`.
"""

from ._errors import (
    LedgerError,
    LedgerKeyMismatchError,
    LedgerNotFoundError,
    LedgerUnavailableError,
)
from ._key import KEY_VARIABLE, MIN_KEY_LENGTH, LedgerKey, ledger_key
from ._ledger import DeletionLedger, LedgerEntry, Pruned, open_ledger
from ._store import Reapplied, reapply, with_ledger
from ._version import __version__ as __version__

__all__ = [
    "KEY_VARIABLE",
    "MIN_KEY_LENGTH",
    "DeletionLedger",
    "LedgerEntry",
    "LedgerError",
    "LedgerKey",
    "LedgerKeyMismatchError",
    "LedgerNotFoundError",
    "LedgerUnavailableError",
    "Pruned",
    "Reapplied",
    "ledger_key",
    "open_ledger",
    "reapply",
    "with_ledger",
]
