"""`remember` and `forget` as Agents SDK function tools, the memory block in the instructions."""

from __future__ import annotations

import inspect
from collections import OrderedDict
from collections.abc import Awaitable, Callable
from typing import Any, Final, Generic, TypeVar

from agents import Agent, FunctionTool, RunContextWrapper
from agents.tool import Tool
from agents.tool_context import ToolContext

from psych_runtime.memory.port import MemoryKey, MemoryStore, Scope
from psych_runtime.tools.builtins import (
    MemoryTools,
    ToolLimits,
    ToolSpec,
    memory_tool_specs,
    run_key,
)

__all__ = ["AgentMemory", "Identity", "Instructions"]

ContextT = TypeVar("ContextT")

Identity = Callable[[ContextT], tuple[Scope, str | None]]
"""Reads the tenant and the end user of a run from its context (``Runner.run(context=...)``).

Returns ``(scope, end_user_id)``: the tenant as a `str` or an object with a
`str` ``tenant``, and the end user's id, or ``None`` when the run has none.
"""

Instructions = Callable[[RunContextWrapper[ContextT], Agent[ContextT]], Awaitable[str]]
"""Dynamic instructions as the Agents SDK takes them: ``(context, agent) -> str``."""

_BaseInstructions = (
    str | Callable[[RunContextWrapper[ContextT], Agent[ContextT]], str | Awaitable[str]] | None
)

# The tools bound to the most recent end users are kept, so that parallel
# calls for one user share one toolset: with a store that does not keep the
# cap itself (`RemembersWithinLimit`), they count and add one at a time.
_BOUND_KEPT: Final = 1024


class AgentMemory(Generic[ContextT]):
    """The ``remember`` and ``forget`` tools and the memory block, for Agents SDK agents.

    Give `tools` to ``Agent(tools=[...])`` and `instructions` to
    ``Agent(instructions=...)``. Every run reads its tenant and end user
    from the run's context with ``identity``; the model is never asked for
    them, no tool schema mentions them, and a call that passes them is
    refused. The instructions hold the end user's memory block (rendered
    by `render_memories`, within the limits' budget), built again for every
    model call, so a fact saved in one run is in the next run's prompt.

    The tools' names, descriptions, refusals and results are those of
    `psych_runtime.tools.builtins`; their schemas are the strict OpenAI
    form (`ToolSpec.as_openai`), and a result is the JSON text the model
    reads, an error result included.

    Args:
        memory: Any `MemoryStore`.
        identity: Returns ``(scope, end_user_id)`` for a run's context; an
            end user of ``None`` means the run has none.
        limits: The limits of the tools (`ToolLimits`); the defaults when
            ``None``.

    Raises:
        TypeError: ``memory`` is not a `MemoryStore`, ``identity`` is not
            callable, or ``limits`` is not a `ToolLimits`.
    """

    __slots__ = ("_bound", "_identity", "_limits", "_memory", "_tools")

    def __init__(
        self,
        memory: MemoryStore,
        *,
        identity: Identity[ContextT],
        limits: ToolLimits | None = None,
    ) -> None:
        if not isinstance(memory, MemoryStore):
            raise TypeError(f"memory must be a MemoryStore, not {type(memory).__qualname__}")
        if not callable(identity):
            raise TypeError(f"identity must be callable, not {type(identity).__qualname__}")
        if limits is None:
            limits = ToolLimits()
        elif not isinstance(limits, ToolLimits):
            raise TypeError(f"limits must be a ToolLimits, not {type(limits).__qualname__}")
        self._memory = memory
        self._identity = identity
        self._limits = limits
        self._bound: OrderedDict[MemoryKey, MemoryTools] = OrderedDict()
        self._tools = tuple(self._function_tool(spec) for spec in memory_tool_specs(limits))

    @property
    def memory(self) -> MemoryStore:
        """The store the tools read and write."""
        return self._memory

    @property
    def limits(self) -> ToolLimits:
        """The limits the tools keep."""
        return self._limits

    @property
    def tools(self) -> list[Tool]:
        """``remember`` and ``forget``, for ``Agent(tools=...)``."""
        return list(self._tools)

    def __repr__(self) -> str:
        return f"AgentMemory(memory={type(self._memory).__qualname__})"

    def instructions(self, base: _BaseInstructions[ContextT] = None) -> Instructions[ContextT]:
        """Return the agent's instructions: ``base``, then the end user's memory block.

        Args:
            base: The agent's own instructions: a `str`, or a function of
                ``(context, agent)`` returning one (or an awaitable of one),
                as ``Agent(instructions=...)`` takes them; ``None`` for none.

        Returns:
            An async function for ``Agent(instructions=...)``. It raises
            `NoEndUserError` when the run's context names no end user,
            before the model is called; whatever the store's ``recall``
            raises propagates.

        Raises:
            TypeError: ``base`` is neither ``None``, a `str` nor callable.
        """
        if base is not None and not isinstance(base, str) and not callable(base):
            raise TypeError(f"base must be None, a str or callable, not {type(base).__qualname__}")

        async def instructions(context: RunContextWrapper[ContextT], agent: Agent[ContextT]) -> str:
            block = await self.bind(context.context).prompt()
            text = await _text_of(base, context, agent)
            return "\n\n".join(part for part in (text, block) if part)

        return instructions

    def bind(self, context: ContextT) -> MemoryTools:
        """Return the memory tools of the tenant and end user ``context`` names.

        Args:
            context: A run's context (``RunContextWrapper.context``).

        Returns:
            The tools bound to that tenant and end user; the same object for
            the same key while it is among the most recent ones.

        Raises:
            NoEndUserError: ``identity`` gave no end user for ``context``.
            TypeError: ``identity`` returned no ``(scope, end_user_id)``
                pair, or a part of the wrong type.
            InvalidKeyError: The tenant or end-user id breaks a key rule.
        """
        key = run_key(self._identity(context), source="context")
        tools = self._bound.get(key)
        if tools is None:
            tools = self._bound[key] = MemoryTools(self._memory, key, limits=self._limits)
            if len(self._bound) > _BOUND_KEPT:
                self._bound.popitem(last=False)
        else:
            self._bound.move_to_end(key)
        return tools

    def _function_tool(self, spec: ToolSpec) -> FunctionTool:
        name = spec.name

        async def invoke(context: ToolContext[ContextT], arguments: str) -> str:
            # The JSON text as the model sent it: the tools refuse repeated
            # keys and malformed JSON with their own words.
            result = await self.bind(context.context).call(name, arguments)
            return result.content

        def enabled(context: RunContextWrapper[ContextT], agent: object) -> bool:
            # Asked when the agent's tools are listed, before the model call:
            # a run without an end user fails there.
            self.bind(context.context)
            return True

        function = spec.as_openai()["function"]
        return FunctionTool(
            name=name,
            description=spec.description,
            params_json_schema=function["parameters"],
            on_invoke_tool=invoke,
            strict_json_schema=True,
            is_enabled=enabled,
        )


async def _text_of(
    base: _BaseInstructions[ContextT],
    context: RunContextWrapper[ContextT],
    agent: Agent[ContextT],
) -> str | None:
    if base is None or isinstance(base, str):
        return base
    text: Any = base(context, agent)
    if inspect.isawaitable(text):
        text = await text
    return None if text is None else str(text)
