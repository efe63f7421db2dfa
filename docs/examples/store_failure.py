"""An application catching store failures around a memory tool call.

A model cannot repair an outage, so a store failure is the application's to
handle: log it, and give the model a result it can act on (tell the user that
memory is unavailable right now) instead of failing the whole turn.
"""

from __future__ import annotations

import logging

from psych_runtime.memory.port import MemoryStoreError, StoreUnavailableError
from psych_runtime.tools.builtins import MemoryTools, ToolResult

logger = logging.getLogger("agent")

UNAVAILABLE = (
    "Memory is unavailable right now; nothing may have been saved or forgotten. "
    "Carry on without it and tell the user if it matters."
)


async def run_memory_tool(tools: MemoryTools, name: str, arguments: object) -> ToolResult:
    """Run one memory tool call; a store failure becomes an error result for the model."""
    try:
        return await tools.call(name, arguments)
    except MemoryStoreError as exc:
        # The message names the operation and the rule, never a fact or a key.
        uncertain = isinstance(exc, StoreUnavailableError) and exc.may_have_taken_effect
        logger.warning("memory tool %s failed (outcome unknown: %s): %s", name, uncertain, exc)
        return ToolResult(UNAVAILABLE, is_error=True)
