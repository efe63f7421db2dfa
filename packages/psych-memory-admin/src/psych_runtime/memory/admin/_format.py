"""The export format: one end user's facts as JSON or JSON Lines, and reading it back.

Version 1, documented with its JSON Schema on the operator's page. ``json``
is one object:

    {"format": "psych-memory-export", "version": 1, "tenant": "...",
     "end_user_id": "...", "exported_at": "...Z", "facts": [
       {"id": "...", "content": "...", "created_at": "...Z"}, ...]}

``jsonl`` is the same header without ``facts`` (with ``"facts_count"``) on
the first line, then one fact object per line; lines end with a line feed
alone. Facts are in the store's order (oldest first); times are
``YYYY-MM-DDTHH:MM:SS.ffffffZ``.

Both directions stream: an export is written a fact at a time, and a file
is read in chunks, one fact at a time, so neither holds a whole end user.
"""

from __future__ import annotations

import codecs
import json
import re
import sqlite3
import tempfile
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from io import BytesIO
from pathlib import Path
from typing import IO, Final, Literal

from psych_runtime.memory.port import (
    MAX_CREATED_AT,
    MIN_CREATED_AT,
    InvalidInputError,
    Memory,
    MemoryKey,
    validate_content,
    validate_restored_id,
)

__all__ = [
    "FORMAT_NAME",
    "FORMAT_VERSION",
    "Export",
    "ExportFormatError",
    "ExportReader",
    "Layout",
    "export_fact",
    "export_head",
    "export_tail",
    "parse_export",
    "render_export",
    "utc_text",
]

FORMAT_NAME: Final = "psych-memory-export"
FORMAT_VERSION: Final = 1
_FACT_FIELDS: Final = frozenset({"id", "content", "created_at"})
_HEADER_FIELDS: Final = frozenset({"format", "version", "tenant", "end_user_id", "exported_at"})

Layout = Literal["json", "jsonl"]


class ExportFormatError(ValueError):
    """The text is not an export of this format and version; says where and which rule."""


@dataclass(frozen=True, slots=True)
class Export:
    """An export read back whole: whose facts, and the facts in their order."""

    key: MemoryKey
    facts: tuple[Memory, ...]


def utc_text(moment: datetime) -> str:
    """``moment`` in UTC, ISO 8601, always with microseconds and a ``Z``."""
    return moment.astimezone(UTC).isoformat(timespec="microseconds").replace("+00:00", "Z")


def _json(value: object) -> str:
    # U+2028 and U+2029 are legal inside JSON strings, but readers that split
    # lines the way Python's str.splitlines does would cut a fact in two.
    return (
        json.dumps(value, ensure_ascii=False)
        .replace("\u2028", "\\u2028")
        .replace("\u2029", "\\u2029")
    )


def export_head(key: MemoryKey, exported_at: datetime, layout: Layout, count: int) -> str:
    """The text of an export before its first fact (``count``: how many follow)."""
    header: dict[str, object] = {
        "format": FORMAT_NAME,
        "version": FORMAT_VERSION,
        "tenant": key.tenant,
        "end_user_id": key.end_user_id,
        "exported_at": utc_text(exported_at),
    }
    if layout == "jsonl":
        return _json({**header, "facts_count": count}) + "\n"
    fields = "".join(f"  {_json(name)}: {_json(value)},\n" for name, value in header.items())
    return "{\n" + fields + '  "facts": ['


def export_fact(fact: Memory, layout: Layout, *, first: bool) -> str:
    """The text of one fact of an export (``first``: the first one)."""
    entry = _json({"id": fact.id, "content": fact.content, "created_at": utc_text(fact.created_at)})
    if layout == "jsonl":
        return entry + "\n"
    return ("\n    " if first else ",\n    ") + entry


def export_tail(layout: Layout, count: int) -> str:
    """The text of an export after its last fact."""
    if layout == "jsonl":
        return ""
    return "\n  ]\n}\n" if count else "]\n}\n"


def render_export(
    key: MemoryKey, facts: Iterable[Memory], exported_at: datetime, layout: Layout
) -> str:
    """The whole text of an export of ``facts`` (all of ``key``, in order)."""
    listed = tuple(facts)
    body = "".join(export_fact(fact, layout, first=index == 0) for index, fact in enumerate(listed))
    return (
        export_head(key, exported_at, layout, len(listed)) + body + export_tail(layout, len(listed))
    )


def parse_export(text: str) -> Export:
    """Read a whole export held in memory (see `ExportReader`).

    Raises:
        ExportFormatError: The text is not an export of this format and version.
    """
    reader = ExportReader(lambda: BytesIO(text.encode("utf-8")))
    key = reader.check()
    return Export(key, tuple(reader.facts(key)))


class ExportReader:
    """Reads an export from a binary file in chunks, checking every rule of the format.

    `check` reads the file once to the end and returns whose facts it
    holds, holding no more than one fact (the ids seen, to refuse one given
    twice, go to a temporary file); `facts` reads it again and hands the
    facts out one by one. ``open_file`` is called for each reading.
    """

    def __init__(self, open_file: Callable[[], IO[bytes]]) -> None:
        self._open = open_file
        self.count = 0
        """How many facts `check` found."""

    def check(self) -> MemoryKey:
        """Read the whole file, check it, and return the key of its facts.

        Raises:
            ExportFormatError: The file breaks a rule of the format; the
                message says where (line, fact) and which rule, never
                quoting a fact.
            UnicodeDecodeError: The file is not UTF-8.
            OSError: The file cannot be read.
        """
        with self._open() as stream, _Ids() as seen:
            document = _Document(stream)
            self.count = 0
            for where, entry in document.entries():
                fact_id, _, _ = _fact_fields(entry, where)
                seen.add(fact_id, where)
                self.count += 1
            seen.flush()
            return document.key()

    def facts(self, key: MemoryKey) -> Iterator[Memory]:
        """The facts of the file, in order, as facts of ``key`` (read again).

        Raises:
            ExportFormatError: The file changed since `check`.
            OSError: The file cannot be read.
        """
        with self._open() as stream:
            document = _Document(stream)
            for where, entry in document.entries():
                memory_id, content, created_at = _fact_fields(entry, where)
                yield Memory(id=memory_id, key=key, content=content, created_at=created_at)
            if document.key() != key:
                raise ExportFormatError("changed while it was read")


class _Ids:
    """The ids of a file's facts, kept in a temporary SQLite file, not in memory.

    A set in memory would grow by about 75 MB per million facts; this
    stays at SQLite's page cache, however large the file.
    """

    _CHUNK: Final = 10_000

    def __init__(self) -> None:
        self._folder = tempfile.TemporaryDirectory()
        self._db = sqlite3.connect(Path(self._folder.name) / "ids.sqlite3")
        self._db.executescript(
            "PRAGMA journal_mode = OFF; PRAGMA synchronous = OFF;"
            "CREATE TABLE seen (id TEXT PRIMARY KEY) WITHOUT ROWID;"
        )
        self._pending: list[tuple[str, str]] = []

    def add(self, fact_id: str, where: str) -> None:
        """Note ``fact_id``; refuse it, naming ``where``, if an earlier fact had it."""
        self._pending.append((fact_id, where))
        if len(self._pending) >= self._CHUNK:
            self.flush()

    def flush(self) -> None:
        """Check the ids noted since the last flush."""
        try:
            with self._db:
                self._db.executemany(
                    "INSERT INTO seen VALUES (?)", [(fact_id,) for fact_id, _ in self._pending]
                )
        except sqlite3.IntegrityError:
            # Rare: one by one, to name the first fact whose id came before.
            for fact_id, where in self._pending:
                try:
                    with self._db:
                        self._db.execute("INSERT INTO seen VALUES (?)", (fact_id,))
                except sqlite3.IntegrityError:
                    raise ExportFormatError(f"{where} has the id of an earlier fact") from None
        self._pending.clear()

    def __enter__(self) -> _Ids:
        return self

    def __exit__(self, *_: object) -> None:
        self._db.close()
        self._folder.cleanup()


# A fact's longest text: 4,096 characters, each escaped in six, and its id
# and time; a value longer than this cannot be a fact of the format.
_MAX_VALUE: Final = 1 << 20
_CHUNK: Final = 1 << 16
_BLANK: Final = re.compile(r"[ \t\r\n]*")
_INLINE_BLANK: Final = re.compile(r"[ \t\r]*")
_MAX_DIGITS: Final = 20
# The documented form exactly: ASCII digits (\d would take any script's).
_TIME: Final = re.compile(r"[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9]{2}:[0-9]{2}:[0-9]{2}\.[0-9]{6}Z")
_OUTSIDE: Final = re.compile(r"([+-][0-9]{4,}|[0-9]{5,}|0000)-.*")
_TIME_RULE: Final = (
    "must be a time in UTC written YYYY-MM-DDTHH:MM:SS.ffffffZ (ISO 8601 extended "
    "format, with 'T', microseconds and 'Z')"
)
_RANGE_RULE: Final = (
    f"must be between {utc_text(MIN_CREATED_AT)} and {utc_text(MAX_CREATED_AT)}, "
    "the times a store keeps"
)


def _no_repeats(pairs: list[tuple[str, object]]) -> dict[str, object]:
    found = dict(pairs)
    if len(found) != len(pairs):
        raise ExportFormatError("repeats a field of one JSON object")
    return found


def _small_int(digits: str) -> int:
    if len(digits.lstrip("-")) > _MAX_DIGITS:
        raise ExportFormatError(f"holds an integer of more than {_MAX_DIGITS} digits")
    return int(digits)


def _no_constant(name: str) -> object:
    raise ExportFormatError(f"holds {name}, which JSON does not allow")


_DECODER: Final = json.JSONDecoder(
    object_pairs_hook=_no_repeats, parse_int=_small_int, parse_constant=_no_constant
)


class _Text:
    """UTF-8 text read in chunks: the unread part, and the line it is at."""

    def __init__(self, stream: IO[bytes]) -> None:
        self._stream = stream
        self._decode = codecs.getincrementaldecoder("utf-8")().decode
        self._buffer = ""
        self._position = 0
        self._ended = False
        self.line = 1

    def _more(self) -> bool:
        # Whether more text came; the part already read is dropped.
        if self._ended:
            return False
        chunk = self._stream.read(_CHUNK)
        text = self._decode(chunk, final=not chunk)
        self._buffer = self._buffer[self._position :] + text
        self._position = 0
        self._ended = not chunk
        return bool(chunk)

    def _to(self, end: int) -> None:
        self.line += self._buffer.count("\n", self._position, end)
        self._position = end

    def next_char(self, *, across_lines: bool = True) -> str:
        """Skip blanks (within the line unless ``across_lines``); the next character or ''."""
        blank = _BLANK if across_lines else _INLINE_BLANK
        while True:
            self._to(blank.match(self._buffer, self._position).end())  # type: ignore[union-attr]
            if self._position < len(self._buffer):
                return self._buffer[self._position]
            if not self._more():
                return ""

    def take(self, char: str, where: str) -> None:
        """Step over ``char``, the next character after blanks, or refuse."""
        if self.next_char() != char:
            raise ExportFormatError(f"{where} is not JSON (expected {char!r})")
        self.step()

    def step(self) -> None:
        """Step over the next character (one `next_char` returned)."""
        self._to(self._position + 1)

    def value(self, where: str) -> object:
        """The next JSON value, at most `_MAX_VALUE` characters long."""
        self.next_char()
        while True:
            try:
                found, end = _DECODER.raw_decode(self._buffer, self._position)
            except json.JSONDecodeError:
                # Perhaps only cut short by the chunk: read on, up to the
                # longest value the format can hold.
                if len(self._buffer) - self._position > _MAX_VALUE or not self._more():
                    raise ExportFormatError(f"{where} is not JSON") from None
                continue
            except ExportFormatError as exc:
                raise ExportFormatError(f"{where} {exc}") from None
            except RecursionError:
                raise ExportFormatError(f"{where} nests JSON too deeply") from None
            if end == len(self._buffer) and self._more():
                continue  # a number may go on in the next chunk
            self._to(end)
            return found


class _Document:
    """One reading of an export: its facts as they come, then its header."""

    def __init__(self, stream: IO[bytes]) -> None:
        self._text = _Text(stream)
        self._header: dict[str, object] = {}
        self._where = "the export"
        self._count = 0

    def entries(self) -> Iterator[tuple[str, object]]:
        """Each fact's place (line, fact) and JSON value, in the file's order."""
        text = self._text
        first = text.next_char()
        if not first:
            raise ExportFormatError("is empty")
        if first != "{":
            raise ExportFormatError("must hold a JSON object")
        text.take("{", self._where)
        with_facts = False
        while text.next_char() != "}" or self._header or with_facts:
            start = text.line
            name = text.value(self._where)
            if not isinstance(name, str):
                raise ExportFormatError(f"{self._where} is not JSON (line {start})")
            if name in self._header or (name == "facts" and with_facts):
                raise ExportFormatError(f"{self._where} repeats a field (line {start})")
            text.take(":", self._where)
            if name == "facts":
                with_facts = True
                yield from self._listed()
            else:
                self._header[name] = text.value(f"{self._where} (line {start})")
            if text.next_char() != ",":
                break
            text.take(",", self._where)
        text.take("}", self._where)
        if with_facts:
            self._header["facts"] = self._count
            if text.next_char():
                raise ExportFormatError("holds more than one JSON document")
            return
        # JSON Lines: the header alone on line 1, then a fact on each line.
        self._where = "line 1"
        if text.line != 1:
            raise ExportFormatError("line 1 must hold the whole header object")
        yield from self._lines()

    def _listed(self) -> Iterator[tuple[str, object]]:
        text = self._text
        if text.next_char() != "[":
            raise ExportFormatError(f"{self._where} must have a list 'facts'")
        text.take("[", self._where)
        if text.next_char() == "]":
            text.take("]", self._where)
            return
        while True:
            where = f"fact {self._count + 1} (line {text.line})"
            self._count += 1
            yield where, text.value(where)
            if text.next_char() != ",":
                break
            text.take(",", where)
        text.take("]", self._where)

    def _lines(self) -> Iterator[tuple[str, object]]:
        text = self._text
        while True:
            after = text.next_char(across_lines=False)
            if not after:
                return
            if after != "\n":
                raise ExportFormatError(f"line {text.line} must end after its JSON object")
            text.step()
            line = text.line
            if not text.next_char(across_lines=False):
                return
            where = f"line {line}"
            found = text.value(where)
            if text.line != line:
                raise ExportFormatError(f"{where} must hold one whole fact")
            self._count += 1
            yield where, found

    def key(self) -> MemoryKey:
        """The key the header names, once every fact was read; checks the header."""
        header, where = self._header, self._where
        if "facts" in header:
            return _header(header, _HEADER_FIELDS | {"facts"}, where)
        key = _header(header, _HEADER_FIELDS | {"facts_count"}, where)
        count = header.get("facts_count")
        if type(count) is not int or count != self._count:
            raise ExportFormatError(
                f"line 1 'facts_count' must be the number of fact lines that follow ({self._count})"
            )
        return key


def _header(header: dict[str, object], allowed: frozenset[str], where: str) -> MemoryKey:
    if header.get("format") != FORMAT_NAME:
        raise ExportFormatError(f"{where} must have 'format': {FORMAT_NAME!r}")
    if header.get("version") != FORMAT_VERSION or type(header.get("version")) is not int:
        raise ExportFormatError(
            f"{where} must have 'version': {FORMAT_VERSION} (the one this tool reads)"
        )
    _fields(header, allowed, where)
    _moment(header.get("exported_at"), f"{where} 'exported_at'")
    tenant, end_user = header.get("tenant"), header.get("end_user_id")
    if not isinstance(tenant, str) or not isinstance(end_user, str):
        raise ExportFormatError(f"{where} must have the strings 'tenant' and 'end_user_id'")
    try:
        return MemoryKey(tenant, end_user)
    except InvalidInputError as exc:
        raise ExportFormatError(f"{where} {exc}") from None


def _fact_fields(entry: object, where: str) -> tuple[str, str, datetime]:
    if not isinstance(entry, dict):
        raise ExportFormatError(f"{where} must be a JSON object")
    _fields(entry, _FACT_FIELDS, where)
    try:
        memory_id = validate_restored_id(entry["id"], "'id'")
        content = validate_content(entry["content"])
    except (TypeError, InvalidInputError) as exc:
        raise ExportFormatError(f"{where} {exc}") from None
    return memory_id, content, _moment(entry["created_at"], f"{where} 'created_at'")


def _fields(found: dict[str, object], allowed: frozenset[str], where: str) -> None:
    missing = sorted(allowed - found.keys())
    if missing:
        raise ExportFormatError(f"{where} lacks the field(s) {', '.join(missing)}")
    if found.keys() - allowed:
        raise ExportFormatError(f"{where} has fields this format does not define")


def _moment(value: object, where: str) -> datetime:
    if isinstance(value, str) and _OUTSIDE.fullmatch(value):
        raise ExportFormatError(f"{where} {_RANGE_RULE}")
    if not isinstance(value, str) or not _TIME.fullmatch(value):
        raise ExportFormatError(f"{where} {_TIME_RULE}")
    try:
        # The form above is one fromisoformat reads; a time of that form
        # always lies between MIN_CREATED_AT and MAX_CREATED_AT.
        return datetime.fromisoformat(value)
    except ValueError:
        raise ExportFormatError(f"{where} is not a date and time that exists") from None
