"""The input rules of the port, as functions every adapter calls first.

Keeping them here, and nowhere else, is what makes every backend accept and
refuse exactly the same input.
"""

from __future__ import annotations

import re
from typing import Final

from ._errors import InvalidContentError, InvalidKeyError, InvalidLimitError

__all__ = [
    "MAX_CONTENT_LENGTH",
    "MAX_KEY_LENGTH",
    "validate_content",
    "validate_key_part",
    "validate_limit",
    "validate_memory_id",
]

MAX_KEY_LENGTH: Final = 256
"""The most characters a tenant or an end-user id may have."""

MAX_CONTENT_LENGTH: Final = 4096
"""The most characters the content of one fact may have."""

# C0 and C1 controls and DEL, plus lone surrogates (which cannot be encoded as
# UTF-8 and so cannot be stored faithfully by any backend).
_FORBIDDEN_IN_KEY = re.compile("[\x00-\x1f\x7f-\x9f\ud800-\udfff]")
# The same, except newline and tab, which facts may legitimately contain.
_FORBIDDEN_IN_CONTENT = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\ud800-\udfff]")


def _type_name(value: object) -> str:
    return type(value).__qualname__


def validate_key_part(value: object, argument: str) -> str:
    """Check one half of a key (a tenant or an end-user id) and return it.

    Args:
        value: The candidate value.
        argument: The argument's name, used in the error message.

    Returns:
        The value as a plain `str`, character for character unchanged.

    Raises:
        TypeError: ``value`` is not a `str`.
        InvalidKeyError: ``value`` is empty, longer than `MAX_KEY_LENGTH`,
            starts or ends with whitespace, or contains a control character
            or a lone surrogate.
    """
    if type(value) is not str:
        if not isinstance(value, str):
            raise TypeError(f"{argument} must be a str, not {_type_name(value)}")
        value = str.__str__(value)
    if not value:
        raise InvalidKeyError(argument, "must not be empty")
    if len(value) > MAX_KEY_LENGTH:
        raise InvalidKeyError(
            argument,
            f"must be at most {MAX_KEY_LENGTH} characters (got {len(value)})",
        )
    if value[0].isspace() or value[-1].isspace():
        raise InvalidKeyError(argument, "must not start or end with whitespace")
    match = _FORBIDDEN_IN_KEY.search(value)
    if match is not None:
        raise InvalidKeyError(argument, _forbidden_rule(match))
    return value


def validate_content(content: object) -> str:
    """Check the content of a fact and return it.

    Returns:
        The content as a plain `str`, character for character unchanged.

    Raises:
        TypeError: ``content`` is not a `str`.
        InvalidContentError: ``content`` is empty, only whitespace, longer
            than `MAX_CONTENT_LENGTH`, or contains a control character other
            than newline and tab, or a lone surrogate.
    """
    if type(content) is not str:
        if not isinstance(content, str):
            raise TypeError(f"content must be a str, not {_type_name(content)}")
        content = str.__str__(content)
    if not content:
        raise InvalidContentError("content", "must not be empty")
    if len(content) > MAX_CONTENT_LENGTH:
        raise InvalidContentError(
            "content",
            f"must be at most {MAX_CONTENT_LENGTH} characters (got {len(content)})",
        )
    if content.isspace():
        raise InvalidContentError("content", "must not be only whitespace")
    match = _FORBIDDEN_IN_CONTENT.search(content)
    if match is not None:
        raise InvalidContentError(
            "content",
            _forbidden_rule(match, "a control character other than newline and tab"),
        )
    return content


def validate_memory_id(memory_id: object) -> str:
    """Check that a memory id is a `str` and return it.

    Any string is acceptable: an id that is unknown or malformed simply
    matches no fact.

    Raises:
        TypeError: ``memory_id`` is not a `str`.
    """
    if type(memory_id) is str:
        return memory_id
    if isinstance(memory_id, str):
        return str.__str__(memory_id)
    raise TypeError(f"memory_id must be a str, not {_type_name(memory_id)}")


def validate_limit(limit: object) -> int | None:
    """Check the ``limit`` of `recall` and return it.

    Returns:
        ``None`` (no limit) or a non-negative `int`.

    Raises:
        TypeError: ``limit`` is neither ``None`` nor an `int`, or is a `bool`.
        InvalidLimitError: ``limit`` is negative.
    """
    if limit is None:
        return None
    if isinstance(limit, bool) or not isinstance(limit, int):
        raise TypeError(f"limit must be None or an int, not {_type_name(limit)}")
    if limit < 0:
        raise InvalidLimitError("limit", "must be None or an int >= 0")
    return int(limit)


def _forbidden_rule(match: re.Match[str], control: str = "a control character") -> str:
    # The position and code point of the offending character help the caller
    # find it without the message repeating the surrounding text.
    char = match.group()
    what = "a lone surrogate" if "\ud800" <= char <= "\udfff" else control
    return f"must not contain {what} (U+{ord(char):04X} at index {match.start()})"
