"""Every operation of every adapter: the documented span, attributes and measurements."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

import pytest
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.trace import SpanKind, StatusCode

from psych_runtime.memory.port import (
    CountsFacts,
    InvalidContentError,
    InvalidKeyError,
    ListsEndUsers,
    Memory,
    MemoryKey,
    MemoryStore,
    PagesFacts,
    RestoresFacts,
    StoreClosedError,
)

if TYPE_CHECKING:
    from conftest import StoreOpener, Telemetry

pytestmark = pytest.mark.anyio

DURATION = "gen_ai.client.operation.duration"
ERRORS = "psych_memory.client.operation.errors"


def only(telemetry: Telemetry) -> ReadableSpan:
    spans = telemetry.spans()
    assert len(spans) == 1, [span.name for span in spans]
    telemetry.clear()
    return spans[0]


def attributes(span: ReadableSpan) -> dict[str, Any]:
    return dict(span.attributes or {})


def common(span: ReadableSpan, operation: str, method: str, store: MemoryStore) -> dict[str, Any]:
    """Check what every span of a successful call has; return its other attributes."""
    found = attributes(span)
    assert span.name == operation
    assert span.status.status_code is StatusCode.UNSET
    in_process = type(store).__module__.startswith(
        ("psych_runtime.memory.inproc", "psych_runtime.memory.sqlite")
    )
    assert span.kind is (SpanKind.INTERNAL if in_process else SpanKind.CLIENT)
    assert found.pop("gen_ai.operation.name") == operation
    assert found.pop("psych_memory.operation") == method
    assert found.pop("psych_memory.store.type") == type(store).__qualname__
    assert "error.type" not in found
    return found


async def operator_capabilities(
    store: MemoryStore, bare: MemoryStore, telemetry: Telemetry, other: Memory
) -> None:
    """Check the spans of each capability the bare store has; ``other`` is u1's one fact."""
    if isinstance(bare, ListsEndUsers):
        assert isinstance(store, ListsEndUsers)
        assert await store.tenants() == ("acme",)
        assert common(only(telemetry), "search_memory", "tenants", bare) == {
            "psych_memory.listed.count": 1
        }
        assert await store.end_users("acme") == ("u1",)
        assert common(only(telemetry), "search_memory", "end_users", bare) == {
            "psych_memory.listed.count": 1
        }
    if isinstance(bare, CountsFacts):
        assert isinstance(store, CountsFacts)
        assert dict(await store.fact_counts("acme")) == {"u1": 1}
        assert common(only(telemetry), "search_memory", "fact_counts", bare) == {
            "psych_memory.listed.count": 1,
            "gen_ai.memory.record.count": 1,
        }
    if isinstance(bare, PagesFacts):
        assert isinstance(store, PagesFacts)
        assert await store.recall_page("acme", "u1", size=5) == (other,)
        assert common(only(telemetry), "search_memory", "recall_page", bare) == {
            "gen_ai.memory.record.count": 1,
            "psych_memory.page.size": 5,
        }
    if isinstance(bare, RestoresFacts):
        assert isinstance(store, RestoresFacts)
        moved = Memory("moved-1", MemoryKey("acme", "u2"), "likes tea", datetime.now(UTC))
        assert await store.restore(moved) is True
        assert common(only(telemetry), "create_memory", "restore", bare) == {
            "gen_ai.memory.record.id": "moved-1",
            "gen_ai.memory.record.count": 1,
            "psych_memory.records.stored": 1,
        }
        again = Memory("moved-2", MemoryKey("acme", "u2"), "likes coffee", datetime.now(UTC))
        assert await store.restore_many([moved, again]) == 1
        assert common(only(telemetry), "create_memory", "restore_many", bare) == {
            "gen_ai.memory.record.count": 1,
            "psych_memory.records.stored": 1,
        }


async def test_each_operation_records_its_documented_span(
    open_bare: StoreOpener, telemetry: Telemetry
) -> None:
    async with open_bare() as bare:
        store = telemetry.instrument(bare)
        fact = await store.remember("acme", "u1", "prefers the Berlin warehouse")
        assert common(only(telemetry), "create_memory", "remember", bare) == {
            "gen_ai.memory.record.id": fact.id,
            "gen_ai.memory.record.count": 1,
        }
        other = await store.remember("acme", "u1", "ships on Fridays")

        telemetry.clear()
        assert await store.recall("acme", "u1") == (fact, other)
        assert common(only(telemetry), "search_memory", "recall", bare) == {
            "gen_ai.memory.record.count": 2
        }
        assert await store.recall("acme", "u1", limit=1) == (fact,)
        assert common(only(telemetry), "search_memory", "recall", bare) == {
            "gen_ai.memory.record.count": 1,
            "psych_memory.recall.limit": 1,
        }

        assert await store.forget("acme", "u1", fact.id) is True
        span = only(telemetry)
        scrub = [event.name for event in span.events]
        assert common(span, "delete_memory", "forget", bare) == {
            "gen_ai.memory.record.id": fact.id,
            "gen_ai.memory.record.count": 1,
            "psych_memory.records.deleted": 1,
        }
        assert scrub == (["psych_memory.scrub.pending"] if hasattr(bare, "scrub") else [])
        assert await store.forget("acme", "u1", fact.id) is False
        span = only(telemetry)
        assert common(span, "delete_memory", "forget", bare) == {
            "gen_ai.memory.record.count": 1,
            "psych_memory.records.deleted": 0,
        }
        # Nothing deleted: no bytes of this call wait for a scrub.
        assert span.events == ()

        await operator_capabilities(store, bare, telemetry, other)

        assert await store.erase("acme", "u1") == 1
        span = only(telemetry)
        # No record id: the conventions' way of saying "every record of the scope".
        assert common(span, "delete_memory", "erase", bare) == {
            "gen_ai.memory.record.count": 1,
            "psych_memory.records.deleted": 1,
        }
        if hasattr(bare, "scrub"):
            assert [event.name for event in span.events] == ["psych_memory.scrub.pending"]
            assert store.scrub_pending is bare.scrub_pending is True  # type: ignore[attr-defined]
            assert await store.scrub() is True  # type: ignore[attr-defined]
            span = only(telemetry)
            assert common(span, "scrub_memory_store", "scrub", bare) == {}
            assert [event.name for event in span.events] == ["psych_memory.scrub.done"]
            assert store.scrub_pending is False  # type: ignore[attr-defined]
        else:
            assert not hasattr(store, "scrub")
            assert not hasattr(store, "scrub_pending")


async def test_a_failed_call_sets_error_type_and_status_and_counts_one_error(
    open_bare: StoreOpener, telemetry: Telemetry
) -> None:
    async with open_bare() as bare:
        store = telemetry.instrument(bare)
        with pytest.raises(InvalidContentError) as raised:
            await store.remember("acme", "u1", "   ")
        with pytest.raises(InvalidContentError) as bare_raised:
            await bare.remember("acme", "u1", "   ")
        assert str(raised.value) == str(bare_raised.value)
        span = only(telemetry)
        assert span.name == "create_memory"
        assert span.status.status_code is StatusCode.ERROR
        error_type = "psych_runtime.memory.port.InvalidContentError"
        assert span.status.description == error_type
        assert attributes(span)["error.type"] == error_type
        assert "gen_ai.memory.record.id" not in attributes(span)

        with pytest.raises(InvalidKeyError):
            await store.recall("acme", " padded ")
        assert attributes(only(telemetry))["error.type"] == (
            "psych_runtime.memory.port.InvalidKeyError"
        )
        with pytest.raises(TypeError):
            await store.erase("acme", 42)  # type: ignore[arg-type]
        assert attributes(only(telemetry))["error.type"] == "TypeError"
        assert await store.recall("acme", "u1") == ()
        telemetry.clear()

        errors = {
            (point.attributes["gen_ai.operation.name"], point.attributes["error.type"]): point.value
            for point in telemetry.points(ERRORS)
        }
        assert errors == {
            ("create_memory", error_type): 1,
            ("search_memory", "psych_runtime.memory.port.InvalidKeyError"): 1,
            ("delete_memory", "TypeError"): 1,
        }
        durations = {
            (
                point.attributes["psych_memory.operation"],
                point.attributes.get("error.type"),
            ): point.count
            for point in telemetry.points(DURATION)
        }
        assert durations == {
            ("remember", error_type): 1,
            ("recall", "psych_runtime.memory.port.InvalidKeyError"): 1,
            ("erase", "TypeError"): 1,
            ("recall", None): 1,
        }

    with pytest.raises(StoreClosedError):
        await store.recall("acme", "u1")
    error = attributes(only(telemetry))["error.type"]
    # The adapter's own subclass, named where its users import it from.
    assert error.endswith("Error")
    assert "._" not in error


async def test_durations_are_measured_per_operation_in_seconds(
    open_bare: StoreOpener, telemetry: Telemetry
) -> None:
    async with open_bare() as bare:
        store = telemetry.instrument(bare, store_id="facts-eu")
        for _ in range(3):
            await store.remember("acme", "u1", "a fact")
        await store.recall("acme", "u1")
        await store.erase("acme", "u1")
    points = {
        point.attributes["psych_memory.operation"]: point for point in telemetry.points(DURATION)
    }
    assert set(points) == {"remember", "recall", "erase"}
    assert points["remember"].count == 3
    for point in points.values():
        assert dict(point.attributes) == {
            "gen_ai.operation.name": point.attributes["gen_ai.operation.name"],
            "psych_memory.operation": point.attributes["psych_memory.operation"],
            "gen_ai.memory.store.id": "facts-eu",
        }
        # Seconds, and boundaries fine enough for calls of microseconds.
        assert 0 < point.sum < 60
        assert point.explicit_bounds[0] <= 0.00001
    assert telemetry.points(ERRORS) == []
    for span in telemetry.spans():
        assert attributes(span)["gen_ai.memory.store.id"] == "facts-eu"


async def test_spans_nest_under_the_callers_current_span(
    open_bare: StoreOpener, telemetry: Telemetry
) -> None:
    tracer = telemetry.tracer_provider.get_tracer("the agent")
    async with open_bare() as bare:
        store = telemetry.instrument(bare)
        with tracer.start_as_current_span("turn") as turn:
            await store.remember("acme", "u1", "a fact")
            with pytest.raises(InvalidKeyError):
                await store.recall("", "u1")
        await store.recall("acme", "u1")
    parent = turn.get_span_context()
    remembered, failed, later = [span for span in telemetry.spans() if span.name != "turn"]
    assert remembered.parent is not None
    assert remembered.parent.span_id == parent.span_id
    assert remembered.context.trace_id == parent.trace_id
    assert failed.parent is not None
    assert failed.parent.span_id == parent.span_id
    # After the call, the caller's span is current again; outside it, a new trace.
    assert later.parent is None
    assert later.context.trace_id != parent.trace_id
