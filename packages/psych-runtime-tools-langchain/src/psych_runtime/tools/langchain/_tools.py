"""``remember`` and ``forget`` as LangChain tools, bound per run to the run's end user."""

from __future__ import annotations

from collections.abc import Callable, Coroutine
from typing import Any

from langchain_core.tools import BaseTool, StructuredTool, ToolException

from langchain.tools import ToolRuntime
from psych_runtime.memory.port import MemoryStore
from psych_runtime.tools.builtins import MemoryTools, ToolLimits, ToolSpec, memory_tool_specs

from ._identity import memory_key_of

__all__ = ["memory_tools"]


def memory_tools(memory: MemoryStore, *, limits: ToolLimits | None = None) -> list[BaseTool]:
    """Return ``remember`` and ``forget`` as LangChain tools, for any run's end user.

    Give them to ``create_agent(tools=...)`` or a LangGraph ``ToolNode``
    (`MemoryMiddleware` adds them to an agent itself). Each call runs for the
    tenant and end user of its own run, read from the run's runtime context or
    its config's ``configurable`` (`memory_key_of`), which the tool receives
    as LangGraph's ``ToolRuntime``. The schema the model sees is the Python
    tools' own (`memory_tool_specs`): only ``content``, or only
    ``memory_id``; a call that adds a tenant or an end user is refused like
    any other unknown argument.

    A refused call becomes an error tool message (``status="error"``) holding
    the Python tools' refusal text. The tools are asynchronous: run the
    agent or graph with ``ainvoke`` or ``astream``.

    Args:
        memory: Any `MemoryStore`.
        limits: The tools' limits; ``None`` for the defaults.

    Returns:
        ``[remember, forget]``.

    Raises:
        TypeError: ``memory`` is not a `MemoryStore`, or ``limits`` is
            neither ``None`` nor a `ToolLimits`.
    """
    if not isinstance(memory, MemoryStore):
        raise TypeError(f"memory must be a MemoryStore, not {type(memory).__qualname__}")
    specs = memory_tool_specs(limits)
    bound_limits = ToolLimits() if limits is None else limits
    return [_tool(spec, _runner(memory, bound_limits, spec.name)) for spec in specs]


def _runner(
    memory: MemoryStore, limits: ToolLimits, name: str
) -> Callable[..., Coroutine[Any, Any, str]]:
    # The parameter must be named and annotated ``runtime: ToolRuntime``:
    # that is how ToolNode knows to inject it and to strip any model-sent
    # value of that name. Every other argument is the model's, checked by
    # the Python tools as sent.
    async def run(runtime: ToolRuntime[Any, Any], **arguments: Any) -> str:
        key = memory_key_of(runtime.context, runtime.config)
        result = await MemoryTools(memory, key, limits=limits).call(name, arguments)
        if result.is_error:
            raise ToolException(result.content)
        return result.content

    return run


def _tool(spec: ToolSpec, run: Callable[..., Coroutine[Any, Any, str]]) -> BaseTool:
    return StructuredTool(
        name=spec.name,
        description=spec.description,
        # A JSON Schema is published to the model unchanged and the call's
        # arguments reach ``run`` unvalidated, so every check is the Python
        # tools' own.
        args_schema=spec.input_schema,
        coroutine=run,
        handle_tool_error=True,
    )
