"""ADK's memory-service interface over a Psych store, with real deletes."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import TYPE_CHECKING

from google.adk.memory import BaseMemoryService
from google.adk.memory.base_memory_service import SearchMemoryResponse
from google.adk.memory.memory_entry import MemoryEntry
from google.genai import types

from psych_runtime.memory.port import (
    InvalidContentError,
    MemoryKey,
    MemoryStore,
    memory_key,
    validate_content,
    validate_memory_id,
)

from ._identity import check_tenant

if TYPE_CHECKING:
    from google.adk.events import Event
    from google.adk.sessions import Session

__all__ = ["StoreMemoryService"]

# Only what the user said is a fact about them; the model's turns are not.
_USER_AUTHOR = "user"


class StoreMemoryService(BaseMemoryService):
    """ADK's ``BaseMemoryService`` backed by any Psych `MemoryStore`.

    Every ADK user (``user_id``) of an app is one end user of the store, in
    ``tenant`` or, when that is ``None``, in the tenant named like the app
    (``app_name``).

    - `add_session_to_memory` and `add_events_to_memory` store the text of
      each event the user wrote as one fact, exactly as written; a text the
      user already holds as a fact is not stored twice, so adding the same
      session again adds nothing. A text the store cannot hold (longer than
      `MAX_CONTENT_LENGTH`, holding a control character other than newline
      and tab) is left out. `add_memory` stores each entry's text the same way.
    - `search_memory` returns every fact of the user, oldest first: the
      store's order. There is no similarity search and ``query`` is not
      used; the facts are few and short, made to be put in the prompt whole.
    - `delete_memory` deletes one fact by its id (``MemoryEntry.id``) or,
      with no id, every fact of that user, for good (`MemoryStore.erase`):
      no copy, tombstone or history is kept.

    Args:
        memory: Any `MemoryStore`.
        tenant: The tenant of every user, or ``None`` for the app name.

    Raises:
        TypeError: ``memory`` is not a `MemoryStore`, or ``tenant`` is
            neither ``None`` nor a `str`.
    """

    def __init__(self, memory: MemoryStore, *, tenant: str | None = None) -> None:
        if not isinstance(memory, MemoryStore):
            raise TypeError(f"memory must be a MemoryStore, not {type(memory).__qualname__}")
        self._memory = memory
        self._tenant = check_tenant(tenant)

    async def add_session_to_memory(self, session: Session) -> None:
        """Store the text of each event the user wrote in ``session`` as a fact.

        Raises:
            InvalidKeyError: The tenant or the session's user id breaks a key rule.
            Exception: Whatever the store raises propagates.
        """
        await self._add(self._key(session.app_name, session.user_id), _user_texts(session.events))

    async def add_events_to_memory(
        self,
        *,
        app_name: str,
        user_id: str,
        events: Sequence[Event],
        session_id: str | None = None,
        custom_metadata: Mapping[str, object] | None = None,
    ) -> None:
        """Store the text of each event the user wrote in ``events`` as a fact.

        ``session_id`` and ``custom_metadata`` are not used: a fact belongs
        to its user, not to a session.

        Raises:
            InvalidKeyError: The tenant or ``user_id`` breaks a key rule.
            Exception: Whatever the store raises propagates.
        """
        await self._add(self._key(app_name, user_id), _user_texts(events))

    async def add_memory(
        self,
        *,
        app_name: str,
        user_id: str,
        memories: Sequence[MemoryEntry],
        custom_metadata: Mapping[str, object] | None = None,
    ) -> None:
        """Store the text of each entry of ``memories`` as a fact.

        ``custom_metadata`` is not used.

        Raises:
            InvalidKeyError: The tenant or ``user_id`` breaks a key rule.
            Exception: Whatever the store raises propagates.
        """
        await self._add(self._key(app_name, user_id), (_text(m.content) for m in memories))

    async def search_memory(
        self, *, app_name: str, user_id: str, query: str
    ) -> SearchMemoryResponse:
        """Return every fact of the user, oldest first; ``query`` is not used.

        Raises:
            InvalidKeyError: The tenant or ``user_id`` breaks a key rule.
            Exception: Whatever the store's ``recall`` raises propagates.
        """
        key = self._key(app_name, user_id)
        facts = await self._memory.recall(key.tenant, key.end_user_id)
        return SearchMemoryResponse(
            memories=[
                MemoryEntry(
                    id=fact.id,
                    content=types.Content(role=_USER_AUTHOR, parts=[types.Part(text=fact.content)]),
                    author=_USER_AUTHOR,
                    timestamp=fact.created_at.isoformat(),
                )
                for fact in facts
            ]
        )

    async def delete_memory(
        self, *, app_name: str, user_id: str, memory_id: str | None = None
    ) -> None:
        """Delete one fact of the user by its id, or with no id every fact of the user.

        An id the user does not hold (gone already, or another user's)
        deletes nothing.

        Raises:
            InvalidKeyError: The tenant or ``user_id`` breaks a key rule.
            TypeError: ``memory_id`` is neither ``None`` nor a `str`.
            Exception: Whatever the store raises propagates.
        """
        key = self._key(app_name, user_id)
        if memory_id is None:
            await self._memory.erase(key.tenant, key.end_user_id)
        else:
            await self._memory.forget(key.tenant, key.end_user_id, validate_memory_id(memory_id))

    def _key(self, app_name: str, user_id: str) -> MemoryKey:
        return memory_key(app_name if self._tenant is None else self._tenant, user_id)

    async def _add(self, key: MemoryKey, texts: Iterable[str]) -> None:
        held = {fact.content for fact in await self._memory.recall(key.tenant, key.end_user_id)}
        for text in texts:
            if text in held or not _storable(text):
                continue
            await self._memory.remember(key.tenant, key.end_user_id, text)
            held.add(text)


def _user_texts(events: Iterable[Event]) -> Iterable[str]:
    return (_text(event.content) for event in events if event.author == _USER_AUTHOR)


def _text(content: types.Content | None) -> str:
    if content is None or not content.parts:
        return ""
    return "\n".join(part.text for part in content.parts if part.text).strip()


def _storable(text: str) -> bool:
    try:
        validate_content(text)
    except InvalidContentError:
        return False
    return True
