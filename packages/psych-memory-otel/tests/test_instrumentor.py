"""What ``opentelemetry-instrument`` loads turns the instrumentation of opened stores on and off."""

from __future__ import annotations

import importlib.metadata
from collections.abc import Iterator
from typing import TYPE_CHECKING

import pytest

from psych_runtime.memory.admin import open_memory
from psych_runtime.memory.inproc import InProcessMemory
from psych_runtime.memory.otel import MemoryInstrumentor, instrumented
from psych_runtime.memory.port import ListsEndUsers

if TYPE_CHECKING:
    from conftest import Telemetry


def is_on() -> bool:
    return MemoryInstrumentor().is_instrumented_by_opentelemetry


@pytest.fixture
def instrumentor() -> Iterator[MemoryInstrumentor]:
    found = MemoryInstrumentor()
    yield found
    found.uninstrument()


@pytest.mark.anyio
async def test_loaded_as_opentelemetry_instrument_loads_it(
    instrumentor: MemoryInstrumentor, telemetry: Telemetry
) -> None:
    bare = InProcessMemory()
    assert instrumented(bare) is bare
    assert not is_on()
    (entry_point,) = importlib.metadata.entry_points(
        group="opentelemetry_instrumentor", name="psych_memory"
    )
    # What the OpenTelemetry distro does with each instrumentor it finds.
    loaded = entry_point.load()()
    assert loaded.instrumentation_dependencies() == ()
    loaded.instrument(
        tracer_provider=telemetry.tracer_provider, meter_provider=telemetry.meter_provider
    )
    assert is_on()
    store = instrumented(bare)
    assert store is not bare
    await store.remember("acme", "u1", "a fact")
    assert [span.name for span in telemetry.spans()] == ["create_memory"]
    assert telemetry.points("gen_ai.client.operation.duration") != []

    loaded.uninstrument()
    assert not is_on()
    assert instrumented(bare) is bare


def test_instrumenting_again_replaces_the_providers(
    instrumentor: MemoryInstrumentor, telemetry: Telemetry
) -> None:
    instrumentor.instrument()
    instrumentor.instrument(tracer_provider=telemetry.tracer_provider)
    assert is_on()
    with pytest.raises(TypeError, match="store must be a MemoryStore"):
        instrumented("memory:")  # type: ignore[arg-type]


@pytest.mark.anyio
async def test_stores_opened_by_url_are_instrumented_while_it_is_on(
    instrumentor: MemoryInstrumentor, telemetry: Telemetry
) -> None:
    async with open_memory("memory:") as store:
        assert isinstance(store, InProcessMemory)
    instrumentor.instrument(
        tracer_provider=telemetry.tracer_provider, meter_provider=telemetry.meter_provider
    )
    async with open_memory("memory:") as store:
        assert not isinstance(store, InProcessMemory)
        assert isinstance(store, ListsEndUsers)
        await store.remember("acme", "u1", "a fact")
    assert [span.name for span in telemetry.spans()] == ["create_memory"]
