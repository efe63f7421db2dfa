"""The names this instrumentation records, and our operations mapped onto the conventions'.

The OpenTelemetry GenAI memory conventions name a `gen_ai.memory.client`
span, its operations and its attributes. Names they do not define are ours,
under ``psych_memory.``.
"""

from __future__ import annotations

import os
from typing import Final

__all__ = [
    "CAPTURE_CONTENT_VARIABLE",
    "CAPTURE_TENANT_VARIABLE",
    "OPERATIONS",
    "content_opted_in",
    "tenant_opted_in",
]

# The conventions' attributes.
OPERATION_NAME: Final = "gen_ai.operation.name"
STORE_ID: Final = "gen_ai.memory.store.id"
RECORD_ID: Final = "gen_ai.memory.record.id"
RECORD_COUNT: Final = "gen_ai.memory.record.count"
RECORDS: Final = "gen_ai.memory.records"
ERROR_TYPE: Final = "error.type"

# Ours.
METHOD: Final = "psych_memory.operation"
STORE_TYPE: Final = "psych_memory.store.type"
TENANT: Final = "psych_memory.tenant"
DELETED: Final = "psych_memory.records.deleted"
STORED: Final = "psych_memory.records.stored"
LIMIT: Final = "psych_memory.recall.limit"
PAGE_SIZE: Final = "psych_memory.page.size"
CUTOFF: Final = "psych_memory.expire.before"
LISTED: Final = "psych_memory.listed.count"
SCRUB_PENDING_EVENT: Final = "psych_memory.scrub.pending"
SCRUB_DONE_EVENT: Final = "psych_memory.scrub.done"

# The instruments.
DURATION: Final = "gen_ai.client.operation.duration"
ERRORS: Final = "psych_memory.client.operation.errors"
# Memory calls take microseconds to a few seconds, well below the
# conventions' boundaries for model calls (10 ms and up).
DURATION_BOUNDARIES: Final = (
    0.00001,
    0.000025,
    0.00005,
    0.0001,
    0.00025,
    0.0005,
    0.001,
    0.0025,
    0.005,
    0.01,
    0.025,
    0.05,
    0.1,
    0.25,
    0.5,
    1.0,
    2.5,
    5.0,
    10.0,
)

OPERATIONS: Final = {
    "remember": "create_memory",
    "forget": "delete_memory",
    "recall": "search_memory",
    "erase": "delete_memory",
    "tenants": "search_memory",
    "end_users": "search_memory",
    "fact_counts": "search_memory",
    "recall_page": "search_memory",
    "restore": "create_memory",
    "restore_many": "create_memory",
    # The conventions name no operation that rewrites a store's files.
    "scrub": "scrub_memory_store",
    "expire": "delete_memory",
    "count_expired": "search_memory",
}
"""Each method of a store, and the ``gen_ai.operation.name`` of its span."""

CAPTURE_CONTENT_VARIABLE: Final = "OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT"
CAPTURE_TENANT_VARIABLE: Final = "PSYCH_MEMORY_OTEL_CAPTURE_TENANT"

# The values other GenAI instrumentations take for "record content on spans".
_CONTENT_ON: Final = frozenset({"true", "span_only", "span_and_event"})


def content_opted_in() -> bool:
    """Whether the environment asks for fact content on spans."""
    return os.environ.get(CAPTURE_CONTENT_VARIABLE, "").strip().lower() in _CONTENT_ON


def tenant_opted_in() -> bool:
    """Whether the environment asks for the tenant on spans."""
    return os.environ.get(CAPTURE_TENANT_VARIABLE, "").strip().lower() == "true"
