"""One remembered fact, as every adapter returns it."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, NoReturn, final

from ._key import MemoryKey

__all__ = ["Memory"]


@final
@dataclass(frozen=True, slots=True, init=False)
class Memory:
    """A fact about one end user, as stored.

    Instances are immutable and built by adapters, which guarantee that
    ``content`` passed `validate_content` and ``key`` came from `memory_key`.
    It cannot be subclassed. The representation leaves the content out, so that logging a `Memory`
    does not write personal data to the log. Facts work as fields of pydantic
    models (and so in FastAPI responses); the port itself does not import
    pydantic.

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

    # Written out rather than generated: every recall of a durable store
    # builds one per fact, and setting the slots directly costs about 40 %
    # less than the frozen dataclass's generated ``__init__``.
    def __init__(
        self,
        id: str,  # noqa: A002 - the field's name, which callers may pass by keyword
        key: MemoryKey,
        content: str,
        created_at: datetime,
    ) -> None:
        _set_id(self, id)
        _set_key(self, key)
        _set_content(self, content)
        _set_created_at(self, created_at)

    def __init_subclass__(cls, **kwargs: Any) -> NoReturn:
        raise TypeError("Memory cannot be subclassed")

    @classmethod
    def __get_pydantic_core_schema__(cls, source: object, handler: Any) -> Any:
        """Let pydantic validate, serialise and describe facts, by the port's rules.

        Called by pydantic only, so the port never needs it installed. A fact
        is ``{"id", "key", "content", "created_at"}``, each field checked as
        `validate_restored` checks a fact restored from elsewhere; a `Memory`
        passes as it is.
        """
        from ._pydantic import memory_schema  # noqa: PLC0415 - pydantic is optional

        return memory_schema(handler.generate_schema(MemoryKey))

    @classmethod
    def __get_pydantic_json_schema__(cls, schema: Any, handler: Any) -> Any:
        """Describe facts in JSON Schema for pydantic, with the limits of their fields."""
        from ._pydantic import describe  # noqa: PLC0415 - pydantic is optional

        return describe(cls, schema, handler)


def _slot_setter(name: str) -> Callable[[Memory, Any], None]:
    # The slot's own setter, which a frozen dataclass's ``__setattr__`` refuses.
    slot: Any = vars(Memory)[name]
    setter: Callable[[Memory, Any], None] = slot.__set__
    return setter


_set_id = _slot_setter("id")
_set_key = _slot_setter("key")
_set_content = _slot_setter("content")
_set_created_at = _slot_setter("created_at")
