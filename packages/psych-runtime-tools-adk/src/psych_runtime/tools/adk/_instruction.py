"""The memory block in an ADK agent's instruction, rendered again for every model call."""

from __future__ import annotations

from collections.abc import Awaitable, Callable

from google.adk.agents.readonly_context import ReadonlyContext

from psych_runtime.memory.port import MemoryStore
from psych_runtime.tools.builtins import MemoryTools, ToolLimits

from ._identity import check_tenant, memory_key_of

__all__ = ["memory_instruction"]


def memory_instruction(
    memory: MemoryStore,
    instruction: str = "",
    *,
    tenant: str | None = None,
    limits: ToolLimits | None = None,
) -> Callable[[ReadonlyContext], Awaitable[str]]:
    """Return an ADK instruction provider: ``instruction``, then the user's memory block.

    Pass it as ``LlmAgent(instruction=...)``. ADK calls it before every
    model call, so a fact remembered in one run is in the next run's
    instruction. The block is the Python tools' `MemoryTools.prompt`, with
    ``limits``' caps and budget, for the session's user in ``tenant`` (or the
    app name; see `memory_key_of`); with no facts the instruction is
    ``instruction`` alone. ADK inserts no session state into an instruction
    provider's text, so braces in ``instruction`` or in facts stay as written.

    Args:
        memory: Any `MemoryStore`.
        instruction: The agent's own instruction, put before the block.
        tenant: The tenant of every user, or ``None`` for the app name.
        limits: The limits of the block (and of the tools beside it);
            ``None`` for the defaults.

    Returns:
        The provider. It raises `NoEndUserError` when the session has no
        user, before the model is called; whatever the store's ``recall``
        raises propagates the same way.

    Raises:
        TypeError: ``memory`` is not a `MemoryStore`, ``instruction`` is not
            a `str`, ``tenant`` is neither ``None`` nor a `str`, or
            ``limits`` is neither ``None`` nor a `ToolLimits`.
    """
    if not isinstance(memory, MemoryStore):
        raise TypeError(f"memory must be a MemoryStore, not {type(memory).__qualname__}")
    if not isinstance(instruction, str):
        raise TypeError(f"instruction must be a str, not {type(instruction).__qualname__}")
    tenant = check_tenant(tenant)
    if limits is None:
        limits = ToolLimits()
    elif not isinstance(limits, ToolLimits):
        raise TypeError(f"limits must be a ToolLimits, not {type(limits).__qualname__}")
    bound = limits

    async def provide(context: ReadonlyContext) -> str:
        key = memory_key_of(context, tenant)
        block = await MemoryTools(memory, key, limits=bound).prompt()
        if not block:
            return instruction
        return f"{instruction}\n\n{block}" if instruction else block

    return provide
