"""The errors of the memory tools for the OpenAI Agents SDK."""

from __future__ import annotations

__all__ = ["NoEndUserError"]


class NoEndUserError(LookupError):
    """A run has no end user, so the memory tools have nobody to remember for.

    Raised before the model is called (when the agent's tools are listed, and
    when its instructions are built): the tools never fall back to a default
    user, which would put every user's facts in one place.
    """
