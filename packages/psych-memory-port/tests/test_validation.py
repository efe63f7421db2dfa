"""The input rules of DESIGN section 3, one by one."""

from __future__ import annotations

import pickle
from collections.abc import Callable

import pytest
from hypothesis import given
from hypothesis import strategies as st

from psych_runtime.memory.port import (
    MAX_CONTENT_LENGTH,
    MAX_KEY_LENGTH,
    InvalidContentError,
    InvalidInputError,
    InvalidKeyError,
    InvalidLimitError,
    validate_content,
    validate_key_part,
    validate_limit,
    validate_memory_id,
)

PERSONAL = "alice@example.com"


class _Str(str):
    __slots__ = ()


@pytest.mark.parametrize(
    "value",
    ["a", "user-42", "x" * MAX_KEY_LENGTH, "über ü", "a b", "東京", "😀"],
)
def test_valid_key_parts_are_returned_unchanged(value: str) -> None:
    assert validate_key_part(value, "tenant") == value


@pytest.mark.parametrize(
    ("value", "rule"),
    [
        ("", "must not be empty"),
        ("x" * (MAX_KEY_LENGTH + 1), "at most 256 characters"),
        (" lead", "whitespace"),
        ("trail ", "whitespace"),
        ("\u00a0nbsp", "whitespace"),
        ("tab\tinside", "control character"),
        ("new\nline", "control character"),
        ("nul\x00", "control character"),
        ("del\x7f", "control character"),
        ("c1\x85c2", "control character"),
        ("lone\ud800", "lone surrogate"),
    ],
)
def test_invalid_key_parts_raise_naming_argument_and_rule(value: str, rule: str) -> None:
    with pytest.raises(InvalidKeyError) as info:
        validate_key_part(value, "end_user_id")
    assert info.value.argument == "end_user_id"
    assert rule in info.value.rule
    assert str(info.value).startswith("end_user_id ")
    assert isinstance(info.value, InvalidInputError)
    assert isinstance(info.value, ValueError)


@pytest.mark.parametrize("value", [None, 42, b"bytes", ["a"], object()])
def test_key_part_of_wrong_type_raises_type_error(value: object) -> None:
    with pytest.raises(TypeError, match=r"^tenant must be a str, not "):
        validate_key_part(value, "tenant")


def test_key_part_str_subclass_becomes_plain_str() -> None:
    result = validate_key_part(_Str("acme"), "tenant")
    assert type(result) is str
    assert result == "acme"


@pytest.mark.parametrize(
    "value",
    [
        "prefers the Berlin warehouse",
        "x" * MAX_CONTENT_LENGTH,
        "two\nlines",
        "tab\tseparated",
        "  padded  ",
        "ünïcödé 😀",
    ],
)
def test_valid_content_is_returned_exactly(value: str) -> None:
    assert validate_content(value) == value


@pytest.mark.parametrize(
    ("value", "rule"),
    [
        ("", "must not be empty"),
        (" ", "only whitespace"),
        ("\n\t ", "only whitespace"),
        ("x" * (MAX_CONTENT_LENGTH + 1), "at most 4096 characters"),
        ("carriage\rreturn", "control character other than newline and tab"),
        ("bell\x07", "control character"),
        ("esc\x1b[31m", "control character"),
        ("c1\x9f", "control character"),
        ("lone\ud83d", "lone surrogate"),
    ],
)
def test_invalid_content_raises_naming_rule(value: str, rule: str) -> None:
    with pytest.raises(InvalidContentError) as info:
        validate_content(value)
    assert info.value.argument == "content"
    assert rule in info.value.rule


@pytest.mark.parametrize("value", [None, 1, b"fact", ("fact",)])
def test_content_of_wrong_type_raises_type_error(value: object) -> None:
    with pytest.raises(TypeError, match=r"^content must be a str"):
        validate_content(value)


def test_content_str_subclass_becomes_plain_str() -> None:
    assert type(validate_content(_Str("fact"))) is str


@given(st.text(max_size=MAX_CONTENT_LENGTH + 10))
def test_accepted_content_is_encodable_and_unchanged(value: str) -> None:
    try:
        result = validate_content(value)
    except InvalidContentError:
        return
    assert result == value
    assert result.encode("utf-8").decode("utf-8") == value
    assert not value.isspace()
    assert 1 <= len(value) <= MAX_CONTENT_LENGTH


@given(st.text(min_size=1, max_size=64))
def test_key_part_is_accepted_or_refused_never_changed(value: str) -> None:
    try:
        result = validate_key_part(value, "tenant")
    except InvalidKeyError:
        return
    assert result == value
    assert result == result.strip()


@pytest.mark.parametrize(
    "check",
    [
        lambda: validate_content(PERSONAL * 300),
        lambda: validate_content(PERSONAL + "\x00"),
        lambda: validate_content(PERSONAL + "\ud800"),
        lambda: validate_key_part(" " + PERSONAL, "tenant"),
        lambda: validate_key_part(PERSONAL + "\n", "tenant"),
        lambda: validate_key_part(PERSONAL * 20, "tenant"),
    ],
)
def test_messages_never_echo_the_value(check: Callable[[], object]) -> None:
    with pytest.raises(InvalidInputError) as info:
        check()
    assert "alice" not in str(info.value)


def test_type_error_message_names_only_the_type() -> None:
    with pytest.raises(TypeError) as info:
        validate_content(PERSONAL.encode())
    assert PERSONAL not in str(info.value)
    assert "bytes" in str(info.value)


@pytest.mark.parametrize("value", ["", "m1", "not an id at all", "\x00"])
def test_any_str_is_a_memory_id(value: str) -> None:
    assert validate_memory_id(value) == value


def test_memory_id_str_subclass_becomes_plain_str() -> None:
    assert type(validate_memory_id(_Str("m1"))) is str


@pytest.mark.parametrize("value", [None, 1, b"m1"])
def test_memory_id_of_wrong_type_raises_type_error(value: object) -> None:
    with pytest.raises(TypeError, match=r"^memory_id must be a str"):
        validate_memory_id(value)


@pytest.mark.parametrize("value", [None, 0, 1, 10**9])
def test_valid_limits(value: int | None) -> None:
    assert validate_limit(value) == value


@pytest.mark.parametrize("value", [True, False, 1.0, "3", object()])
def test_limit_of_wrong_type_raises_type_error(value: object) -> None:
    with pytest.raises(TypeError, match=r"^limit must be None or an int"):
        validate_limit(value)


@pytest.mark.parametrize("value", [-1, -(10**9)])
def test_negative_limit_raises(value: int) -> None:
    with pytest.raises(InvalidLimitError) as info:
        validate_limit(value)
    assert info.value.argument == "limit"


def test_errors_survive_pickling() -> None:
    error = InvalidKeyError("tenant", "must not be empty")
    copy = pickle.loads(pickle.dumps(error))
    assert type(copy) is InvalidKeyError
    assert (copy.argument, copy.rule, str(copy)) == (error.argument, error.rule, str(error))
