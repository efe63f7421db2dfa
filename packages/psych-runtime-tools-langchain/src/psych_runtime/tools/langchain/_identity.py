"""Whose memory a run reaches: its runtime context, or its config's ``configurable``."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Final

from psych_runtime.memory.port import MemoryKey, memory_key
from psych_runtime.tools.builtins import NoEndUserError

__all__ = ["MemoryContext", "memory_key_of"]

_TENANT: Final = "tenant"
_END_USER: Final = "end_user_id"
_HOW: Final = (
    "pass context=MemoryContext(tenant=..., end_user_id=...) (or any context with "
    "'tenant' and 'end_user_id'), or config={'configurable': {'tenant': ..., "
    "'end_user_id': ...}}"
)


@dataclass(frozen=True, slots=True)
class MemoryContext:
    """The runtime context of a run: whose memory the tools and the prompt reach.

    Use it as the agent's ``context_schema`` and pass one per run
    (``agent.ainvoke(..., context=MemoryContext("acme", "alice"))``), or
    give your own context class fields named ``tenant`` and
    ``end_user_id``. The model never sees it.

    Attributes:
        tenant: The tenant the end user belongs to.
        end_user_id: The end user the run serves.
    """

    tenant: str
    end_user_id: str


def memory_key_of(context: object, config: Mapping[str, object] | None = None) -> MemoryKey:
    """Return the tenant and end user of a run.

    The run's runtime context comes first: an object with ``tenant`` and
    ``end_user_id`` attributes (`MemoryContext`, a dataclass, a pydantic
    model) or a mapping with those keys. When the context has neither (or is
    ``None``), the config's ``configurable`` mapping is read for the same two
    keys. Nothing comes from the model.

    Args:
        context: The run's runtime context (``Runtime.context``,
            ``ToolRuntime.context``), or ``None``.
        config: The run's ``RunnableConfig``, or ``None``.

    Returns:
        The key, validated by `memory_key`.

    Raises:
        NoEndUserError: Neither the context nor ``configurable`` names both
            a tenant and an end user.
        TypeError: A tenant or end-user id is not a `str`.
        InvalidKeyError: The tenant or end-user id breaks a key rule.
    """
    found = _identity(context)
    if found is None:
        configurable = (config or {}).get("configurable")
        found = _identity(configurable) if isinstance(configurable, Mapping) else None
    if found is None:
        raise NoEndUserError(f"the run names no tenant and end user for memory: {_HOW}")
    tenant, end_user_id = found
    if not isinstance(tenant, str):
        raise TypeError(f"tenant must be a str, not {type(tenant).__qualname__}")
    if not isinstance(end_user_id, str):
        raise TypeError(f"end_user_id must be a str, not {type(end_user_id).__qualname__}")
    return memory_key(tenant, end_user_id)


def _identity(source: object) -> tuple[object, object] | None:
    if source is None:
        return None
    if isinstance(source, Mapping):
        tenant, end_user_id = source.get(_TENANT), source.get(_END_USER)
    else:
        tenant, end_user_id = getattr(source, _TENANT, None), getattr(source, _END_USER, None)
    if tenant is None or end_user_id is None:
        return None
    return tenant, end_user_id
