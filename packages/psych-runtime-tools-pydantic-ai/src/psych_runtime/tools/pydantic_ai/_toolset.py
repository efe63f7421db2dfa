"""`remember` and `forget` as a pydantic-ai toolset, with the memory block as its instructions."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Final, Generic, TypeVar

from pydantic_core import SchemaValidator, core_schema

from psych_runtime.memory.port import MemoryStore, Scope
from psych_runtime.tools.builtins import MemoryTools, ToolLimits, ToolSpec, run_key
from pydantic_ai import RunContext
from pydantic_ai.tools import ToolDefinition
from pydantic_ai.toolsets import AbstractToolset, ToolsetTool

__all__ = ["DEFAULT_TOOLSET_ID", "Identity", "MemoryToolset"]

DepsT = TypeVar("DepsT")

Identity = Callable[[DepsT], tuple[Scope, str | None]]
"""Reads the tenant and the end user of a run from its dependencies (``ctx.deps``).

Returns ``(scope, end_user_id)``: the tenant as a `str` or an object with a
`str` ``tenant``, and the end user's id, or ``None`` when the run has none.
"""

DEFAULT_TOOLSET_ID: Final = "psych-memory"
"""The `MemoryToolset.id` unless another is given."""

# The model's arguments reach the memory tools as the provider sent them: the
# tools check them (and refuse a tenant or an end user) with their own words.
_ANY_OBJECT: Final = SchemaValidator(core_schema.dict_schema())
# A refused call is answered, not retried: the answer says what to fix.
_MAX_RETRIES: Final = 1


class MemoryToolset(AbstractToolset[DepsT], Generic[DepsT]):
    """The ``remember`` and ``forget`` tools and the memory block, for one agent.

    Give it to ``Agent(toolsets=[...])``. Each run reads its tenant and end
    user from the run's dependencies with ``identity``, once, when it starts;
    the model is never asked for them, no tool schema mentions them, and a
    call that passes them is refused. The memory block of that end user
    (rendered by `render_memories`, within the limits' budget) is the
    toolset's instructions, read again before every model request, so a
    fact saved in one run is in the next run's prompt.

    The tools' names, descriptions, schemas, refusals and results are those
    of `psych_runtime.tools.builtins`; a result is the JSON text the model
    reads, an error result included.

    Args:
        memory: Any `MemoryStore`.
        identity: Returns ``(scope, end_user_id)`` for a run's ``deps``; an
            end user of ``None`` means the run has none.
        limits: The limits of the tools (`ToolLimits`); the defaults when
            ``None``.
        id: The toolset's id, unique among the agent's toolsets.

    Raises:
        TypeError: ``memory`` is not a `MemoryStore`, ``identity`` is not
            callable, ``limits`` is not a `ToolLimits`, or ``id`` is not a
            `str`.
    """

    def __init__(
        self,
        memory: MemoryStore,
        *,
        identity: Identity[DepsT],
        limits: ToolLimits | None = None,
        id: str = DEFAULT_TOOLSET_ID,  # noqa: A002 - pydantic-ai's name for it
    ) -> None:
        if not isinstance(memory, MemoryStore):
            raise TypeError(f"memory must be a MemoryStore, not {type(memory).__qualname__}")
        if not callable(identity):
            raise TypeError(f"identity must be callable, not {type(identity).__qualname__}")
        if limits is None:
            limits = ToolLimits()
        elif not isinstance(limits, ToolLimits):
            raise TypeError(f"limits must be a ToolLimits, not {type(limits).__qualname__}")
        if not isinstance(id, str):
            raise TypeError(f"id must be a str, not {type(id).__qualname__}")
        self._memory = memory
        self._identity = identity
        self._limits = limits
        self._id = id
        self._bound: MemoryTools | None = None

    @property
    def id(self) -> str:
        """The toolset's id among the agent's toolsets."""
        return self._id

    @property
    def memory(self) -> MemoryStore:
        """The store the tools read and write."""
        return self._memory

    @property
    def limits(self) -> ToolLimits:
        """The limits the tools keep."""
        return self._limits

    def __repr__(self) -> str:
        return f"MemoryToolset(memory={type(self._memory).__qualname__}, id={self._id!r})"

    def bind(self, deps: DepsT) -> MemoryTools:
        """Return the memory tools of the tenant and end user ``deps`` name.

        Args:
            deps: A run's dependencies.

        Returns:
            The tools bound to that tenant and end user.

        Raises:
            NoEndUserError: ``identity`` gave no end user for ``deps``.
            TypeError: ``identity`` returned no ``(scope, end_user_id)``
                pair, or a part of the wrong type.
            InvalidKeyError: The tenant or end-user id breaks a key rule.
        """
        return MemoryTools(
            self._memory, run_key(self._identity(deps), source="deps"), limits=self._limits
        )

    async def for_run(self, ctx: RunContext[DepsT]) -> MemoryToolset[DepsT]:
        """Return this toolset bound to the run's tenant and end user.

        Called by pydantic-ai when a run starts, before the model is called.

        Raises:
            NoEndUserError: The run's ``deps`` name no end user.
            TypeError: See `bind`.
            InvalidKeyError: See `bind`.
        """
        tools = self.bind(ctx.deps)
        bound = MemoryToolset(
            self._memory, identity=self._identity, limits=self._limits, id=self._id
        )
        # One MemoryTools per run: with a store that does not keep the cap
        # itself, its parallel remember calls count and add one at a time.
        bound._bound = tools
        return bound

    async def get_instructions(self, ctx: RunContext[DepsT]) -> str | None:
        """Return the end user's memory block, or ``None`` when they have no facts.

        Raises:
            NoEndUserError: The run's ``deps`` name no end user.
            Exception: Whatever the store's ``recall`` raises propagates.
        """
        return await self._tools(ctx).prompt() or None

    async def get_tools(self, ctx: RunContext[DepsT]) -> dict[str, ToolsetTool[DepsT]]:
        """Return ``remember`` and ``forget`` as the model sees them.

        Raises:
            NoEndUserError: The run's ``deps`` name no end user.
        """
        return {spec.name: self._toolset_tool(spec) for spec in self._tools(ctx).specs}

    async def call_tool(
        self, name: str, tool_args: dict[str, Any], ctx: RunContext[DepsT], tool: ToolsetTool[DepsT]
    ) -> str:
        """Run one call of ``remember`` or ``forget`` and return the text the model reads.

        Raises:
            NoEndUserError: The run's ``deps`` name no end user.
            UnknownToolError: ``name`` is not a memory tool.
            Exception: Whatever the store raises propagates, failing the run.
        """
        result = await self._tools(ctx).call(name, tool_args)
        return result.content

    def _tools(self, ctx: RunContext[DepsT]) -> MemoryTools:
        return self._bound if self._bound is not None else self.bind(ctx.deps)

    def _toolset_tool(self, spec: ToolSpec) -> ToolsetTool[DepsT]:
        return ToolsetTool(
            toolset=self,
            tool_def=ToolDefinition(
                name=spec.name,
                description=spec.description,
                parameters_json_schema=spec.input_schema,
            ),
            max_retries=_MAX_RETRIES,
            args_validator=_ANY_OBJECT,
        )
