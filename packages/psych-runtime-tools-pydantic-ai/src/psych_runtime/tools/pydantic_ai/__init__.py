"""The Psych memory tools as a pydantic-ai toolset.

`MemoryToolset` gives an agent the ``remember`` and ``forget`` tools of
`psych_runtime.tools.builtins` (the same names, descriptions, limits,
refusals and results) and puts the end user's memory block in the agent's
instructions, refreshed before every model request.

The tenant and the end user come from the run's dependencies
(``RunContext.deps``), read by the ``identity`` function the application
gives; the model never names them. A run whose dependencies name no end
user fails with `NoEndUserError` before the model is called.
"""

from psych_runtime.tools.builtins import NoEndUserError

from ._toolset import DEFAULT_TOOLSET_ID, Identity, MemoryToolset
from ._version import __version__ as __version__

__all__ = ["DEFAULT_TOOLSET_ID", "Identity", "MemoryToolset", "NoEndUserError"]
