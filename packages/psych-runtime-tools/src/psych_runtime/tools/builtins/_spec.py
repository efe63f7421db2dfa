"""What a model is told about a tool, and what it is told back."""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Final, final

__all__ = ["ToolResult", "ToolSpec"]

# Keywords OpenAI's strict mode refuses; the limits they carry are enforced
# by `MemoryTools.call` anyway.
_NOT_IN_OPENAI_STRICT: Final = frozenset({"minLength", "maxLength"})
# The Gemini Developer API's `parameters` is an OpenAPI-style schema with
# upper-case type names and no `additionalProperties`.
_NOT_IN_GEMINI: Final = frozenset({"additionalProperties"})


@final
class ToolSpec:
    """One tool as a model sees it: its name, when to use it, its arguments.

    ``input_schema`` is a JSON Schema (draft 2020-12) object schema. The
    memory tools' schemas are closed (``additionalProperties: false``) and
    keep to the keywords that Anthropic, OpenAI (strict mode) and Google Gen
    AI all accept once each provider's shape drops the few it refuses.

    A spec is immutable: it keeps its own copy of the schema, and every read
    of `input_schema` and every ``as_*`` call returns a fresh plain
    dictionary that the caller may change freely.

    Args:
        name: The tool's name, as the model will call it.
        description: When and how a model should use the tool.
        input_schema: The JSON Schema of the tool's arguments.

    Raises:
        TypeError: ``name`` or ``description`` is not a `str`, or
            ``input_schema`` is not a JSON object made of JSON data.
    """

    __slots__ = ("_description", "_name", "_schema")

    def __init__(self, name: str, description: str, input_schema: Mapping[str, Any]) -> None:
        if not isinstance(name, str):
            raise TypeError(f"name must be a str, not {type(name).__qualname__}")
        if not isinstance(description, str):
            raise TypeError(f"description must be a str, not {type(description).__qualname__}")
        if not isinstance(input_schema, Mapping):
            raise TypeError(
                f"input_schema must be a mapping, not {type(input_schema).__qualname__}"
            )
        self._name = name
        self._description = description
        # Kept as JSON text: a private, deep and immutable copy in one step,
        # which also proves the schema is plain JSON data.
        try:
            self._schema = json.dumps(dict(input_schema), allow_nan=False)
        except (TypeError, ValueError):
            raise TypeError("input_schema must contain only JSON data") from None

    @property
    def name(self) -> str:
        """The tool's name, as the model calls it."""
        return self._name

    @property
    def description(self) -> str:
        """When and how a model should use the tool."""
        return self._description

    @property
    def input_schema(self) -> dict[str, Any]:
        """The JSON Schema of the arguments, as a fresh dictionary."""
        schema: dict[str, Any] = json.loads(self._schema)
        return schema

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, ToolSpec):
            return NotImplemented
        return (self._name, self._description, self._schema) == (
            other._name,
            other._description,
            other._schema,
        )

    def __hash__(self) -> int:
        return hash((self._name, self._description, self._schema))

    def __repr__(self) -> str:
        return f"ToolSpec(name={self._name!r})"

    def as_anthropic(self) -> dict[str, Any]:
        """Return the tool as an entry of the Anthropic Messages API ``tools``.

        Returns:
            ``{"name", "description", "input_schema"}``, the schema unchanged.
        """
        return {
            "name": self.name,
            "description": self.description,
            "input_schema": self.input_schema,
        }

    def as_openai(self) -> dict[str, Any]:
        """Return the tool as an OpenAI Chat Completions function tool in strict mode.

        Strict mode requires every property to be listed in ``required`` and
        ``additionalProperties: false`` (both already true of these schemas)
        and refuses the length keywords, which are left out here.

        Returns:
            ``{"type": "function", "function": {"name", "description",
            "parameters", "strict": True}}``.
        """
        return {
            "type": "function",
            "function": {
                "name": self.name,
                "description": self.description,
                "parameters": _strip(self.input_schema, _NOT_IN_OPENAI_STRICT),
                "strict": True,
            },
        }

    def as_gemini(self) -> dict[str, Any]:
        """Return the tool as a Google Gen AI function declaration.

        The ``parameters`` schema is the OpenAPI subset the Gemini API takes:
        type names in upper case, and no ``additionalProperties``.

        Returns:
            ``{"name", "description", "parameters"}``, ready for
            ``types.FunctionDeclaration`` or the REST API.
        """
        return {
            "name": self.name,
            "description": self.description,
            "parameters": _upper_types(_strip(self.input_schema, _NOT_IN_GEMINI)),
        }


@dataclass(frozen=True, slots=True)
class ToolResult:
    """What a tool call gives back to the model.

    Attributes:
        content: Compact JSON text for the model to read: the outcome, or
            for an error what was wrong and how to fix the call.
        is_error: ``True`` when the call was refused and nothing changed.
            Providers that have an error flag (Anthropic's ``is_error``)
            should be given it.
    """

    content: str
    is_error: bool


def _strip(schema: Any, keywords: frozenset[str]) -> Any:
    # Object schemas and their properties are walked (the only nesting these
    # tools use); a property that happens to share a keyword's name is kept.
    if not isinstance(schema, dict):
        return schema
    out: dict[str, Any] = {}
    for key, value in schema.items():
        if key in keywords:
            continue
        if key == "properties":
            out[key] = {name: _strip(sub, keywords) for name, sub in value.items()}
        else:
            out[key] = value
    return out


def _upper_types(schema: Any) -> Any:
    if not isinstance(schema, dict):
        return schema
    out = dict(schema)
    if isinstance(out.get("type"), str):
        out["type"] = out["type"].upper()
    if "properties" in out:
        out["properties"] = {name: _upper_types(sub) for name, sub in out["properties"].items()}
    return out
