"""Arguments that repeat a key: the SDK keeps the last one, so they are marked before it parses."""

from __future__ import annotations

import json
from typing import Any

from ._server import ARGUMENTS_AS_SENT

__all__ = ["mark_repeats"]


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
    """Mark each ``tools/call`` of a JSON-RPC body whose arguments repeat a key.

    For such a call the arguments as sent (JSON text, every key as often as
    it was sent) go into its ``_meta`` under `ARGUMENTS_AS_SENT`; that key is
    removed from every other call's ``_meta``, so only this function sets it.

    Args:
        body: One JSON-RPC message or a batch, as received.

    Returns:
        The body to pass on, compact JSON without a newline, or ``None`` to
        pass on ``body`` unchanged (nothing to mark, or not JSON: the SDK
        refuses that itself).
    """
    try:
        parsed = json.loads(body, object_pairs_hook=_object_keeping_repeats)
    except (ValueError, RecursionError):
        return None
    messages = parsed if isinstance(parsed, list) else [parsed]
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
