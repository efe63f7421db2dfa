"""The Psych memory tools for the OpenAI Agents SDK.

`AgentMemory` gives an agent the ``remember`` and ``forget`` tools of
`psych_runtime.tools.builtins` as function tools (the same names,
descriptions, limits, refusals and results) and dynamic instructions that
hold the end user's memory block, built again for every model call.

The tenant and the end user come from the run context
(``Runner.run(..., context=...)``), read by the ``identity`` function the
application gives; the model never names them. A run whose context names
no end user fails with `NoEndUserError` before the model is called.
"""

from psych_runtime.tools.builtins import NoEndUserError

from ._memory import AgentMemory, Identity, Instructions
from ._version import __version__ as __version__

__all__ = ["AgentMemory", "Identity", "Instructions", "NoEndUserError"]
