"""OpenTelemetry traces and metrics for any Psych memory store.

`instrument` wraps a store so that each call records one span after the
OpenTelemetry GenAI memory conventions, a duration and, when it fails, an
error count. Nothing personal is recorded by default.
"""

from ._version import __version__ as __version__

__all__: list[str] = []
