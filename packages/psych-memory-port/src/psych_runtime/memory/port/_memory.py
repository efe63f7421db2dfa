"""One remembered fact, as every adapter returns it."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, NoReturn, final

from ._key import MemoryKey

__all__ = ["Memory"]


@final
@dataclass(frozen=True, slots=True)
class Memory:
    """A fact about one end user, as stored.

    Instances are immutable and built by adapters, which guarantee that
    ``content`` passed `validate_content` and ``key`` came from `memory_key`.
    It cannot be subclassed. The representation leaves the content out, so that logging a `Memory`
    does not write personal data to the log.

    Attributes:
        id: Chosen by the adapter; unique within its store and never reused.
            This is what `MemoryStore.forget` takes.
        key: The tenant and end user the fact belongs to.
        content: The fact, exactly as it was given to `MemoryStore.remember`.
        created_at: When it was stored, timezone-aware, in UTC. It is
            informative only: order comes from insertion, not from this.
    """

    id: str
    key: MemoryKey
    content: str = field(repr=False)
    created_at: datetime

    def __init_subclass__(cls, **kwargs: Any) -> NoReturn:
        raise TypeError("Memory cannot be subclassed")
