"""The conformance kit: the port's contract as a pytest suite for any backend.

Subclass `MemoryStoreContract` in a test module, give it `open_store` and
`count_stored`, and pytest runs every rule of the port against the backend,
on asyncio and on trio. A failing check names the rule it found broken, in the
words of `RULES`.
"""

from ._contract import MemoryStoreContract
from ._rules import RULES, RuleViolationError
from ._version import __version__ as __version__

__all__ = ["RULES", "MemoryStoreContract", "RuleViolationError"]
