"""Whose memory an ADK run reaches: the session's user, in the configured tenant or the app."""

from __future__ import annotations

import logging
from typing import Final

from google.adk.agents.readonly_context import ReadonlyContext

from psych_runtime.memory.port import MemoryKey, memory_key
from psych_runtime.tools.builtins import NoEndUserError

__all__ = ["check_tenant", "memory_key_of"]

# Where ADK logs, with its traceback at ERROR, an exception that ends a run
# before handing it to the caller of ``Runner.run_async``.
_ADK_RUN_LOGGERS: Final = (
    "google_adk.google.adk.workflow._node_runner",
    "google_adk.google.adk.runners",
)


class _WithoutNoEndUser(logging.Filter):
    """Drops ADK's records of a `NoEndUserError`: the application gets the exception itself.

    A run without an end user is the application's mistake, reported to it
    by the exception; a traceback at ERROR in ADK's log on top would page
    an operator for it. Every other record passes.
    """

    def filter(self, record: logging.LogRecord) -> bool:
        return record.exc_info is None or not isinstance(record.exc_info[1], NoEndUserError)


_FILTER: Final = _WithoutNoEndUser()
for _name in _ADK_RUN_LOGGERS:
    logging.getLogger(_name).addFilter(_FILTER)


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
