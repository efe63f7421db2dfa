"""Memory as model tools: ``remember`` and ``forget``, and the prompt's memory block.

Bind a store to one tenant and end user with `memory_tools`, give the model
`MemoryTools.specs` in its provider's shape (`ToolSpec.as_anthropic`,
`ToolSpec.as_openai`, `ToolSpec.as_gemini`), run each tool call it makes
with `MemoryTools.call`, and put `MemoryTools.prompt` (or `render_memories`)
into the system prompt so the model sees the facts and their ids.

The tenant and the end user are the application's choice, made once when the
tools are bound; the model never names them.
"""

from ._render import render_memories
from ._spec import ToolResult, ToolSpec
from ._tools import FORGET, REMEMBER, MemoryTools, UnknownToolError, memory_tools
from ._version import __version__ as __version__

__all__ = [
    "FORGET",
    "REMEMBER",
    "MemoryTools",
    "ToolResult",
    "ToolSpec",
    "UnknownToolError",
    "memory_tools",
    "render_memories",
]
