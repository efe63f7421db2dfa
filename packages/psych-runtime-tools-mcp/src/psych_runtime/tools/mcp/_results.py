"""What the model is told when memory itself fails, or when no user is known."""

from __future__ import annotations

import json

from psych_runtime.memory.port import StoreClosedError, StoreUnavailableError
from psych_runtime.tools.builtins import ToolResult

__all__ = ["no_identity", "unavailable", "unknown_tool"]

_READ_ONLY_TOOLS = frozenset({"recall"})


def unavailable(tool: str, error: BaseException) -> ToolResult:
    """Tell the model that memory is unavailable, and whether anything changed.

    The store's own message and any trace stay on the server: they may name
    hosts, files or facts, and they are nothing the model can act on.

    Args:
        tool: The tool that was called (one of the server's own names).
        error: What the store raised.

    Returns:
        An error result.
    """
    if tool in _READ_ONLY_TOOLS:
        outcome = "Nothing was changed; try again later"
    elif isinstance(error, StoreClosedError) or (
        isinstance(error, StoreUnavailableError) and not error.may_have_taken_effect
    ):
        outcome = "Nothing was saved or deleted; try again later"
    else:
        outcome = (
            "Nothing may have been saved or deleted, or the change may have gone "
            "through: once memory is back, call recall to check before trying again"
        )
    return _error_result(f"{tool} failed: memory is unavailable right now. {outcome}.")


def no_identity(tool: str) -> ToolResult:
    """Refuse a call that reached the server without a usable end user.

    Args:
        tool: The tool that was called.

    Returns:
        An error result.
    """
    return _error_result(
        f"{tool} was not run: this connection is not signed in as a user this "
        "server can serve. Nothing was changed."
    )


def unknown_tool(names: tuple[str, ...]) -> ToolResult:
    """Refuse a call to a tool this server does not have.

    Args:
        names: The server's tool names.

    Returns:
        An error result listing the tools there are (the unknown name is not
        repeated: it came from the client).
    """
    return _error_result(f"no such tool; the memory tools are {', '.join(map(repr, names))}")


def _error_result(text: str) -> ToolResult:
    return ToolResult(json.dumps({"error": text}, separators=(",", ":")), is_error=True)
