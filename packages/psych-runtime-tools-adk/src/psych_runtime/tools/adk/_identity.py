"""Whose memory an ADK run reaches: the session's user, in the configured tenant or the app."""

from __future__ import annotations

from google.adk.agents.readonly_context import ReadonlyContext

from psych_runtime.memory.port import MemoryKey, memory_key
from psych_runtime.tools.builtins import NoEndUserError

__all__ = ["check_tenant", "memory_key_of"]


def check_tenant(tenant: str | None) -> str | None:
    """Return ``tenant`` unchanged after checking its type (``None``: the app name).

    Raises:
        TypeError: ``tenant`` is neither ``None`` nor a `str`.
    """
    if tenant is not None and not isinstance(tenant, str):
        raise TypeError(f"tenant must be a str or None, not {type(tenant).__qualname__}")
    return tenant


def memory_key_of(context: ReadonlyContext, tenant: str | None = None) -> MemoryKey:
    """Return the tenant and end user of an ADK run.

    The end user is the session's user id (``context.user_id``), which the
    application chose when it created the session; the tenant is ``tenant``
    or, when that is ``None``, the session's app name. Nothing comes from
    the model.

    Args:
        context: The run's context (a ``ToolContext``, a ``CallbackContext``
            or the ``ReadonlyContext`` of an instruction provider).
        tenant: The tenant of every user, or ``None`` for the app name.

    Returns:
        The key, validated by `memory_key`.

    Raises:
        NoEndUserError: The session has no user id.
        InvalidKeyError: The tenant or end-user id breaks a key rule.
    """
    end_user_id = context.user_id
    if not end_user_id:
        raise NoEndUserError(
            "the session names no end user for memory: create it with "
            "session_service.create_session(app_name=..., user_id=...)"
        )
    return memory_key(context.session.app_name if tenant is None else tenant, end_user_id)
