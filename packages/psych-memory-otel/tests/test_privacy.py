"""Personal data stays out of spans, metrics and logs unless the user opts in."""

from __future__ import annotations

import json
import logging
from typing import TYPE_CHECKING

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from psych_runtime.memory.inproc import InProcessMemory
from psych_runtime.memory.port import (
    CountsFacts,
    InvalidInputError,
    ListsEndUsers,
    MemoryStore,
)

if TYPE_CHECKING:
    from conftest import StoreOpener, Telemetry

pytestmark = pytest.mark.anyio

# Values distinctive enough that finding one in a text is no accident: a
# fixed marker and any text the key and content rules accept.
_text = st.text(
    alphabet=st.characters(codec="utf-8", categories=["L", "N", "P", "S", "Zs"]),
    max_size=30,
).map(str.strip)
tenants = _text.map(lambda text: f"TENANT-{text}".strip())
end_users = _text.map(lambda text: f"ENDUSER-{text}".strip())
contents = _text.map(lambda text: f"CONTENT {text}\nsecond line\twith a tab")
CONTENT_VARIABLE = "OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT"
TENANT_VARIABLE = "PSYCH_MEMORY_OTEL_CAPTURE_TENANT"


async def every_operation(store: MemoryStore, tenant: str, user: str, content: str) -> None:
    """Each operation, with and without an error, on the key (tenant, user)."""
    fact = await store.remember(tenant, user, content)
    await store.remember(tenant, f"{user}-2", content)
    await store.recall(tenant, user)
    await store.recall(tenant, user, limit=1)
    assert await store.forget(tenant, user, fact.id)
    # What a model might send as an id: content, the tenant, the end user.
    for wrong in (content, tenant, user):
        assert not await store.forget(tenant, user, wrong)
    for refused in (
        store.remember(tenant, user, f"{content}\x00"),
        store.remember(f" {tenant}", user, content),
        store.recall(tenant, f"{user}\x07"),
    ):
        with pytest.raises(InvalidInputError):
            await refused
    if isinstance(store, ListsEndUsers):
        await store.tenants()
        await store.end_users(tenant)
    if isinstance(store, CountsFacts):
        await store.fact_counts(tenant)
    await store.erase(tenant, user)
    await store.erase(tenant, f"{user}-2")


def leaked(texts: list[str], *values: str) -> list[str]:
    """The texts holding one of the values, as it is or as JSON writes it."""
    forms = set(values) | {json.dumps(value, ensure_ascii=False)[1:-1] for value in values}
    return [text for text in texts for form in forms if form in text]


@settings(suppress_health_check=[HealthCheck.function_scoped_fixture], max_examples=60)
@given(tenant=tenants, user=end_users, content=contents)
async def test_no_content_end_user_or_tenant_is_recorded_by_default(
    *,
    anyio_backend: str,
    make_telemetry: type[Telemetry],
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
    tenant: str,
    user: str,
    content: str,
) -> None:
    monkeypatch.delenv(CONTENT_VARIABLE, raising=False)
    monkeypatch.delenv(TENANT_VARIABLE, raising=False)
    caplog.clear()
    telemetry = make_telemetry()
    with caplog.at_level(logging.DEBUG):
        await every_operation(telemetry.instrument(InProcessMemory()), tenant, user, content)
    texts = telemetry.texts()
    assert "create_memory" in texts  # something was recorded
    assert leaked(texts, tenant, user, content, content.splitlines()[0]) == []
    assert leaked([record.getMessage() for record in caplog.records], tenant, user, content) == []


@settings(suppress_health_check=[HealthCheck.function_scoped_fixture], max_examples=30)
@given(tenant=tenants, user=end_users, content=contents)
async def test_content_and_tenant_appear_only_when_opted_in_and_the_end_user_never(
    *,
    anyio_backend: str,
    make_telemetry: type[Telemetry],
    monkeypatch: pytest.MonkeyPatch,
    tenant: str,
    user: str,
    content: str,
) -> None:
    monkeypatch.setenv(CONTENT_VARIABLE, "true")
    monkeypatch.setenv(TENANT_VARIABLE, "true")
    telemetry = make_telemetry()
    await every_operation(telemetry.instrument(InProcessMemory()), tenant, user, content)
    spans = [span for span in telemetry.spans() if "error.type" not in (span.attributes or {})]
    remembered = [span for span in spans if span.name == "create_memory"]
    recalled = [span for span in spans if span.name == "search_memory"]
    assert remembered
    for span in remembered + recalled[:2]:
        attributes = dict(span.attributes or {})
        records = json.loads(str(attributes["gen_ai.memory.records"]))
        assert content in [record["content"] for record in records]
        assert attributes["psych_memory.tenant"] == tenant
    # Measurements never carry the tenant, whatever the opt-in.
    for name in ("gen_ai.client.operation.duration", "psych_memory.client.operation.errors"):
        for point in telemetry.points(name):
            assert tenant not in dict(point.attributes).values()
    assert leaked(telemetry.texts(), user) == []


async def test_each_adapter_records_nothing_personal_by_default(
    open_bare: StoreOpener,
    telemetry: Telemetry,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    monkeypatch.delenv(CONTENT_VARIABLE, raising=False)
    monkeypatch.delenv(TENANT_VARIABLE, raising=False)
    tenant, user, content = "TENANT-Zoë", "ENDUSER-42", "CONTENT prefers the Berlin warehouse"
    with caplog.at_level(logging.DEBUG):
        async with open_bare() as bare:
            store = telemetry.instrument(bare)
            await every_operation(store, tenant, user, content)
            scrub = getattr(store, "scrub", None)
            if scrub is not None:
                await scrub()
    assert len(telemetry.spans()) > 10
    assert leaked(telemetry.texts(), tenant, user, content) == []
    assert leaked([record.getMessage() for record in caplog.records], tenant, user, content) == []


@pytest.mark.parametrize("value", ["", "false", "0", "no", "yes", "1"])
async def test_content_stays_out_unless_the_variable_says_true(
    telemetry: Telemetry, monkeypatch: pytest.MonkeyPatch, value: str
) -> None:
    monkeypatch.setenv(CONTENT_VARIABLE, value)
    monkeypatch.setenv(TENANT_VARIABLE, value)
    store = telemetry.instrument(InProcessMemory())
    await store.remember("acme", "u1", "CONTENT a fact")
    await store.recall("acme", "u1")
    assert leaked(telemetry.texts(), "CONTENT", "acme") == []


@pytest.mark.parametrize("value", ["true", "TRUE", " True ", "span_only", "SPAN_AND_EVENT"])
async def test_content_is_recorded_for_each_spelling_of_the_opt_in(
    telemetry: Telemetry, monkeypatch: pytest.MonkeyPatch, value: str
) -> None:
    monkeypatch.setenv(CONTENT_VARIABLE, value)
    store = telemetry.instrument(InProcessMemory())
    fact = await store.remember("acme", "u1", "CONTENT a fact")
    await store.recall("acme", "u1")
    for span in telemetry.spans():
        records = dict(span.attributes or {})["gen_ai.memory.records"]
        assert records == f'[{{"id": "{fact.id}", "content": "CONTENT a fact"}}]'


async def test_the_tenant_is_recorded_when_the_keyword_asks_whatever_the_environment(
    telemetry: Telemetry, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(TENANT_VARIABLE, "true")
    quiet = telemetry.instrument(InProcessMemory(), capture_tenant=False)
    await quiet.remember("acme", "u1", "a fact")
    assert leaked(telemetry.texts(), "acme") == []
    monkeypatch.delenv(TENANT_VARIABLE)
    told = telemetry.instrument(InProcessMemory(), capture_tenant=True)
    await told.remember("acme", "u1", "a fact")
    # A refused tenant is not recorded: it may be anything.
    with pytest.raises(InvalidInputError):
        await told.recall(" acme", "u1")
    tenants = [dict(span.attributes or {}).get("psych_memory.tenant") for span in telemetry.spans()]
    assert tenants == [None, "acme", None]
