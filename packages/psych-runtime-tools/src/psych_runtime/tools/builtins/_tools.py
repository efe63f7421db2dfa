"""`remember` and `forget` as model tools, bound to one tenant and end user."""

from __future__ import annotations

import json
from collections.abc import Iterable
from typing import Final, cast

from psych_runtime.memory.port import (
    MAX_CONTENT_LENGTH,
    MemoryKey,
    MemoryStore,
    Scope,
    memory_key,
    validate_memory_id,
)

from ._refusals import RefusedCallError, check_arguments, check_content, refusal
from ._render import render_memories
from ._spec import ToolResult, ToolSpec

__all__ = ["FORGET", "REMEMBER", "MemoryTools", "UnknownToolError", "memory_tools"]

REMEMBER: Final = ToolSpec(
    name="remember",
    description=(
        "Save one durable fact about the current user so that it is known in "
        "later conversations: a lasting preference, a standing instruction, or "
        "a detail of their situation (for example: prefers the Berlin warehouse). "
        "Do not save small talk, one-off requests, anything about other people, "
        "or a fact already listed in memory. Write the fact as one short, "
        f"self-contained statement of at most {MAX_CONTENT_LENGTH} characters. "
        "Each call adds a new fact and returns its id."
    ),
    input_schema={
        "type": "object",
        "properties": {
            "content": {
                "type": "string",
                "description": "The fact, as one short self-contained statement.",
                "minLength": 1,
                "maxLength": MAX_CONTENT_LENGTH,
            },
        },
        "required": ["content"],
        "additionalProperties": False,
    },
)
"""The spec of the ``remember`` tool."""

FORGET: Final = ToolSpec(
    name="forget",
    description=(
        "Delete one fact you saved earlier about the current user, when they ask "
        "you to drop it or it is no longer true. Pass the id shown with that "
        "fact in the memory section of the prompt. Facts shown without an id "
        "come from the application and cannot be forgotten. Returns whether a "
        "fact was deleted."
    ),
    input_schema={
        "type": "object",
        "properties": {
            "memory_id": {
                "type": "string",
                "description": "The id shown with the fact in the memory section.",
            },
        },
        "required": ["memory_id"],
        "additionalProperties": False,
    },
)
"""The spec of the ``forget`` tool."""

# An unknown tool name is the application's routing bug, reported to the
# application (not the model); a bounded prefix is enough to find it.
_SHOWN_NAME_LENGTH: Final = 40


class UnknownToolError(LookupError):
    """`MemoryTools.call` was asked for a tool it does not have.

    This is a routing bug in the caller (a call meant for another tool was
    sent here), not a mistake of the model to report back to it.

    Attributes:
        name: The name that was asked for.
    """

    name: str

    def __init__(self, name: str) -> None:
        super().__init__(
            f"no memory tool named {_shown(name)}; the memory tools are "
            f"{REMEMBER.name!r} and {FORGET.name!r}"
        )
        self.name = name


class MemoryTools:
    """The ``remember`` and ``forget`` tools, bound to one store and one key.

    Built by `memory_tools`. The tenant and the end user are fixed here by
    the application; no schema mentions them and a call that passes them is
    refused, so a model can never read or write another user's facts.
    """

    __slots__ = ("_key", "_memory")

    def __init__(self, memory: MemoryStore, key: MemoryKey) -> None:
        """Bind ``memory`` to ``key``; `memory_tools` builds the key from call-site arguments.

        Raises:
            TypeError: ``memory`` is not a `MemoryStore` or ``key`` is not a
                `MemoryKey`.
        """
        if not isinstance(memory, MemoryStore):
            raise TypeError(f"memory must be a MemoryStore, not {type(memory).__qualname__}")
        if not isinstance(key, MemoryKey):
            raise TypeError(f"key must be a MemoryKey, not {type(key).__qualname__}")
        self._memory = memory
        self._key = key

    @property
    def key(self) -> MemoryKey:
        """The tenant and end user every call of these tools addresses."""
        return self._key

    @property
    def memory(self) -> MemoryStore:
        """The store the tools read and write."""
        return self._memory

    @property
    def specs(self) -> tuple[ToolSpec, ToolSpec]:
        """The specs to give the model: ``remember``, then ``forget``."""
        return (REMEMBER, FORGET)

    def __repr__(self) -> str:
        return f"MemoryTools(memory={type(self._memory).__qualname__}, key={self._key!r})"

    async def call(self, name: str, arguments: object) -> ToolResult:
        """Run one tool call the model made, and return what to tell it.

        Every problem with ``arguments`` becomes an error result (``is_error``
        true) that says what to fix, and nothing is stored or deleted: missing
        or extra arguments (the tenant and end user included), a wrong type,
        malformed JSON, duplicate keys, content that is empty, only
        whitespace, longer than `MAX_CONTENT_LENGTH` or holding control
        characters. The error text never repeats the model's text
        (values, keys nested in them, or argument names it made up).

        Args:
            name: The tool the model called: ``"remember"`` or ``"forget"``.
            arguments: The call's arguments as the provider delivered them: a
                mapping, or JSON text of an object. Anything else gives an
                error result.

        Returns:
            For ``remember``, ``{"remembered":true,"id":...}`` with the new
            fact's id. For ``forget``, ``{"forgotten":true}``, or
            ``{"forgotten":false,...}`` when this user has no fact with that id.

        Raises:
            TypeError: ``name`` is not a `str`.
            UnknownToolError: ``name`` is neither ``"remember"`` nor ``"forget"``.
            Exception: Whatever the store raises (a database that is down, for
                example) propagates unchanged: it is the application's to
                handle, not the model's to fix.
        """
        if not isinstance(name, str):
            raise TypeError(f"name must be a str, not {type(name).__qualname__}")
        if name == REMEMBER.name:
            return await self._call_remember(arguments)
        if name == FORGET.name:
            return await self._call_forget(arguments)
        raise UnknownToolError(name)

    async def prompt(self, fixed: Iterable[str] = ()) -> str:
        """Recall this end user's facts and render the memory block of the prompt.

        Args:
            fixed: Facts the application already holds (the runtime's
                ``memories=``), shown without an id; see `render_memories`.

        Returns:
            The block, or ``""`` when there are no facts at all.

        Raises:
            TypeError: See `render_memories`.
            InvalidContentError: An item of ``fixed`` breaks a content rule.
            Exception: Whatever the store's `recall` raises propagates.
        """
        recalled = await self._memory.recall(self._key.tenant, self._key.end_user_id)
        return render_memories(recalled, fixed)

    async def _call_remember(self, arguments: object) -> ToolResult:
        try:
            # The schema declares a string, so the check has made it one.
            value = cast("str", check_arguments(REMEMBER, arguments)["content"])
            content = check_content(value, None)
        except RefusedCallError as refused:
            return refusal(REMEMBER.name, refused.reason)
        memory = await self._memory.remember(self._key.tenant, self._key.end_user_id, content)
        return _ok({"remembered": True, "id": memory.id})

    async def _call_forget(self, arguments: object) -> ToolResult:
        try:
            memory_id = cast("str", check_arguments(FORGET, arguments)["memory_id"])
        except RefusedCallError as refused:
            return refusal(FORGET.name, refused.reason)
        key = self._key
        if await self._memory.forget(key.tenant, key.end_user_id, validate_memory_id(memory_id)):
            return _ok({"forgotten": True})
        return _ok(
            {
                "forgotten": False,
                "reason": "no saved fact of this user has that id; it may already be gone",
            }
        )


def memory_tools(memory: MemoryStore, *, scope: Scope, end_user_id: str) -> MemoryTools:
    """Bind ``remember`` and ``forget`` to one store, tenant and end user.

    The key is validated here, once, through `memory_key`, so a bad key fails
    when the application wires the tools and never in front of the model.
    Both ``scope`` and ``end_user_id`` are required and have no default: a
    default end user would quietly put every user's facts in one bucket.

    Args:
        memory: Any `MemoryStore`.
        scope: The tenant, as a `str` or an object with a `str` ``tenant``
            (the runtime's scope object).
        end_user_id: The end user the model is talking to.

    Returns:
        The bound tools.

    Raises:
        TypeError: ``memory`` is not a `MemoryStore`, or ``scope`` or
            ``end_user_id`` has the wrong type.
        InvalidKeyError: The tenant or end-user id breaks a key rule.
    """
    return MemoryTools(memory, memory_key(scope, end_user_id))


def _ok(payload: dict[str, object]) -> ToolResult:
    return ToolResult(json.dumps(payload, separators=(",", ":")), is_error=False)


def _shown(name: str) -> str:
    if len(name) > _SHOWN_NAME_LENGTH:
        return repr(name[:_SHOWN_NAME_LENGTH]) + "..."
    return repr(name)
