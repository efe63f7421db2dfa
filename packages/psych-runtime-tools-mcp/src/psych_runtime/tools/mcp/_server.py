"""The MCP server: memory tools, a resource and a prompt, bound to a key the model never sees."""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any, Final

from mcp.server import Server, ServerRequestContext
from mcp.shared.exceptions import MCPError
from mcp.types import (
    INTERNAL_ERROR,
    INVALID_PARAMS,
    CallToolRequestParams,
    CallToolResult,
    GetPromptRequestParams,
    GetPromptResult,
    ListPromptsResult,
    ListResourcesResult,
    ListToolsResult,
    PaginatedRequestParams,
    Prompt,
    PromptMessage,
    ReadResourceRequestParams,
    ReadResourceResult,
    Resource,
    TextContent,
    TextResourceContents,
    Tool,
    ToolAnnotations,
)
from psych_runtime.tools.builtins import MemoryTools, ToolResult, ToolSpec

from ._recall import RECALL, recall_refusal
from ._results import no_identity, unavailable, unknown_tool
from ._version import __version__

__all__ = [
    "ARGUMENTS_AS_SENT",
    "MEMORY_PROMPT",
    "MEMORY_RESOURCE_URI",
    "IdentityError",
    "build_server",
]

MEMORY_RESOURCE_URI: Final = "memory://current-user"
"""The URI of the resource holding the current end user's memory block."""

MEMORY_PROMPT: Final = "memory"
"""The name of the prompt holding the current end user's memory block."""

ARGUMENTS_AS_SENT: Final = "psych-memory/arguments-as-sent"
"""The ``_meta`` key of a ``tools/call`` that carries its arguments as JSON text, as sent.

The HTTP front sets it when a key appears twice in the arguments (the
parsed arguments keep only one of them) and removes it from every other
call, so a server built with ``arguments_as_sent`` can trust it.
"""

_INSTRUCTIONS: Final = (
    "Long-term memory about the user you are talking to. Call recall to see what "
    "is known, remember to save a lasting fact, forget to delete one by its id. "
    "Who the user is was decided when this server was connected; no tool takes a "
    "user, tenant or scope."
)
_EMPTY_BLOCK: Final = "No facts are saved about the current user yet."
_ANNOTATIONS: Final = {
    "remember": ToolAnnotations(
        read_only_hint=False, destructive_hint=False, idempotent_hint=False, open_world_hint=False
    ),
    "forget": ToolAnnotations(
        read_only_hint=False, destructive_hint=True, idempotent_hint=True, open_world_hint=False
    ),
    "recall": ToolAnnotations(read_only_hint=True, open_world_hint=False),
}

_logger = logging.getLogger("psych_runtime.tools.mcp")


class IdentityError(Exception):
    """The request carries no end user this server can serve (for example no usable token)."""


Binder = Callable[[], MemoryTools]
"""Returns the tools bound to the key of the request being served."""


def build_server(bind: Binder, *, name: str, arguments_as_sent: bool = False) -> Server[Any]:
    """Build a low-level MCP server whose every request acts for ``bind()``'s key.

    The low-level server is used, not ``MCPServer``: it publishes the tools'
    own JSON Schemas unchanged and hands over the raw arguments, so the
    Python tools do all validation and every refusal is theirs. (``MCPServer``
    validates through a model generated from a function signature, which
    drops unknown arguments such as ``end_user_id`` instead of refusing them.)

    Args:
        bind: Returns the memory tools for the current request; raises
            `IdentityError` when the request has no usable end user.
        name: The server name announced to clients.
        arguments_as_sent: Check a ``tools/call`` whose ``_meta`` holds
            `ARGUMENTS_AS_SENT` against that JSON text instead of the parsed
            arguments; only for a transport that sets and strips the key.

    Returns:
        The server, ready for any transport.
    """
    handlers = _RequestHandlers(bind, arguments_as_sent=arguments_as_sent)
    return Server(
        name,
        version=__version__,
        instructions=_INSTRUCTIONS,
        on_list_tools=handlers.list_tools,
        on_call_tool=handlers.call_tool,
        on_list_resources=handlers.list_resources,
        on_read_resource=handlers.read_resource,
        on_list_prompts=handlers.list_prompts,
        on_get_prompt=handlers.get_prompt,
    )


class _RequestHandlers:
    __slots__ = ("_arguments_as_sent", "_bind")

    def __init__(self, bind: Binder, *, arguments_as_sent: bool) -> None:
        self._bind = bind
        self._arguments_as_sent = arguments_as_sent

    def _bound_tools(self) -> MemoryTools:
        try:
            return self._bind()
        except IdentityError:
            raise MCPError(INVALID_PARAMS, "no end user this server can serve") from None

    async def list_tools(
        self, ctx: ServerRequestContext[Any], params: PaginatedRequestParams | None
    ) -> ListToolsResult:
        return ListToolsResult(tools=[_mcp_tool(spec) for spec in _tool_specs(self._bound_tools())])

    async def call_tool(
        self, ctx: ServerRequestContext[Any], params: CallToolRequestParams
    ) -> CallToolResult:
        arguments: object = params.arguments or {}
        if self._arguments_as_sent:
            sent = (params.meta or {}).get(ARGUMENTS_AS_SENT)
            if isinstance(sent, str):
                # The JSON text keeps the repeated keys the parsed arguments lost.
                arguments = sent
        result = await self._call_result(params.name, arguments)
        return CallToolResult(
            content=[TextContent(type="text", text=result.content)], is_error=result.is_error
        )

    async def _call_result(self, name: str, arguments: object) -> ToolResult:
        try:
            tools = self._bind()
        except IdentityError:
            return no_identity(name if name in _ANNOTATIONS else "the tool")
        names = tuple(spec.name for spec in _tool_specs(tools))
        if name not in names:
            return unknown_tool(names)
        try:
            if name == RECALL.name:
                return recall_refusal(arguments) or ToolResult(
                    await _memory_block(tools), is_error=False
                )
            return await tools.call(name, arguments)
        except Exception as error:
            # The trace stays in the server's log; the model gets a plain answer.
            _logger.warning("memory tool %r failed", name, exc_info=True)
            return unavailable(name, error)

    async def list_resources(
        self, ctx: ServerRequestContext[Any], params: PaginatedRequestParams | None
    ) -> ListResourcesResult:
        return ListResourcesResult(
            resources=[
                Resource(
                    uri=MEMORY_RESOURCE_URI,
                    name="memory",
                    title="Memory about the current user",
                    description="The facts saved about the current user, one per line, with ids.",
                    mime_type="text/plain",
                )
            ]
        )

    async def read_resource(
        self, ctx: ServerRequestContext[Any], params: ReadResourceRequestParams
    ) -> ReadResourceResult:
        if params.uri != MEMORY_RESOURCE_URI:
            raise MCPError(INVALID_PARAMS, "no such resource")
        text = await self._memory_block()
        return ReadResourceResult(
            contents=[
                TextResourceContents(uri=MEMORY_RESOURCE_URI, text=text, mime_type="text/plain")
            ]
        )

    async def list_prompts(
        self, ctx: ServerRequestContext[Any], params: PaginatedRequestParams | None
    ) -> ListPromptsResult:
        return ListPromptsResult(
            prompts=[
                Prompt(
                    name=MEMORY_PROMPT,
                    title="Memory about the current user",
                    description="Adds the facts saved about the current user to the conversation.",
                )
            ]
        )

    async def get_prompt(
        self, ctx: ServerRequestContext[Any], params: GetPromptRequestParams
    ) -> GetPromptResult:
        if params.name != MEMORY_PROMPT:
            raise MCPError(INVALID_PARAMS, "no such prompt")
        text = await self._memory_block()
        return GetPromptResult(
            description="The facts saved about the current user.",
            messages=[PromptMessage(role="user", content=TextContent(type="text", text=text))],
        )

    async def _memory_block(self) -> str:
        tools = self._bound_tools()
        try:
            return await _memory_block(tools)
        except Exception:
            _logger.warning("reading the memory block failed", exc_info=True)
            message = "memory is unavailable right now; try again later"
            raise MCPError(INTERNAL_ERROR, message) from None


def _tool_specs(tools: MemoryTools) -> tuple[ToolSpec, ...]:
    return (*tools.specs, RECALL)


def _mcp_tool(spec: ToolSpec) -> Tool:
    return Tool(
        name=spec.name,
        description=spec.description,
        input_schema=spec.input_schema,
        annotations=_ANNOTATIONS.get(spec.name),
    )


async def _memory_block(tools: MemoryTools) -> str:
    return await tools.prompt() or _EMPTY_BLOCK
