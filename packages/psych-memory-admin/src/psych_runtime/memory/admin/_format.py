"""The export format: one end user's facts as JSON or JSON Lines, and reading it back.

Version 1, documented with its JSON Schema on the operator's page. ``json``
is one object::

    {"format": "psych-memory-export", "version": 1, "tenant": "...",
     "end_user_id": "...", "exported_at": "...Z", "facts": [
       {"id": "...", "content": "...", "created_at": "...Z"}, ...]}

``jsonl`` is the same header without ``facts`` (with ``"facts_count"``) on
the first line, then one fact object per line. Facts are oldest first;
times are ISO 8601 in UTC with microseconds and a ``Z``.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Final, Literal

from psych_runtime.memory.port import (
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
    "parse_export",
    "render_export",
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
    """An export read back: whose facts, and the facts in their order."""

    key: MemoryKey
    facts: tuple[Memory, ...]


def utc_text(moment: datetime) -> str:
    """``moment`` in UTC, ISO 8601, always with microseconds and a ``Z``."""
    return moment.astimezone(UTC).isoformat(timespec="microseconds").replace("+00:00", "Z")


def render_export(
    key: MemoryKey, facts: Iterable[Memory], exported_at: datetime, layout: Layout
) -> str:
    """The text of an export of ``facts`` (all of ``key``, oldest first)."""
    header: dict[str, object] = {
        "format": FORMAT_NAME,
        "version": FORMAT_VERSION,
        "tenant": key.tenant,
        "end_user_id": key.end_user_id,
        "exported_at": utc_text(exported_at),
    }
    entries = [
        {"id": fact.id, "content": fact.content, "created_at": utc_text(fact.created_at)}
        for fact in facts
    ]
    if layout == "json":
        return json.dumps({**header, "facts": entries}, ensure_ascii=False, indent=2) + "\n"
    lines = [json.dumps({**header, "facts_count": len(entries)}, ensure_ascii=False)]
    lines.extend(json.dumps(entry, ensure_ascii=False) for entry in entries)
    return "\n".join(lines) + "\n"


def parse_export(text: str) -> Export:
    """Read an export in either layout and check every rule of the format.

    Raises:
        ExportFormatError: The text is not an export of this format and version;
            the message says where and which rule, never quoting a fact.
    """
    stripped = text.strip()
    if not stripped:
        raise ExportFormatError("is empty")
    try:
        whole = json.loads(stripped)
    except json.JSONDecodeError as exc:
        if "\n" not in stripped:
            raise ExportFormatError(
                f"is not JSON (line {exc.lineno}, column {exc.colno})"
            ) from None
        return _parse_lines(stripped.splitlines())
    if not isinstance(whole, dict):
        raise ExportFormatError("must hold a JSON object")
    if "facts_count" in whole:
        # A JSON Lines export holding no facts is one header line.
        return _parse_lines([stripped])
    key = _header(whole, _HEADER_FIELDS | {"facts"}, "the export")
    entries = whole.get("facts")
    if not isinstance(entries, list):
        raise ExportFormatError("the export must have a list 'facts'")
    facts = tuple(_fact(entry, key, f"fact {index + 1}") for index, entry in enumerate(entries))
    return _checked(key, facts)


def _parse_lines(lines: list[str]) -> Export:
    parsed: list[object] = []
    for number, line in enumerate(lines, start=1):
        try:
            parsed.append(json.loads(line))
        except json.JSONDecodeError as exc:
            raise ExportFormatError(f"line {number} is not JSON (column {exc.colno})") from None
    head = parsed[0]
    if not isinstance(head, dict):
        raise ExportFormatError("line 1 must be the header object")
    key = _header(head, _HEADER_FIELDS | {"facts_count"}, "line 1")
    count = head.get("facts_count")
    if type(count) is not int or count != len(parsed) - 1:
        raise ExportFormatError(
            f"line 1 'facts_count' must be the number of fact lines that follow ({len(parsed) - 1})"
        )
    facts = tuple(
        _fact(entry, key, f"line {number}") for number, entry in enumerate(parsed[1:], start=2)
    )
    return _checked(key, facts)


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


def _fact(entry: object, key: MemoryKey, where: str) -> Memory:
    if not isinstance(entry, dict):
        raise ExportFormatError(f"{where} must be a JSON object")
    _fields(entry, _FACT_FIELDS, where)
    try:
        memory_id = validate_restored_id(entry.get("id"))
        content = validate_content(entry.get("content"))
    except (TypeError, InvalidInputError) as exc:
        raise ExportFormatError(f"{where} {exc}") from None
    created_at = _moment(entry.get("created_at"), f"{where} 'created_at'")
    return Memory(id=memory_id, key=key, content=content, created_at=created_at)


def _fields(found: dict[str, object], allowed: frozenset[str], where: str) -> None:
    missing = sorted(allowed - found.keys())
    if missing:
        raise ExportFormatError(f"{where} lacks the field(s) {', '.join(missing)}")
    if found.keys() - allowed:
        raise ExportFormatError(f"{where} has fields this format does not define")


def _moment(value: object, where: str) -> datetime:
    if not isinstance(value, str) or not value.endswith("Z"):
        raise ExportFormatError(f"{where} must be an ISO 8601 time in UTC ending in 'Z'")
    try:
        moment = datetime.fromisoformat(value)
    except ValueError:
        raise ExportFormatError(f"{where} must be an ISO 8601 time in UTC ending in 'Z'") from None
    return moment.astimezone(UTC)


def _checked(key: MemoryKey, facts: tuple[Memory, ...]) -> Export:
    if len({fact.id for fact in facts}) != len(facts):
        raise ExportFormatError("holds two facts with the same id")
    return Export(key, facts)
