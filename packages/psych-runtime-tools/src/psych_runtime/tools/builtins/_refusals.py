"""What the model is told when a call is refused, and the checks that decide it.

Every text a tool call can be refused with is written here, and nowhere else,
so that every front end of the memory tools (these Python tools, an MCP
server) refuses the same call with the same words.

The one rule all of them keep: a refusal never repeats the model's text. Not
a value, not part of one, not an argument name the model made up, at any
depth. It names only what the tools define (a tool, an argument of its
schema, a name it refuses on purpose), JSON types, limits and lengths.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from typing import Final, NoReturn

from psych_runtime.memory.port import InvalidContentError, validate_content

from ._spec import ToolResult, ToolSpec

__all__ = [
    "KEY_ARGUMENTS",
    "RefusedCallError",
    "check_arguments",
    "check_content",
    "memory_full",
    "refusal",
]

KEY_ARGUMENTS: Final = frozenset({"end_user_id", "user_id", "tenant", "scope"})
"""Argument names a model might use to pick whose memory to touch.

No memory tool takes them; a call that sends one is refused with a message
saying that the application, not the tool call, chooses the user.
"""

# bool before int: a bool is an int to isinstance, but a boolean to JSON.
_JSON_TYPES: Final[tuple[tuple[type | tuple[type, ...], str], ...]] = (
    (type(None), "null"),
    (bool, "a boolean"),
    ((int, float), "a number"),
    (str, "a string"),
    (Mapping, "an object"),
    ((list, tuple), "an array"),
)


class RefusedCallError(Exception):
    """A tool call was refused; ``str(error)`` is the reason to tell the model.

    The reason never contains the model's text (see the module's rule), so it
    may be shown to the model, logged and kept in transcripts.

    Attributes:
        reason: What was wrong and how to fix the call, without a final period.
    """

    reason: str

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


def refusal(tool: str, reason: str) -> ToolResult:
    """Return the error result for a refused call of ``tool``.

    Args:
        tool: The name of the tool the model called, one of the tools' own
            names (never a name the model made up).
        reason: A reason from `RefusedCallError`, `memory_full` or another
            text of this module.

    Returns:
        ``{"error": "<tool> was not run: <reason>. Nothing was changed."}`` as
        compact JSON, with ``is_error`` true.
    """
    text = f"{tool} was not run: {reason}. Nothing was changed."
    return ToolResult(json.dumps({"error": text}, separators=(",", ":")), is_error=True)


def check_arguments(spec: ToolSpec, arguments: object) -> dict[str, object]:
    """Check a call's arguments against a tool's schema and return them.

    The checks are those every memory tool shares: the arguments are a JSON
    object (a mapping, or JSON text of one) with no NaN or Infinity, string
    names only, none of `KEY_ARGUMENTS`, no name outside the schema's
    ``properties``, every ``required`` name present, and every value whose
    property is declared ``"type": "string"`` a string (the only type the
    memory tools use). In JSON text no key may appear twice in one object,
    at any depth: a repeated argument name is refused as such, and a key
    repeated inside a value is refused without calling it an argument. What
    a value must hold beyond its type is the tool's to check (see
    `check_content`).

    Args:
        spec: The tool called; its ``input_schema`` is a closed object schema.
        arguments: The arguments as the provider delivered them.

    Returns:
        A new dictionary holding exactly the arguments, by name.

    Raises:
        RefusedCallError: The arguments break a rule; the reason says which,
            never repeating the model's text.
    """
    schema = spec.input_schema
    properties: dict[str, dict[str, object]] = schema.get("properties", {})
    required: list[str] = schema.get("required", [])
    parsed = _arguments_object(arguments, properties)
    if isinstance(parsed, _RepeatedKeys):
        _refuse(_repeated_argument_reason(parsed.repeated, properties))
    names = [name for name in parsed if isinstance(name, str)]
    if len(names) != len(parsed):
        _refuse(f"argument names must be strings; send {_allowed_arguments(properties)}")
    key_names = sorted(name for name in names if name in KEY_ARGUMENTS)
    if key_names:
        _refuse(
            f"{_quoted_list(key_names)} cannot be passed: the user and the tenant are set "
            f"by the application, not by the tool call; send {_allowed_arguments(properties)}"
        )
    if any(name not in properties for name in names):
        # The name itself is the model's text: it is never repeated.
        _refuse(
            f"an argument not in the tool's schema was given; send {_allowed_arguments(properties)}"
        )
    for name in required:
        if name not in parsed:
            _refuse(f"missing required argument {name!r}; send {_example_object(properties)}")
    checked = {str(name): value for name, value in parsed.items()}
    for name, value in checked.items():
        if properties[name].get("type") == "string" and not isinstance(value, str):
            _refuse(f"{name!r} must be a string, not {_json_type_name(value)}")
        if _holds_repeats(value):
            _refuse(f"a key appears more than once inside the value of {name!r}; send it once")
    return checked


def check_content(content: str, max_length: int | None) -> str:
    """Check the content of a fact for the ``remember`` tool and return it.

    Args:
        content: The ``content`` argument, already known to be a `str`.
        max_length: The most characters a fact may have with these tools, or
            ``None`` for the port's own limit only.

    Returns:
        ``content``, unchanged.

    Raises:
        RefusedCallError: ``content`` is longer than ``max_length`` (the
            reason asks for a shorter fact), or breaks a content rule of the
            port (empty, only whitespace, too long, a control character other
            than newline and tab, a lone surrogate).
    """
    if max_length is not None and len(content) > max_length:
        _refuse(
            f"'content' is too long for this memory: at most {max_length} characters "
            f"(got {len(content)}); save a shorter fact, one short statement"
        )
    try:
        return validate_content(content)
    except InvalidContentError as error:
        # The port's rules name the argument, limits, positions and code
        # points, never the text around them.
        _refuse(f"'content' {error.rule}; send the fact as one short plain-text statement")


def memory_full(max_facts: int) -> str:
    """Return the reason ``remember`` gives when the user's memory is full.

    Args:
        max_facts: The most facts one end user may hold with these tools.

    Returns:
        A reason for `refusal`, telling the model to forget an outdated fact
        first or to tell the user.
    """
    return (
        f"memory is full: this user already has the most saved facts allowed "
        f"({max_facts}). Nothing was evicted. To save this fact, first call forget with the "
        "id of a saved fact that is outdated or no longer needed; if none is, tell "
        "the user that memory is full"
    )


class _RepeatedKeys(dict[str, object]):
    """A JSON object in which some key appeared more than once."""

    repeated: frozenset[str]


def _arguments_object(
    arguments: object, properties: Mapping[str, object]
) -> Mapping[object, object]:
    if isinstance(arguments, str):
        try:
            arguments = json.loads(
                arguments,
                object_pairs_hook=_keep_repeats,
                parse_constant=_refuse_constant,
            )
        except (ValueError, RecursionError):
            _refuse(
                "the arguments are not valid JSON; send one JSON object like "
                f"{_example_object(properties)}"
            )
    if not isinstance(arguments, Mapping):
        _refuse(
            f"the arguments must be a JSON object like {_example_object(properties)}, "
            f"not {_json_type_name(arguments)}"
        )
    return arguments


def _keep_repeats(pairs: list[tuple[str, object]]) -> dict[str, object]:
    # Parsers disagree on which of two equal keys wins, so a repeated key is
    # refused rather than read one way here and another way elsewhere. It is
    # only marked here: this hook runs for nested objects too, and a key
    # inside a value is not an argument, so the top level decides.
    result: dict[str, object] = {}
    repeated = set()
    for name, value in pairs:
        if name in result:
            repeated.add(name)
        result[name] = value
    if not repeated:
        return result
    marked = _RepeatedKeys(result)
    marked.repeated = frozenset(repeated)
    return marked


def _holds_repeats(value: object) -> bool:
    # Iterative: a value may be nested as deeply as the JSON parser allows.
    stack = [value]
    while stack:
        item = stack.pop()
        if isinstance(item, _RepeatedKeys):
            return True
        if isinstance(item, dict):
            stack.extend(item.values())
        elif isinstance(item, list):
            stack.extend(item)
    return False


def _repeated_argument_reason(names: Iterable[str], properties: Mapping[str, object]) -> str:
    known = sorted(name for name in names if name in properties or name in KEY_ARGUMENTS)
    if known and len(known) == len(set(names)):
        return f"argument {_quoted_list(known)} appears more than once; send each argument once"
    return "an argument name appears more than once; send each argument once"


def _refuse_constant(name: str) -> NoReturn:
    del name
    _refuse("the arguments contain NaN or Infinity, which JSON does not allow")


def _refuse(reason: str) -> NoReturn:
    raise RefusedCallError(reason)


def _allowed_arguments(properties: Mapping[str, object]) -> str:
    if not properties:
        return "no arguments"
    return "only " + _quoted_list(list(properties))


def _example_object(properties: Mapping[str, object]) -> str:
    return "{" + ", ".join(f'"{name}": "..."' for name in properties) + "}"


def _quoted_list(names: list[str]) -> str:
    quoted = [repr(name) for name in names]
    if len(quoted) == 1:
        return quoted[0]
    return ", ".join(quoted[:-1]) + " and " + quoted[-1]


def _json_type_name(value: object) -> str:
    # Named as JSON names them, since that is the language the model wrote in.
    for kind, name in _JSON_TYPES:
        if isinstance(value, kind):
            return name
    return type(value).__qualname__
