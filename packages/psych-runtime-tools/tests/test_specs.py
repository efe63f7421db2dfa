"""The tool specs: valid JSON Schema 2020-12, closed, and free of the key."""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping
from typing import Any

import pytest
from jsonschema import Draft202012Validator

from psych_runtime.memory.inproc import InProcessMemory
from psych_runtime.memory.port import MAX_CONTENT_LENGTH, InvalidKeyError, memory_key
from psych_runtime.tools.builtins import (
    DEFAULT_MAX_FACT_LENGTH,
    FORGET,
    REMEMBER,
    MemoryTools,
    NoEndUserError,
    ToolLimits,
    ToolSpec,
    memory_tool_specs,
    memory_tools,
    run_key,
)

SPECS = (REMEMBER, FORGET)
# The subset of JSON Schema every provider accepts for these tools.
PORTABLE_KEYWORDS = {
    "type",
    "properties",
    "required",
    "additionalProperties",
    "description",
    "minLength",
    "maxLength",
}


def schemas(schema: Mapping[str, Any]) -> Iterator[Mapping[str, Any]]:
    yield schema
    for sub in schema.get("properties", {}).values():
        yield from schemas(sub)


def test_specs_are_remember_then_forget() -> None:
    tools = memory_tools(InProcessMemory(), scope="acme", end_user_id="u1")
    assert tools.specs == (REMEMBER, FORGET)
    assert [spec.name for spec in tools.specs] == ["remember", "forget"]


@pytest.mark.parametrize("spec", SPECS, ids=lambda spec: spec.name)
def test_schema_is_valid_json_schema_2020_12(spec: ToolSpec) -> None:
    Draft202012Validator.check_schema(spec.input_schema)
    # The schema survives a JSON round trip: it is plain data.
    assert (
        json.loads(json.dumps(spec.as_anthropic()["input_schema"]))
        == spec.as_anthropic()["input_schema"]
    )


@pytest.mark.parametrize("spec", SPECS, ids=lambda spec: spec.name)
def test_schema_is_a_closed_object_with_every_property_required(spec: ToolSpec) -> None:
    schema = spec.input_schema
    assert schema["type"] == "object"
    assert schema["additionalProperties"] is False
    assert sorted(schema["required"]) == sorted(schema["properties"])


@pytest.mark.parametrize("spec", SPECS, ids=lambda spec: spec.name)
def test_schema_keeps_to_the_portable_subset(spec: ToolSpec) -> None:
    for schema in schemas(spec.input_schema):
        assert set(schema) <= PORTABLE_KEYWORDS, set(schema) - PORTABLE_KEYWORDS
        # Every schema names its type: an untyped enum broke one provider.
        assert isinstance(schema["type"], str)


@pytest.mark.parametrize("spec", SPECS, ids=lambda spec: spec.name)
def test_schema_never_mentions_the_key(spec: ToolSpec) -> None:
    text = json.dumps(spec.input_schema).lower()
    for word in ("tenant", "end_user", "user_id", "scope"):
        assert word not in text, word


def test_schema_arguments() -> None:
    assert list(REMEMBER.input_schema["properties"]) == ["content"]
    assert list(FORGET.input_schema["properties"]) == ["memory_id"]


def test_remember_content_carries_the_bound_length_limit() -> None:
    content = REMEMBER.input_schema["properties"]["content"]
    assert content == {
        "type": "string",
        "description": content["description"],
        "minLength": 1,
        "maxLength": DEFAULT_MAX_FACT_LENGTH,
    }
    assert f"at most {DEFAULT_MAX_FACT_LENGTH} characters" in REMEMBER.description
    validator = Draft202012Validator(REMEMBER.input_schema)
    assert validator.is_valid({"content": "x" * DEFAULT_MAX_FACT_LENGTH})
    assert not validator.is_valid({"content": "x" * (DEFAULT_MAX_FACT_LENGTH + 1)})
    assert not validator.is_valid({"content": ""})
    assert not validator.is_valid({"content": "x", "end_user_id": "u2"})


@pytest.mark.parametrize(("bound", "stated"), [(120, 120), (None, MAX_CONTENT_LENGTH)])
def test_tools_bound_with_another_length_state_it_to_the_model(
    bound: int | None, stated: int
) -> None:
    tools = memory_tools(InProcessMemory(), scope="a", end_user_id="u", max_fact_length=bound)
    remember, forget = tools.specs
    assert forget == FORGET
    assert remember.name == "remember"
    assert remember.input_schema["properties"]["content"]["maxLength"] == stated
    assert f"at most {stated} characters" in remember.description
    assert remember.input_schema["additionalProperties"] is False
    default = memory_tools(InProcessMemory(), scope="a", end_user_id="u")
    assert default.specs[0] is REMEMBER


def test_descriptions_say_when_to_use_each_tool() -> None:
    remember = REMEMBER.description.lower()
    assert "durable" in remember
    assert "small talk" in remember
    assert "full" in remember
    assert "forget an outdated fact" in remember
    forget = FORGET.description.lower()
    assert "id" in forget
    assert "prompt" in forget


def test_spec_schema_cannot_be_changed_through_the_spec_or_its_source() -> None:
    source: dict[str, Any] = {
        "type": "object",
        "properties": {"a": {"type": "string"}},
        "required": ["a"],
    }
    spec = ToolSpec("t", "d", source)
    source["properties"]["a"]["type"] = "integer"
    assert spec.input_schema["properties"]["a"]["type"] == "string"
    spec.input_schema["properties"]["a"]["type"] = "integer"
    assert spec.input_schema["properties"]["a"]["type"] == "string"
    for shape in (spec.as_anthropic()["input_schema"], spec.as_gemini()["parameters"]):
        shape["properties"]["a"]["type"] = "integer"
    assert spec.as_anthropic()["input_schema"]["properties"]["a"]["type"] == "string"
    with pytest.raises(AttributeError):
        spec.name = "other"  # type: ignore[misc]


def test_spec_equality_hash_and_repr() -> None:
    schema = {"type": "object"}
    assert ToolSpec("t", "d", schema) == ToolSpec("t", "d", dict(schema))
    assert hash(ToolSpec("t", "d", schema)) == hash(ToolSpec("t", "d", dict(schema)))
    assert ToolSpec("t", "d", schema) != ToolSpec("t", "other", schema)
    assert ToolSpec("t", "d", schema) != "t"
    assert repr(REMEMBER) == "ToolSpec(name='remember')"


@pytest.mark.parametrize(
    ("args", "argument"),
    [
        ((1, "d", {}), "name"),
        (("t", None, {}), "description"),
        (("t", "d", [("type", "object")]), "input_schema"),
        (("t", "d", {"type": {1, 2}}), "input_schema"),
        (("t", "d", {"maximum": float("nan")}), "input_schema"),
    ],
)
def test_spec_refuses_non_json_input(args: tuple[Any, Any, Any], argument: str) -> None:
    with pytest.raises(TypeError, match=argument):
        ToolSpec(*args)


def test_anthropic_shape() -> None:
    assert REMEMBER.as_anthropic() == {
        "name": "remember",
        "description": REMEMBER.description,
        "input_schema": REMEMBER.input_schema,
    }


@pytest.mark.parametrize("spec", SPECS, ids=lambda spec: spec.name)
def test_openai_shape_is_strict_and_has_no_length_keywords(spec: ToolSpec) -> None:
    shape = spec.as_openai()
    assert set(shape) == {"type", "function"}
    assert shape["type"] == "function"
    function = shape["function"]
    assert set(function) == {"name", "description", "parameters", "strict"}
    assert function["strict"] is True
    assert function["name"] == spec.name
    parameters = function["parameters"]
    Draft202012Validator.check_schema(parameters)
    for schema in schemas(parameters):
        assert "minLength" not in schema
        assert "maxLength" not in schema
        if schema["type"] == "object":
            assert schema["additionalProperties"] is False
            assert sorted(schema["required"]) == sorted(schema["properties"])


@pytest.mark.parametrize("spec", SPECS, ids=lambda spec: spec.name)
def test_gemini_shape_has_upper_case_types_and_no_additional_properties(spec: ToolSpec) -> None:
    shape = spec.as_gemini()
    assert set(shape) == {"name", "description", "parameters"}
    for schema in schemas(shape["parameters"]):
        assert "additionalProperties" not in schema
        assert schema["type"] in {"OBJECT", "STRING"}
    assert shape["parameters"]["required"] == list(spec.input_schema["required"])


def test_shapes_keep_a_property_named_like_a_dropped_keyword() -> None:
    spec = ToolSpec(
        "t",
        "d",
        {
            "type": "object",
            "properties": {"maxLength": {"type": "string", "maxLength": 3}},
            "required": ["maxLength"],
            "additionalProperties": False,
        },
    )
    assert spec.as_openai()["function"]["parameters"]["properties"] == {
        "maxLength": {"type": "string"}
    }
    assert spec.as_gemini()["parameters"]["properties"] == {
        "maxLength": {"type": "STRING", "maxLength": 3}
    }


def test_shapes_leave_what_they_do_not_understand_unchanged() -> None:
    # Boolean schemas and type lists are valid JSON Schema; the shapes pass
    # them through rather than guess (the memory tools use neither).
    spec = ToolSpec(
        "t",
        "d",
        {"type": "object", "properties": {"any": True, "n": {"type": ["string", "null"]}}},
    )
    properties = {"any": True, "n": {"type": ["string", "null"]}}
    assert spec.as_openai()["function"]["parameters"]["properties"] == properties
    assert spec.as_gemini()["parameters"]["properties"] == properties


def test_memory_tool_specs_are_the_bound_tools_specs() -> None:
    store = InProcessMemory()
    for limits in (ToolLimits(), ToolLimits(max_fact_length=80), ToolLimits(max_fact_length=None)):
        bound = MemoryTools(store, memory_key("acme", "u1"), limits=limits)
        assert memory_tool_specs(limits) == bound.specs
    assert memory_tool_specs() == (REMEMBER, FORGET)
    assert (
        "at most 80 characters" in memory_tool_specs(ToolLimits(max_fact_length=80))[0].description
    )


def test_memory_tool_specs_refuses_what_is_not_limits() -> None:
    with pytest.raises(TypeError, match="limits must be a ToolLimits"):
        memory_tool_specs({"max_facts": 3})  # type: ignore[arg-type]


def test_run_key_reads_a_pair_and_refuses_a_run_without_an_end_user() -> None:
    assert run_key(("acme", "u-1"), source="deps") == memory_key("acme", "u-1")
    with pytest.raises(NoEndUserError, match=r"identity\(context\) gave None"):
        run_key(("acme", None), source="context")
    with pytest.raises(TypeError, match="pair, not list"):
        run_key(["acme", "u-1"], source="deps")
    with pytest.raises(InvalidKeyError):
        run_key(("acme", ""), source="deps")
