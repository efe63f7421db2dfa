"""Repeated keys in a request: the SDK keeps the last one, so they are found before it parses.

A tool call's arguments that repeat a key are marked, so that the tools
refuse them with their own message. A repeated key anywhere else in a
message (``params.name`` twice, ``arguments`` twice, ``id``, ``method``,
``_meta``, a prompt's arguments) refuses the whole request.
"""

from __future__ import annotations

import json
from typing import Any, Final

from ._server import ARGUMENTS_AS_SENT

__all__ = ["REPEATED_KEY_MESSAGE", "RepeatedKeyError", "mark_repeats", "repeated_key_answer"]

REPEATED_KEY_MESSAGE: Final = "Invalid Request: a JSON object in the request repeats a key"
"""How the JSON-RPC error (code -32600) of a request refused for a repeated key starts."""

_MAX_SHOWN_KEY: Final = 40


class RepeatedKeyError(Exception):
    """A JSON object of the request, outside a tool call's arguments, repeats a key.

    Attributes:
        path: Where, as dotted keys and ``[index]`` (``params.name``), each key
            cut to 40 characters: what the client sent, never a value.
        request_id: The request's ``id`` when it can be read without doubt
            (a string or an integer, in a message that is not a batch, and
            not itself repeated), else ``None``; the error answers it.
    """

    def __init__(self, path: str, request_id: str | int | None) -> None:
        super().__init__(f"{REPEATED_KEY_MESSAGE} ({path})")
        self.path = path
        self.request_id = request_id


def repeated_key_answer(error: RepeatedKeyError) -> dict[str, object]:
    """The JSON-RPC error (-32600) answering a request that repeats a key, saying where."""
    answered = {"code": -32600, "message": str(error)}
    return {"jsonrpc": "2.0", "id": error.request_id, "error": answered}


class _ObjectWithRepeats(dict[str, Any]):
    """A JSON object in which a key appeared twice; ``pairs`` keeps them all."""

    pairs: list[tuple[str, Any]]


def _object_keeping_repeats(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    result = dict(pairs)
    if len(result) == len(pairs):
        return result
    marked = _ObjectWithRepeats(result)
    marked.pairs = pairs
    return marked


def mark_repeats(body: bytes) -> bytes | None:
    """Refuse a JSON-RPC body that repeats a key; mark a ``tools/call`` whose arguments do.

    Every JSON object of every message is read, at any depth. For a
    ``tools/call`` whose arguments (and only they) repeat a key, the
    arguments as sent (JSON text, every key as often as it was sent) go
    into its ``_meta`` under `ARGUMENTS_AS_SENT`, for the tools to refuse
    with their own message; that key is removed from every other call's
    ``_meta``, so only this function sets it.

    Args:
        body: One JSON-RPC message or a batch, as received.

    Returns:
        The body to pass on, compact JSON without a newline, or ``None`` to
        pass on ``body`` unchanged (nothing to mark, or not JSON: the SDK
        refuses that itself).

    Raises:
        RepeatedKeyError: A JSON object outside a tool call's arguments
            repeats a key.
    """
    try:
        parsed = json.loads(body, object_pairs_hook=_object_keeping_repeats)
    except (ValueError, RecursionError):
        return None
    batch = isinstance(parsed, list)
    messages = parsed if batch else [parsed]
    for index, message in enumerate(messages):
        _refuse_repeats(message, f"[{index}]" if batch else "", None if batch else message)
    changed = False
    for message in messages:
        if not isinstance(message, dict) or message.get("method") != "tools/call":
            continue
        params = message.get("params")
        if not isinstance(params, dict):
            continue
        meta = params.get("_meta")
        if isinstance(meta, dict) and meta.pop(ARGUMENTS_AS_SENT, None) is not None:
            changed = True
        try:
            sent, repeated = _json_as_sent(params.get("arguments"))
        except RecursionError:
            return None
        if repeated:
            meta = meta if isinstance(meta, dict) else {}
            params["_meta"] = {**meta, ARGUMENTS_AS_SENT: sent}
            changed = True
    if not changed:
        return None
    return json.dumps(parsed, separators=(",", ":")).encode()


def _refuse_repeats(message: object, root: str, single: object) -> None:
    """Raise `RepeatedKeyError` for the first object of ``message`` that repeats a key.

    The arguments of a ``tools/call`` are skipped: the tools refuse their
    repeats. Walked with a stack, so that no depth the parser took is too deep.
    """
    skipped = _tool_arguments(message)
    stack: list[tuple[object, str]] = [(message, root)]
    while stack:
        value, path = stack.pop()
        if value is skipped:
            continue
        if isinstance(value, _ObjectWithRepeats):
            raise RepeatedKeyError(_joined(path, _first_repeated(value)), _request_id(single))
        if isinstance(value, dict):
            stack.extend((item, _joined(path, key)) for key, item in value.items())
        elif isinstance(value, list):
            stack.extend((item, f"{path}[{index}]") for index, item in enumerate(value))


def _first_repeated(value: _ObjectWithRepeats) -> str:
    seen: set[str] = set()
    for key, _ in value.pairs:
        if key in seen:
            return key
        seen.add(key)
    raise AssertionError("an object with repeats repeats a key")  # pragma: no cover


def _tool_arguments(message: object) -> object:
    if isinstance(message, dict) and message.get("method") == "tools/call":
        params = message.get("params")
        if isinstance(params, dict) and not isinstance(params, _ObjectWithRepeats):
            return params.get("arguments")
    return None


def _joined(path: str, key: str) -> str:
    shown = key if len(key) <= _MAX_SHOWN_KEY else f"{key[:_MAX_SHOWN_KEY]}..."
    return f"{path}.{shown}" if path else shown


def _request_id(message: object) -> str | int | None:
    if not isinstance(message, dict):
        return None
    pairs = message.pairs if isinstance(message, _ObjectWithRepeats) else message.items()
    ids = [value for key, value in pairs if key == "id"]
    # An id sent twice is no id to answer.
    if len(ids) == 1 and isinstance(ids[0], str | int) and not isinstance(ids[0], bool):
        return ids[0]
    return None


def _json_as_sent(value: object) -> tuple[str, bool]:
    """JSON text of ``value`` with every key as often as it was sent, and whether one repeats."""
    if isinstance(value, dict):
        pairs = value.pairs if isinstance(value, _ObjectWithRepeats) else list(value.items())
        repeated = len(pairs) > len(value)
        parts = []
        for key, item in pairs:
            text, inner = _json_as_sent(item)
            parts.append(f"{json.dumps(key)}:{text}")
            repeated = repeated or inner
        return "{" + ",".join(parts) + "}", repeated
    if isinstance(value, list):
        items = [_json_as_sent(item) for item in value]
        return "[" + ",".join(text for text, _ in items) + "]", any(inner for _, inner in items)
    return json.dumps(value), False
