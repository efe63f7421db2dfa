"""Open any Psych memory store by URL, and show a URL without its password.

``open_memory("memory:")``, ``open_memory("sqlite:///facts.db")`` and
``open_memory("postgresql://...")`` each yield a ready `MemoryStore` and close
it on exit. Backends register their schemes in the entry-point group
``psych_runtime.memory.stores``, so a third-party backend opens the same way;
this package imports no adapter itself.

It also installs the operator's command ``psych-memory`` (export, import,
erase, users, count, migrate, replay-deletions,
ledger prune) with the extra ``psych-memory-admin[cli]``;
`main` runs it in-process. What it shares with the MCP server's command
``psych-memory-mcp`` is here, for both: `ExitCode`, one table of exit
statuses (`exit_codes_help` for a command's help), `open_for_command`,
which opens a store and words any failure as a `CommandError` with its
exit code, `KEY_OPTIONS`, the option naming each key argument, and
`ledger_for_command`, which opens the deletion ledger ``--ledger`` names
(``PSYCH_MEMORY_LEDGER``) and attaches it to a store.
"""

from ._commands import KEY_OPTIONS, open_for_command
from ._errors import StoreBackendError, StoreUrlError, UnknownSchemeError
from ._exit import CommandError, ExitCode, exit_codes_help
from ._ledger_open import LEDGER_KEY_VARIABLE, LEDGER_VARIABLE, ledger_for_command
from ._main import main
from ._open import ENTRY_POINT_GROUP, open_memory, store_schemes
from ._url import redact_url
from ._version import __version__ as __version__

__all__ = [
    "ENTRY_POINT_GROUP",
    "KEY_OPTIONS",
    "LEDGER_KEY_VARIABLE",
    "LEDGER_VARIABLE",
    "CommandError",
    "ExitCode",
    "StoreBackendError",
    "StoreUrlError",
    "UnknownSchemeError",
    "exit_codes_help",
    "ledger_for_command",
    "main",
    "open_for_command",
    "open_memory",
    "redact_url",
    "store_schemes",
]
