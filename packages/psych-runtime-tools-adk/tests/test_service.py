"""`StoreMemoryService`: ADK's memory-service interface over a SQLite store.

ADK's sessions and events are built by its own in-memory session service;
its services run on asyncio alone, hence ``pytest.mark.asyncio``.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest
import pytest_asyncio
from google.adk.events import Event
from google.adk.memory.memory_entry import MemoryEntry
from google.adk.sessions import InMemorySessionService, Session
from google.genai import types

from psych_runtime.memory.port import InvalidKeyError
from psych_runtime.memory.sqlite import SqliteMemory
from psych_runtime.tools.adk import StoreMemoryService


@pytest_asyncio.fixture
async def store(tmp_path: Path) -> AsyncIterator[SqliteMemory]:
    async with SqliteMemory(tmp_path / "memory.sqlite3") as memory:
        yield memory


def text(author: str, words: str) -> Event:
    role = "user" if author == "user" else "model"
    return Event(author=author, content=types.Content(role=role, parts=[types.Part(text=words)]))


async def session_with(user_id: str, *events: Event) -> Session:
    sessions = InMemorySessionService()
    session = await sessions.create_session(app_name="acme", user_id=user_id)
    for event in events:
        await sessions.append_event(session, event)
    return session


def texts(entries: list[MemoryEntry]) -> list[str]:
    return [part.text or "" for entry in entries for part in entry.content.parts or []]


@pytest.mark.asyncio
async def test_a_session_adds_what_the_user_said_once(store: SqliteMemory) -> None:
    service = StoreMemoryService(store)
    session = await session_with(
        "alice",
        text("user", "I prefer the Berlin warehouse"),
        text("assistant", "Noted, Berlin it is."),
        text("user", "Invoices go to finance@example.com"),
    )
    await service.add_session_to_memory(session)
    await service.add_session_to_memory(session)
    held = [fact.content for fact in await store.recall("acme", "alice")]
    assert held == ["I prefer the Berlin warehouse", "Invoices go to finance@example.com"]


@pytest.mark.asyncio
async def test_search_returns_every_fact_of_the_user_in_store_order(store: SqliteMemory) -> None:
    service = StoreMemoryService(store)
    first = await store.remember("acme", "alice", "Works nights")
    second = await store.remember("acme", "alice", "Speaks French")
    await store.remember("acme", "bob", "Bob is vegetarian")
    found = await service.search_memory(app_name="acme", user_id="alice", query="vegetarian")
    assert [entry.id for entry in found.memories] == [first.id, second.id]
    assert texts(found.memories) == ["Works nights", "Speaks French"]
    assert found.memories[0].timestamp == first.created_at.isoformat()


@pytest.mark.asyncio
async def test_delete_one_fact_then_all_of_one_user(store: SqliteMemory) -> None:
    service = StoreMemoryService(store)
    await service.add_memory(
        app_name="acme",
        user_id="alice",
        memories=[
            MemoryEntry(content=types.Content(role="user", parts=[types.Part(text=words)]))
            for words in ("One", "Two", "Three")
        ],
    )
    bob = await store.remember("acme", "bob", "Bob is vegetarian")
    one, two, three = await store.recall("acme", "alice")
    await service.delete_memory(app_name="acme", user_id="alice", memory_id=two.id)
    await service.delete_memory(app_name="acme", user_id="alice", memory_id=bob.id)
    assert await store.recall("acme", "alice") == (one, three)
    await service.delete_memory(app_name="acme", user_id="alice")
    assert await store.recall("acme", "alice") == ()
    assert await store.forget("acme", "alice", one.id) is False
    assert await store.recall("acme", "bob") == (bob,)


@pytest.mark.asyncio
async def test_a_fixed_tenant_keeps_apps_out_of_the_key(store: SqliteMemory) -> None:
    service = StoreMemoryService(store, tenant="shared")
    await service.add_events_to_memory(
        app_name="acme", user_id="alice", events=[text("user", "Likes tea")]
    )
    assert [fact.content for fact in await store.recall("shared", "alice")] == ["Likes tea"]
    assert await store.recall("acme", "alice") == ()
    found = await service.search_memory(app_name="other-app", user_id="alice", query="")
    assert texts(found.memories) == ["Likes tea"]


@pytest.mark.asyncio
async def test_what_the_store_cannot_hold_is_left_out(store: SqliteMemory) -> None:
    service = StoreMemoryService(store)
    await service.add_events_to_memory(
        app_name="acme",
        user_id="alice",
        events=[text("user", "x" * 20_000), text("user", "bell\x07"), text("user", "Kept")],
    )
    assert [fact.content for fact in await store.recall("acme", "alice")] == ["Kept"]


@pytest.mark.asyncio
async def test_an_invalid_user_is_refused(store: SqliteMemory) -> None:
    service = StoreMemoryService(store)
    with pytest.raises(InvalidKeyError):
        await service.search_memory(app_name="acme", user_id="", query="")


def test_the_service_refuses_what_is_not_a_store() -> None:
    with pytest.raises(TypeError, match="memory must be a MemoryStore"):
        StoreMemoryService(object())  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="tenant must be a str or None"):
        StoreMemoryService(SqliteMemory(":memory:"), tenant=3)  # type: ignore[arg-type]
