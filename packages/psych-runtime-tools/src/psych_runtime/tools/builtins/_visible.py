"""One entry of the memory block: a JSON object on one line, hiding nothing."""

from __future__ import annotations

import functools
import json
import re
import unicodedata
from typing import Final

__all__ = ["json_line"]

# json.dumps(ensure_ascii=False) escapes C0 controls, quotes and backslashes
# and leaves every other character raw. Some of those are line breaks for
# some reader (Python's str.splitlines, JavaScript, many editors), and some
# are invisible to a person yet read by a model: Unicode tag characters can
# spell out a whole hidden instruction, bidirectional controls reorder what
# a reviewer sees (Trojan Source), zero-width and other format characters
# hide inside words. Each of those is written as its JSON escape (\uXXXX, a
# surrogate pair beyond U+FFFF): visible to whoever reads the prompt, still
# inside its JSON string, and decoding to the exact stored fact.
_INVISIBLE_CATEGORIES: Final = frozenset({"Cc", "Cf", "Cn", "Co", "Cs", "Zl", "Zp"})
_INVISIBLE_MARKS: Final = frozenset(
    {
        0x034F,  # combining grapheme joiner
        0x115F,  # Hangul choseong filler
        0x1160,  # Hangul jungseong filler
        0x180B, 0x180C, 0x180D, 0x180F,  # Mongolian free variation selectors
        0x2800,  # braille pattern blank
        0x3164,  # Hangul filler
        0xFFA0,  # halfwidth Hangul filler
        *range(0xFE00, 0xFE10),  # variation selectors
        *range(0xE0100, 0xE01F0),  # variation selectors supplement
    }
)  # fmt: skip
_NOT_ASCII: Final = re.compile("[^\x00-\x7e]")


def json_line(entry: dict[str, str]) -> str:
    """Return ``entry`` as JSON on one line, every hidden character escaped."""
    return _NOT_ASCII.sub(_escaped_if_hidden, json.dumps(entry, ensure_ascii=False))


def _escaped_if_hidden(match: re.Match[str]) -> str:
    char = match.group()
    return _json_escape(char) if _is_hidden(char) else char


@functools.lru_cache(maxsize=4096)
def _is_hidden(char: str) -> bool:
    return unicodedata.category(char) in _INVISIBLE_CATEGORIES or ord(char) in _INVISIBLE_MARKS


def _json_escape(char: str) -> str:
    # json.dumps with its default ensure_ascii writes exactly the escape a
    # JSON reader turns back into this character.
    return json.dumps(char)[1:-1]
