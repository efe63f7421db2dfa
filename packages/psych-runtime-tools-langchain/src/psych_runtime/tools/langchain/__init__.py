"""The Psych memory tools and memory block for LangChain 1.x and LangGraph.

`memory_tools` returns ``remember`` and ``forget`` as LangChain tools for
``create_agent`` or a plain LangGraph ``ToolNode``; `MemoryMiddleware` adds
them to a ``create_agent`` agent together with the end user's memory block
in its system prompt, refreshed before every model call.

The tenant and the end user come from the run, never from the model: the
runtime context (`MemoryContext`, or any context with ``tenant`` and
``end_user_id``) or the config's ``configurable`` (`memory_key_of`). A run
that names none raises `NoEndUserError`. The tools' names, descriptions,
limits, refusals and results are those of `psych_runtime.tools.builtins`.
"""

from psych_runtime.tools.builtins import NoEndUserError

from ._identity import MemoryContext, memory_key_of
from ._middleware import MemoryMiddleware
from ._tools import memory_tools
from ._version import __version__ as __version__

__all__ = [
    "MemoryContext",
    "MemoryMiddleware",
    "NoEndUserError",
    "memory_key_of",
    "memory_tools",
]
