"""What ``opentelemetry-instrument`` loads: every store opened by URL, instrumented."""

from __future__ import annotations

from collections.abc import Collection
from typing import Any

from opentelemetry.metrics import MeterProvider
from opentelemetry.trace import TracerProvider

from psych_runtime.memory.port import MemoryStore

from ._instrument import instrument

__all__ = ["MemoryInstrumentor", "instrumented"]

# The providers of the instrumentor, while it is on; one per process, as
# OpenTelemetry's own instrumentors keep theirs.
_on: list[tuple[TracerProvider | None, MeterProvider | None]] = []


class MemoryInstrumentor:
    """Turns on the instrumentation of every store opened by URL from now on.

    Registered as the ``opentelemetry_instrumentor`` entry point
    ``psych_memory``, so that ``opentelemetry-instrument psych-memory-mcp ...``
    (or ``psych-memory ...``) configures the SDK from the standard ``OTEL_*``
    environment variables and turns this on; an application can call
    ``MemoryInstrumentor().instrument()`` itself. A store the application
    builds directly is instrumented by `instrument`, not by this.
    """

    def instrumentation_dependencies(self) -> Collection[str]:
        """What must be installed for this to work: nothing beyond this distribution."""
        return ()

    @property
    def is_instrumented_by_opentelemetry(self) -> bool:
        """Whether the instrumentation is on."""
        return bool(_on)

    def instrument(self, **kwargs: Any) -> None:
        """Turn it on, with the ``tracer_provider`` and ``meter_provider`` `instrument` takes.

        Turning it on again only replaces the providers.
        """
        _on[:] = [(kwargs.get("tracer_provider"), kwargs.get("meter_provider"))]

    def uninstrument(self, **kwargs: Any) -> None:
        """Turn it off: stores opened from now on are not instrumented."""
        _on.clear()


def instrumented(store: MemoryStore) -> MemoryStore:
    """Return ``store`` instrumented if `MemoryInstrumentor` is on, else ``store`` itself.

    What an opener calls on each store it opens.

    Raises:
        TypeError: ``store`` is not a `MemoryStore` (when on).
    """
    if not _on:
        return store
    ((tracer_provider, meter_provider),) = _on
    return instrument(store, tracer_provider=tracer_provider, meter_provider=meter_provider)
