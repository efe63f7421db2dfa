"""Memory as model tools: ``remember`` and ``forget``, and the prompt's memory block.

Bind a store to one tenant and end user with `memory_tools`, give the model
`MemoryTools.specs` in its provider's shape (`ToolSpec.as_anthropic`,
`ToolSpec.as_openai`, `ToolSpec.as_gemini`), run each tool call it makes
with `MemoryTools.call`, and put `MemoryTools.prompt` (or `render_memories`)
into the system prompt so the model sees the facts and their ids. The
limits of the tools are keywords of `memory_tools`, or one `ToolLimits`.

The tenant and the end user are the application's choice, made once when the
tools are bound; the model never names them.

Other front ends of the same tools (an MCP server) reuse the checks and texts
of a refused call: `check_arguments`, `check_content`, `memory_full`,
`refusal`, `RefusedCallError` and `KEY_ARGUMENTS`; one that publishes the
tools before any end user is known (an agent framework) takes their specs
from `memory_tool_specs`, reads each run's key with `run_key`, and raises
`NoEndUserError` for a run that names no end user.
"""

# First: refuses, in one clear message, the one layout where nothing can work.
from . import _beside as _beside
from ._limits import (
    DEFAULT_MAX_FACT_LENGTH,
    DEFAULT_MAX_FACTS,
    DEFAULT_MAX_PROMPT_CHARS,
    ToolLimits,
)
from ._refusals import (
    KEY_ARGUMENTS,
    RefusedCallError,
    check_arguments,
    check_content,
    memory_full,
    refusal,
)
from ._render import MIN_PROMPT_CHARS, render_memories
from ._spec import ToolResult, ToolSpec
from ._tools import (
    FORGET,
    REMEMBER,
    MemoryTools,
    NoEndUserError,
    UnknownToolError,
    memory_tool_specs,
    memory_tools,
    run_key,
)
from ._version import __version__ as __version__

__all__ = [
    "DEFAULT_MAX_FACTS",
    "DEFAULT_MAX_FACT_LENGTH",
    "DEFAULT_MAX_PROMPT_CHARS",
    "FORGET",
    "KEY_ARGUMENTS",
    "MIN_PROMPT_CHARS",
    "REMEMBER",
    "MemoryTools",
    "NoEndUserError",
    "RefusedCallError",
    "ToolLimits",
    "ToolResult",
    "ToolSpec",
    "UnknownToolError",
    "check_arguments",
    "check_content",
    "memory_full",
    "memory_tool_specs",
    "memory_tools",
    "refusal",
    "render_memories",
    "run_key",
]
