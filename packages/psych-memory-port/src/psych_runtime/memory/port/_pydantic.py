"""How pydantic validates, serialises and describes `MemoryKey` and `Memory`.

Imported only from the classes' ``__get_pydantic_core_schema__`` hooks, which
pydantic alone calls: the port itself never imports pydantic, and works
without it installed.

Validation applies the port's own rules, through the port's own functions,
so a key or fact that pydantic accepts is one the port would accept:
`validate_key_part` for each half of a key, `validate_restored_id` for an id,
`validate_content` for the text, and a timezone-aware ``created_at`` within
`MIN_CREATED_AT` to `MAX_CREATED_AT`, returned in UTC. A refusal becomes a
pydantic error at the field it concerns, typed ``invalid_key``,
``invalid_content`` or ``invalid_input``, whose message is the port's (it
names the field and the rule, never the value).

Serialised, both have the shape the runtime 0.1 models had: a key is
``{"tenant", "end_user_id"}`` and a fact ``{"id", "key", "content",
"created_at"}``, so documents written with either read back with the other.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from datetime import datetime
from typing import Any, Final

from pydantic import GetJsonSchemaHandler
from pydantic.json_schema import JsonSchemaValue
from pydantic_core import PydanticCustomError, core_schema

from ._capabilities import MAX_RESTORED_ID_LENGTH, validate_restored, validate_restored_id
from ._errors import InvalidContentError, InvalidInputError, InvalidKeyError
from ._key import MemoryKey, _fill
from ._memory import Memory
from ._validation import MAX_CONTENT_LENGTH, MAX_KEY_LENGTH, validate_content, validate_key_part

__all__ = ["describe", "key_schema", "memory_schema"]

_KEY_FIELDS: Final = ("tenant", "end_user_id")
_MEMORY_FIELDS: Final = ("id", "key", "content", "created_at")
# Only its created_at is ever read: the probe lets ``validate_restored`` judge
# a time without this module repeating its range rule.
_PROBE_KEY: Final = MemoryKey("probe", "probe")
# What JSON Schema can say of the port's rules; the rest is in the checks.
_KEY_PART: Final[dict[str, object]] = {"minLength": 1, "maxLength": MAX_KEY_LENGTH}
_DESCRIBED: Final[dict[str, dict[str, dict[str, object]]]] = {
    "MemoryKey": {"tenant": _KEY_PART, "end_user_id": _KEY_PART},
    "Memory": {
        "id": {"minLength": 1, "maxLength": MAX_RESTORED_ID_LENGTH, "pattern": "^[A-Za-z0-9_-]+$"},
        "content": {"minLength": 1, "maxLength": MAX_CONTENT_LENGTH},
    },
}


def _error_type(error: InvalidInputError) -> str:
    if isinstance(error, InvalidKeyError):
        return "invalid_key"
    if isinstance(error, InvalidContentError):
        return "invalid_content"
    return "invalid_input"


def _ported(check: Callable[[Any], Any]) -> Callable[[Any], Any]:
    """Wrap a port check so that its refusal is a pydantic error, not a crash."""

    def validate(value: Any) -> Any:
        try:
            return check(value)
        except InvalidInputError as error:
            raise PydanticCustomError(
                _error_type(error),
                "{argument} {rule}",
                {"argument": error.argument, "rule": error.rule},
            ) from None

    return validate


def _created_at(value: datetime) -> datetime:
    probe = Memory("probe", _PROBE_KEY, "probe", value)
    try:
        return validate_restored(probe, "memory").created_at
    except InvalidInputError as error:
        # The check names the field "memory.created_at"; here it is a field.
        raise InvalidInputError("created_at", error.rule) from None


def _checked_str(check: Callable[[Any], Any]) -> core_schema.CoreSchema:
    # Strict: the port takes a str and nothing that merely converts to one.
    return core_schema.no_info_after_validator_function(
        _ported(check), core_schema.str_schema(strict=True)
    )


def _typed_dict(fields: dict[str, core_schema.CoreSchema]) -> core_schema.TypedDictSchema:
    return core_schema.typed_dict_schema(
        {name: core_schema.typed_dict_field(schema) for name, schema in fields.items()},
        extra_behavior="forbid",
    )


def _passing(
    cls: type[Any],
    fields: core_schema.CoreSchema,
    build: Callable[[Any], Any],
    dump: Callable[[Any], Any],
    plain: core_schema.CoreSchema,
) -> core_schema.CoreSchema:
    # An instance is valid by construction and passes as it is; anything else
    # is read as the fields and built (a union would report both branches).
    def validate(value: Any, handler: core_schema.ValidatorFunctionWrapHandler) -> Any:
        if type(value) is cls:
            return value
        return handler(value)

    return core_schema.no_info_wrap_validator_function(
        validate,
        core_schema.no_info_after_validator_function(build, fields),
        # The class's own reference: JSON Schema describes it once, by name.
        ref=f"{cls.__module__}.{cls.__qualname__}:{id(cls)}",
        serialization=core_schema.plain_serializer_function_ser_schema(dump, return_schema=plain),
    )


def _key_part(value: object, argument: str) -> str:
    return validate_key_part(value, argument)


def _build_key(fields: dict[str, str]) -> MemoryKey:
    key: MemoryKey = object.__new__(MemoryKey)
    _fill(key, fields["tenant"], fields["end_user_id"])
    return key


def _dump_key(key: MemoryKey) -> dict[str, str]:
    return {"tenant": key.tenant, "end_user_id": key.end_user_id}


def key_schema() -> core_schema.CoreSchema:
    """Return the core schema of `MemoryKey`: fields checked by `validate_key_part`."""
    fields = _typed_dict(
        {name: _checked_str(functools.partial(_key_part, argument=name)) for name in _KEY_FIELDS},
    )
    plain = _typed_dict({name: core_schema.str_schema() for name in _KEY_FIELDS})
    return _passing(MemoryKey, fields, _build_key, _dump_key, plain)


def _build_memory(fields: dict[str, Any]) -> Memory:
    return Memory(fields["id"], fields["key"], fields["content"], fields["created_at"])


def _dump_memory(memory: Memory) -> dict[str, Any]:
    return {name: getattr(memory, name) for name in _MEMORY_FIELDS}


def memory_schema(key: core_schema.CoreSchema) -> core_schema.CoreSchema:
    """Return the core schema of `Memory`, given the one pydantic made for its key.

    Each field is checked as `validate_restored` checks a fact restored from
    elsewhere, which is what a fact read through pydantic is.
    """
    fields = _typed_dict(
        {
            "id": _checked_str(lambda value: validate_restored_id(value, "id")),
            "key": key,
            "content": _checked_str(validate_content),
            "created_at": core_schema.no_info_after_validator_function(
                _ported(_created_at), core_schema.datetime_schema()
            ),
        },
    )
    plain = _typed_dict(
        {
            "id": core_schema.str_schema(),
            "key": key,
            "content": core_schema.str_schema(),
            "created_at": core_schema.datetime_schema(),
        },
    )
    return _passing(Memory, fields, _build_memory, _dump_memory, plain)


def describe(
    cls: type[Any], schema: core_schema.CoreSchema, handler: GetJsonSchemaHandler
) -> JsonSchemaValue:
    """Return the JSON Schema of `MemoryKey` or `Memory`: named, with its fields' limits."""
    json_schema = handler(schema)
    target = handler.resolve_ref_schema(json_schema)
    target["title"] = cls.__name__
    for name, limits in _DESCRIBED[cls.__name__].items():
        target["properties"][name].update(limits)
    return json_schema
