"""`remember` and `forget` as model tools, bound to one tenant and end user."""

from __future__ import annotations

import json
from collections.abc import Iterable
from typing import Final, cast

from psych_runtime.memory.port import (
    MemoryKey,
    MemoryStore,
    RemembersWithinLimit,
    Scope,
    memory_key,
    validate_memory_id,
)

from ._limits import (
    DEFAULT_MAX_FACT_LENGTH,
    DEFAULT_MAX_FACTS,
    DEFAULT_MAX_PROMPT_CHARS,
    ToolLimits,
)
from ._loop_lock import LoopLock
from ._refusals import RefusedCallError, check_arguments, check_content, memory_full, refusal
from ._render import check_budget, render_memories
from ._spec import ToolResult, ToolSpec

__all__ = [
    "FORGET",
    "REMEMBER",
    "MemoryTools",
    "NoEndUserError",
    "UnknownToolError",
    "memory_tool_specs",
    "memory_tools",
    "run_key",
]


def _remember_spec(max_fact_length: int) -> ToolSpec:
    return ToolSpec(
        name="remember",
        description=(
            "Save one durable fact about the current user so that it is known in "
            "later conversations: a lasting preference, a standing instruction, or "
            "a detail of their situation (for example: prefers the Berlin warehouse). "
            "Do not save small talk, one-off requests, anything about other people, "
            "or a fact already listed in memory. Write the fact as one short, "
            f"self-contained statement of at most {max_fact_length} characters. "
            "Each call adds a new fact and returns its id. Memory holds a limited "
            "number of facts: when it is full, the tool says so; then forget an "
            "outdated fact first, or tell the user."
        ),
        input_schema={
            "type": "object",
            "properties": {
                "content": {
                    "type": "string",
                    "description": "The fact, as one short self-contained statement.",
                    "minLength": 1,
                    "maxLength": max_fact_length,
                },
            },
            "required": ["content"],
            "additionalProperties": False,
        },
    )


REMEMBER: Final = _remember_spec(DEFAULT_MAX_FACT_LENGTH)
"""The spec of the ``remember`` tool, for the default `DEFAULT_MAX_FACT_LENGTH`.

Tools bound with another ``max_fact_length`` give the model a spec that
states their own limit; see `MemoryTools.specs`.
"""

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


def memory_tool_specs(limits: ToolLimits | None = None) -> tuple[ToolSpec, ToolSpec]:
    """Return the specs of ``remember`` and ``forget`` for ``limits``, bound to no one.

    For a front end that publishes the tools before any end user is known
    (an agent framework's tool list, built once) and binds `MemoryTools`
    per run: these are exactly the `MemoryTools.specs` of tools bound with
    the same ``limits``.

    Args:
        limits: The limits of the tools; ``None`` for the defaults.

    Returns:
        ``remember`` (stating ``limits.max_fact_length``), then ``forget``.

    Raises:
        TypeError: ``limits`` is neither ``None`` nor a `ToolLimits`.
    """
    if limits is None:
        return (REMEMBER, FORGET)
    if not isinstance(limits, ToolLimits):
        raise TypeError(f"limits must be a ToolLimits, not {type(limits).__qualname__}")
    length = limits.fact_length
    return (REMEMBER if length == DEFAULT_MAX_FACT_LENGTH else _remember_spec(length), FORGET)


# What the three limit keywords hold when left alone: with ``limits`` they must be.
_DEFAULT_LIMITS: Final = (DEFAULT_MAX_FACTS, DEFAULT_MAX_FACT_LENGTH, DEFAULT_MAX_PROMPT_CHARS)

# An unknown tool name is the application's routing bug, reported to the
# application (not the model); a bounded prefix is enough to find it.
_SHOWN_NAME_LENGTH: Final = 40


class NoEndUserError(LookupError):
    """A run names no end user, so the memory tools have nobody to remember for.

    Raised by the agent-framework front ends before the model is called,
    and never reported to the model: which end user a run serves is the
    application's decision, and the tools never fall back to a default one,
    which would put every end user's facts in one place. One class for
    every front end, so that one ``except`` serves them all.
    """


def run_key(identity: object, *, source: str) -> MemoryKey:
    """The key a run's identity names: what an agent framework's front end binds the tools to.

    Args:
        identity: What the application's identity function returned for
            the run: a ``(scope, end_user_id)`` pair. Typed as a pair, but
            written by the application, so checked all the same.
        source: What the function was given (``"deps"``, ``"context"``),
            for the message of an error.

    Raises:
        NoEndUserError: ``end_user_id`` is ``None``.
        TypeError: ``identity`` is not a pair, or a part has the wrong type.
        InvalidKeyError: The tenant or end-user id breaks a key rule.
    """
    if not isinstance(identity, tuple) or len(identity) != 2:
        raise TypeError(
            f"identity must return a (scope, end_user_id) pair, not {type(identity).__qualname__}"
        )
    scope, end_user_id = identity
    if end_user_id is None:
        raise NoEndUserError(
            f"this run has no end user: identity({source}) gave None for end_user_id; run the "
            f"agent with {source} that name the end user (the memory tools never pick one)"
        )
    return memory_key(scope, end_user_id)


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
            f"no memory tool named {_shown_name(name)}; the memory tools are "
            f"{REMEMBER.name!r} and {FORGET.name!r}"
        )
        self.name = name


class MemoryTools:
    """The ``remember`` and ``forget`` tools, bound to one store and one key.

    Built by `memory_tools`. The tenant and the end user are fixed here by
    the application; no schema mentions them and a call that passes them is
    refused, so a model can never read or write another user's facts.

    The limits are those of `memory_tools` (``max_facts``,
    ``max_fact_length``, ``max_prompt_chars``), checked the same way, or
    one `ToolLimits` already checked, as ``limits``.
    """

    __slots__ = ("_key", "_limits", "_lock", "_memory", "_remember", "_within_limit")

    def __init__(  # noqa: PLR0913 - the limits are keyword-only options
        self,
        memory: MemoryStore,
        key: MemoryKey,
        *,
        max_facts: int | None = DEFAULT_MAX_FACTS,
        max_fact_length: int | None = DEFAULT_MAX_FACT_LENGTH,
        max_prompt_chars: int | None = DEFAULT_MAX_PROMPT_CHARS,
        limits: ToolLimits | None = None,
    ) -> None:
        """Bind ``memory`` to ``key``; `memory_tools` builds the key from call-site arguments.

        ``limits``, when given, replaces the three limit keywords, which
        must then keep their defaults.

        Raises:
            TypeError: ``memory`` is not a `MemoryStore`, ``key`` is not a
                `MemoryKey`, ``limits`` is not a `ToolLimits` or is given
                beside another limit, or a limit is neither ``None`` nor an
                `int`.
            ValueError: A limit is out of range (see `ToolLimits`).
        """
        if not isinstance(memory, MemoryStore):
            raise TypeError(f"memory must be a MemoryStore, not {type(memory).__qualname__}")
        if not isinstance(key, MemoryKey):
            raise TypeError(f"key must be a MemoryKey, not {type(key).__qualname__}")
        if limits is None:
            limits = ToolLimits(max_facts, max_fact_length, max_prompt_chars)
        elif not isinstance(limits, ToolLimits):
            raise TypeError(f"limits must be a ToolLimits, not {type(limits).__qualname__}")
        elif (max_facts, max_fact_length, max_prompt_chars) != _DEFAULT_LIMITS:
            raise TypeError(
                "give either limits or max_facts, max_fact_length and max_prompt_chars, not both"
            )
        self._memory = memory
        self._key = key
        self._limits = limits
        self._remember = memory_tool_specs(limits)[0]
        # A store that counts and adds as one step of its own keeps the cap
        # for every caller sharing it; for any other store, counting and
        # adding are one step for the tasks of this toolset alone.
        self._within_limit = isinstance(memory, RemembersWithinLimit)
        self._lock = LoopLock()

    @property
    def key(self) -> MemoryKey:
        """The tenant and end user every call of these tools addresses."""
        return self._key

    @property
    def memory(self) -> MemoryStore:
        """The store the tools read and write."""
        return self._memory

    @property
    def limits(self) -> ToolLimits:
        """The limits these tools keep."""
        return self._limits

    @property
    def max_facts(self) -> int | None:
        """The most facts the end user may hold before ``remember`` refuses; ``None``: no cap."""
        return self._limits.max_facts

    @property
    def max_fact_length(self) -> int | None:
        """The most characters of one fact; ``None``: the port's `MAX_CONTENT_LENGTH`."""
        return self._limits.max_fact_length

    @property
    def max_prompt_chars(self) -> int | None:
        """The most characters `prompt` returns by default; ``None``: no budget."""
        return self._limits.max_prompt_chars

    @property
    def specs(self) -> tuple[ToolSpec, ToolSpec]:
        """The specs to give the model: ``remember``, then ``forget``.

        ``remember`` states this toolset's ``max_fact_length`` in its
        description and schema (`REMEMBER` for the default).
        """
        return (self._remember, FORGET)

    def __repr__(self) -> str:
        return f"MemoryTools(memory={type(self._memory).__qualname__}, key={self._key!r})"

    async def call(self, name: str, arguments: object) -> ToolResult:
        """Run one tool call the model made, and return what to tell it.

        Every problem with ``arguments`` becomes an error result (``is_error``
        true) that says what to fix, and nothing is stored or deleted: missing
        or extra arguments (the tenant and end user included), a wrong type,
        malformed JSON, duplicate keys, content that is empty, only
        whitespace, longer than ``max_fact_length`` (or the port's
        `MAX_CONTENT_LENGTH`) or holding control characters. A ``remember``
        while the end user already holds ``max_facts`` facts is refused the
        same way: memory is full, nothing is stored and nothing is evicted,
        and the text asks the model to forget an outdated fact first or to
        tell the user. The error text never repeats the model's text
        (values, keys nested in them, or argument names it made up).

        Parallel ``remember`` calls never take the end user past
        ``max_facts``: with a store that is `RemembersWithinLimit`, the store
        counts and adds as one atomic step, so the cap holds for every
        caller sharing the store (tasks, toolsets, processes); with any
        other store, the calls of this toolset count and add one at a time,
        so the cap holds among them alone.

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

    async def prompt(self, fixed: Iterable[str] = (), *, max_chars: int | None = None) -> str:
        """Recall this end user's facts and render the memory block of the prompt.

        Args:
            fixed: Facts the application already holds (the runtime's
                ``memories=``), shown without an id; see `render_memories`.
            max_chars: The most characters of the block, at least
                `MIN_PROMPT_CHARS`; ``None`` uses ``max_prompt_chars`` bound
                with `memory_tools` (itself ``None`` for no budget). Which
                facts are kept is said in `render_memories`.

        Returns:
            The block, or ``""`` when there are no facts at all.

        Raises:
            TypeError: See `render_memories`.
            ValueError: ``max_chars`` is below `MIN_PROMPT_CHARS`.
            InvalidContentError: An item of ``fixed`` breaks a content rule.
            Exception: Whatever the store's `recall` raises propagates.
        """
        budget = self._limits.max_prompt_chars if max_chars is None else max_chars
        check_budget(budget, "max_chars")
        recalled = await self._memory.recall(self._key.tenant, self._key.end_user_id)
        return render_memories(recalled, fixed, max_chars=budget)

    async def _call_remember(self, arguments: object) -> ToolResult:
        spec = self._remember
        try:
            # The schema declares a string, so the check has made it one.
            value = cast("str", check_arguments(spec, arguments)["content"])
            content = check_content(value, self._limits.max_fact_length)
        except RefusedCallError as refused:
            return refusal(spec.name, refused.reason)
        key = self._key
        max_facts = self._limits.max_facts
        if max_facts is None:
            memory = await self._memory.remember(key.tenant, key.end_user_id, content)
            return _success({"remembered": True, "id": memory.id})
        if self._within_limit:
            store = cast("RemembersWithinLimit", self._memory)
            added = await store.remember_within_limit(
                key.tenant, key.end_user_id, content, max_facts=max_facts
            )
            if added is None:
                return refusal(spec.name, memory_full(max_facts))
            return _success({"remembered": True, "id": added.id})
        async with self._lock():
            held = await self._memory.recall(key.tenant, key.end_user_id, limit=max_facts)
            if len(held) >= max_facts:
                return refusal(spec.name, memory_full(max_facts))
            memory = await self._memory.remember(key.tenant, key.end_user_id, content)
        return _success({"remembered": True, "id": memory.id})

    async def _call_forget(self, arguments: object) -> ToolResult:
        try:
            memory_id = cast("str", check_arguments(FORGET, arguments)["memory_id"])
        except RefusedCallError as refused:
            return refusal(FORGET.name, refused.reason)
        key = self._key
        if await self._memory.forget(key.tenant, key.end_user_id, validate_memory_id(memory_id)):
            return _success({"forgotten": True})
        return _success(
            {
                "forgotten": False,
                "reason": "no saved fact of this user has that id; it may already be gone",
            }
        )


def memory_tools(  # noqa: PLR0913 - the limits are keyword-only options
    memory: MemoryStore,
    *,
    scope: Scope,
    end_user_id: str,
    max_facts: int | None = DEFAULT_MAX_FACTS,
    max_fact_length: int | None = DEFAULT_MAX_FACT_LENGTH,
    max_prompt_chars: int | None = DEFAULT_MAX_PROMPT_CHARS,
) -> MemoryTools:
    """Bind ``remember`` and ``forget`` to one store, tenant and end user.

    The key and the limits are validated here, once, so a bad key or limit
    fails when the application wires the tools and never in front of the
    model. Both ``scope`` and ``end_user_id`` are required and have no
    default: a default end user would quietly put every user's facts in one
    bucket. Limits held as one `ToolLimits` bind the same way with
    ``MemoryTools(memory, memory_key(scope, end_user_id), limits=limits)``.

    Args:
        memory: Any `MemoryStore`.
        scope: The tenant, as a `str` or an object with a `str` ``tenant``
            (the runtime's scope object).
        end_user_id: The end user the model is talking to.
        max_facts: The most facts the end user may hold, as `ToolLimits`
            says: an int >= 1, or ``None`` for no cap.
        max_fact_length: The most characters of one fact through the tools,
            as `ToolLimits` says. ``remember``'s spec states it to the model.
        max_prompt_chars: The budget of `MemoryTools.prompt` in characters,
            as `ToolLimits` says.

    Returns:
        The bound tools.

    Raises:
        TypeError: ``memory`` is not a `MemoryStore`, or ``scope``,
            ``end_user_id`` or a limit has the wrong type (a `bool` is no
            limit).
        InvalidKeyError: The tenant or end-user id breaks a key rule.
        ValueError: A limit is out of range: ``max_facts`` or
            ``max_fact_length`` below 1, ``max_fact_length`` above
            `MAX_CONTENT_LENGTH`, ``max_prompt_chars`` below
            `MIN_PROMPT_CHARS`.
    """
    return MemoryTools(
        memory,
        memory_key(scope, end_user_id),
        max_facts=max_facts,
        max_fact_length=max_fact_length,
        max_prompt_chars=max_prompt_chars,
    )


def _success(payload: dict[str, object]) -> ToolResult:
    return ToolResult(json.dumps(payload, separators=(",", ":")), is_error=False)


def _shown_name(name: str) -> str:
    if len(name) > _SHOWN_NAME_LENGTH:
        return repr(name[:_SHOWN_NAME_LENGTH]) + "..."
    return repr(name)
