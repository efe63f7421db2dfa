"""The receipts of ``psych-memory``: one shape for every command that reports.

Every command that reports prints, with ``--json``, one JSON object whose
first two keys are the same everywhere: ``"receipt"``, naming the kind of
receipt (``psych-memory-<kind>-receipt``), and ``"version"``, the version
of that kind's keys. The keys that follow are the command's own, each
documented on the operator's page.
"""

from __future__ import annotations

import json
from typing import Final

__all__ = ["RECEIPT_VERSION", "receipt", "receipt_json", "receipt_name"]

RECEIPT_VERSION: Final = 1
"""The version of every receipt's keys; raised for a kind when its keys change."""


def receipt_name(kind: str) -> str:
    """The value of ``"receipt"`` for receipts of ``kind`` (``"erasure"``, ``"count"``, ...)."""
    return f"psych-memory-{kind}-receipt"


def receipt(kind: str, fields: dict[str, object]) -> dict[str, object]:
    """A receipt of ``kind``: ``"receipt"`` and ``"version"`` first, then ``fields`` in order."""
    return {"receipt": receipt_name(kind), "version": RECEIPT_VERSION, **fields}


def receipt_json(document: dict[str, object]) -> str:
    """The receipt as the command prints it with ``--json``."""
    return json.dumps(document, ensure_ascii=False, indent=2)
