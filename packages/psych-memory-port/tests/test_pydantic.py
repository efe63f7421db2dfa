"""MemoryKey and Memory inside pydantic models, by the port's own rules.

The runtime 0.1 shipped both as pydantic models, and applications hold them
in models of their own (its playground keeps ``facts: list[Memory]`` in a
JSON file and serves facts from FastAPI). These tests pin that the port's
classes validate, serialise and describe themselves for pydantic, that
pydantic accepts exactly what the port accepts, and that the port still
imports without pydantic.
"""

from __future__ import annotations

import json
import subprocess
import sys
from datetime import UTC, datetime, timedelta, timezone
from typing import Any

import jsonschema
import pytest
from hypothesis import given
from hypothesis import strategies as st
from pydantic import BaseModel, ConfigDict, TypeAdapter, ValidationError

from psych_runtime.memory.port import (
    MAX_CONTENT_LENGTH,
    MAX_CREATED_AT,
    MAX_KEY_LENGTH,
    MIN_CREATED_AT,
    InvalidInputError,
    Memory,
    MemoryKey,
    validate_content,
    validate_restored_id,
)

KEY = MemoryKey("acme", "user-1")
FACT = Memory("mem_1", KEY, "prefers tea", datetime(2026, 12, 4, 9, 30, 1, 123456, tzinfo=UTC))
FACTS: TypeAdapter[list[Memory]] = TypeAdapter(list[Memory])
KEYS: TypeAdapter[MemoryKey] = TypeAdapter(MemoryKey)
ONE: TypeAdapter[Memory] = TypeAdapter(Memory)


class MemoryFile(BaseModel):
    """The runtime 0.1 playground's model of its memory file."""

    model_config = ConfigDict(extra="forbid")

    facts: list[Memory] = []


def _raw(**changes: Any) -> dict[str, Any]:
    raw: dict[str, Any] = {
        "id": "mem_1",
        "key": {"tenant": "acme", "end_user_id": "user-1"},
        "content": "prefers tea",
        "created_at": "2026-12-04T09:30:01.123456Z",
    }
    raw.update(changes)
    return raw


def _errors(adapter: TypeAdapter[Any], value: object) -> list[tuple[str, tuple[str | int, ...]]]:
    with pytest.raises(ValidationError) as caught:
        adapter.validate_python(value)
    return [(error["type"], error["loc"]) for error in caught.value.errors()]


def test_the_port_imports_without_pydantic() -> None:
    # A fresh interpreter: this one has imported pydantic for the tests.
    code = (
        "import sys\n"
        "import psych_runtime.memory.port as port\n"
        "port.MemoryKey('acme', 'user'); port.memory_key('acme', 'user')\n"
        "top = {name.split('.')[0] for name in sys.modules}\n"
        "loaded = sorted(top & {'pydantic', 'pydantic_core'})\n"
        "print(loaded)\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True
    )
    assert result.stdout.strip() == "[]"


def test_a_model_holding_facts_round_trips_in_the_runtime_01_shape() -> None:
    document = MemoryFile(facts=[FACT])

    assert document.model_dump() == {
        "facts": [
            {
                "id": "mem_1",
                "key": {"tenant": "acme", "end_user_id": "user-1"},
                "content": "prefers tea",
                "created_at": FACT.created_at,
            }
        ]
    }
    text = document.model_dump_json()
    assert json.loads(text) == {"facts": [_raw()]}
    again = MemoryFile.model_validate_json(text)
    assert again.facts == [FACT]
    assert type(again.facts[0]) is Memory
    assert type(again.facts[0].key) is MemoryKey


def test_instances_pass_as_they_are() -> None:
    assert ONE.validate_python(FACT) is FACT
    assert KEYS.validate_python(KEY) is KEY
    assert MemoryFile(facts=[FACT]).facts[0] is FACT


def test_a_document_written_by_the_runtime_01_reads_back() -> None:
    # As the 0.1 playground wrote it: its ids are 16 hex digits, its times
    # pydantic's rendering of datetime.now(UTC).
    written = (
        '{"facts": [{"id": "0f3a9c2b7d1e4a56", "key": {"tenant": "acct_1", '
        '"end_user_id": "acct_1"}, "content": "likes tea", '
        '"created_at": "2026-11-30T08:00:00.5Z"}]}'
    )

    (fact,) = MemoryFile.model_validate_json(written).facts

    assert fact == Memory(
        "0f3a9c2b7d1e4a56",
        MemoryKey("acct_1", "acct_1"),
        "likes tea",
        datetime(2026, 11, 30, 8, 0, 0, 500000, tzinfo=UTC),
    )


@given(tenant=st.text(max_size=MAX_KEY_LENGTH + 2), end_user_id=st.text(max_size=4))
def test_pydantic_accepts_exactly_the_keys_the_port_accepts(tenant: str, end_user_id: str) -> None:
    try:
        expected: MemoryKey | None = MemoryKey(tenant, end_user_id)
    except InvalidInputError:
        expected = None
    raw = {"tenant": tenant, "end_user_id": end_user_id}
    if expected is None:
        types = {error_type for error_type, _ in _errors(KEYS, raw)}
        assert types == {"invalid_key"}
    else:
        assert KEYS.validate_python(raw) == expected
        assert KEYS.validate_json(json.dumps(raw)) == expected


@given(
    content=st.text(max_size=8)
    | st.text(min_size=MAX_CONTENT_LENGTH, max_size=MAX_CONTENT_LENGTH + 1)
)
def test_pydantic_accepts_exactly_the_content_the_port_accepts(content: str) -> None:
    try:
        validate_content(content)
    except InvalidInputError:
        assert _errors(ONE, _raw(content=content)) == [("invalid_content", ("content",))]
    else:
        assert ONE.validate_python(_raw(content=content)).content == content


@given(memory_id=st.text(max_size=70))
def test_pydantic_accepts_exactly_the_ids_a_restore_accepts(memory_id: str) -> None:
    try:
        validate_restored_id(memory_id)
    except InvalidInputError:
        assert _errors(ONE, _raw(id=memory_id)) == [("invalid_input", ("id",))]
    else:
        assert ONE.validate_python(_raw(id=memory_id)).id == memory_id


def test_a_refusal_names_the_field_and_rule_never_the_value() -> None:
    secret = "x" * (MAX_CONTENT_LENGTH + 1)
    with pytest.raises(ValidationError) as caught:
        MemoryFile.model_validate({"facts": [_raw(content=secret)]})

    (error,) = caught.value.errors(include_input=False)
    assert error["loc"] == ("facts", 0, "content")
    assert error["msg"] == (
        f"content must be at most {MAX_CONTENT_LENGTH} characters (got {MAX_CONTENT_LENGTH + 1})"
    )
    assert error["ctx"] == {"argument": "content", "rule": error["msg"].removeprefix("content ")}


def test_each_broken_field_of_a_key_is_reported_at_its_place() -> None:
    raw = _raw(key={"tenant": "", "end_user_id": " user"})

    assert _errors(ONE, raw) == [
        ("invalid_key", ("key", "tenant")),
        ("invalid_key", ("key", "end_user_id")),
    ]


@pytest.mark.parametrize("value", [3, b"acme", None, ["acme"]])
def test_a_key_part_must_be_a_str_not_something_that_converts(value: object) -> None:
    assert _errors(KEYS, {"tenant": value, "end_user_id": "user"}) == [("string_type", ("tenant",))]


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        ({"tenant": "acme"}, [("missing", ("end_user_id",))]),
        (
            {"tenant": "acme", "end_user_id": "u", "principal": "p"},
            [("extra_forbidden", ("principal",))],
        ),
        ("acme:user", [("dict_type", ())]),
    ],
)
def test_a_key_has_exactly_its_two_fields(raw: object, expected: list[Any]) -> None:
    assert _errors(KEYS, raw) == expected


def test_a_fact_has_exactly_its_four_fields() -> None:
    raw = _raw(pinned=True)
    del raw["created_at"]

    assert sorted(_errors(ONE, raw)) == [
        ("extra_forbidden", ("pinned",)),
        ("missing", ("created_at",)),
    ]


def test_created_at_must_be_timezone_aware_and_is_returned_in_utc() -> None:
    assert _errors(ONE, _raw(created_at="2026-12-04T09:30:01")) == [
        ("invalid_input", ("created_at",))
    ]
    plus_two = datetime(2026, 12, 4, 11, 30, 1, tzinfo=timezone(timedelta(hours=2)))

    created_at = ONE.validate_python(_raw(created_at=plus_two)).created_at

    assert created_at == plus_two
    assert created_at.tzinfo is UTC


@pytest.mark.parametrize(
    "outside", ["0001-01-01T00:00:00+00:01", "9999-12-31T23:59:59.999999-00:01"]
)
def test_created_at_outside_the_range_is_refused(outside: str) -> None:
    assert _errors(ONE, _raw(created_at=outside)) == [("invalid_input", ("created_at",))]


@pytest.mark.parametrize("created_at", [MIN_CREATED_AT, MAX_CREATED_AT])
def test_both_ends_of_the_range_round_trip_to_the_microsecond(created_at: datetime) -> None:
    fact = Memory("mem_1", KEY, "x", created_at)

    assert ONE.validate_json(ONE.dump_json(fact)) == fact


def test_json_schema_names_both_classes_with_the_limits_of_their_fields() -> None:
    schema = MemoryFile.model_json_schema()

    assert schema["properties"]["facts"]["items"] == {"$ref": "#/$defs/Memory"}
    memory, key = schema["$defs"]["Memory"], schema["$defs"]["MemoryKey"]
    assert memory["title"] == "Memory"
    assert memory["required"] == ["id", "key", "content", "created_at"]
    assert memory["additionalProperties"] is False
    assert memory["properties"]["key"] == {"$ref": "#/$defs/MemoryKey"}
    assert memory["properties"]["content"]["maxLength"] == MAX_CONTENT_LENGTH
    assert memory["properties"]["id"]["pattern"] == "^[A-Za-z0-9_-]+$"
    assert memory["properties"]["created_at"]["format"] == "date-time"
    assert key["title"] == "MemoryKey"
    assert key["required"] == ["tenant", "end_user_id"]
    assert key["properties"]["tenant"]["maxLength"] == MAX_KEY_LENGTH
    # A response and a request are described alike (FastAPI then names one
    # schema, not an -Input and an -Output).
    assert MemoryFile.model_json_schema(mode="serialization") == schema


def test_what_is_serialised_matches_the_json_schema() -> None:
    schema = MemoryFile.model_json_schema(mode="serialization")
    latest = Memory("b", KEY, "y", MAX_CREATED_AT)
    document = json.loads(MemoryFile(facts=[FACT, latest]).model_dump_json())

    jsonschema.validate(document, schema)
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate({"facts": [_raw(content="")]}, schema)


def test_keys_are_usable_in_frozen_models_and_sets() -> None:
    class Owner(BaseModel):
        model_config = ConfigDict(frozen=True)

        key: MemoryKey

    first = Owner.model_validate({"key": {"tenant": "acme", "end_user_id": "user-1"}})

    assert first == Owner(key=KEY)
    assert len({first, Owner(key=KEY)}) == 1
