"""`instrument`: any store, each of its calls observed as one span and two instruments."""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence, Sized
from contextvars import Token
from datetime import UTC, datetime
from functools import partial
from time import perf_counter
from typing import Any, Final, TypeVar, cast

from opentelemetry import context as otel_context
from opentelemetry import metrics, trace
from opentelemetry.metrics import MeterProvider
from opentelemetry.trace import Span, SpanKind, Status, StatusCode, TracerProvider

from psych_runtime.memory.port import (
    CountsFacts,
    ExpiresFacts,
    InvalidInputError,
    ListsEndUsers,
    Memory,
    MemoryStore,
    PagesFacts,
    RestoresFacts,
    Scope,
    StoreWrapper,
    store_events,
    validate_scope,
    wrap_store,
)

from . import _conventions as names
from ._version import __version__

__all__ = ["instrument"]

_SCOPE_NAME: Final = "psych_runtime.memory.otel"

_T = TypeVar("_T")

# Stores whose calls never leave the process: their spans are INTERNAL, as
# the conventions allow; every other store's are CLIENT.
_IN_PROCESS_MODULES: Final = (
    "psych_runtime.memory.inproc",
    "psych_runtime.memory.store_backed",
    "psych_runtime.memory.sqlite",
)


def instrument(
    store: MemoryStore,
    *,
    tracer_provider: TracerProvider | None = None,
    meter_provider: MeterProvider | None = None,
    store_id: str | None = None,
    capture_tenant: bool | None = None,
) -> MemoryStore:
    """Return a store that behaves exactly like ``store`` and records each of its calls.

    The returned store gives the same results and raises the same errors as
    ``store``, and has the same optional capabilities: it is a
    `ListsEndUsers`, `CountsFacts`, `PagesFacts`, `RestoresFacts` or
    `ExpiresFacts` exactly when ``store`` is, and has ``scrub`` and ``scrub_pending`` exactly when
    ``store`` has them. Entering, leaving and closing it enter, leave and
    close ``store``.

    Each call of a method records one span named after its
    ``gen_ai.operation.name`` (the mapping is on the documentation page),
    a child of the caller's current span, and its duration in the histogram
    ``gen_ai.client.operation.duration``; a call that raises also sets
    ``error.type`` and the span's error status, and adds one to
    ``psych_memory.client.operation.errors``. Record ids and counts are
    recorded; the content of facts only when the environment variable
    ``OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT`` is ``true`` when
    this is called; the end user's id never; the tenant only on opt-in.

    Args:
        store: The store to observe.
        tracer_provider: Where spans go; ``None`` for the global provider
            (none configured: nothing is recorded).
        meter_provider: Where measurements go; ``None`` for the global one.
        store_id: Recorded as ``gen_ai.memory.store.id`` on every span and
            measurement, to tell several stores apart (``None``: not recorded).
        capture_tenant: Record the tenant on every span as
            ``psych_memory.tenant`` (never on measurements). ``None`` reads
            the environment variable ``PSYCH_MEMORY_OTEL_CAPTURE_TENANT``
            (``true`` to record it).

    Raises:
        TypeError: ``store`` is not a `MemoryStore`, ``store_id`` is not
            ``None`` or a `str`, or ``capture_tenant`` is not ``None`` or a
            `bool`.
        InvalidInputError: ``store_id`` is empty.
    """
    if not isinstance(store, MemoryStore):
        raise TypeError(f"store must be a MemoryStore, not {type(store).__qualname__}")
    if store_id is not None:
        if not isinstance(store_id, str):
            raise TypeError(f"store_id must be None or a str, not {type(store_id).__qualname__}")
        if not store_id:
            raise InvalidInputError("store_id", "must not be empty")
    if capture_tenant is not None and not isinstance(capture_tenant, bool):
        raise TypeError(
            f"capture_tenant must be None or a bool, not {type(capture_tenant).__qualname__}"
        )
    telemetry = _Telemetry(
        store,
        tracer_provider=tracer_provider,
        meter_provider=meter_provider,
        store_id=store_id,
        tenant=names.tenant_opted_in() if capture_tenant is None else capture_tenant,
        content=names.content_opted_in(),
    )
    return wrap_store(_Instrumented, store, telemetry)


class _Operation:
    """One method of a store, with the attributes every call of it records."""

    __slots__ = ("failures", "method", "span_attributes", "span_name", "succeeded")

    def __init__(self, method: str, common: Mapping[str, str]) -> None:
        self.method = method
        self.span_name = names.OPERATIONS[method]
        measured = {names.OPERATION_NAME: self.span_name, names.METHOD: method}
        if names.STORE_ID in common:
            measured[names.STORE_ID] = common[names.STORE_ID]
        self.succeeded: Mapping[str, str] = measured
        self.span_attributes: Mapping[str, str] = {**measured, **common}
        self.failures: dict[str, Mapping[str, str]] = {}

    def failed(self, error_type: str) -> Mapping[str, str]:
        attributes = self.failures.get(error_type)
        if attributes is None:
            attributes = {**self.succeeded, names.ERROR_TYPE: error_type}
            self.failures[error_type] = attributes
        return attributes


class _Telemetry:
    """What one `instrument` call records with: tracer, instruments, options."""

    __slots__ = (
        "content",
        "duration",
        "errors",
        "kind",
        "operations",
        "tenant",
        "tracer",
    )

    def __init__(  # noqa: PLR0913
        self,
        store: MemoryStore,
        *,
        tracer_provider: TracerProvider | None,
        meter_provider: MeterProvider | None,
        store_id: str | None,
        tenant: bool,
        content: bool,
    ) -> None:
        self.tracer = trace.get_tracer(_SCOPE_NAME, __version__, tracer_provider)
        meter = metrics.get_meter(_SCOPE_NAME, __version__, meter_provider)
        self.duration = meter.create_histogram(
            names.DURATION,
            unit="s",
            description="Duration of memory store operations.",
            explicit_bucket_boundaries_advisory=list(names.DURATION_BOUNDARIES),
        )
        self.errors = meter.create_counter(
            names.ERRORS,
            unit="{error}",
            description="Memory store operations that ended in an error.",
        )
        module = type(store).__module__
        self.kind = (
            SpanKind.INTERNAL
            if any(module == name or module.startswith(f"{name}.") for name in _IN_PROCESS_MODULES)
            else SpanKind.CLIENT
        )
        common = {names.STORE_TYPE: type(store).__qualname__}
        if store_id is not None:
            common[names.STORE_ID] = store_id
        self.operations = {method: _Operation(method, common) for method in names.OPERATIONS}
        self.tenant = tenant
        self.content = content

    def start(self, method: str, scope: Scope | None = None) -> _Call:
        operation = self.operations[method]
        attributes = operation.span_attributes
        if self.tenant and scope is not None:
            tenant = _tenant(scope)
            if tenant is not None:
                attributes = {**attributes, names.TENANT: tenant}
        span = self.tracer.start_span(operation.span_name, kind=self.kind, attributes=attributes)
        return _Call(self, operation, span)


class _Call:
    """One call in flight: its span, made current, and when it started."""

    __slots__ = ("context", "listening", "operation", "recording", "span", "started", "telemetry")

    def __init__(self, telemetry: _Telemetry, operation: _Operation, span: Span) -> None:
        self.telemetry = telemetry
        self.operation = operation
        self.span = span
        self.recording = span.is_recording()
        # Whatever the store does inside (a driver's own instrumentation, a
        # replay it reports) belongs to this span.
        self.context = otel_context.attach(trace.set_span_in_context(span))
        self.listening: Token[Any] | None = (
            store_events.set(span.add_event) if self.recording else None
        )
        self.started = perf_counter()

    def done(self) -> None:
        elapsed = perf_counter() - self.started
        self._leave()
        self.span.end()
        self.telemetry.duration.record(elapsed, self.operation.succeeded)

    def failed(self, error: BaseException) -> None:
        elapsed = perf_counter() - self.started
        self._leave()
        error_type = _error_type(type(error))
        if self.recording:
            self.span.set_attribute(names.ERROR_TYPE, error_type)
            # The type only: a message may quote what the caller passed.
            self.span.set_status(Status(StatusCode.ERROR, error_type))
        self.span.end()
        attributes = self.operation.failed(error_type)
        self.telemetry.duration.record(elapsed, attributes)
        self.telemetry.errors.add(1, attributes)

    def _leave(self) -> None:
        if self.listening is not None:
            store_events.reset(self.listening)
        otel_context.detach(self.context)


_error_types: dict[type[BaseException], str] = {}


def _error_type(error: type[BaseException]) -> str:
    """The error's class as its users import it: private modules left out."""
    found = _error_types.get(error)
    if found is None:
        parts = error.__module__.split(".")
        public = parts[: _first_private(parts)]
        found = (
            error.__qualname__
            if error.__module__ == "builtins"
            else ".".join([*public, error.__qualname__])
        )
        _error_types[error] = found
    return found


def _first_private(parts: Sequence[str]) -> int:
    for index, part in enumerate(parts):
        if part.startswith("_"):
            return index
    return len(parts)


def _tenant(scope: Scope) -> str | None:
    # Only a tenant the key rules accept: a refused one may be anything.
    try:
        return validate_scope(scope)
    except (TypeError, InvalidInputError):
        return None


def _records(memories: Iterable[Memory]) -> str:
    return json.dumps(
        [{"id": memory.id, "content": memory.content} for memory in memories],
        ensure_ascii=False,
    )


class _Instrumented(StoreWrapper):
    """The four methods, observed; the lifecycle, forwarded."""

    __slots__ = ("_telemetry",)

    def __init__(self, store: MemoryStore, telemetry: _Telemetry) -> None:
        super().__init__(store)
        self._telemetry = telemetry

    def __repr__(self) -> str:
        return f"instrument({self.wrapped!r})"

    async def _observed(
        self,
        method: str,
        scope: Scope | None,
        work: Callable[[], Awaitable[_T]],
        describe: Callable[[Span, _T], None],
    ) -> _T:
        # The store's method is called inside the span: a store may check
        # its arguments before it returns an awaitable.
        call = self._telemetry.start(method, scope)
        try:
            result = await work()
        except BaseException as exc:
            call.failed(exc)
            raise
        if call.recording:
            describe(call.span, result)
        call.done()
        return result

    async def remember(self, scope: Scope, end_user_id: str, content: str) -> Memory:
        content_on = self._telemetry.content

        def describe(span: Span, memory: Memory) -> None:
            span.set_attribute(names.RECORD_ID, memory.id)
            span.set_attribute(names.RECORD_COUNT, 1)
            if content_on:
                span.set_attribute(names.RECORDS, _records((memory,)))

        return await self._observed(
            "remember", scope, lambda: self.wrapped.remember(scope, end_user_id, content), describe
        )

    async def forget(self, scope: Scope, end_user_id: str, memory_id: str) -> bool:
        def describe(span: Span, deleted: bool) -> None:  # noqa: FBT001
            # The id only when it was a fact's: a caller, or a model, may put
            # anything in a forget.
            if deleted:
                span.set_attribute(names.RECORD_ID, memory_id)
            span.set_attribute(names.RECORD_COUNT, 1)
            span.set_attribute(names.DELETED, 1 if deleted else 0)
            if deleted:
                self._scrub_state(span)

        return await self._observed(
            "forget", scope, lambda: self.wrapped.forget(scope, end_user_id, memory_id), describe
        )

    async def recall(
        self, scope: Scope, end_user_id: str, *, limit: int | None = None
    ) -> tuple[Memory, ...]:
        content_on = self._telemetry.content

        def describe(span: Span, memories: tuple[Memory, ...]) -> None:
            span.set_attribute(names.RECORD_COUNT, len(memories))
            if limit is not None:
                span.set_attribute(names.LIMIT, limit)
            if content_on:
                span.set_attribute(names.RECORDS, _records(memories))

        return await self._observed(
            "recall", scope, lambda: self.wrapped.recall(scope, end_user_id, limit=limit), describe
        )

    async def erase(self, scope: Scope, end_user_id: str) -> int:
        def describe(span: Span, deleted: int) -> None:
            # No record id: the conventions' "every record of the scope".
            span.set_attribute(names.RECORD_COUNT, deleted)
            span.set_attribute(names.DELETED, deleted)
            if deleted:
                self._scrub_state(span)

        return await self._observed(
            "erase", scope, lambda: self.wrapped.erase(scope, end_user_id), describe
        )

    def _scrub_state(self, span: Span) -> None:
        # After a deletion, a store that scrubs says whether bytes remain.
        if getattr(self.wrapped, "scrub_pending", False) is True:
            span.add_event(names.SCRUB_PENDING_EVENT)


def _listed(span: Span, found: Sized) -> None:
    span.set_attribute(names.LISTED, len(found))


class _ListsEndUsers(_Instrumented):
    __slots__ = ()

    async def tenants(self) -> tuple[str, ...]:
        store = cast("ListsEndUsers", self.wrapped)
        return await self._observed("tenants", None, store.tenants, _listed)

    async def end_users(self, scope: Scope) -> tuple[str, ...]:
        store = cast("ListsEndUsers", self.wrapped)
        return await self._observed("end_users", scope, lambda: store.end_users(scope), _listed)


def _counted(span: Span, counts: Mapping[str, int]) -> None:
    span.set_attribute(names.LISTED, len(counts))
    span.set_attribute(names.RECORD_COUNT, sum(counts.values()))


class _CountsFacts(_Instrumented):
    __slots__ = ()

    async def fact_counts(self, scope: Scope) -> Mapping[str, int]:
        store = cast("CountsFacts", self.wrapped)
        work = partial(store.fact_counts, scope)
        return await self._observed("fact_counts", scope, work, _counted)


class _PagesFacts(_Instrumented):
    __slots__ = ()

    async def recall_page(
        self, scope: Scope, end_user_id: str, *, after: str | None = None, size: int
    ) -> tuple[Memory, ...]:
        content_on = self._telemetry.content

        def describe(span: Span, page: tuple[Memory, ...]) -> None:
            span.set_attribute(names.RECORD_COUNT, len(page))
            span.set_attribute(names.PAGE_SIZE, size)
            if content_on:
                span.set_attribute(names.RECORDS, _records(page))

        store = cast("PagesFacts", self.wrapped)
        return await self._observed(
            "recall_page",
            scope,
            lambda: store.recall_page(scope, end_user_id, after=after, size=size),
            describe,
        )


def _stored(span: Span, stored: int) -> None:
    span.set_attribute(names.RECORD_COUNT, stored)
    span.set_attribute(names.STORED, stored)


class _RestoresFacts(_Instrumented):
    __slots__ = ()

    async def restore(self, memory: Memory) -> bool:
        content_on = self._telemetry.content

        def describe(span: Span, stored: bool) -> None:  # noqa: FBT001
            span.set_attribute(names.RECORD_ID, memory.id)
            span.set_attribute(names.RECORD_COUNT, 1)
            span.set_attribute(names.STORED, 1 if stored else 0)
            if content_on:
                span.set_attribute(names.RECORDS, _records((memory,)))

        tenant = getattr(getattr(memory, "key", None), "tenant", None)
        store = cast("RestoresFacts", self.wrapped)
        return await self._observed("restore", tenant, lambda: store.restore(memory), describe)

    async def restore_many(self, memories: Iterable[Memory]) -> int:
        # The facts are the store's to read, once: counted from its answer.
        store = cast("RestoresFacts", self.wrapped)
        return await self._observed(
            "restore_many", None, lambda: store.restore_many(memories), _stored
        )


class _ExpiresFacts(_Instrumented):
    __slots__ = ()

    async def count_expired(self, scope: Scope, *, before: datetime) -> int:
        def describe(span: Span, counted: int) -> None:
            span.set_attribute(names.RECORD_COUNT, counted)

        store = cast("ExpiresFacts", self.wrapped)
        return await self._observed(
            "count_expired", scope, lambda: store.count_expired(scope, before=before), describe
        )

    async def expire(self, scope: Scope, *, before: datetime) -> int:
        def describe(span: Span, deleted: int) -> None:
            # The cutoff is an instant, not personal data; no record id, as
            # for an erase: every record of the tenant older than it.
            span.set_attribute(names.RECORD_COUNT, deleted)
            span.set_attribute(names.DELETED, deleted)
            # A store of a third party may have accepted a naive one.
            if before.utcoffset() is not None:
                span.set_attribute(names.CUTOFF, before.astimezone(UTC).isoformat())
            if deleted:
                self._scrub_state(span)

        store = cast("ExpiresFacts", self.wrapped)
        return await self._observed(
            "expire", scope, lambda: store.expire(scope, before=before), describe
        )


def _scrubbed(span: Span, done: bool) -> None:  # noqa: FBT001
    span.add_event(names.SCRUB_DONE_EVENT if done else names.SCRUB_PENDING_EVENT)


class _Scrubs(_Instrumented):
    __slots__ = ()

    async def scrub(self) -> bool:
        work: Callable[[], Awaitable[bool]] = cast("Any", self.wrapped).scrub
        return await self._observed("scrub", None, work, _scrubbed)


class _TellsScrubPending(_Instrumented):
    __slots__ = ()

    @property
    def scrub_pending(self) -> bool:
        """Whether bytes of a fact the store deleted may remain (the store's own answer)."""
        return cast("bool", cast("Any", self.wrapped).scrub_pending)


_Instrumented.capability_mixins = (
    _ListsEndUsers,
    _CountsFacts,
    _PagesFacts,
    _RestoresFacts,
    _ExpiresFacts,
    _Scrubs,
    _TellsScrubPending,
)
