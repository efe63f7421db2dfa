"""Each provider shape of the tool specs, checked against that provider's official SDK."""

from __future__ import annotations

import json
from typing import Any, get_type_hints

import pydantic
import pytest
from anthropic.types import ToolParam
from anthropic.types.tool_param import InputSchemaTyped
from google.genai import types as genai_types
from openai import pydantic_function_tool
from openai.types.chat import ChatCompletionFunctionToolParam
from openai.types.shared_params import FunctionDefinition

from psych_runtime.tools.builtins import FORGET, REMEMBER, ToolSpec

SPECS = (REMEMBER, FORGET)


def keys_of(typed_dict: Any) -> set[str]:
    return set(get_type_hints(typed_dict))


# TypedDicts let unknown keys through by default; a key the SDK does not know
# is one the API may refuse, so these strict variants make it fail here.
FORBID = pydantic.ConfigDict(extra="forbid")


@pydantic.with_config(FORBID)
class StrictToolParam(ToolParam):
    pass


@pydantic.with_config(FORBID)
class StrictFunctionToolParam(ChatCompletionFunctionToolParam):
    pass


@pydantic.with_config(FORBID)
class StrictFunctionDefinition(FunctionDefinition):
    pass


@pytest.mark.parametrize("spec", SPECS, ids=lambda spec: spec.name)
def test_anthropic_shape_is_a_valid_tool_param(spec: ToolSpec) -> None:
    shape = spec.as_anthropic()
    assert set(shape) <= keys_of(ToolParam)
    pydantic.TypeAdapter(StrictToolParam).validate_python(shape)
    assert shape["input_schema"]["type"] == "object"
    assert set(shape["input_schema"]) <= keys_of(InputSchemaTyped) | {"additionalProperties"}


@pytest.mark.parametrize("spec", SPECS, ids=lambda spec: spec.name)
def test_openai_shape_is_a_valid_strict_function_tool(spec: ToolSpec) -> None:
    shape = spec.as_openai()
    assert set(shape) <= keys_of(ChatCompletionFunctionToolParam)
    assert set(shape["function"]) <= keys_of(FunctionDefinition)
    pydantic.TypeAdapter(StrictFunctionToolParam).validate_python(shape)


class Remember(pydantic.BaseModel):
    content: str = pydantic.Field(description="The fact.")


def keywords(schema: Any) -> set[str]:
    if not isinstance(schema, dict):
        return set()
    found = set(schema)
    for sub in schema.get("properties", {}).values():
        found |= keywords(sub)
    return found


@pytest.mark.parametrize("spec", SPECS, ids=lambda spec: spec.name)
def test_openai_parameters_use_only_keywords_the_sdks_strict_helper_emits(spec: ToolSpec) -> None:
    # The SDK's own strict-mode helper is the reference for what strict mode takes.
    reference = pydantic_function_tool(Remember, name="remember", description="d")
    allowed = keywords(reference["function"]["parameters"])
    assert keywords(spec.as_openai()["function"]["parameters"]) <= allowed
    assert reference["function"]["strict"] is spec.as_openai()["function"]["strict"]


@pytest.mark.parametrize("spec", SPECS, ids=lambda spec: spec.name)
def test_gemini_shape_is_a_valid_function_declaration(spec: ToolSpec) -> None:
    shape = spec.as_gemini()
    declaration = genai_types.FunctionDeclaration.model_validate(shape)
    assert declaration.name == spec.name
    assert declaration.parameters is not None
    assert declaration.parameters.type == genai_types.Type.OBJECT
    assert declaration.parameters.required == spec.input_schema["required"]
    assert declaration.parameters.properties is not None
    assert set(declaration.parameters.properties) == set(spec.input_schema["properties"])
    # Nothing was dropped on the way in: the SDK kept every field we sent.
    dumped = declaration.model_dump(mode="json", by_alias=True, exclude_none=True)
    assert json.loads(json.dumps(dumped)) == shape


def test_gemini_keeps_the_content_length_limit() -> None:
    declaration = genai_types.FunctionDeclaration.model_validate(REMEMBER.as_gemini())
    assert declaration.parameters is not None
    assert declaration.parameters.properties is not None
    content = declaration.parameters.properties["content"]
    limits = REMEMBER.input_schema["properties"]["content"]
    assert (content.min_length, content.max_length) == (limits["minLength"], limits["maxLength"])


def test_the_sdk_checks_would_catch_an_unknown_field() -> None:
    # The checks above have teeth: each SDK refuses a field it does not know.
    with pytest.raises(pydantic.ValidationError):
        genai_types.FunctionDeclaration.model_validate({**REMEMBER.as_gemini(), "strict": True})
    with pytest.raises(pydantic.ValidationError):
        pydantic.TypeAdapter(StrictFunctionDefinition).validate_python(
            {**REMEMBER.as_openai()["function"], "input_schema": {}}
        )
    pydantic.TypeAdapter(StrictFunctionDefinition).validate_python(REMEMBER.as_openai()["function"])
    with pytest.raises(pydantic.ValidationError):
        pydantic.TypeAdapter(StrictToolParam).validate_python(
            {**REMEMBER.as_anthropic(), "parameters": {}}
        )
    with pytest.raises(pydantic.ValidationError):
        pydantic.TypeAdapter(StrictFunctionToolParam).validate_python(
            {**REMEMBER.as_openai(), "strict": True}
        )
    pydantic.TypeAdapter(StrictToolParam).validate_python(REMEMBER.as_anthropic())
