"""The memory block in a LangChain agent's system prompt, refreshed before every model call."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

from langchain_core.messages import AIMessage, SystemMessage
from langchain_core.runnables import ensure_config

from langchain.agents.middleware import AgentMiddleware, AgentState, ModelRequest, ModelResponse
from psych_runtime.memory.port import MemoryStore
from psych_runtime.tools.builtins import MemoryTools, ToolLimits

from ._identity import memory_key_of
from ._tools import memory_tools

__all__ = ["MemoryMiddleware"]


class MemoryMiddleware(AgentMiddleware[AgentState[Any], Any]):
    """Memory for a ``create_agent`` agent: the tools, and the facts in the system prompt.

    ``create_agent(model, middleware=[MemoryMiddleware(store)],
    context_schema=MemoryContext)`` gives the agent `memory_tools` and, before
    each model call, appends the end user's memory block (the Python tools'
    `MemoryTools.prompt`, with its caps and budget) to the system prompt, so
    a fact remembered in one run is in the prompt of the next. With no facts
    the prompt is left as it is.

    The tenant and end user come from the run (`memory_key_of`): a run that
    names none raises `NoEndUserError` before the model is called. The
    middleware is asynchronous: run the agent with ``ainvoke`` or ``astream``.

    Args:
        memory: Any `MemoryStore`.
        limits: The limits of the tools and of the block; ``None`` for the
            defaults.

    Raises:
        TypeError: ``memory`` is not a `MemoryStore`, or ``limits`` is
            neither ``None`` nor a `ToolLimits`.
    """

    def __init__(self, memory: MemoryStore, *, limits: ToolLimits | None = None) -> None:
        super().__init__()
        self.tools = memory_tools(memory, limits=limits)
        self._memory = memory
        self._limits = ToolLimits() if limits is None else limits

    async def awrap_model_call(
        self,
        request: ModelRequest[Any],
        handler: Callable[[ModelRequest[Any]], Awaitable[ModelResponse[Any]]],
    ) -> ModelResponse[Any] | AIMessage:
        """Add the run's end user's memory block to the system prompt, then call the model.

        Raises:
            NoEndUserError: The run names no tenant and end user.
            Exception: Whatever the store's ``recall`` raises propagates; the
                model is not called.
        """
        key = memory_key_of(request.runtime.context, ensure_config())
        block = await MemoryTools(self._memory, key, limits=self._limits).prompt()
        if block:
            request = request.override(system_message=_with_block(request.system_message, block))
        return await handler(request)


def _with_block(system: SystemMessage | None, block: str) -> SystemMessage:
    if system is None:
        return SystemMessage(content=block)
    if isinstance(system.content, str):
        return SystemMessage(content=f"{system.content}\n\n{block}" if system.content else block)
    return SystemMessage(content=[*system.content, {"type": "text", "text": block}])
