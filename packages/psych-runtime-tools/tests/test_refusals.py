"""Properties: a refusal never repeats the model's text, at any depth.

The model's text is everything it wrote: argument names and values, and
keys and strings nested inside values. The sound way to show that a refusal
repeats none of it is to change all of it and see the refusal stay the same.
`disguised` replaces every character of the model's strings by another one
of the same kind (whitespace and control characters, which decide some
rules, stay; every other character moves to a far plane of Unicode), so
every rule decides the same way and any repeated text would differ. Names
the tools define themselves (``content``, ``memory_id``, the refused key
names) are the only strings kept.
"""

from __future__ import annotations

import json
import unicodedata
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from psych_runtime.memory.inproc import InProcessMemory
from psych_runtime.tools.builtins import (
    FORGET,
    KEY_ARGUMENTS,
    RefusedCallError,
    ToolResult,
    ToolSpec,
    check_arguments,
    memory_tools,
)

pytestmark = pytest.mark.anyio

OWN_NAMES = frozenset({"content", "memory_id"}) | KEY_ARGUMENTS
# The far plane: every shifted character stays below U+110000.
SHIFT = 0x10000
FAR = settings(
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
    deadline=None,
    max_examples=75,
)


@dataclass(frozen=True)
class Obj:
    """A JSON object as written: pairs in order, a name possibly repeated."""

    pairs: tuple[tuple[str, Any], ...]


def kept(char: str) -> bool:
    return char.isspace() or unicodedata.category(char) in {"Cc", "Cs"}


def disguise_text(text: str) -> str:
    if text in OWN_NAMES:
        return text
    return "".join(char if kept(char) else chr(ord(char) + SHIFT) for char in text)


def disguised(value: Any) -> Any:
    if isinstance(value, str):
        return disguise_text(value)
    if isinstance(value, Obj):
        return Obj(tuple((disguise_text(name), disguised(item)) for name, item in value.pairs))
    if isinstance(value, list):
        return [disguised(item) for item in value]
    return value


def as_text(value: Any, ensure_ascii: bool) -> str:
    """JSON text, repeated names and all, as a model might send it."""
    if isinstance(value, Obj):
        pairs = (
            f"{json.dumps(name, ensure_ascii=ensure_ascii)}: {as_text(item, ensure_ascii)}"
            for name, item in value.pairs
        )
        return "{" + ", ".join(pairs) + "}"
    if isinstance(value, list):
        return "[" + ", ".join(as_text(item, ensure_ascii) for item in value) + "]"
    return json.dumps(value, ensure_ascii=ensure_ascii)


def as_python(value: Any) -> Any:
    """The mapping a provider's SDK would hand over (a repeated name: the last wins)."""
    if isinstance(value, Obj):
        return {name: as_python(item) for name, item in value.pairs}
    if isinstance(value, list):
        return [as_python(item) for item in value]
    return value


def model_strings(value: Any) -> list[str]:
    if isinstance(value, str):
        return [value]
    if isinstance(value, Obj):
        return [text for n, v in value.pairs for text in [n, *model_strings(v)]]
    if isinstance(value, list):
        return [text for item in value for text in model_strings(item)]
    return []


# Below U+100000, so that the shifted character exists; surrogates included,
# since JSON text can carry them escaped.
texts = st.text(st.characters(max_codepoint=0xFFFFF, exclude_categories=()), max_size=12)
names = st.sampled_from(sorted(OWN_NAMES)) | texts
scalars = (
    st.none()
    | st.booleans()
    | st.integers()
    | st.floats(allow_nan=False, allow_infinity=False)
    | texts
)


def objects(children: st.SearchStrategy[Any]) -> st.SearchStrategy[Obj]:
    def maybe_repeated(pairs: list[tuple[str, Any]]) -> st.SearchStrategy[Obj]:
        written = st.just(Obj(tuple(pairs)))
        if not pairs:
            return written
        # The same name again, with another value: a repeated key.
        return written | children.map(lambda value: Obj((*pairs, (pairs[0][0], value))))

    return st.lists(st.tuples(names, children), max_size=3).flatmap(maybe_repeated)


values = st.recursive(
    scalars, lambda children: st.lists(children, max_size=3) | objects(children), max_leaves=10
)
calls = values | objects(values)


async def run(tool: str, arguments: object) -> ToolResult:
    tools = memory_tools(InProcessMemory(), scope="acme", end_user_id="u1")
    return await tools.call(tool, arguments)


@FAR
@given(call=calls, tool=st.sampled_from(["remember", "forget"]), ensure_ascii=st.booleans())
async def test_a_refusal_stays_the_same_whatever_the_model_wrote(
    anyio_backend: str, call: Any, tool: str, ensure_ascii: bool
) -> None:
    other = disguised(call)

    def text(value: Any) -> str:
        return as_text(value, ensure_ascii)

    shapes: list[Callable[[Any], object]] = [text]
    if not isinstance(call, str):
        # A lone str handed over is JSON text, which the first shape covers.
        shapes.append(as_python)
    for shape in shapes:
        first = await run(tool, shape(call))
        second = await run(tool, shape(other))
        assert first.is_error is second.is_error
        if first.is_error:
            assert first.content == second.content
            assert first.content.isascii()


@FAR
@given(call=calls, tool=st.sampled_from(["remember", "forget"]))
async def test_no_refusal_contains_a_string_of_the_model(
    anyio_backend: str, call: Any, tool: str
) -> None:
    # The same rule said directly: every string of four characters or more
    # that the model wrote, once disguised so that it cannot coincide with
    # the tools' own words, is absent from the refusal.
    call = disguised(call)
    result = await run(tool, as_text(call, ensure_ascii=False))
    if result.is_error:
        text = json.loads(result.content)["error"]
        for string in model_strings(call):
            if len(string) >= 4 and string not in OWN_NAMES:
                assert string not in text


@FAR
@given(text=st.text(max_size=40))
async def test_text_that_is_not_json_gets_one_fixed_refusal(anyio_backend: str, text: str) -> None:
    try:
        json.loads(text)
    except ValueError:
        result = await run("remember", text)
        assert json.loads(result.content) == {
            "error": (
                "remember was not run: the arguments are not valid JSON; send one JSON object "
                'like {"content": "..."}. Nothing was changed.'
            )
        }


def test_check_arguments_serves_any_closed_schema() -> None:
    # An MCP server's recall tool takes no arguments; the same checks and
    # texts refuse a call that names the user.
    recall = ToolSpec(
        "recall",
        "d",
        {"type": "object", "properties": {}, "required": [], "additionalProperties": False},
    )
    assert check_arguments(recall, {}) == {}
    assert check_arguments(recall, "{}") == {}
    with pytest.raises(RefusedCallError, match="'end_user_id' cannot be passed") as caught:
        check_arguments(recall, {"end_user_id": "u2"})
    assert caught.value.reason.endswith("send no arguments")
    with pytest.raises(RefusedCallError, match="send no arguments"):
        check_arguments(recall, {"Jane Roe": 1})
    assert check_arguments(FORGET, {"memory_id": "m1"}) == {"memory_id": "m1"}


def test_a_key_repeated_inside_a_value_of_any_type_is_refused_without_naming_it() -> None:
    # The memory tools take strings only; a schema with an object property
    # shows the rule for values that pass their type check.
    spec = ToolSpec(
        "t",
        "d",
        {
            "type": "object",
            "properties": {"settings": {"type": "object"}},
            "required": ["settings"],
            "additionalProperties": False,
        },
    )
    assert check_arguments(spec, '{"settings": {"a": [{"b": 1}]}}') == {
        "settings": {"a": [{"b": 1}]}
    }
    personal = "Jane Roe, SSN 078-05-1120"
    deep = '{"settings": {"a": [{"' + personal + '": 1, "' + personal + '": 2}]}}'
    with pytest.raises(RefusedCallError) as caught:
        check_arguments(spec, deep)
    assert caught.value.reason == (
        "a key appears more than once inside the value of 'settings'; send it once"
    )
    # Deep nesting is walked too.
    nested = '{"settings": ' + "[" * 500 + "]" * 500 + "}"
    assert check_arguments(spec, nested)["settings"] is not None
