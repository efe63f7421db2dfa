"""``remember`` and ``forget`` as ADK tools, bound per call to the session's user."""

from __future__ import annotations

import json
from typing import Any

from google.adk.agents.llm_agent import ToolUnion
from google.adk.models.llm_request import LlmRequest
from google.adk.tools.base_tool import BaseTool
from google.adk.tools.tool_context import ToolContext
from google.genai import types

from psych_runtime.memory.port import MemoryStore
from psych_runtime.tools.builtins import MemoryTools, ToolLimits, ToolSpec, memory_tool_specs

from ._identity import check_tenant, memory_key_of

__all__ = ["memory_tools"]


class _MemoryTool(BaseTool):
    def __init__(
        self, memory: MemoryStore, spec: ToolSpec, tenant: str | None, limits: ToolLimits
    ) -> None:
        super().__init__(name=spec.name, description=spec.description)
        self._memory = memory
        self._spec = spec
        self._tenant = tenant
        self._limits = limits

    def _get_declaration(self) -> types.FunctionDeclaration:
        return types.FunctionDeclaration.model_validate(self._spec.as_gemini())

    async def process_llm_request(
        self, *, tool_context: ToolContext, llm_request: LlmRequest
    ) -> None:
        # ADK offers each tool to the model here, before every model call: a
        # session without a user fails now, not at the model's first call.
        memory_key_of(tool_context, self._tenant)
        await super().process_llm_request(tool_context=tool_context, llm_request=llm_request)

    async def run_async(self, *, args: dict[str, Any], tool_context: ToolContext) -> Any:
        key = memory_key_of(tool_context, self._tenant)
        result = await MemoryTools(self._memory, key, limits=self._limits).call(self.name, args)
        # The Python tools' compact JSON, as the object ADK hands the model.
        return json.loads(result.content)


def memory_tools(
    memory: MemoryStore, *, tenant: str | None = None, limits: ToolLimits | None = None
) -> list[ToolUnion]:
    """Return ``remember`` and ``forget`` as ADK tools, for any session's user.

    Give them to an ``LlmAgent(tools=...)``. Each call runs for the user of
    its session (``ToolContext.user_id``) in ``tenant`` or, when that is
    ``None``, in the tenant named like the session's app (`memory_key_of`).
    The declaration the model sees is the Python tools' own
    (`ToolSpec.as_gemini`): only ``content``, or only ``memory_id``; a call
    that adds a tenant or an end user is refused like any other unknown
    argument. The result is the Python tools' JSON object, a refusal
    included (``{"error": ...}``). A session without a user raises
    `NoEndUserError` when the tools are offered to the model, before it is
    called.

    Args:
        memory: Any `MemoryStore`.
        tenant: The tenant of every user, or ``None`` for the app name.
        limits: The tools' limits; ``None`` for the defaults.

    Returns:
        ``[remember, forget]``, as the list ``LlmAgent(tools=...)`` takes.

    Raises:
        TypeError: ``memory`` is not a `MemoryStore`, ``tenant`` is neither
            ``None`` nor a `str`, or ``limits`` is neither ``None`` nor a
            `ToolLimits`.
    """
    if not isinstance(memory, MemoryStore):
        raise TypeError(f"memory must be a MemoryStore, not {type(memory).__qualname__}")
    tenant = check_tenant(tenant)
    specs = memory_tool_specs(limits)
    bound = ToolLimits() if limits is None else limits
    return [_MemoryTool(memory, spec, tenant, bound) for spec in specs]
