"""The instrumented store keeps the wrapped store's capabilities, lifecycle and errors."""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any

import anyio
import anyio.lowlevel
import anyio.to_thread
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from opentelemetry.trace import SpanKind, StatusCode

from psych_runtime.memory.inproc import InProcessMemory
from psych_runtime.memory.otel import instrument
from psych_runtime.memory.port import (
    CountsFacts,
    ExpiresFacts,
    InvalidInputError,
    ListsEndUsers,
    Memory,
    MemoryKey,
    MemoryStore,
    PagesFacts,
    RestoresFacts,
    Scope,
    StalePageError,
    StoreClosedError,
    store_events,
    validate_page,
)

if TYPE_CHECKING:
    from conftest import Telemetry

pytestmark = pytest.mark.anyio


class ThirdPartyStore(MemoryStore):
    """A backend written elsewhere, with the four methods only, over the in-process one."""

    def __init__(self) -> None:
        self.inner = InProcessMemory()
        self.entered = 0
        self.left: list[type[BaseException] | None] = []

    async def __aenter__(self) -> ThirdPartyStore:
        self.entered += 1
        return self

    async def __aexit__(self, exc_type: Any, exc: Any, tb: Any) -> None:
        self.left.append(exc_type)
        await self.aclose()

    async def aclose(self) -> None:
        await self.inner.aclose()

    async def remember(self, scope: Scope, end_user_id: str, content: str) -> Memory:
        return await self.inner.remember(scope, end_user_id, content)

    async def forget(self, scope: Scope, end_user_id: str, memory_id: str) -> bool:
        # Reports what only it knows, from the call's task and a worker thread.
        listener = store_events.get()
        if listener is not None:
            listener("psych_memory.replay", {"psych_memory.attempt": 2})
        await anyio.to_thread.run_sync(_report_from_a_thread)
        return await self.inner.forget(scope, end_user_id, memory_id)

    async def recall(
        self, scope: Scope, end_user_id: str, *, limit: int | None = None
    ) -> tuple[Memory, ...]:
        return await self.inner.recall(scope, end_user_id, limit=limit)

    async def erase(self, scope: Scope, end_user_id: str) -> int:
        await anyio.sleep(3600)  # stands for a call slow enough to be cancelled
        return await self.inner.erase(scope, end_user_id)


def _report_from_a_thread() -> None:
    listener = store_events.get()
    if listener is not None:
        listener("psych_memory.scrub.pending", {})


class _Lists(ThirdPartyStore):
    async def tenants(self) -> tuple[str, ...]:
        return await self.inner.tenants()

    async def end_users(self, scope: Scope) -> tuple[str, ...]:
        return await self.inner.end_users(scope)


class _Counts(ThirdPartyStore):
    async def fact_counts(self, scope: Scope) -> Mapping[str, int]:
        return await self.inner.fact_counts(scope)


class _Pages(ThirdPartyStore):
    async def recall_page(
        self, scope: Scope, end_user_id: str, *, after: str | None = None, size: int
    ) -> tuple[Memory, ...]:
        after, size = validate_page(after, size)
        held = await self.inner.recall(scope, end_user_id)
        ids = [memory.id for memory in held]
        if after is not None and after not in ids:
            raise StalePageError
        start = 0 if after is None else ids.index(after) + 1
        return held[start : start + size]


class _Restores(ThirdPartyStore):
    async def restore(self, memory: Memory) -> bool:
        return await self.inner.restore(memory)

    async def restore_many(self, memories: Iterable[Memory]) -> int:
        return await self.inner.restore_many(memories)


class _Scrubs(ThirdPartyStore):
    pending = True

    @property
    def scrub_pending(self) -> bool:
        return self.pending

    async def scrub(self) -> bool:
        self.pending = False
        return True


class _ScrubsWithoutSaying(ThirdPartyStore):
    async def scrub(self) -> bool:
        return False


class _Expires(ThirdPartyStore):
    async def count_expired(self, scope: Scope, *, before: datetime) -> int:
        return await self.inner.count_expired(scope, before=before)

    async def expire(self, scope: Scope, *, before: datetime) -> int:
        return await self.inner.expire(scope, before=before)


_MIXINS = (_Lists, _Counts, _Pages, _Restores, _Scrubs, _ScrubsWithoutSaying, _Expires)
_PROTOCOLS = (ListsEndUsers, CountsFacts, PagesFacts, RestoresFacts, ExpiresFacts)


@settings(suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(chosen=st.sets(st.sampled_from(_MIXINS)))
def test_a_capability_is_there_exactly_when_the_wrapped_store_has_it(
    chosen: set[type[ThirdPartyStore]],
) -> None:
    bases = tuple(mixin for mixin in _MIXINS if mixin in chosen) or (ThirdPartyStore,)
    bare = type("Chosen", bases, {})()
    store = instrument(bare)
    assert isinstance(store, MemoryStore)
    for protocol in _PROTOCOLS:
        assert isinstance(store, protocol) is isinstance(bare, protocol), protocol
    for name in (
        "scrub",
        "scrub_pending",
        "tenants",
        "fact_counts",
        "recall_page",
        "restore",
        "expire",
        "count_expired",
    ):
        assert hasattr(store, name) is hasattr(bare, name), name


async def test_every_capability_answers_as_the_wrapped_store(telemetry: Telemetry) -> None:
    bare = type("All", _MIXINS[:5], {})()
    store = telemetry.instrument(bare)
    assert isinstance(store, PagesFacts)
    facts = [await store.remember("acme", "u1", f"fact {number}") for number in range(5)]
    first = await store.recall_page("acme", "u1", size=2)
    assert first == tuple(facts[:2])
    assert await store.recall_page("acme", "u1", after=first[-1].id, size=10) == tuple(facts[2:])
    with pytest.raises(StalePageError):
        await store.recall_page("acme", "u1", after="gone", size=2)
    with pytest.raises(InvalidInputError):
        await store.recall_page("acme", "u1", size=0)
    failed = [span for span in telemetry.spans() if span.status.status_code is StatusCode.ERROR]
    assert [dict(span.attributes or {})["error.type"] for span in failed] == [
        "psych_runtime.memory.port.StalePageError",
        "psych_runtime.memory.port.InvalidInputError",
    ]
    assert store.scrub_pending is True  # type: ignore[attr-defined]
    assert await store.scrub() is True  # type: ignore[attr-defined]
    assert store.scrub_pending is False  # type: ignore[attr-defined]


async def test_expiry_is_a_deletion_span_with_its_count_cutoff_and_scrub_state(
    telemetry: Telemetry,
) -> None:
    bare = type("Expiring", (_Expires, _Scrubs), {})()
    store = telemetry.instrument(bare)
    assert isinstance(store, ExpiresFacts)
    old = await store.remember("acme", "SECRET-user", "SECRET content")
    cutoff = old.created_at + timedelta(microseconds=1)
    while datetime.now(UTC) <= cutoff:
        await anyio.lowlevel.checkpoint()
    assert await store.count_expired("acme", before=cutoff) == 1
    assert await store.expire("acme", before=cutoff) == 1
    assert await store.expire("acme", before=cutoff) == 0
    with pytest.raises(InvalidInputError):
        await store.expire("acme", before=datetime(2001, 1, 1))
    counted, expired, again, refused = telemetry.spans()[1:]
    assert counted.name == "search_memory"
    assert dict(counted.attributes or {})["gen_ai.memory.record.count"] == 1
    attributes = dict(expired.attributes or {})
    assert expired.name == again.name == refused.name == "delete_memory"
    assert attributes["psych_memory.operation"] == "expire"
    assert attributes["gen_ai.memory.record.count"] == 1
    assert attributes["psych_memory.records.deleted"] == 1
    assert attributes["psych_memory.expire.before"] == cutoff.isoformat()
    assert [event.name for event in expired.events] == ["psych_memory.scrub.pending"]
    assert [event.name for event in again.events] == []
    assert refused.status.status_code is StatusCode.ERROR
    recorded = json.dumps([dict(span.attributes or {}) for span in telemetry.spans()])
    assert "SECRET" not in recorded
    assert "acme" not in recorded


async def test_a_scrub_left_pending_is_an_event_of_its_span(telemetry: Telemetry) -> None:
    store = telemetry.instrument(_ScrubsWithoutSaying())
    assert await store.scrub() is False  # type: ignore[attr-defined]
    (span,) = telemetry.spans()
    assert [event.name for event in span.events] == ["psych_memory.scrub.pending"]


async def test_what_the_store_reports_becomes_events_of_the_calls_span(
    telemetry: Telemetry,
) -> None:
    store = telemetry.instrument(ThirdPartyStore())
    fact = await store.remember("acme", "u1", "a fact")
    assert await store.forget("acme", "u1", fact.id) is True
    forget = telemetry.spans()[-1]
    assert [(event.name, dict(event.attributes or {})) for event in forget.events] == [
        ("psych_memory.replay", {"psych_memory.attempt": 2}),
        ("psych_memory.scrub.pending", {}),
    ]
    # Nobody listens once the call is over.
    assert store_events.get() is None


async def test_a_store_reporting_with_no_recording_span_reaches_nobody() -> None:
    # No SDK: the API's own no-op tracer, so the call sets no listener.
    store = instrument(ThirdPartyStore())
    fact = await store.remember("acme", "u1", "a fact")
    assert await store.forget("acme", "u1", fact.id) is True


async def test_a_cancelled_call_ends_its_span_with_the_cancellation(
    telemetry: Telemetry, anyio_backend: str
) -> None:
    store = telemetry.instrument(ThirdPartyStore())
    with anyio.move_on_after(0.01):
        await store.erase("acme", "u1")
    (span,) = telemetry.spans()
    assert span.name == "delete_memory"
    assert span.status.status_code is StatusCode.ERROR
    expected = "trio.Cancelled" if anyio_backend == "trio" else "asyncio.exceptions.CancelledError"
    assert dict(span.attributes or {})["error.type"] == expected
    # The caller's context is whole again: nothing of the call is current.
    assert store_events.get() is None


async def test_the_lifecycle_goes_to_the_wrapped_store(telemetry: Telemetry) -> None:
    bare = ThirdPartyStore()
    store = telemetry.instrument(bare)
    async with store as entered:
        assert entered is store
        await store.remember("acme", "u1", "a fact")
    assert bare.entered == 1
    assert bare.left == [None]
    with pytest.raises(StoreClosedError):
        await store.recall("acme", "u1")
    with pytest.raises(RuntimeError):
        async with store:
            raise RuntimeError
    assert bare.left == [None, RuntimeError]
    await store.aclose()
    assert repr(store) == f"instrument({bare!r})"
    # Only calls of the store's methods are spans: entering and closing are not.
    assert [span.name for span in telemetry.spans()] == ["create_memory", "search_memory"]


async def test_a_third_party_store_is_a_client_and_the_in_process_one_internal(
    telemetry: Telemetry,
) -> None:
    await telemetry.instrument(ThirdPartyStore()).recall("acme", "u1")
    await telemetry.instrument(InProcessMemory()).recall("acme", "u1")
    assert [span.kind for span in telemetry.spans()] == [SpanKind.CLIENT, SpanKind.INTERNAL]


def test_instrument_refuses_what_it_cannot_use() -> None:
    with pytest.raises(TypeError, match="store must be a MemoryStore, not object"):
        instrument(object())  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="store_id must be None or a str, not int"):
        instrument(InProcessMemory(), store_id=3)  # type: ignore[arg-type]
    with pytest.raises(InvalidInputError, match="store_id"):
        instrument(InProcessMemory(), store_id="")
    with pytest.raises(TypeError, match="capture_tenant must be None or a bool, not str"):
        instrument(InProcessMemory(), capture_tenant="yes")  # type: ignore[arg-type]


async def test_pages_and_restored_facts_carry_their_content_when_opted_in(
    telemetry: Telemetry, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT", "true")
    store = telemetry.instrument(type("Both", (_Pages, _Restores), {})())
    assert isinstance(store, PagesFacts)
    assert isinstance(store, RestoresFacts)
    fact = await store.remember("acme", "u1", "CONTENT paged")
    moved = Memory("moved-1", MemoryKey("acme", "u2"), "CONTENT moved", datetime.now(UTC))
    assert await store.restore(moved) is True
    assert await store.recall_page("acme", "u1", size=3) == (fact,)
    records = {
        span.name + ":" + str(dict(span.attributes or {})["psych_memory.operation"]): json.loads(
            str(dict(span.attributes or {})["gen_ai.memory.records"])
        )
        for span in telemetry.spans()
    }
    assert records == {
        "create_memory:remember": [{"id": fact.id, "content": "CONTENT paged"}],
        "create_memory:restore": [{"id": "moved-1", "content": "CONTENT moved"}],
        "search_memory:recall_page": [{"id": fact.id, "content": "CONTENT paged"}],
    }


async def test_a_failure_is_measured_even_when_its_span_is_not_recorded(
    telemetry: Telemetry,
) -> None:
    store = instrument(InProcessMemory(), meter_provider=telemetry.meter_provider)
    with pytest.raises(InvalidInputError):
        await store.remember("acme", "u1", "")
    (point,) = telemetry.points("psych_memory.client.operation.errors")
    assert point.value == 1
    assert telemetry.spans() == ()
