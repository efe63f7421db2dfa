"""The memory port: the contract every Psych memory backend keeps.

Install this distribution alone to write a backend; it has no runtime
dependencies. Adapters subclass `MemoryStore` and call `memory_key` and the
``validate_*`` functions before they change anything, so that every backend
accepts and refuses exactly the same input.
"""

from ._capabilities import (
    MAX_CREATED_AT,
    MAX_PAGE_SIZE,
    MAX_RESTORED_ID_LENGTH,
    MIN_CREATED_AT,
    CountsFacts,
    ListsEndUsers,
    PagesFacts,
    RestoresFacts,
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

__all__ = [
    "MAX_CONTENT_LENGTH",
    "MAX_CREATED_AT",
    "MAX_KEY_LENGTH",
    "MAX_PAGE_SIZE",
    "MAX_RESTORED_ID_LENGTH",
    "MIN_CREATED_AT",
    "CountsFacts",
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
    "RestoresFacts",
    "SchemaVersionError",
    "Scope",
    "StalePageError",
    "StoreClosedError",
    "StoreUnavailableError",
    "memory_key",
    "store_events",
    "validate_content",
    "validate_key_part",
    "validate_limit",
    "validate_memory_id",
    "validate_page",
    "validate_restored",
    "validate_restored_id",
    "validate_restored_many",
]
