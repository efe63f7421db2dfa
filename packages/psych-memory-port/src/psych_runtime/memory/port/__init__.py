"""The memory port: the contract every Psych memory backend keeps.

Install this distribution alone to write a backend; it has no runtime
dependencies. Adapters subclass `MemoryStore` and call `memory_key` and the
``validate_*`` functions before they change anything, so that every backend
accepts and refuses exactly the same input; `new_memory_id`, `bounded_limit`
and `RestorePlan` are the decisions they share after that. `StoreWrapper`
and `wrap_store` put something in front of a store (a ledger, telemetry)
with exactly the store's capabilities.
"""

from ._capabilities import (
    MAX_CREATED_AT,
    MAX_PAGE_SIZE,
    MAX_RESTORED_ID_LENGTH,
    MIN_CREATED_AT,
    CountsFacts,
    ExpiresFacts,
    ListsEndUsers,
    PagesFacts,
    RemembersWithinLimit,
    RestoresFacts,
    ScrubsDeletions,
    validate_cutoff,
    validate_max_facts,
    validate_page,
    validate_restored,
    validate_restored_id,
    validate_restored_many,
)
from ._errors import (
    InvalidContentError,
    InvalidInputError,
    InvalidKeyError,
    InvalidLimitError,
    MemoryStoreError,
    SchemaVersionError,
    StalePageError,
    StoreClosedError,
    StoreUnavailableError,
)
from ._events import store_events
from ._key import HasTenant, MemoryKey, Scope, memory_key
from ._memory import Memory
from ._rules import RestorePlan, bounded_limit, new_memory_id, validate_scope, validate_seconds
from ._store import MemoryStore
from ._validation import (
    MAX_CONTENT_LENGTH,
    MAX_KEY_LENGTH,
    validate_content,
    validate_key_part,
    validate_limit,
    validate_memory_id,
)
from ._version import __version__ as __version__
from ._wrapping import StoreWrapper, wrap_store

__all__ = [
    "MAX_CONTENT_LENGTH",
    "MAX_CREATED_AT",
    "MAX_KEY_LENGTH",
    "MAX_PAGE_SIZE",
    "MAX_RESTORED_ID_LENGTH",
    "MIN_CREATED_AT",
    "CountsFacts",
    "ExpiresFacts",
    "HasTenant",
    "InvalidContentError",
    "InvalidInputError",
    "InvalidKeyError",
    "InvalidLimitError",
    "ListsEndUsers",
    "Memory",
    "MemoryKey",
    "MemoryStore",
    "MemoryStoreError",
    "PagesFacts",
    "RemembersWithinLimit",
    "RestorePlan",
    "RestoresFacts",
    "SchemaVersionError",
    "Scope",
    "ScrubsDeletions",
    "StalePageError",
    "StoreClosedError",
    "StoreUnavailableError",
    "StoreWrapper",
    "bounded_limit",
    "memory_key",
    "new_memory_id",
    "store_events",
    "validate_content",
    "validate_cutoff",
    "validate_key_part",
    "validate_limit",
    "validate_max_facts",
    "validate_memory_id",
    "validate_page",
    "validate_restored",
    "validate_restored_id",
    "validate_restored_many",
    "validate_scope",
    "validate_seconds",
    "wrap_store",
]
