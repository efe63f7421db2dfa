"""The errors of the pydantic-ai memory toolset."""

from __future__ import annotations

__all__ = ["NoEndUserError"]


class NoEndUserError(LookupError):
    """A run has no end user, so the memory tools have nobody to remember for.

    Raised when the run starts, before the model is called: the tools never
    fall back to a default user, which would put every user's facts in one
    place.
    """
