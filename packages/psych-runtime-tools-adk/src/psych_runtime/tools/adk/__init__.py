"""The Psych memory tools and memory block for Google ADK, and an ADK memory service.

`memory_tools` returns ``remember`` and ``forget`` as ADK tools and
`memory_instruction` an instruction provider that puts the end user's memory
block after the agent's instruction, rendered again for every model call.
`StoreMemoryService` is ADK's memory-service interface over any Psych store,
with real deletes of one fact or of all of one user's facts.

The end user is the session's user id and the tenant is fixed by the
application or is the app name (`memory_key_of`), never a model argument. A
session without a user raises `NoEndUserError`. The tools' names,
descriptions, limits, refusals and results are those of
`psych_runtime.tools.builtins`.
"""

from psych_runtime.tools.builtins import NoEndUserError

from ._identity import memory_key_of
from ._instruction import memory_instruction
from ._service import StoreMemoryService
from ._tools import memory_tools
from ._version import __version__ as __version__

__all__ = [
    "NoEndUserError",
    "StoreMemoryService",
    "memory_instruction",
    "memory_key_of",
    "memory_tools",
]
