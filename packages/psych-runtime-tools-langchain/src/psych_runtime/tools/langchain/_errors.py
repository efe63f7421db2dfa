"""The errors of the LangChain front end."""

from __future__ import annotations

__all__ = ["NoEndUserError"]


class NoEndUserError(LookupError):
    """The run names no tenant and end user, so no memory can be read or written.

    Raised before the model is called (by `MemoryMiddleware`) and before a
    tool touches the store, never reported to the model: which user a run
    serves is the application's decision, not something the model can fix.
    """
