"""OpenTelemetry traces and metrics for any Psych memory store.

`instrument` wraps a store so that each call records one span after the
OpenTelemetry GenAI memory conventions, its duration and, when it fails, an
error count; the store keeps its results, errors and capabilities. Nothing
personal is recorded by default. `MemoryInstrumentor` is what
``opentelemetry-instrument`` loads to do the same for every store opened by
URL.
"""

from ._instrument import instrument
from ._instrumentor import MemoryInstrumentor, instrumented
from ._version import __version__ as __version__

__all__ = ["MemoryInstrumentor", "instrument", "instrumented"]
