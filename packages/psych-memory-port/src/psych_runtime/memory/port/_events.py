"""A hook through which a store tells an observer what only the store knows.

Some things happen inside a call that its caller cannot see: a PostgreSQL
call replayed on a fresh connection after the server dropped the first, a
deletion whose bytes still wait to be scrubbed. An observer, such as an
OpenTelemetry instrumentation, sets `store_events` for the duration of one
call; the store, anywhere in that call (tasks and worker threads it starts
inherit the context), reports to whatever listener is set. With none set,
which is the rule, reporting costs one context-variable read.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from contextvars import ContextVar
from typing import Final

__all__ = ["store_events"]

store_events: Final[
    ContextVar[Callable[[str, Mapping[str, str | bool | int | float]], None] | None]
] = ContextVar("psych_runtime.memory.port.store_events", default=None)
"""The listener of the current call's events, or ``None`` (the default).

A store reports an event by calling the listener with a name and its
attributes, which never hold personal data (no content, key or tenant):

    listener = store_events.get()
    if listener is not None:
        listener("psych_memory.replay", {"psych_memory.attempt": 2})

An observer sets a listener for one call and resets it afterwards
(``token = store_events.set(listener)`` ... ``store_events.reset(token)``).
A listener may be called from a worker thread; it must be quick, must not
block and must not raise.
"""
